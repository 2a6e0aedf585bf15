"""Sort benchmark: our radix sort (one and two threads) against np.sort.

For each size (--sizes, default 1e6 1e7 1e8) and key shape, uniform, host-skewed (top
20 bits a Zipf(1) host over 2^20 buckets, low 44 random: the store's keys) and crawl
(a batch of ``seenstore bench``'s stream: host-skewed, 10% repeats of keys of the
batch, half of the rest offered by earlier batches; what the store sorts), prints
ns/key of np.sort, of the plain LSD radix sort (8-bit digits, constant digits skipped:
the baseline), of our MSD+LSD radix sort on one thread, on two threads, and
``sort_unique`` (sort + dedup, what the store needs), each with its ratio to np.sort
measured in the same run; then the store's path on one thread, the partition included:
the keys partitioned by their top 4 bits (16 shards) and each shard through
``sort_unique`` ("16 shards"), and partitioned by ``sorting.fine_bits`` top bits, each
shard sorted from those groups (``ShardSorter.partition``: "16 shards fine part."),
and the same with numpy's sort of each group ("16 shards fine np.sort": the store's
path where numpy's sort is the faster). Every radix row sorts with the same scratch
array (its pages already touched), except "2 threads new scratch", which allocates one
as the store's callers do (a fresh array's page faults: ~1 ns/key of CPU here). Median
of --reps, a fresh copy of the keys each rep (the copy not timed). Wall time and its
ratio, and the CPU time and its ratio, which a shared machine's descheduling does not
inflate: the thread's for one thread, the process's for two (both threads' CPU
seconds: divide by 2 for the cores' share). JIT warm-up (compile or cache load) is
timed apart and reported. The CPU model, numpy's SIMD dispatch and the load average
head the output.

    python bench/bench_sort.py [--sizes 1e6 1e7 1e8] [--reps 3] [--shapes uniform skewed crawl]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from seenstore.keys import sort as sorting
from seenstore.kernels.batch import partition_top_bits
from seenstore.kernels.sort import lsd_sort, radix_sort, sort_unique


def keys_of(shape: str, n: int) -> np.ndarray:
    if shape == "crawl":  # what the store's shard sorts get: bench's second batch
        from seenstore.bench.workload import CrawlStream
        stream = CrawlStream(4 * n, n, seed=7)
        return stream.batch(*list(stream.plan())[1]).keys
    return sorting.probe_keys(n, shape == "skewed", seed=7)


def timed(keys: np.ndarray, fn, reps: int, process: bool = False) -> tuple[float, float]:
    """Median (wall, CPU) seconds of ``fn(copy)`` over ``reps`` fresh copies; CPU:
    this thread's, or with ``process`` the whole process's (two sorting threads)."""
    clock = time.process_time if process else time.thread_time
    walls, cpus = [], []
    for _ in range(reps):
        a = keys.copy()
        c0, w0 = clock(), time.perf_counter()
        fn(a)
        walls.append(time.perf_counter() - w0)
        cpus.append(clock() - c0)
        del a
    return float(np.median(walls)), float(np.median(cpus))


def shards(a: np.ndarray, buf: np.ndarray, fine: bool, method: str = "radix") -> None:
    """The store's path on one thread: ``a`` partitioned (into ``buf``) by its top 4
    bits, or by ``fine_bits`` when ``fine``; each shard sorted and deduplicated (by
    ``method``: radix, or with ``fine`` numpy's sort group by group, what the store
    runs where numpy's sort is the faster)."""
    bits = sorting.fine_bits(len(a), 4) if fine else 4
    starts = np.empty((1 << bits) + 1, np.int64)
    partition_top_bits(a, bits, buf, starts)
    sub = 1 << (bits - 4)
    for s in range(16):
        lo, hi = starts[s * sub], starts[(s + 1) * sub]
        if fine:
            sorting.sort_unique_buckets(buf[lo:hi], starts[s * sub:(s + 1) * sub + 1], method)
        else:
            sort_unique(buf[lo:hi], a, *sorting._tunables())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["1e6", "1e7", "1e8"])
    ap.add_argument("--shapes", nargs="+", default=["uniform", "skewed", "crawl"],
                    choices=["uniform", "skewed", "crawl"])
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    print(f"machine: {sorting.machine_summary()}")
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    t0 = time.perf_counter()
    sorting.warm_up()
    w = np.arange(1000, dtype=np.uint64)[::-1].copy()
    lsd_sort(w, np.empty_like(w), 8)
    print("JIT warm-up (compile or cache load, not in the figures): "
          f"{time.perf_counter() - t0:.2f} s")
    print(f"dispatcher's verdict: {sorting.describe()}")
    print(f"{'n':>11} {'keys':>8} {'sort':>22} {'ns/key':>8} {'cpu ns/key':>10} {'x np.sort':>9} "
          f"{'cpu x':>6}   (cpu of the 2-thread rows: both threads' seconds)")
    for size in a.sizes:
        n = int(float(size))
        kw = sorting._tunables(n)  # what sort_keys / sort_unique_keys take for n keys
        buf = np.empty(n, np.uint64)
        for shape in a.shapes:
            keys = keys_of(shape, n)
            rows = [
                ("np.sort", lambda x: x.sort()),
                ("LSD 8-bit baseline", lambda x: lsd_sort(x, buf, 8)),
                ("radix 1 thread", lambda x: radix_sort(x, buf, *kw)),
                ("radix 2 threads", lambda x: sorting.sort_keys(x, 2, method="radix", buf=buf)),
                ("sort_unique 1 thread", lambda x: sort_unique(x, buf, *kw)),
                ("sort_unique 2 threads", lambda x: sorting._sort(x, True, 2, "radix", buf)),
                ("2 threads new scratch", lambda x: sorting.sort_keys(x, 2, method="radix")),
                ("16 shards", lambda x: shards(x, buf, False)),
                ("16 shards fine part.", lambda x: shards(x, buf, True)),
                ("16 shards fine np.sort", lambda x: shards(x, buf, True, "numpy")),
            ]
            base = base_cpu = None
            for name, fn in rows:
                wall, cpu = timed(keys, fn, a.reps, process="2 threads" in name)
                base, base_cpu = base or wall, base_cpu or cpu
                print(f"{n:>11,} {shape:>8} {name:>22} {wall / n * 1e9:8.2f} "
                      f"{cpu / n * 1e9:10.2f} {wall / base:9.2f} {cpu / base_cpu:6.2f}", flush=True)
            del keys
        buf = None  # freed before the next size's array is made


if __name__ == "__main__":
    main()
