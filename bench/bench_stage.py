"""Throughput of the streaming dedup stage: keys offered per second through
``DedupStage.offer`` on a crawl-like stream with 50% re-offers, and the share of
offered keys answered without waiting for a merge.

The stream is seenstore.bench.workload.CrawlStream (host-skewed keys; each offer call
carries --offer keys: fresh ones, re-offers of keys from earlier calls drawn
uniformly over the whole history or, with --popular, Zipf-popular ones, and
in-call repeats with --dup), generated
before the clock starts. The stage runs with real fsyncs (store commits and WAL
"always"). Baselines measured in the same run on the same keys: SeenStore.add
alone in batches of the stage's buffer size (no immediate answers), and a Python
set (check-and-add per key, in memory; at most --set-max keys).

    python bench/bench_stage.py --keys 1e7
    python bench/bench_stage.py --keys 1e8 [--offer 1e4] [--budget-mb 64] [--cache 4194304]
    python bench/bench_stage.py --keys 1e7 --offer 1e3 --tasks 32 [--wal-sync 0.01] [--popular]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import threading
import time

import numpy as np

from seenstore.bench.units import parse_count
from seenstore.stage import DedupStage
from seenstore.store import SeenStore
from seenstore.bench.workload import CrawlStream, keys_of_ids


def gen(total: int, offer: int, reoffer: float, dup: float,
        popular: bool) -> tuple[list[np.ndarray], int]:
    """Offer batches and the number of distinct keys in them. ``popular``: re-offered
    ids are Zipf-distributed over the history (id rank r with P ~ 1/(r+1): early
    pages, like home pages, are linked again and again) instead of uniform."""
    stream = CrawlStream(total, offer, reoffer=reoffer, dup=dup, seed=7)
    if not popular:
        return [b.keys for b in stream], stream.expected_total_new
    rng = np.random.default_rng(7)
    out = []
    for _, first, n_fresh, n_re, n_dup in stream.plan():
        ids = np.arange(first, first + n_fresh + n_re, dtype=np.uint64)
        if n_re:
            rank = np.exp(rng.random(n_re) * np.log(first + 1.0)) - 1.0
            ids[n_fresh:] = np.minimum(rank.astype(np.uint64), np.uint64(first - 1))
        keys = keys_of_ids(ids, stream.host_bits, stream.n_hosts, stream.seed)
        if n_dup:
            keys = np.concatenate([keys, keys[rng.integers(0, len(keys), n_dup)]])
        out.append(keys)
    return out, stream.expected_total_new


def warm_up(directory: str) -> float:
    """Load/compile every kernel the stage uses on a throwaway store."""
    t = time.perf_counter()
    path = os.path.join(directory, "warm")
    with DedupStage.open(path, create=True, budget_bytes=8 * 5000, sync=False,
                         wal_sync="never") as st:
        keys = np.random.default_rng(1).integers(0, 2**64, 20_000, dtype=np.uint64)
        for lo in range(0, 20_000, 2000):
            st.offer(keys[lo:lo + 2000])
            st.offer(keys[:lo + 10])
        st.flush()
    shutil.rmtree(path)
    return time.perf_counter() - t


class AnonPeak:
    """Peak anonymous resident memory (RssAnon: not file pages such as the memory-mapped
    runs) of this process from construction to ``stop``, above its level at construction."""

    def __init__(self) -> None:
        self.base = self.peak = self._read()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    @staticmethod
    def _read() -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
        return 0

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._read())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._read())

    @property
    def growth(self) -> int:
        return self.peak - self.base


def run_stage(path: str, batches, a, expected_new: int) -> dict:
    mem = AnonPeak()
    stage = DedupStage.open(path, create=True, budget_bytes=a.budget_mb << 20,
                            cache_keys=a.cache, bloom_capacity=max(expected_new, 1 << 20),
                            wal_sync=a.wal_sync)
    lat = np.empty(len(batches))
    t0 = time.perf_counter()
    if a.tasks:
        handed = asyncio.run(offer_async(stage, batches, a.tasks, lat))
    else:
        handed = 0
        for i, keys in enumerate(batches):
            t = time.perf_counter()
            handed += len(stage.offer(keys))
            lat[i] = time.perf_counter() - t
    t_offer = time.perf_counter() - t0
    handed += len(stage.flush())
    t_all = time.perf_counter() - t0
    s = stage.stats()
    s["bloom_mb"] = stage.store.bloom.nbytes / 2**20
    stage.close()
    mem.stop()
    if handed != expected_new:
        sys.exit(f"WRONG: stage handed out {handed} keys, the stream holds {expected_new} new")
    return dict(s, t_offer=t_offer, t_all=t_all, lat=lat, peak=mem.growth)


async def offer_async(stage: DedupStage, batches, tasks: int, lat: np.ndarray) -> int:
    """``tasks`` asyncio tasks take the next batch and ``await stage.offer_async`` it:
    WAL fsyncs are shared by the offers waiting at the same time (group commit)."""
    work = iter(enumerate(batches))
    handed = 0

    async def worker():
        nonlocal handed
        for i, keys in work:
            t = time.perf_counter()
            got = await stage.offer_async(keys)  # not "handed += len(await ...)": that
            handed += len(got)                    # reads handed before the await
            lat[i] = time.perf_counter() - t

    await asyncio.gather(*(worker() for _ in range(tasks)))
    return handed


def run_store(path: str, batches, buffer_keys: int, expected_new: int) -> float:
    """SeenStore.add alone, fed buffer-sized batches: the store's batch throughput."""
    t0 = time.perf_counter()
    new, pend, n = 0, [], 0
    with SeenStore.open(path, create=True, bloom_capacity=max(expected_new, 1 << 20)) as store:
        for keys in batches + [None]:
            if keys is not None:
                pend.append(keys)
                n += len(keys)
            if pend and (keys is None or n >= buffer_keys):
                new += int(store.add(np.concatenate(pend)).sum())
                pend, n = [], 0
    if new != expected_new:
        sys.exit(f"WRONG: store admitted {new} keys, the stream holds {expected_new} new")
    return time.perf_counter() - t0


def run_set(batches, limit: int) -> tuple[float, int]:
    seen: set[int] = set()
    n = 0
    t0 = time.perf_counter()
    for keys in batches:
        if n + len(keys) > limit:
            break
        new = []
        for k in keys.tolist():
            if k not in seen:
                seen.add(k)
                new.append(k)
        n += len(keys)
    return time.perf_counter() - t0, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--keys", default="1e7", help="keys offered in total (1e7, 1e8 ...)")
    ap.add_argument("--offer", default="1e4", help="keys per offer call")
    ap.add_argument("--reoffer", type=float, default=0.5, help="share of re-offered keys")
    ap.add_argument("--dup", type=float, default=0.0, help="share of in-call repeats")
    ap.add_argument("--popular", action="store_true",
                    help="re-offers Zipf-popular over the history (default: uniform)")
    ap.add_argument("--budget-mb", type=int, default=64, help="stage buffer budget (MiB)")
    ap.add_argument("--cache", type=int, default=1 << 22, help="recent-key cache entries")
    ap.add_argument("--wal-sync", default="always")
    ap.add_argument("--tasks", type=int, default=0,
                    help="offer from this many asyncio tasks with offer_async (0: plain offer)")
    ap.add_argument("--set-max", default="1e7", help="keys for the Python set baseline")
    ap.add_argument("--no-store-baseline", action="store_true")
    ap.add_argument("--dir", default="scratch/bench_stage")
    a = ap.parse_args()
    total, offer = parse_count(a.keys), parse_count(a.offer)
    a.wal_sync = a.wal_sync if a.wal_sync in ("always", "never") else float(a.wal_sync)
    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir)

    print(f"JIT warm-up (load/compile kernels): {warm_up(a.dir):.2f}s, not counted")
    t = time.perf_counter()
    batches, expected_new = gen(total, offer, a.reoffer, a.dup, a.popular)
    print(f"stream: {total:,} keys in offers of {offer:,}, re-offer {a.reoffer:.0%} "
          f"({'Zipf-popular' if a.popular else 'uniform'} over the history), "
          f"in-call repeats {a.dup:.0%}, {expected_new:,} distinct new "
          f"(generated in {time.perf_counter() - t:.1f}s, not counted)")
    buffer_keys = (a.budget_mb << 20) // 8
    print(f"stage: budget {a.budget_mb} MiB/buffer ({buffer_keys:,} keys), cache {a.cache:,} "
          f"keys, WAL sync {a.wal_sync!r}, store sync on, "
          + (f"{a.tasks} asyncio tasks (offer_async)" if a.tasks else "one thread (offer)"))

    s = run_stage(os.path.join(a.dir, "stage"), batches, a, expected_new)
    lat = s["lat"] * 1e3
    rate = total / s["t_all"]
    print(f"\nDedupStage: {total / s['t_offer'] / 1e6:.2f} M keys/s through offer "
          f"({s['t_offer']:.1f}s), {rate / 1e6:.2f} M keys/s including the final flush "
          f"({s['t_all']:.1f}s)")
    print(f"  answered without waiting for a merge: {s['answered_without_waiting']:.1%} "
          f"of offered keys; new keys handed out at once: {s['new_without_waiting']:.1%}")
    print(f"  cache hit rate {s['cache_hit_rate']:.1%}, held {s['held']:,} "
          f"({s['held_seen']:,} turned out seen), merges {s['merges']} "
          f"({s['merge_s']:.1f}s in the background), offers blocked {s['blocked_s']:.1f}s, "
          f"final flush waited {s['flush_wait_s']:.1f}s")
    print(f"  offer latency ms: p50 {np.percentile(lat, 50):.2f}  p99 "
          f"{np.percentile(lat, 99):.2f}  max {lat.max():.1f}")
    print(f"  WAL: {s['wal_bytes_written'] / 1e6:.0f} MB written, {s['wal_records']:,} "
          f"records, {s['wal_fsyncs']:,} fsyncs; anomalies {s['anomalies']}")
    print(f"  memory: peak anonymous RSS {s['peak'] / 2**20:.0f} MiB above the process before "
          f"open (stage, merge scratch, store Bloom filter {s['bloom_mb']:.0f} MiB)")

    t_set, n_set = run_set(batches, parse_count(a.set_max))
    print(f"\nbaseline Python set (check-and-add per key, {n_set:,} keys, in memory): "
          f"{n_set / t_set / 1e6:.2f} M keys/s -> stage is {rate / (n_set / t_set):.1f}x")
    if not a.no_store_baseline:
        t_store = run_store(os.path.join(a.dir, "store"), batches, buffer_keys, expected_new)
        print(f"baseline SeenStore.add in {buffer_keys:,}-key batches (answers only per batch): "
              f"{total / t_store / 1e6:.2f} M keys/s ({t_store:.1f}s) -> stage is "
              f"{rate / (total / t_store):.2f}x")
    shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
