"""Safe rules of normalise, table-driven: what merges, what must stay distinct, rejections."""

import pytest

from seenstore.errors import InvalidInputError, SeenStoreError
from seenstore.url.normalise import (DEFAULT_MAX_LENGTH, Rejection, URLRejected, normalise, normalise_escapes, try_normalise)
from seenstore.url.fastpath import normalise_many

# (input, canonical): one row per safe rule of docs/normalise.md.
SAFE = [
    # scheme and host case
    ("HTTP://Example.COM/a", "http://example.com/a"),
    ("hTTpS://WWW.Example.Com/", "https://www.example.com/"),
    # default ports of http/https only
    ("http://example.com:80/a", "http://example.com/a"),
    ("https://example.com:443/a", "https://example.com/a"),
    ("http://example.com:443/a", "http://example.com:443/a"),
    ("https://example.com:80/a", "https://example.com:80/a"),
    ("http://example.com:0080/a", "http://example.com/a"),
    ("http://example.com:/a", "http://example.com/a"),
    # fragment dropped, empty query kept
    ("http://example.com/a#frag", "http://example.com/a"),
    ("http://example.com/a?#", "http://example.com/a?"),
    ("http://example.com/a?", "http://example.com/a?"),
    # dot segments, including encoded dots
    ("http://example.com/a/./b/../c", "http://example.com/a/c"),
    ("http://example.com/a/%2e%2E/c", "http://example.com/c"),
    ("http://example.com/../../x", "http://example.com/x"),
    # empty path becomes "/", "//" inside a path is kept
    ("http://example.com", "http://example.com/"),
    ("http://example.com/a//b", "http://example.com/a//b"),
    # percent-encoding: unreserved decoded, others uppercased, reserved never decoded
    ("http://example.com/%7euser/%41%2d%5F%2E", "http://example.com/~user/A-_."),
    ("http://example.com/a%2fb%3a", "http://example.com/a%2Fb%3A"),
    ("http://example.com/?q=%7e%26%3d", "http://example.com/?q=~%26%3D"),
    ("http://us%65r:p%61ss@example.com/", "http://user:pass@example.com/"),
    # stray % left alone; decoding never creates a new escape
    ("http://example.com/100%", "http://example.com/100%"),
    ("http://example.com/%zz%4", "http://example.com/%zz%4"),
    ("http://example.com/%%34%31", "http://example.com/%%341"),
    ("http://example.com/%4%31", "http://example.com/%4%31"),
    ("http://example.com/%%41", "http://example.com/%%41"),
    ("http://example.com/%%7e", "http://example.com/%~"),
    # non-ASCII: UTF-8 escapes in path/query, punycode host
    ("http://example.com/ä?q=ü", "http://example.com/%C3%A4?q=%C3%BC"),
    ("http://München.DE/", "http://xn--mnchen-3ya.de/"),
    ("http://ex%41mple.com/", "http://example.com/"),
    # numeric IPv4 as browsers do, IPv6 compressed
    ("http://0x7f.1/", "http://127.0.0.1/"),
    ("http://2130706433/", "http://127.0.0.1/"),
    ("http://[0:0::1]:80/", "http://[::1]/"),
    # browser spellings kept: trailing dot, userinfo, backslash as slash, tabs/newlines removed
    ("http://example.com./", "http://example.com./"),
    ("http://u:p@example.com/", "http://u:p@example.com/"),
    ("http:\\\\example.com\\a\\b", "http://example.com/a/b"),
    ("  http://exa\tmple.com/a\nb  ", "http://example.com/ab"),
    # browser encode sets (WHATWG, not RFC 3986): | [ ] literal, ^ ` { } escaped in paths,
    # ' escaped in queries of http(s)
    ("http://example.com/a|b^c`{d}?x='[y]'", "http://example.com/a|b%5Ec%60%7Bd%7D?x=%27[y]%27"),
    ("http://example.com/a b?c d", "http://example.com/a%20b?c%20d"),
]


@pytest.mark.parametrize("raw,canonical", SAFE)
def test_safe_rule(raw, canonical):
    assert normalise(raw) == canonical
    assert normalise(canonical) == canonical


# Pairs that are different resources under the safe rules: never merged.
DISTINCT = [
    ("http://example.com/About", "http://example.com/about"),
    ("http://example.com/a%2Fb", "http://example.com/a/b"),
    ("http://example.com/docs", "http://example.com/docs/"),
    ("http://example.com/?a=1&b=2", "http://example.com/?b=2&a=1"),
    ("http://www.example.com/", "http://example.com/"),
    ("http://example.com./", "http://example.com/"),
    ("http://example.com/?", "http://example.com/"),
    ("http://example.com/a//b", "http://example.com/a/b"),
    ("http://example.com/?utm_source=x", "http://example.com/"),
    ("http://example.com/", "https://example.com/"),
    ("http://example.com/%3F", "http://example.com/?"),
    ("http://u@example.com/", "http://example.com/"),
    ("http://example.com/?q=a+b", "http://example.com/?q=a%20b"),
]


@pytest.mark.parametrize("a,b", DISTINCT)
def test_stays_distinct(a, b):
    assert normalise(a) != normalise(b)


@pytest.mark.parametrize("base,ref,canonical", [
    ("http://h.com/a/b/c", "../d#x", "http://h.com/a/d"),
    ("http://h.com/a/b", "//OTHER.com/x", "http://other.com/x"),
    ("https://h.com/a/b", "?q", "https://h.com/a/b?q"),
    ("http://h.com/a/b?q#f", "", "http://h.com/a/b?q"),
    ("http://h.com/a/", "http://x.com/", "http://x.com/"),
    ("http://h.com/a/", "http:c", "http://h.com/a/c"),
])
def test_relative_resolution(base, ref, canonical):
    assert normalise(ref, base=base) == canonical


@pytest.mark.parametrize("raw,reason", [
    ("ftp://example.com/", Rejection.SCHEME),
    ("mailto:a@b.com", Rejection.SCHEME),
    ("javascript:alert(1)", Rejection.SCHEME),
    ("file:///etc/passwd", Rejection.SCHEME),
    ("", Rejection.UNPARSABLE),
    ("example.com/a", Rejection.UNPARSABLE),
    ("http://exa mple.com/", Rejection.UNPARSABLE),
    ("http://example.com:99999/", Rejection.UNPARSABLE),
    ("http://[::1/", Rejection.UNPARSABLE),
    ("http://", Rejection.UNPARSABLE),
    ("http://example.com/a\x00b", Rejection.CONTROL),
    ("http://example.com/\x1b", Rejection.CONTROL),
    ("http://example.com/\x7f", Rejection.CONTROL),
    ("http://example.com/\x85", Rejection.CONTROL),
    ("\x00http://example.com/", Rejection.CONTROL),
    ("http://example.com/\ud800", Rejection.ENCODING),
    (b"http://example.com/\xff", Rejection.ENCODING),
    (None, Rejection.ENCODING),
    (42, Rejection.ENCODING),
    ("http://example.com/" + "a" * DEFAULT_MAX_LENGTH, Rejection.TOO_LONG),
])
def test_rejections(raw, reason):
    assert try_normalise(raw) is reason
    with pytest.raises(URLRejected) as e:
        normalise(raw)
    assert e.value.reason is reason
    assert isinstance(e.value, (InvalidInputError, ValueError, SeenStoreError))
    assert reason.value in str(e.value)


def test_max_length_counts_bytes_of_input_and_result():
    url = "http://example.com/" + "a" * 81  # 100 bytes
    assert normalise(url, max_length=100) == url
    assert try_normalise(url + "b", max_length=100) is Rejection.TOO_LONG
    assert try_normalise("http://example.com/" + "é" * 41, max_length=100) is Rejection.TOO_LONG
    # 19 + 20 = 39 input characters, but the canonical form spells each é as %C3%A9
    assert try_normalise("http://example.com/" + "é" * 20, max_length=100) is Rejection.TOO_LONG
    assert normalise("http://example.com/" + "é" * 13, max_length=100).endswith("%C3%A9")


def test_bytes_input_is_utf8():
    assert normalise(b"http://example.com/\xc3\xa4") == "http://example.com/%C3%A4"


def test_bad_base_is_a_caller_error_not_a_rejection():
    for bad in ("not a url", "http://exa mple.com/", "http://x/\x00"):
        with pytest.raises(InvalidInputError) as e:
            normalise("/a", base=bad)
        assert not isinstance(e.value, URLRejected)
        with pytest.raises(InvalidInputError):
            normalise_many(["/a"], base=bad)


def test_non_http_base_rejects_relative_by_scheme():
    assert try_normalise("a", base="ftp://x/") is Rejection.SCHEME


def test_batch_reports_rejections_beside_results():
    urls = ["http://A.com/", "ftp://x/", b"\xff", "http://b.com/#x", "", "http://a.com:80/"]
    out = normalise_many(urls)
    assert out.urls == ["http://a.com/", "http://b.com/", "http://a.com/"]
    assert out.positions == [0, 3, 5]
    assert out.rejected == [(1, Rejection.SCHEME), (2, Rejection.ENCODING),
                            (4, Rejection.UNPARSABLE)]
    assert out.reason_counts() == {"scheme": 1, "encoding": 1, "unparsable": 1}


def test_batch_with_base_matches_scalar():
    refs = ["a", "../b", "?q", "//h.com/", "http://x.com/", "mailto:x"]
    out = normalise_many(refs, base="http://base.com/d/e")
    scalar = [try_normalise(r, "http://base.com/d/e") for r in refs]
    assert out.urls == [s for s in scalar if not isinstance(s, Rejection)]
    assert [r for _, r in out.rejected] == [s for s in scalar if isinstance(s, Rejection)]


@pytest.mark.parametrize("raw,expected", [
    ("%7e%7E", "~~"),
    ("%2f%2F", "%2F%2F"),
    ("%e2%82%ac", "%E2%82%AC"),
    ("%", "%"),
    ("%%", "%%"),
    ("%g1", "%g1"),
    ("%%34%31", "%%341"),
    ("%A%42", "%A%42"),
    ("%A%47", "%AG"),
    ("%%7e", "%~"),
    ("%41%", "A%"),
    ("%25%34%31", "%2541"),
])
def test_escape_normalisation(raw, expected):
    assert normalise_escapes(raw) == expected
    assert normalise_escapes(expected) == expected


def test_fast_path_regex_agrees_with_the_escape_rule_on_all_escapes():
    from seenstore.url.normalise import _CHANGES, _ESCAPE, _escape
    for i in range(256):
        up, low = f"{i:02X}", f"{i:02x}"
        for hx in {up, low, up[0] + low[1], low[0] + up[1]}:
            s = "x%" + hx
            assert (_ESCAPE.sub(_escape, s) != s) == bool(_CHANGES.search(s)), hx


def test_fast_and_public_parsers_agree():
    from seenstore.url.normalise import _parse, _parse_public
    cases = [("HTTP://A.com:80/./x?y#z", None), ("../a b", "http://h.com/x/y"),
             ("http://exa mple.com", None), ("//h.com", "https://b.com/"), ("", None),
             ("http://ü.de/ä", None), ("x", "mailto:a@b")]
    for url, base in cases:
        assert _parse(url, base) == _parse_public(url, base)


def test_base_with_lone_surrogate_is_a_typed_error():
    from seenstore.errors import InvalidInputError
    from seenstore.url.normalise import check_base
    with pytest.raises(InvalidInputError):
        check_base("http://a.example/\udcff")
