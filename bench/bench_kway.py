"""The k-way merge kernel of compaction (kernels/merge.py ``kway_step``) against
``np.sort`` of the runs concatenated, on
disjoint sorted runs of random keys, driven chunk by chunk as ``runs.merged_chunks``
drives it (rows of MERGE_BUFFER_BYTES / k, output lots of 2^20 keys). Thread CPU
time, best of --reps; each result checked against the sorted concatenation.

    python bench/bench_kway.py [--keys 1e7] [--k 2,4,8] [--reps 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from seenstore.bench.units import parse_count
from seenstore.kernels.merge import kway_step
from seenstore.keys.sort import machine_summary
from seenstore.store.runs.live import MERGE_BUFFER_BYTES, kway_arrays


def merge(kernel, runs: list, row: int) -> np.ndarray:
    got = kway_arrays(runs, row, kernel=kernel)
    if got is None:
        raise SystemExit("kernel reported a key in two runs: bench input broken")
    return got


def timed(fn, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        c = time.thread_time()
        fn()
        best = min(best, time.thread_time() - c)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=parse_count, default=10_000_000)
    ap.add_argument("--k", default="2,4,8", help="runs per merge, comma-separated")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"Machine: {machine_summary()}")
    rng = np.random.default_rng(args.seed)
    keys = np.unique(rng.integers(0, 2**64 - 1, args.keys, dtype=np.uint64))
    warm = [keys[:1000:2], keys[1:1000:2]]
    merge(kway_step, warm, 64)  # JIT outside the timings
    print(f"{len(keys):,} keys in k disjoint runs of equal size "
          f"(thread CPU ns/key, best of {args.reps})")
    print("| k | kway_step | np.sort of the concatenation | np.sort / kway_step |")
    print("|---:|---:|---:|---:|")
    for k in [int(x) for x in args.k.split(",")]:
        owner = rng.integers(0, k, len(keys))
        runs = [keys[owner == r] for r in range(k)]
        row = max(512, MERGE_BUFFER_BYTES // 8 // k)
        if not np.array_equal(merge(kway_step, runs, row), keys):
            raise SystemExit("kway_step merged wrongly")
        n = len(keys)
        new = timed(lambda: merge(kway_step, runs, row), args.reps) / n * 1e9
        cat = np.concatenate(runs)
        srt = timed(lambda: np.sort(cat), args.reps) / n * 1e9
        print(f"| {k} | {new:.1f} | {srt:.1f} | {srt / new:.2f}x |")


if __name__ == "__main__":
    main()
