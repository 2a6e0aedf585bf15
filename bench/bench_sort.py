"""Sort benchmark (issue 13): our radix sort (one and two threads) against np.sort.

For each size (--sizes, default 1e6 1e7 1e8) and key shape, uniform and host-skewed
(top 20 bits a Zipf(1) host over 2^20 buckets, low 44 random: the store's keys),
prints ns/key of np.sort, of the plain LSD radix sort (8-bit digits, constant digits
skipped: the baseline), of our MSD+LSD radix sort on one thread, on two threads, and
``sort_unique`` (sort + dedup, what the store needs), each with its ratio to np.sort
measured in the same run. Best of --reps, a fresh copy of the keys each rep (the copy
not timed). Wall time and its ratio, and beside the one-thread figures the thread
CPU time and its ratio, which a shared machine's descheduling does not inflate. JIT warm-up (compile or cache
load) is timed apart and reported. The CPU model and numpy's SIMD dispatch head the
output.

    python bench/bench_sort.py [--sizes 1e6 1e7 1e8] [--reps 3] [--shapes uniform skewed]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from seenstore import sorting
from seenstore.kernels.sort import lsd_sort, radix_sort, sort_unique


def keys_of(shape: str, n: int) -> np.ndarray:
    return sorting.probe_keys(n, shape == "skewed", seed=7)


def timed(keys: np.ndarray, fn, reps: int) -> tuple[float, float]:
    """Best (wall, thread CPU) seconds of ``fn(copy)`` over ``reps`` fresh copies."""
    best_w = best_c = float("inf")
    for _ in range(reps):
        a = keys.copy()
        c0, w0 = time.thread_time(), time.perf_counter()
        fn(a)
        best_w = min(best_w, time.perf_counter() - w0)
        best_c = min(best_c, time.thread_time() - c0)
        del a
    return best_w, best_c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["1e6", "1e7", "1e8"])
    ap.add_argument("--shapes", nargs="+", default=["uniform", "skewed"],
                    choices=["uniform", "skewed"])
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    print(f"machine: {sorting.machine_summary()}")
    t0 = time.perf_counter()
    sorting.warm_up()
    w = np.arange(1000, dtype=np.uint64)[::-1].copy()
    lsd_sort(w, np.empty_like(w), sorting.WIDTH)
    print(f"JIT warm-up (compile or cache load, not in the figures): {time.perf_counter() - t0:.2f} s")
    print(f"dispatcher's verdict: {sorting.describe()}")
    kw = (sorting.BUCKET_KEYS, sorting.WIDTH, sorting.EXTRA)
    print(f"{'n':>11} {'keys':>8} {'sort':>22} {'ns/key':>8} {'cpu ns/key':>10} {'x np.sort':>9} "
          f"{'cpu x':>6}")
    for size in a.sizes:
        n = int(float(size))
        buf = np.empty(n, np.uint64)
        for shape in a.shapes:
            keys = keys_of(shape, n)
            rows = [
                ("np.sort", lambda x: x.sort()),
                ("LSD 8-bit baseline", lambda x: lsd_sort(x, buf, sorting.WIDTH)),
                ("radix 1 thread", lambda x: radix_sort(x, buf, *kw)),
                ("radix 2 threads", lambda x: sorting._sort(x, False, 2, "radix")),
                ("sort_unique 1 thread", lambda x: sort_unique(x, buf, *kw)),
                ("sort_unique 2 threads", lambda x: sorting._sort(x, True, 2, "radix")),
            ]
            base = base_cpu = None
            for name, fn in rows:
                wall, cpu = timed(keys, fn, a.reps)
                base, base_cpu = base or wall, base_cpu or cpu
                one = "2 threads" not in name  # thread CPU time means nothing for two
                cpu_s = f"{cpu / n * 1e9:10.2f}" if one else f"{'-':>10}"
                cpu_x = f"{cpu / base_cpu:6.2f}" if one else f"{'-':>6}"
                print(f"{n:>11,} {shape:>8} {name:>22} {wall / n * 1e9:8.2f} {cpu_s} "
                      f"{wall / base:9.2f} {cpu_x}", flush=True)
            del keys
        del buf


if __name__ == "__main__":
    main()
