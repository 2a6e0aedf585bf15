"""100 asyncio tasks offer the same URLs: each URL is handed out exactly once.

The harness is first shown able to fail: a stage that awaits between its check
and its claim (the classic crawler bug) hands URLs out many times.
"""

import asyncio
import random


from seenstore.store import wal
from seenstore.url.normalise import normalise
from seenstore.stage import DedupStage
from seenstore.store import SeenStore
from naive import uniq

TASKS = 100
URLS = [f"http://h{i % 13}.test/page/{i}?q={i % 5}" for i in range(300)]
# spellings of the same pages: each task offers one of them, all canonicalise alike
VARIANTS = [lambda u: u, lambda u: u.replace("http://", "HTTP://") + "#frag",
            lambda u: u.replace(".test/", ".test:80/")]


async def crawl(offer, flush):
    """Every task offers every URL (its own order, chunks of 10, yielding between
    chunks); returns every (key, payload) pair handed out to any task."""
    handed = []

    async def task(t):
        rnd = random.Random(t)
        urls = [VARIANTS[t % 3](u) for u in URLS]
        rnd.shuffle(urls)
        for lo in range(0, len(urls), 10):
            handed.extend(await offer(urls[lo:lo + 10]))
            await asyncio.sleep(0)

    await asyncio.gather(*(task(t) for t in range(TASKS)))
    handed.extend(await flush())
    return handed


def test_100_tasks_same_urls_each_handed_out_once(tmp_path):
    async def main():
        # small buffers and a weak Bloom filter: merges run while tasks offer,
        # many keys are held, offer_async waits for merges and WAL group commits
        stage = DedupStage.open(str(tmp_path / "s"), create=True, budget_bytes=8 * 64,
                                cache_keys=64, bloom_fpr=0.3, bloom_capacity=64, sync=False,
                                wal_sync=wal.SYNC_ALWAYS)
        try:
            handed = await crawl(stage.offer_async, stage.flush_async)
            return handed, stage.stats()
        finally:
            stage.close()

    handed, st = asyncio.run(main())
    keys = [k for k, _ in handed]
    assert len(keys) == len(set(keys)) == len(URLS)
    assert sorted(normalise(p) for _, p in handed) == sorted(normalise(u) for u in URLS)
    assert st["merges"] >= 3 and st["held"] > 0 and st["admitted_after_merge"] > 0
    assert st["offered"] == TASKS * len(URLS)


def test_harness_catches_an_await_between_check_and_claim(tmp_path):
    store = SeenStore.open(str(tmp_path / "n"), create=True, sync=False)

    async def racy_offer(urls):
        from seenstore.url.fingerprint import fingerprint_many
        canon = [normalise(u) for u in urls]
        keys = fingerprint_many(canon)
        fresh = ~store.contains(keys)  # check ...
        await asyncio.sleep(0)         # ... an await: other tasks check the same keys ...
        store.add(keys[fresh])         # ... claim
        return [(int(k), u) for k, u, f in zip(keys, urls, fresh) if f]

    async def noflush():
        return []

    try:
        handed = asyncio.run(crawl(racy_offer, noflush))
    finally:
        store.close()
    keys = [k for k, _ in handed]
    assert len(set(keys)) == len(URLS) and len(keys) > 2 * len(URLS)
    assert uniq(keys).size < len(keys)
