"""A crawl through ``DedupStage(traps=...)`` of a simulated web with traps (a
calendar, repeated path segments, session ids in paths, an infinite facet space)
beside a large legitimate catalogue (tests/simweb/trapweb.py): every legitimate
page fetched, no URL fetched twice, each trap's fetches within the configured
limit; the patterns recorded in the store refuse again after a reopen, and
``seenstore hosts`` reports them."""

from __future__ import annotations

import json
import os
from collections import Counter, deque

from clirun import cli_bytes
from simweb.trapweb import TrapWeb

from seenstore.frontier import TrapGuard
from seenstore.stage import DedupStage

LIMIT = 30
PRODUCTS = int(os.environ.get("TRAPWEB_PRODUCTS", "3000"))


def crawl(web: TrapWeb, store_dir: str, traps) -> tuple[list[str], list, dict]:
    """Fetch what the stage hands out until it hands out nothing; every fetch's
    evidence (status, digest) goes to ``record_fetch``. Returns (URLs fetched, the
    trapped pairs, the stage's stats)."""
    stage = DedupStage.open(store_dir, create=True, traps=traps, sync=False, wal_sync="never")
    fetched: list[str] = []
    trapped: list = []
    queue: deque[str] = deque()

    def take(res) -> None:
        queue.extend(url for _, url in res)
        trapped.extend(res.trapped)

    try:
        take(stage.offer(web.seeds))
        while True:
            while queue:
                url = queue.popleft()
                status, links, digest = web.respond(url)
                fetched.append(url)
                stage.record_fetch(url, status, digest=digest)
                if links:
                    take(stage.offer(links))
            res = stage.flush()
            if not len(res) and not res.trapped:
                break
            take(res)
        stats = stage.stats()
    finally:
        stage.close()
    return fetched, trapped, stats


def test_traps_are_bounded_and_every_legitimate_page_is_fetched(tmp_path):
    web = TrapWeb(n_products=PRODUCTS)
    store = str(tmp_path / "s")
    fetched, trapped, stats = crawl(web, store, TrapGuard(LIMIT))
    assert max(Counter(fetched).values()) == 1  # nothing handed out twice
    got = {web.legit_page(u) for u in fetched} - {None}
    assert got == web.legit()  # every legitimate page, the catalogue whole
    per_trap = Counter(web.trap_of(u) for u in fetched)
    assert per_trap["calendar"] <= LIMIT
    assert per_trap["repeat"] <= LIMIT
    assert per_trap["facets"] <= LIMIT
    assert per_trap["session"] == web.n_session_pages  # each page once, whatever its id
    assert {web.trap_of(u) for u, _ in trapped} == {"calendar", "repeat", "session", "facets"}
    assert {label.split()[0] for _, label in trapped} >= {"calendar", "repeat", "session"}
    assert stats["trapped"] == len(trapped) and stats["trap_patterns"] >= 4
    legit_fetches = sum(1 for u in fetched if web.trap_of(u) in (None, "session"))
    print(f"\ntrap crawl: {len(fetched)} fetches, {legit_fetches} legitimate pages, "
          f"trap fetches {dict(per_trap)}, {len(trapped)} trapped URLs refused")

    # the patterns are in the store: a reopened stage refuses more of them
    with DedupStage.open(store, traps=LIMIT, sync=False, wal_sync="never") as stage:
        far = stage.offer([f"http://cal.test/calendar/{2100 + i}/01/" for i in range(1, 4)]
                          + ["http://loop.test/a/" + "b/a/" * 80]
                          + [f"http://shop.test/product/{PRODUCTS + 1}"])
        res = stage.flush()
    assert [u for u, _ in far.trapped][:3] == [f"http://cal.test/calendar/{2100 + i}/01/"
                                               for i in range(1, 4)]
    assert len(far.trapped) == 4 and len(far) + len(res) == 1

    doc = json.loads(cli_bytes("hosts", "--store", store, "--json").stdout)
    hosts = {h["host"]: h for h in doc["hosts"]}
    shop = hosts["shop.test"]
    assert shop["kept_urls"] == PRODUCTS + web.listings + 2  # + home + the reopened offer
    if PRODUCTS + web.listings < 4096:  # within the evidence's reservoir: exact
        assert shop["fetched"] == PRODUCTS + web.listings + 1
    else:
        assert shop["evidence_sampled"]
    assert shop["failed"] == 0 and shop["duplicate_fetches"] == 0 and shop["traps"] == []
    assert hosts["cal.test"]["traps"][0]["shape"] == "calendar"
    assert hosts["cal.test"]["traps"][0]["count"] <= LIMIT
    assert hosts["facet.test"]["duplicate_fetches"] > 0
    assert doc["not_available"]  # what the store cannot tell is said
    text = cli_bytes("hosts", "--store", store, "--top", "2").stdout.decode()
    assert text.splitlines()[1].startswith("shop.test") and "# not available:" in text


def test_without_traps_the_crawl_runs_into_them(tmp_path):
    """The same web with the guard off: the traps are cut only by the crawl's end
    (here a fetch budget), which is what the guard is for."""
    web = TrapWeb(n_products=200)
    stage = DedupStage.open(str(tmp_path / "s"), create=True, sync=False, wal_sync="never")
    queue = deque(u for _, u in stage.offer(web.seeds))
    fetched = Counter()
    try:
        while queue and sum(fetched.values()) < 2000:
            url = queue.popleft()
            _, links, _ = web.respond(url)
            fetched[web.trap_of(url)] += 1
            if links:
                queue.extend(u for _, u in stage.offer(links))
    finally:
        stage.close()
    assert sum(fetched.values()) == 2000  # the budget ran out, not the web
    assert fetched["session"] > web.n_session_pages and fetched["facets"] > LIMIT
