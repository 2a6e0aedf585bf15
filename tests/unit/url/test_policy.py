"""Policy files: parsing, errors, identity, host matching, and every risky rule."""

import hashlib
import json
from fnmatch import fnmatchcase

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seenstore.errors import PolicyError
from seenstore.url.normalise import normalise
from seenstore.url.policy import (DEFAULT_POLICY, DEFAULT_POLICY_ID, SAFE_RULES_VERSION, TRACKING_PARAMS, Rule, host_key, load_policy, parse_policy)


def policy(rule_body: str, hosts: str = '["*"]', version: str = "t1"):
    return parse_policy(f'version = "{version}"\n[[rule]]\nhosts = {hosts}\n{rule_body}\n')


# (rule body, input, with the rule, without it): every rule changes something, and
# the default policy leaves the same input alone.
RULES = [
    ("strip_tracking = true", "http://h.com/p?utm_source=x&id=5&gclid=abc",
     "http://h.com/p?id=5"),
    ("strip_tracking = true", "http://h.com/p?utm_source=x&utm_medium=y",
     "http://h.com/p"),
    ("strip_tracking = true", "http://h.com/p?utm%5Fsource=x&a=1", "http://h.com/p?a=1"),
    ('strip_params = ["sid", "sess*"]', "http://h.com/p?a=1&sid=9&session_id=2&sidx=3",
     "http://h.com/p?a=1&sidx=3"),
    ('strip_params = ["a"]', "http://h.com/p?a&a=&b&a=2", "http://h.com/p?b"),
    ("sort_query = true", "http://h.com/p?b=2&a=1&c", "http://h.com/p?a=1&b=2&c"),
    ("sort_query = true", "http://h.com/p?b=2&a=3&a=1", "http://h.com/p?a=3&a=1&b=2"),
    ('trailing_slash = "remove"', "http://h.com/docs/", "http://h.com/docs"),
    ('trailing_slash = "remove"', "http://h.com/docs//?x", "http://h.com/docs?x"),
    ('trailing_slash = "add"', "http://h.com/docs?x", "http://h.com/docs/?x"),
    ("strip_www = true", "http://www.h.com/", "http://h.com/"),
    ("strip_www = true", "http://u@WWW.www.h.com:8080/", "http://u@h.com:8080/"),
    ("strip_trailing_dot = true", "http://h.com../", "http://h.com/"),
    ("strip_trailing_dot = true\nstrip_www = true", "http://www.h.com./", "http://h.com/"),
]


@pytest.mark.parametrize("body,raw,expected", RULES)
def test_rule_applies(body, raw, expected):
    p = policy(body)
    assert normalise(raw, policy=p) == expected
    assert normalise(expected, policy=p) == expected
    assert normalise(raw) != expected  # the default policy keeps it distinct


# Inputs each rule must leave alone.
UNCHANGED = [
    ('trailing_slash = "remove"', "http://h.com/"),
    ('trailing_slash = "add"', "http://h.com/docs/"),
    ("strip_www = true", "http://www.com/"),
    ("strip_www = true", "http://wwwx.h.com/"),
    ("strip_trailing_dot = true", "http://1.2.3.4/"),
    ("strip_trailing_dot = true", "http://0x7f../"),  # would read as an IPv4 number
    ("strip_tracking = true", "http://h.com/p?butm_source=1&utm=2"),
    ("strip_tracking = true", "http://h.com/p?"),
    ("sort_query = true", "http://h.com/p?a=2&a=1"),
    ("sort_query = true", "http://h.com/p?"),
]


@pytest.mark.parametrize("body,raw", UNCHANGED)
def test_rule_leaves_alone(body, raw):
    p = policy(body)
    assert normalise(raw, policy=p) == normalise(raw)


@pytest.mark.parametrize("patterns,host,applies", [
    ('["h.com"]', "h.com", True),
    ('["h.com"]', "www.h.com", True),      # patterns see the host without www.
    ('["h.com"]', "h.com.", True),         # ... and without its trailing dot
    ('["h.com"]', "a.h.com", False),
    ('["*.h.com"]', "a.h.com", True),
    ('["*.h.com"]', "h.com", False),
    ('["*.h.com", "h.com"]', "h.com", True),
    ('["H.COM"]', "h.com", True),
    ('["münchen.de"]', "xn--mnchen-3ya.de", True),
    ('["*.test"]', "x.test", True),
    ('["10.0.0.?"]', "10.0.0.7", True),
    ('"h.com"', "h.com", True),
])
def test_host_patterns(patterns, host, applies):
    p = policy("sort_query = true", hosts=patterns)
    assert (normalise(f"http://{host}/?b&a", policy=p).endswith("?a&b")) is applies


def test_first_matching_rule_wins():
    p = parse_policy("""
version = "2"
[[rule]]
hosts = ["shop.example.com"]
trailing_slash = "add"
[[rule]]
hosts = ["*.example.com", "example.com"]
trailing_slash = "remove"
""")
    assert normalise("http://shop.example.com/a", policy=p) == "http://shop.example.com/a/"
    assert normalise("http://blog.example.com/a/", policy=p) == "http://blog.example.com/a"
    assert normalise("http://other.org/a/", policy=p) == "http://other.org/a/"


def test_host_key():
    assert host_key("www.www.a.com..") == "a.com"
    assert host_key("www.com") == "www.com"
    assert host_key("[::1]") == "[::1]"


def test_default_policy_identity():
    assert DEFAULT_POLICY_ID == "safe-v1"
    assert DEFAULT_POLICY.identity == "safe-v1"
    assert DEFAULT_POLICY.rules == ()
    assert load_policy(None) is DEFAULT_POLICY


def test_identity_is_version_and_content_hash():
    p = policy("sort_query = true", version="shop-3")
    version, digest = p.identity.split(":")
    assert version == "shop-3"
    content = {"safe": SAFE_RULES_VERSION, "rules": [{
        "hosts": ["*"], "strip_params": [], "sort_query": True, "trailing_slash": "keep",
        "strip_www": False, "strip_trailing_dot": False}]}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    assert digest == hashlib.sha256(text.encode()).hexdigest()[:16]


def test_identity_ignores_layout_and_comments_but_not_content():
    a = parse_policy('version = "1"\n[[rule]]\nhosts = ["*"]\nsort_query = true\n')
    b = parse_policy('# comment\nversion="1"\n\n[[rule]]\nsort_query=true\nhosts=["*"]  # x\n')
    c = parse_policy('version = "1"\n[[rule]]\nhosts = ["*"]\nsort_query = false\n')
    d = parse_policy('version = "2"\n[[rule]]\nhosts = ["*"]\nsort_query = true\n')
    e = parse_policy('version = "1"\n[[rule]]\nhosts = ["*"]\nstrip_tracking = true\n')
    assert a.identity == b.identity
    assert len({a.identity, c.identity, d.identity, e.identity}) == 4
    assert parse_policy('version = 7').identity.startswith("7:")


def test_tracking_list_is_in_the_hash():
    e = parse_policy('version = "1"\n[[rule]]\nhosts = ["*"]\nstrip_tracking = true\n')
    f = parse_policy('version = "1"\n[[rule]]\nhosts = ["*"]\nstrip_params = '
                     + json.dumps(list(TRACKING_PARAMS)) + "\n")
    assert e.identity == f.identity


def test_load_policy_file(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('version = "site-1"\n[[rule]]\nhosts = ["*"]\nstrip_www = true\n')
    p = load_policy(str(path))
    assert p.identity.startswith("site-1:")
    assert normalise("http://www.a.com/", policy=p) == "http://a.com/"


@pytest.mark.parametrize("text,needle", [
    ("version = ", "not valid TOML"),
    pytest.param("version = " + "[" * 100_000, "nested too deep", id="nested-too-deep"),
    ("[[rule]]\nhosts = ['*']", "'version' is required"),
    ('version = ""', "'version' is required"),
    ('version = "a:b"', "'version' is required"),
    ('version = true', "'version' is required"),
    ('version = "1"\ncolour = "red"', "unknown top-level"),
    ('version = "1"\nrule = 3', "array of tables"),
    ('version = "1"\n[[rule]]\nsort_query = true', "'hosts'"),
    ('version = "1"\n[[rule]]\nhosts = []', "'hosts'"),
    ('version = "1"\n[[rule]]\nhosts = ["*"]\nsort = true', "unknown key"),
    ('version = "1"\n[[rule]]\nhosts = ["*"]\nsort_query = "yes"', "'sort_query'"),
    ('version = "1"\n[[rule]]\nhosts = ["*"]\ntrailing_slash = "maybe"', "'trailing_slash'"),
    ('version = "1"\n[[rule]]\nhosts = ["*"]\nstrip_params = "sid"', "'strip_params'"),
    ('version = "1"\n[[rule]]\nhosts = ["*"]\nstrip_params = ["a=b"]', "'strip_params'"),
    ('version = "1"\n[[rule]]\nhosts = ["www.h.com"]', "www."),
    ('version = "1"\n[[rule]]\nhosts = ["h.com:80"]', "bad host pattern"),
    ('version = "1"\n[[rule]]\nhosts = ["h com"]', "bad host pattern"),
    ('version = "1"\n[[rule]]\nhosts = [3]', "host pattern"),
])
def test_bad_policy(text, needle):
    with pytest.raises(PolicyError) as e:
        parse_policy(text, source="p.toml")
    assert needle in str(e.value)
    assert str(e.value).startswith("p.toml")


def test_bad_policy_files(tmp_path):
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(str(tmp_path / "missing.toml"))
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'version = "\xe9"\n')
    with pytest.raises(PolicyError, match="not UTF-8"):
        load_policy(str(bad))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="ab_*?[]!x", min_size=1, max_size=5), min_size=1, max_size=4),
       st.lists(st.text(alphabet="ab_x[]!", max_size=5), min_size=1, max_size=6))
def test_param_stripping_is_fnmatch(patterns, names):
    rule = Rule(hosts=("*",), strip_params=tuple(patterns))
    query = "&".join(f"{n}=1" for n in names)
    _, _, got = rule.rewrite("h", "/", query)
    kept = [f"{n}=1" for n in names if not any(fnmatchcase(n, p) for p in patterns)]
    assert got == ("&".join(kept) if kept else None)
