"""Duplicate fetches and wrong merges of a real crawler loop on the simulated web
(issue 38, "Must show"): tests/simweb/ (web, HTTP server, crawler), bench/dust.py
(the table). One web, one server and each config's crawl are shared by the module.

- the simulated web answers as its ground truth says (spot checks per behaviour);
- safe rules only: every reachable page fetched, no wrong merge, many duplicates;
- the per-host rules of the ground truth: no wrong merge (the rules said to hold do);
- the aggressive global rules: wrong merges, only on hosts where a rule is wrong;
- online learning: duplicate fetches cut by >= 75% against safe rules only, no
  wrong merge, every reachable page fetched.
"""

import json

import pytest
from click.testing import CliRunner

from seenstore.cli import main
from simweb.crawl import crawl, crawl_config, links_of, score
from simweb.server import SimServer
from simweb.web import Web
from seenstore.url.normalise import normalise

CUT = 0.75


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """(web, its reachable pages, run(config) -> score, the folder holding the WARC)."""
    web = Web()
    reachable = web.reachable()
    tmp = tmp_path_factory.mktemp("dust")
    scores = {}
    with SimServer(web) as server:
        def run(name):
            if name not in scores:
                warc = str(tmp / f"{name}.warc.gz") if name == "safe" else None
                r = crawl_config(name, web, server.port, str(tmp / name), warc=warc)
                scores[name] = score(r, web, reachable)
            return scores[name]
        run.port = server.port
        yield web, reachable, run, tmp


def test_the_web_answers_as_its_ground_truth_says(sim):
    web, reachable, _, _ = sim
    assert reachable == web.all_pages() and len(web.hosts) >= 40
    r = web.respond
    # the crawler reads the links the ground truth follows
    for pid in sorted(web.all_pages())[::7]:
        resp = r(pid)
        got, _ = links_of(resp.body, dict(resp.headers).get("Link"))
        assert [normalise(u, base=pid) for u in got] == [normalise(u) for u in resp.links]
    # where a rule holds
    assert r("http://www.bare-j.test/").status == 301
    assert r("http://k-site.test/").headers[0] == ("Location", "http://www.k-site.test/")
    page = web.by_name["slash-add-g.test"].order[1]
    assert r(page.id.rstrip("/")).status == 301 and web.page_id(page.id.rstrip("/")) == page.id
    page = web.by_name["case-l.test"].order[1]
    assert r(page.id.lower()).page == r(page.id.upper().replace("HTTP://", "http://")).page
    assert r(page.id).body == r(page.id.lower()).body
    page = web.by_name["index-n.test"].order[1]
    assert r(page.id + "index.html").page == page.id
    page = web.by_name["sess-a.test"].order[1]
    assert r(page.id + "?xsess=1").body == r(page.id).body
    page = web.by_name["order-e.test"].order[1]
    q = "&".join(reversed(page.query))
    assert r(f"http://order-e.test{page.path}?{q}").page == page.id
    page = web.by_name["linkhdr-r.test"].order[1]
    printed = r(page.id + "?print=1")
    assert printed.page == page.id and printed.body != r(page.id).body
    assert ("Link", f'<{page.id}>; rel="canonical"') in printed.headers
    page = web.by_name["ts-s.test"].order[1]
    a, b = r(page.id, clock=1), r(page.id, clock=2)
    assert a.page == b.page and a.body != b.body
    assert len(set(a.body.splitlines()) ^ set(b.body.splitlines())) == 2  # one line differs
    # where it would be wrong
    assert r("http://ids-w.test/item?id=7").page != r("http://ids-w.test/item?id=07").page
    assert r("http://news-x.test/news/2001/05").page != r("http://news-x.test/news/2001/05/").page
    assert r("http://calc-z.test/calc?x=1&y=2").page != r("http://calc-z.test/calc?y=2&x=1").page
    assert r("http://wiki-ab.test/wiki/Topic1").page != r("http://wiki-ab.test/wiki/topic1").page
    assert r("http://twin-af.test/p1").page != r("http://www.twin-af.test/p1").page
    assert (r("http://promo-ad.test/landing?utm_campaign=c1").page
            != r("http://promo-ad.test/landing?utm_campaign=c2").page)
    assert r("http://files-ag.test/d1/").page != r("http://files-ag.test/d1/index.html").page


def test_safe_rules_fetch_every_page_and_many_duplicates(sim):
    web, reachable, run, tmp = sim
    s = run("safe")
    assert s["wrong_merges"] == 0 and s["pages_fetched"] == len(reachable)
    assert s["not_found"] == 0 and s["redirects"] > 0
    assert s["duplicate_fetches"] >= 0.3 * s["fetches"], s
    # the crawl is in a WARC: a response and a request record per fetch
    from warcio.archiveiterator import ArchiveIterator
    with open(tmp / "safe.warc.gz", "rb") as f:
        kinds = [rec.rec_type for rec in ArchiveIterator(f)]
    assert kinds.count("response") == kinds.count("request") == s["fetches"]


def test_the_ground_truths_per_host_rules_merge_nothing_wrongly(sim):
    web, reachable, run, _ = sim
    s = run("oracle")
    assert s["wrong_merges"] == 0, s["missed"]
    assert s["duplicate_fetches"] <= 0.25 * run("safe")["duplicate_fetches"], s


def test_aggressive_global_rules_merge_wrongly(sim):
    web, reachable, run, _ = sim
    s = run("aggressive")
    assert s["wrong_merges"] > 0
    wrong_hosts = {h.name for h in web.hosts if h.wrong}
    assert set(s["missed_hosts"]) <= wrong_hosts, s["missed_hosts"]
    for name in ("calc-z.test", "news-x.test", "promo-ad.test", "twin-af.test"):
        assert s["missed_hosts"].get(name), (name, s["missed_hosts"])


def test_online_learning_cuts_duplicates_and_merges_nothing_wrongly(sim):
    web, reachable, run, _ = sim
    safe, s = run("safe"), run("learn")
    assert s["wrong_merges"] == 0, (s["missed_hosts"], s["missed"])
    assert s["pages_fetched"] == len(reachable)
    assert s["duplicate_fetches"] <= (1 - CUT) * safe["duplicate_fetches"], (
        s["duplicate_fetches"], safe["duplicate_fetches"], s["duplicate_hosts"])


def test_offline_learning_from_the_crawl_warc_then_a_second_crawl(sim):
    """The offline path: the safe crawl written to WARC by warcio, ``seenstore learn``
    on it into a new store, a second crawl starting from the learned policy."""
    web, reachable, run, tmp = sim
    safe = run("safe")
    store = tmp / "offline"
    r = CliRunner().invoke(main, ["learn", str(tmp / "safe.warc.gz"), "--store", str(store),
                                  "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["recorded"] == safe["fetches"] and doc["policy_version"] == 1
    adopted = {(f["host"], f["rule"], f["name"]) for f in doc["findings"]
               if f["status"] == "adopted"}
    assert ("sess-a.test", "strip_params", "xsess") in adopted
    wrong = {("ids-w.test", "strip_params", "id"), ("calc-z.test", "sort_query", ""),
             ("news-x.test", "trailing_slash", "remove"), ("news-x.test", "trailing_slash", "add"),
             ("wiki-ab.test", "lowercase_path", ""), ("twin-af.test", "strip_www", "")}
    assert not adopted & wrong
    second = score(crawl(web, run.port, str(store)), web, reachable)
    assert second["wrong_merges"] == 0 and second["pages_fetched"] == len(reachable)
    assert second["duplicate_fetches"] <= (1 - CUT) * safe["duplicate_fetches"], second
