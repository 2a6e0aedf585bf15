"""Properties of normalise: idempotent on hypothesis URLs; any input gives a URL or a
typed rejection, never another exception."""

import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from seenstore.url.normalise import Rejection, normalise_escapes, try_normalise
from seenstore.url.fastpath import normalise_many
from seenstore.url.policy import parse_policy

# Tokens chosen to hit the tricky spots: stray '%', escapes of hex digits next to
# them, encoded dots, reserved escapes, non-ASCII, browser-only characters.
TOKENS = ["%", "%2", "%41", "%34", "%31", "%25", "%2e", "%2E", "%2f", "%7e", "%e2%82%ac",
          "%zz", "a", "A", "4", "1", "f", ".", "..", "/", "//", "\\", "~", "é", "€", "?",
          "#", "&", "=", "'", "|", "^", "`", "{", "[", "]", " ", "\t", "+", ";", "@", ":"]
part = st.lists(st.sampled_from(TOKENS), max_size=12).map("".join)
label = st.sampled_from(["www", "WWW", "example", "Ex%41mple", "münchen", "xn--mnchen-3ya",
                         "a", "b-c", "0x7f", "1", "255", "com", "test", ""])
host = st.one_of(
    st.lists(label, min_size=1, max_size=4).map(".".join),
    st.sampled_from(["[::1]", "[0:0::1]", "[2001:DB8::1]", "0x7f.1", "2130706433", "1.2.3.4."]),
)
url = st.builds(
    lambda scheme, userinfo, h, port, path, query, frag: (
        f"{scheme}://{userinfo}{h}{port}/{path}{query}{frag}"),
    st.sampled_from(["http", "https", "HTTP", "hTtPs", "ftp", "http:"]),
    st.sampled_from(["", "u@", "u:p@", "u%41:%%@"]),
    host,
    st.sampled_from(["", ":80", ":443", ":8080", ":", ":0080"]),
    part,
    st.one_of(st.just(""), part.map(lambda q: "?" + q)),
    st.one_of(st.just(""), part.map(lambda f: "#" + f)),
)

ALL_RULES = parse_policy("""
version = "all"
[[rule]]
hosts = ["*"]
strip_tracking = true
strip_params = ["a*", "sid"]
sort_query = true
trailing_slash = "remove"
strip_www = true
strip_trailing_dot = true
""")
ADD_SLASH = parse_policy("""
version = "add"
[[rule]]
hosts = ["example.*", "*.test"]
trailing_slash = "add"
strip_www = true
sort_query = true
[[rule]]
hosts = ["*"]
trailing_slash = "remove"
""")


def check_idempotent(u, base=None, policy=None):
    once = try_normalise(u, base, policy)
    if isinstance(once, Rejection):
        return
    assert once.startswith(("http://", "https://"))
    assert "#" not in once
    assert not re.search(r"%(?:[a-f][0-9A-Fa-f]|[0-9A-Fa-f][a-f])", once)  # hex uppercased
    assert try_normalise(once, None, policy) == once


@settings(max_examples=600, deadline=None)
@given(url)
@example("http://example.com/%%34%31")
@example("http://example.com/%2%34%31/%2e%2E/x?%%7e")
def test_idempotent_safe(u):
    check_idempotent(u)


@settings(max_examples=300, deadline=None)
@given(url, st.sampled_from([ALL_RULES, ADD_SLASH]))
@example("http://www.www.example.com.././a//?utm_source=1&b=2&a=1", ALL_RULES)
@example("http://0x7f../", ALL_RULES)
def test_idempotent_with_policy(u, policy):
    check_idempotent(u, policy=policy)


@settings(max_examples=200, deadline=None)
@given(part, st.sampled_from(["http://h.com/a/b?q", "https://WWW.h.com:443/%7e/", "http://h.com"]))
def test_idempotent_relative(ref, base):
    check_idempotent(ref, base=base)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.characters(codec=None), max_size=80))
def test_any_text_is_url_or_rejection(s):
    r = try_normalise(s)
    assert isinstance(r, (str, Rejection))
    r2 = try_normalise("http://h.com/" + s)
    assert isinstance(r2, (str, Rejection))
    if isinstance(r2, str):
        assert try_normalise(r2) == r2


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=80))
def test_any_bytes_is_url_or_rejection(b):
    for raw in (b, b"http://h.com/" + b):
        assert isinstance(try_normalise(raw), (str, Rejection))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="%0123456789aAfFgG", max_size=40))
def test_escape_pass_is_idempotent_and_never_adds_escapes(s):
    once = normalise_escapes(s)
    assert normalise_escapes(once) == once
    assert len(re.findall("%[0-9A-Fa-f]{2}", once)) <= len(re.findall("%[0-9A-Fa-f]{2}", s))


def test_huge_and_deeply_encoded_inputs_are_rejected_or_bounded():
    huge = "http://h.com/" + "a" * 5_000_000
    assert try_normalise(huge) is Rejection.TOO_LONG
    deep = "http://h.com/" + "%25" * 2000 + "41"
    out = try_normalise(deep)
    assert out == deep  # %25 is never decoded, so nothing cascades
    assert try_normalise("http://h.com/" + "%" * 9000) is Rejection.TOO_LONG
    assert try_normalise("x" * 10**6 + "\x00") is Rejection.TOO_LONG
    mixed = ["http://ok.com/", huge, b"\x80" * 100, "http://h.com/\x00", None, deep]
    batch = normalise_many(mixed)
    assert batch.positions == [0, 5]
    assert [r for _, r in batch.rejected] == [
        Rejection.TOO_LONG, Rejection.ENCODING, Rejection.CONTROL, Rejection.ENCODING]
