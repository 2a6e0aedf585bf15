"""The policy vocabulary learning writes: lowercase_path, index_documents, learned rules
(with_learned, learned, base), to_toml round trips, and idempotence under any policy."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seenstore.errors import PolicyError
from seenstore.url.normalise import Rejection, normalise, try_normalise
from seenstore.url.policy import (DEFAULT_POLICY, Policy, Rule, merge_rule, param_pattern,
                                  parse_policy)


def policy(body: str, hosts: str = '["*"]'):
    return parse_policy(f'version = "t1"\n[[rule]]\nhosts = {hosts}\n{body}\n')


@pytest.mark.parametrize("body,raw,expected", [
    ("lowercase_path = true", "http://h.com/A/bC?Q=X", "http://h.com/a/bc?Q=X"),
    ("lowercase_path = true", "http://h.com/%C3%A9/%2F/X", "http://h.com/%C3%A9/%2F/x"),
    ('index_documents = ["index.html"]', "http://h.com/a/index.html?x", "http://h.com/a/?x"),
    ('index_documents = ["index.html"]', "http://h.com/index.html", "http://h.com/"),
    ('index_documents = ["index.html"]', "http://h.com/a/index.html/", "http://h.com/a/"),
    ('index_documents = ["index.php"]\ntrailing_slash = "remove"',
     "http://h.com/a/index.php", "http://h.com/a"),
    ('index_documents = ["index.php"]\ntrailing_slash = "remove"',
     "http://h.com/index.php/index.php", "http://h.com/"),
    ('index_documents = ["Index.html"]\nlowercase_path = true',
     "http://h.com/A/INDEX.HTML", "http://h.com/a/"),
])
def test_new_rules_apply(body, raw, expected):
    p = policy(body)
    assert normalise(raw, policy=p) == expected
    assert normalise(expected, policy=p) == expected
    assert normalise(raw) != expected


@pytest.mark.parametrize("body,raw", [
    ('index_documents = ["index.html"]', "http://h.com/a/xindex.html"),
    ('index_documents = ["index.html"]', "http://h.com/a/index.html2"),
    ('index_documents = ["index.html"]', "http://h.com/a/INDEX.HTML"),  # case-sensitive
    ("lowercase_path = true", "http://h.com/a/b?Q=X"),                 # query untouched
])
def test_new_rules_leave_alone(body, raw):
    assert normalise(raw, policy=policy(body)) == normalise(raw)


@pytest.mark.parametrize("text,needle", [
    ('index_documents = "index.html"', "'index_documents'"),
    ('index_documents = ["a/b"]', "'index_documents'"),
    ('index_documents = [".."]', "'index_documents'"),
    ('index_documents = [""]', "'index_documents'"),
    ('lowercase_path = 1', "'lowercase_path'"),
    ('learned = "yes"', "'learned'"),
])
def test_bad_new_keys(text, needle):
    with pytest.raises(PolicyError, match=needle):
        parse_policy(f'version = "1"\n[[rule]]\nhosts = ["h.com"]\n{text}\n', source="p.toml")


def test_identity_of_files_without_new_keys_is_unchanged():
    old = parse_policy('version = "1"\n[[rule]]\nhosts = ["*"]\nsort_query = true\n')
    same = parse_policy('version = "1"\n[[rule]]\nhosts = ["*"]\nsort_query = true\n'
                        'lowercase_path = false\nindex_documents = []\n')
    new = parse_policy('version = "1"\n[[rule]]\nhosts = ["*"]\nsort_query = true\n'
                       'lowercase_path = true\n')
    docs = parse_policy('version = "1"\n[[rule]]\nhosts = ["*"]\nsort_query = true\n'
                        'index_documents = ["index.html"]\n')
    assert old.identity == same.identity == "1:" + old.content_hash[:16]
    assert len({old.identity, new.identity, docs.identity}) == 3


def test_rejection_is_falsy():
    r = try_normalise("mailto:x")
    assert isinstance(r, Rejection) and not r
    assert all(not reason for reason in Rejection)
    assert try_normalise("http://a.com/")


BASE = parse_policy("""
version = "crawl-2"
[[rule]]
hosts = ["shop.example"]
strip_params = ["sid"]
trailing_slash = "add"
[[rule]]
hosts = ["*"]
strip_tracking = true
""")


def test_with_learned_puts_merged_host_rules_first():
    learned = {"shop.example": Rule(hosts=("x",), strip_params=("ref",), lowercase_path=True),
               "blog.example": Rule(hosts=("x",), trailing_slash="remove")}
    p = BASE.with_learned(learned)
    assert p.base is BASE and BASE.base is BASE and set(p.learned) == set(learned)
    assert p.learned["blog.example"].hosts == ("blog.example",)
    assert [r.hosts for r in p.rules] == [("blog.example",), ("shop.example",),
                                          ("shop.example",), ("*",)]
    assert p.identity != BASE.identity and p.identity.startswith("crawl-2:")
    # shop: learned ref + file sid, the file's trailing slash (learned says keep)
    assert normalise("http://www.shop.example/A?sid=1&ref=2&x=3", policy=p) == \
        "http://www.shop.example/a/?x=3"
    # blog: the learned rule merged with the "*" rule, so tracking still goes
    assert normalise("http://blog.example/a/?utm_source=1", policy=p) == "http://blog.example/a"
    assert normalise("http://other.example/a/?utm_source=1", policy=p) == \
        "http://other.example/a/"
    assert p.with_learned({}) is BASE
    assert p.with_learned(learned).identity == p.identity


@pytest.mark.parametrize("key", ["*.example", "www.a.com", "[::1]", "A.com", ""])
def test_with_learned_refuses_non_literal_hosts(key):
    with pytest.raises(PolicyError, match="learned rule"):
        DEFAULT_POLICY.with_learned({key: Rule(hosts=(key,), sort_query=True)})


def test_merge_rule_is_idempotent():
    base = Rule(hosts=("*",), strip_params=("a",), strip_tracking=True, trailing_slash="add",
                index_documents=("index.php",))
    learned = Rule(hosts=("h.com",), strip_params=("b", "a"), lowercase_path=True,
                   index_documents=("index.html",))
    m = merge_rule(learned, base, "h.com")
    assert m.strip_params == ("b", "a") and m.strip_tracking and m.trailing_slash == "add"
    assert m.learned and m.lowercase_path and set(m.index_documents) == {"index.html",
                                                                         "index.php"}
    assert merge_rule(m, base, "h.com") == m


def test_to_toml_round_trips_with_notes():
    # a name in a URL is as the canonical form spells it: '"' is escaped there
    learned = {"shop.example": Rule(hosts=("x",), sort_query=True, strip_params=(
                   param_pattern('a"b[]'), param_pattern("a%22b[]"))),
               "blog.example": Rule(hosts=("x",), index_documents=("index.html",))}
    p = BASE.with_learned(learned)
    text = p.to_toml({"shop.example": "strip a\"b[]: support 12, counter 0\nsort: 7"})
    assert "# strip a\"b[]: support 12, counter 0\n# sort: 7\n[[rule]]\nhosts = " \
        "[\"shop.example\"]\nlearned = true\n" in text
    q = parse_policy(text)
    assert q.identity == p.identity
    assert q.base.identity == BASE.identity
    assert set(q.learned) == set(learned)
    assert parse_policy(BASE.to_toml()).identity == BASE.identity
    url = 'http://shop.example/p?z=1&a"b[]=2'
    assert normalise(url, policy=q) == normalise(url, policy=p) == "http://shop.example/p/?z=1"


@pytest.mark.parametrize("text,needle", [
    ('[[rule]]\nhosts = ["*"]\n[[rule]]\nhosts = ["a.com"]\nlearned = true', "come before"),
    ('[[rule]]\nhosts = ["a.com", "b.com"]\nlearned = true', "exactly one host"),
    ('[[rule]]\nhosts = ["*.com"]\nlearned = true', "exactly one host"),
    ('[[rule]]\nhosts = ["a.com"]\nlearned = true\n[[rule]]\nhosts = ["a.com"]\nlearned = true',
     "exactly one host"),
])
def test_bad_learned_rules(text, needle):
    with pytest.raises(PolicyError, match=needle):
        parse_policy('version = "1"\n' + text + "\n")


# -- generated rules and URLs: idempotence, and to_toml round trips ------------------

names = st.sampled_from(["a", "b", "sid", "ids[]", "x*", "A", "%41", "a%3Db", ""])
rules = st.builds(
    Rule,
    hosts=st.just(("*",)),
    strip_params=st.lists(names.filter(bool), max_size=3).map(tuple),
    strip_tracking=st.booleans(), sort_query=st.booleans(),
    trailing_slash=st.sampled_from(["keep", "add", "remove"]),
    strip_www=st.booleans(), strip_trailing_dot=st.booleans(), lowercase_path=st.booleans(),
    index_documents=st.lists(st.sampled_from(["index.html", "Index.PHP", "a", "%41"]),
                             max_size=2).map(tuple),
)
segments = st.sampled_from(["", "a", "A", "index.html", "INDEX.HTML", "Index.PHP", "index.php",
                            "%41", "%2f", "%", "%4", ".", "..", "b c", "é", "%C3%A9"])
queries = st.one_of(st.none(), st.lists(st.tuples(names, st.sampled_from(["", "=1", "=x=y"])),
                                        max_size=4))


@st.composite
def urls(draw):
    host = draw(st.sampled_from(["h.com", "www.h.com", "WWW.www.H.com.", "h.com..", "1.2.3.4",
                                 "www.com"]))
    path = "/".join(draw(st.lists(segments, max_size=4)))
    query = draw(queries)
    q = "" if query is None else "?" + "&".join(n + v for n, v in query)
    return f"http://{host}/{path}{draw(st.sampled_from(['', '/', '//']))}{q}"


@settings(max_examples=400, deadline=None)
@given(st.lists(rules, min_size=1, max_size=2), urls())
def test_normalisation_is_idempotent_under_any_policy(rule_list, url):
    p = Policy("gen", tuple(rule_list))
    once = normalise(url, policy=p)
    assert normalise(once, policy=p) == once


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["a.com", "b.org", "c-d.net", "h.com"]), rules,
                       max_size=3),
       st.lists(rules, max_size=2), urls())
def test_learned_policies_round_trip_and_stay_idempotent(learned, file_rules, url):
    p = Policy("gen", tuple(file_rules)).with_learned(learned)
    q = parse_policy(p.to_toml({h: "note" for h in learned}))
    assert q.identity == p.identity
    once = normalise(url, policy=p)
    assert normalise(url, policy=q) == once
    assert normalise(once, policy=p) == once
