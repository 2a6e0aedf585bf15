"""learn(): each rule kind adopted where the evidence supports it, kept out where a
counter-example shows it wrong, withdrawal, and the safety property on generated evidence:
a learned policy never merges two URLs the evidence shows to be different pages."""

import random
from urllib.parse import parse_qsl, urlsplit

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seenstore.evidence.learn import Finding, LearnConfig, near_pairs, atoms_of, fold, learn
from seenstore.evidence.record import Fetch, make_fetch
from seenstore.url.normalise import normalise
from seenstore.url.policy import DEFAULT_POLICY, Rule, parse_policy


def body(key: str) -> bytes:
    """A page whose words depend on ``key`` only."""
    r = random.Random(key)
    return ("<html><body><p>" + " ".join(f"w{r.randrange(10**6)}" for _ in range(80))
            + "</p></body></html>").encode()


def crawl(serve, urls):
    """Fetch records for ``urls`` from ``serve(url) -> (status, location, page key)``."""
    out = []
    for u in urls:
        status, location, key = serve(u)
        out.append(make_fetch(u, status, location=location,
                              body=body(key) if key is not None else None))
    return out


def learned(fetches, policy=DEFAULT_POLICY, **kw):
    rules, findings = learn(fetches, policy, **kw)
    return rules, {(f.kind, f.name): f for f in findings}


def merges(rules, a, b, policy=DEFAULT_POLICY) -> bool:
    p = policy.with_learned(rules)
    return normalise(a, policy=p) == normalise(b, policy=p)


def query_page(significant, order_matters=False):
    """A host whose pages are selected by the ``significant`` parameters."""
    def serve(url):
        s = urlsplit(url)
        pairs = [(k, v) for k, v in parse_qsl(s.query) if k in significant]
        return 200, None, s.path + repr(pairs if order_matters else sorted(pairs))
    return serve


def test_an_ignored_parameter_is_learned_and_a_significant_one_is_not():
    urls = [f"http://a.example/p{i}?id={i % 3}&sid={j}" for i in range(6) for j in range(3)]
    urls += ["http://a.example/p0?id=7", "http://a.example/p0?id=07"]
    rules, found = learned(crawl(query_page({"id"}), urls))
    assert found["strip_params", "sid"].status == "adopted"
    assert found["strip_params", "sid"].counter == 0
    assert found["strip_params", "sid"].support >= 5 and found["strip_params", "sid"].paths == 6
    assert found["strip_params", "id"].status == "rejected"
    assert rules["a.example"].strip_params == ("sid",)
    assert merges(rules, "http://a.example/p1?id=1&sid=9", "http://a.example/p1?id=1")
    assert not merges(rules, "http://a.example/p0?id=7", "http://a.example/p0?id=07")


def test_id_7_and_07_served_differently_keep_id():
    urls = [f"http://b.example/item?id={v}" for v in ("7", "07", "8", "08")]
    urls += [f"http://b.example/item?id={v}&ref=x" for v in ("7", "07")]
    serve = query_page({"id"})
    rules, found = learned(crawl(serve, urls * 3), config=LearnConfig(min_support=1,
                                                                      min_paths=1))
    assert found["strip_params", "id"].status == "rejected"
    assert not merges(rules, urls[0], urls[1])


def test_a_parameter_order_learned_only_where_it_does_not_matter():
    urls = [f"http://c.example/s{i}?a={i}&b=2" for i in range(6)]
    urls += [f"http://c.example/s{i}?b=2&a={i}" for i in range(6)]
    urls += ["http://c.example/s0?a=0&b=3", "http://c.example/s0?a=1&b=2"]  # a, b select
    rules, found = learned(crawl(query_page({"a", "b"}), urls))
    assert found["sort_query", ""].status == "adopted" and rules["c.example"].sort_query
    rules, found = learned(crawl(query_page({"a", "b"}, order_matters=True), urls))
    assert found["sort_query", ""].status == "rejected" and "c.example" not in rules


def slash_site(redirect: bool, distinct: set):
    def serve(url):
        path = urlsplit(url).path
        if path.rstrip("/") in distinct:
            return 200, None, path
        if redirect and not path.endswith("/"):
            return 301, path + "/", None
        return 200, None, path.rstrip("/")
    return serve


def test_trailing_slash_direction_from_redirects():
    urls = [f"http://d.example/n/{i}" for i in range(6)]
    urls += [u + "/" for u in urls]
    rules, found = learned(crawl(slash_site(True, set()), urls))
    assert found["trailing_slash", "add"].status == "adopted"
    assert rules["d.example"].trailing_slash == "add"


def test_no_trailing_slash_rule_where_the_slash_selects_another_page():
    urls = [f"http://e.example/n/{i}" for i in range(6)]
    urls += [u + "/" for u in urls] + ["http://e.example/news/2024/05",
                                       "http://e.example/news/2024/05/"]
    rules, found = learned(crawl(slash_site(False, {"/news/2024/05"}), urls))
    assert found["trailing_slash", "remove"].status == "rejected"
    assert found["trailing_slash", "remove"].counter == 1
    assert "e.example" not in rules


def case_site(insensitive: bool):
    def serve(url):
        path = urlsplit(url).path
        return 200, None, path.lower() if insensitive else path
    return serve


def test_path_case_learned_only_where_the_server_ignores_it():
    urls = [f"http://f.example/Doc/{i}" for i in range(5)] + \
        [f"http://f.example/doc/{i}" for i in range(5)]
    rules, found = learned(crawl(case_site(True), urls))
    assert found["lowercase_path", ""].status == "adopted" and rules["f.example"].lowercase_path
    rules, found = learned(crawl(case_site(False), urls))
    assert found["lowercase_path", ""].status == "rejected" and "f.example" not in rules


def test_www_index_documents_and_two_rules_for_one_pair():
    def serve(url):
        s = urlsplit(url)
        if s.hostname.startswith("www."):
            return 301, url.replace("www.", "", 1), None
        return 200, None, s.path.removesuffix("index.html")
    urls = [f"http://{w}g.example/{d}/{f}" for d in "abcdef" for w in ("", "www.")
            for f in ("", "index.html")]
    rules, found = learned(crawl(serve, urls))
    rule = rules["g.example"]
    assert rule.strip_www and rule.index_documents == ("index.html",)
    assert found["strip_www", ""].status == found["index_documents", "index.html"].status \
        == "adopted"
    # www.g.example/a/index.html and g.example/a/ differ in both: merged by the two
    assert merges(rules, "http://www.g.example/a/index.html", "http://g.example/a/")


def test_a_pair_differing_in_two_ignorable_parameters_supports_both():
    urls = [f"http://h.example/p{i}?sid={j}" for i in range(6) for j in range(2)]
    urls += [f"http://h.example/p{i}?sid={j}&ref={j}" for i in range(6) for j in (5, 6)]
    rules, found = learned(crawl(query_page(set()), urls))
    assert found["strip_params", "ref"].status == "adopted"
    assert set(rules["h.example"].strip_params) == {"sid", "ref"}


def test_declared_canonicals_imply_rules_when_their_target_is_unfetched():
    fetches = [make_fetch(f"http://i.example/a{i}?utm_x={j}", 200, body=body(f"a{i}"),
                          canonical=f"/a{i}") for i in range(5) for j in range(2)]
    rules, found = learned(fetches)
    assert found["strip_params", "utm_x"].status == "adopted"
    # a site declaring its home page everywhere tells nothing
    fetches = [make_fetch(f"http://j.example/a?page={i}", 200, body=body(str(i)),
                          canonical="/a") for i in range(20)]
    rules, found = learned(fetches)
    assert rules == {} and found["strip_params", "page"].status == "rejected"


def test_redirects_to_an_unrelated_page_are_not_evidence():
    fetches = [make_fetch(f"http://k.example/p{i}?id={j}", 302, location="/login")
               for i in range(5) for j in range(5)]
    rules, found = learned(fetches)
    assert rules == {} and found == {}


def test_insufficient_support_and_paths():
    urls = [f"http://l.example/p?sid={j}" for j in range(10)]
    rules, found = learned(crawl(query_page(set()), urls))
    f = found["strip_params", "sid"]
    assert (f.support, f.counter, f.paths, f.status) == (45, 0, 1, "insufficient")
    assert rules == {}


def test_previous_rules_are_withdrawn_on_counter_evidence_and_kept_without_evidence():
    previous = {"m.example": Rule(hosts=("m.example",), strip_params=("sid", "x"),
                                  sort_query=True)}
    urls = [f"http://m.example/p{i}?sid={i}" for i in range(3)] + ["http://m.example/p0"]
    rules, found = learned(crawl(query_page({"sid"}), urls), previous=previous)
    assert found["strip_params", "sid"] == Finding("m.example", "strip_params", "sid", 0, 1,
                                                   0, "withdrawn")
    assert found["strip_params", "x"].status == found["sort_query", ""].status == "adopted"
    assert rules["m.example"].strip_params == ("x",) and rules["m.example"].sort_query
    # previous defaults to the policy's learned rules; no evidence at all keeps them
    p = DEFAULT_POLICY.with_learned(previous)
    assert learn([], p)[0] == {"m.example": fold("m.example", atoms_of(previous["m.example"])[0])}


def test_the_file_rule_applies_first():
    policy = parse_policy('version = "1"\n[[rule]]\nhosts = ["*"]\nstrip_params = ["sid"]\n')
    urls = [f"http://n.example/p{i}?sid={j}&ref={j}" for i in range(5) for j in range(2)]
    rules, found = learned(crawl(query_page(set()), urls), policy=policy)
    assert ("strip_params", "sid") not in found
    assert found["strip_params", "ref"].status == "adopted"
    assert merges(rules, urls[0], urls[1], policy)


def test_fold_and_atoms_round_trip():
    atoms = [("strip_params", "a*b[]"), ("sort_query", ""), ("trailing_slash", "add"),
             ("strip_www", ""), ("lowercase_path", ""), ("index_documents", "index.php")]
    rule = fold("o.example", atoms)
    assert sorted(atoms_of(rule)[0]) == sorted(atoms) and atoms_of(rule)[1] is None
    rest = Rule(hosts=("o.example",), strip_params=("s*",), strip_tracking=True)
    assert atoms_of(rest) == ([], rest)


# -- generated evidence --------------------------------------------------------------

ATOMS = [("strip_params", "a"), ("strip_params", "b"), ("sort_query", ""),
         ("trailing_slash", "remove"), ("trailing_slash", "add"), ("strip_www", ""),
         ("lowercase_path", ""), ("index_documents", "index.html")]


@st.composite
def gen_urls(draw, n=st.integers(2, 30)):
    out = []
    for _ in range(draw(n)):
        host = draw(st.sampled_from(["q.example", "www.q.example"]))
        path = "/" + "/".join(draw(st.lists(st.sampled_from(["x", "X", "y", "index.html"]),
                                            max_size=3)))
        path += draw(st.sampled_from(["", "/"]))
        q = draw(st.lists(st.sampled_from(["a=1", "a=2", "b=1", "b=2", "c=1"]), max_size=3))
        out.append(f"http://{host}{path}" + ("?" + "&".join(q) if q else ""))
    return out


@settings(max_examples=150, deadline=None)
@given(gen_urls(), st.sets(st.sampled_from(ATOMS), max_size=4),
       st.integers(0, 2**32), st.integers(0, 6))
def test_a_learned_policy_never_merges_two_different_pages(urls, true_atoms, seed, noise):
    """Pages are what a hidden true rule merges, plus ``noise`` URLs that serve their own
    page: whatever is learned never merges two URLs that served different digests."""
    slash = [a for a in true_atoms if a[0] == "trailing_slash"][:1]
    true_rule = fold("q.example", [a for a in true_atoms if a[0] != "trailing_slash"] + slash)
    policy = DEFAULT_POLICY.with_learned({"q.example": true_rule})
    rng = random.Random(seed)
    odd = set(rng.sample(urls, min(noise, len(urls))))
    fetches = [Fetch(u, 200, None, None, hash(normalise(u, policy=policy) if u not in odd
                                              else u) & (2**64 - 1), None, "q.example")
               for u in dict.fromkeys(normalise(u) for u in urls)]
    rules, findings = learn(fetches, DEFAULT_POLICY, LearnConfig(min_support=1, min_paths=1))
    learned_policy = DEFAULT_POLICY.with_learned(rules)
    seen = {}
    for f in fetches:
        seen.setdefault(normalise(f.url, policy=learned_policy), set()).add(f.digest)
    assert all(len(d) == 1 for d in seen.values())
    assert all(f.counter == 0 for f in findings if f.status == "adopted")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(ATOMS), unique=True, max_size=5), st.data(), gen_urls())
def test_a_bigger_rule_absorbs_a_smaller_one(atoms, data, urls):
    """Adding atoms only merges more: rule(A)(rule(B)(u)) == rule(A)(u) for B a subset of
    A (one trailing-slash direction), which is what scoring one atom at a time relies on."""
    atoms = [a for a in atoms if a[0] != "trailing_slash"] + \
        [a for a in atoms if a[0] == "trailing_slash"][:1]
    subset = data.draw(st.lists(st.sampled_from(atoms), unique=True) if atoms else st.just([]))
    big = DEFAULT_POLICY.with_learned({"q.example": fold("q.example", atoms)})
    small = DEFAULT_POLICY.with_learned({"q.example": fold("q.example", subset)})
    for u in urls:
        assert normalise(normalise(u, policy=small), policy=big) == normalise(u, policy=big)


@settings(max_examples=60, deadline=None)
@given(st.integers(5, 30), st.integers(0, 2**32))
def test_one_counter_example_among_many_supports_is_never_adopted(n, seed):
    rng = random.Random(seed)
    fetches = []
    for i in range(n):
        page = rng.randrange(2**64)
        fetches += [Fetch(f"http://r.example/p{i}?s={j}", 200, None, None, page, None,
                          "r.example") for j in range(2)]
    k = rng.randrange(n)
    fetches[2 * k + 1] = Fetch(f"http://r.example/p{k}?s=1", 200, None, None,
                               rng.randrange(2**64), None, "r.example")
    rng.shuffle(fetches)
    rules, findings = learn(fetches, DEFAULT_POLICY)
    f = {(f.kind, f.name): f for f in findings}["strip_params", "s"]
    assert f.counter == 1 and f.support == n - 1 and f.status == "rejected"
    assert rules == {}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), unique=True, max_size=30), st.integers(0, 5),
       st.integers(0, 2**32))
def testnear_pairs_match_all_pairs(values, bits, seed):
    rng = random.Random(seed)
    values += [v ^ (1 << rng.randrange(64)) ^ (1 << rng.randrange(64)) for v in values[:10]]
    values = list(dict.fromkeys(values))
    got = {tuple(sorted(p)) for p in near_pairs(np.array(values, dtype=np.uint64), bits)}
    want = {(i, j) for i in range(len(values)) for j in range(i + 1, len(values))
            if bin(values[i] ^ values[j]).count("1") <= bits}
    assert got == want


def test_near_simhashes_are_one_page_and_far_ones_are_not():
    rng = random.Random(5)
    fetches = []
    for i in range(5):
        sim = rng.getrandbits(64)
        for j, flip in enumerate((0, 0b111 << 20)):  # 3 bits apart, different digests
            fetches.append(Fetch(f"http://s.example/p{i}?t={j}", 200, None, None,
                                 rng.getrandbits(64), sim ^ flip, "s.example"))
    rules, found = learned(fetches)
    assert found["strip_params", "t"].status == "adopted"
    rules, found = learned(fetches, config=LearnConfig(near_bits=2))
    assert found["strip_params", "t"].status == "rejected" and rules == {}
