"""Small runs through the page cache against O_DIRECT, in one process.

Two stores, opened with defaults, are fed the same crawl stream (``workload.CrawlStream``)
batch by batch, which of the two goes first alternating; one writes every raw run
O_DIRECT (``store/runs.py: DIRECT_MIN_KEYS`` = 0, the writer before), the other
writes runs of fewer than 2^17 keys through the page cache (the default). Prints
each one's median ns/key per batch and the paired per-batch difference.

    python bench/bench_small_runs.py [--keys 5e6] [--batch 1e5] [--dir scratch/small-runs]
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

import numpy as np

import seenstore.store.runs.live as runs
from seenstore.bench.units import parse_count
from seenstore.warmup import warm_up
from seenstore.keys.sort import machine_summary
from seenstore.store import SeenStore
from seenstore.bench.workload import CrawlStream

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=parse_count, default=5_000_000)
    ap.add_argument("--batch", type=parse_count, default=100_000)
    ap.add_argument("--dir", default=os.path.join(REPO, "scratch", "small-runs"))
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    print(f"machine: {machine_summary()}")
    print(f"JIT warm-up {warm_up(a.dir, child=True):.2f} s (not timed)")
    batches = [b.keys.copy() for b in CrawlStream(a.keys, a.batch, reoffer=0.5, dup=0.1, seed=0)]
    limit = {"O_DIRECT": 0, "page cache": runs.DIRECT_MIN_KEYS}
    stores = {}
    for name in limit:
        path = os.path.join(a.dir, name.replace(" ", "-"))
        shutil.rmtree(path, ignore_errors=True)
        stores[name] = SeenStore.open(path, create=True)
    took: dict = {name: [] for name in limit}
    try:
        for i, keys in enumerate(batches):
            for name in (list(limit) if i % 2 == 0 else list(limit)[::-1]):
                runs.DIRECT_MIN_KEYS = limit[name]  # read by each writer as it opens
                t0 = time.perf_counter()
                stores[name].add_new(keys)
                took[name].append(time.perf_counter() - t0)
    finally:
        for name, st in stores.items():
            runs.DIRECT_MIN_KEYS = limit[name]
            st.close()
        runs.DIRECT_MIN_KEYS = limit["page cache"]
    print(f"{len(batches)} batches of {a.batch:,} keys ({a.keys:,} in all)")
    for name, t in took.items():
        print(f"{name:>10}: median {np.median(t) / a.batch * 1e9:.0f} ns/key per batch")
    d = np.array(took["O_DIRECT"]) - np.array(took["page cache"])
    print(f"paired (O_DIRECT - page cache) per batch: median {np.median(d) * 1e3:.2f} ms, "
          f"mean {d.mean() * 1e3:.2f} ms; page cache faster in {np.mean(d > 0):.0%} of batches")


if __name__ == "__main__":
    main()
