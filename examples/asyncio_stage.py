#!/usr/bin/env python3
"""Embedding seenstore's DedupStage in an asyncio crawler (docs/stage.md, "asyncio").

A simulated web (no network): three hosts of 300 pages each, whose pages link to
each other spelled many ways (fragments, case, default port, dot segments,
escapes, relative references), popular pages far more often than others, plus a
crawler trap: trap.test/cal/YYYY/MM links to the next month, forever. Worker
tasks take a URL from the frontier, "fetch" it, and offer its links to the stage:

    res = await stage.offer_async(links, base=url)   # check-and-claim: no await inside
    for key, url in res:                             # new URLs, each exactly once
        frontier.put_nowait(url)

Links the Bloom filter cannot clear at once are held until the next merge, which
runs in the background; they come back from later offers or from ``flush_async``.
A per-host cap bounds the trap. Run it twice on one store: the second run fetches
nothing, because nothing is handed out twice, across runs and crashes too.

    python examples/asyncio_stage.py [--workers 16] [--host-cap 400] [--store DIR] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import tempfile
import zlib

from seenstore.stage import DedupStage

HOSTS = ("a.test", "b.test", "c.test")
PAGES = 300
TRAP = "trap.test"
START = "http://a.test/p/0"


def links_of(url: str) -> list[str]:
    """The links on page ``url`` (a canonical URL), as a page would spell them."""
    host, path = url.split("/", 3)[2], "/" + url.split("/", 3)[3]
    rnd = random.Random(zlib.crc32(url.encode()))
    if host == TRAP:  # /cal/YYYY/MM -> next month, in two spellings
        y, m = map(int, path.split("/")[2:4])
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
        return [f"../../cal/{y}/{m:02d}", f"http://TRAP.test/cal/{y}/{m:02d}#top"]
    out = []
    for _ in range(12):
        h = rnd.choice(HOSTS)
        j = int(PAGES ** rnd.random()) - 1  # popular pages (small j) are linked most
        out.append(rnd.choice([
            f"http://{h}/p/{j}", f"HTTP://{h.upper()}:80/p/{j}#s{rnd.randint(0, 9)}",
            f"http://{h}/x/../p/{j}", f"http://{h}/p/%{ord(str(j)[0]):02X}{str(j)[1:]}",
        ] + ([f"../p/{j}", f"./{j}", f"/p/{j}"] if h == host else [])))
    if rnd.random() < 0.1:
        out.append(f"http://{TRAP}/cal/2024/01")
    return out


async def fetch(url: str) -> list[str]:
    await asyncio.sleep(random.random() * 0.002)  # the network
    return links_of(url)


async def crawl(stage: DedupStage, workers: int) -> collections.Counter:
    """Crawl from START until nothing is left; returns fetches per URL."""
    frontier: asyncio.Queue[str] = asyncio.Queue()
    fetched: collections.Counter = collections.Counter()

    def enqueue(res) -> None:
        for _, url in res:
            frontier.put_nowait(url)

    async def worker() -> None:
        while True:
            url = await frontier.get()
            try:
                links = await fetch(url)
                fetched[url] += 1
                enqueue(await stage.offer_async(links, base=url))
            finally:
                frontier.task_done()

    enqueue(await stage.offer_async([START]))
    tasks = [asyncio.create_task(worker()) for _ in range(workers)]
    while True:
        await frontier.join()             # every queued URL fetched, its links offered
        res = await stage.flush_async()   # held links: merged, the new ones come back
        if not len(res):
            break
        enqueue(res)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return fetched


def run(store: str, workers: int = 16, host_cap: int | None = 400) -> dict:
    """One crawl on the store at ``store`` (created if missing); returns a summary."""
    with DedupStage.open(store, create=True, budget_bytes=8 * 512, cache_keys=1024,
                         host_cap=host_cap) as stage:
        fetched = asyncio.run(crawl(stage, workers))
        st = stage.stats()
        stage.flush()
    per_host = collections.Counter(u.split("/")[2] for u in fetched)
    return {
        "fetched": sum(fetched.values()),
        "duplicate_fetches": sum(n - 1 for n in fetched.values()),
        "pages_per_host": dict(sorted(per_host.items())),
        "links_offered": st["offered"],
        "cache_hit_rate": round(st["cache_hit_rate"] or 0.0, 3),
        "answered_without_waiting": round(st["answered_without_waiting"] or 0.0, 3),
        "held": st["held"], "admitted_after_merge": st["admitted_after_merge"],
        "merges": st["merges"], "refused_by_cap": st["refused_by_cap"],
        "wal_records": st["wal_records"], "wal_fsyncs": st["wal_fsyncs"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--host-cap", type=int, default=400, help="0 or less: no cap")
    ap.add_argument("--store", default=None, help="store directory (default: a temporary one)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    cap = a.host_cap if a.host_cap > 0 else None
    with tempfile.TemporaryDirectory() as tmp:
        store = a.store or f"{tmp}/crawl.db"
        first = run(store, a.workers, cap)
        again = run(store, a.workers, cap)  # the same crawl again: all seen
    if a.json:
        print(json.dumps({"first": first, "again": again}, indent=2))
        return
    for name, r in (("first crawl", first), ("same store again", again)):
        print(f"{name}: fetched {r['fetched']} pages, {r['duplicate_fetches']} fetched twice; "
              f"per host {r['pages_per_host']}")
        print(f"  {r['links_offered']} links offered, cache hit rate {r['cache_hit_rate']:.1%}, "
              f"answered without waiting {r['answered_without_waiting']:.1%}, held "
              f"{r['held']} ({r['admitted_after_merge']} new after a merge), {r['merges']} "
              f"merges, refused by the host cap {r['refused_by_cap']}, WAL {r['wal_records']} "
              f"records / {r['wal_fsyncs']} fsyncs")


if __name__ == "__main__":
    main()
