"""contains(): ns per asked key, by step, against the per-key binary-search baseline.

    python bench/bench_contains.py [--stored 4e7] [--asked 1e7] [--present 0.5] [--reps 3]

Builds a store of --stored random keys (two batches, scratch/ by default), then asks
--asked keys (a --present fraction of them stored, in random order) and times, best of
--reps: the whole call, and its steps (sort + dedup, Bloom query, per-shard check,
mapping answers back to every asked key), the runs dropped from the page cache
before each (posix_fadvise DONTNEED; runs are written with O_DIRECT, so a real
store's are rarely cached). Beside them, in the same run, the way
the answers were mapped back before: one binary search per asked key into the
sorted answer. (A sequential sweep of each run instead of the binary searches was
tried and dropped: the asked keys are sorted, so the searches fault the run's pages
in ascending order and measured as fast or faster: 17.6 against 21.3 ns/key.)
JIT warm-up runs first and is reported apart.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

from seenstore.keys.batch import prepare
from seenstore.bench.units import parse_count
from seenstore.kernels.batch import mark_members
from seenstore.store import SeenStore
from seenstore.store.check import shard_bounds
from seenstore.store.report import member


def best(reps, fn, *args):
    t = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn(*args)
        t = min(t, time.perf_counter() - t0)
    return t, out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stored", type=parse_count, default=40_000_000)
    ap.add_argument("--asked", type=parse_count, default=10_000_000)
    ap.add_argument("--present", type=float, default=0.5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default=None,
                    help="where the throwaway store goes (default: a temp dir in scratch/)")
    a = ap.parse_args(argv)
    scratch = "scratch" if os.path.isdir("scratch") else None
    base = a.dir or tempfile.mkdtemp(prefix="contains-", dir=scratch)
    path = os.path.join(base, "store")
    rng = np.random.default_rng(1)
    stored = rng.integers(0, 2**64, a.stored, dtype=np.uint64, endpoint=False)
    n_in = int(a.asked * a.present)
    absent = rng.integers(0, 2**64, a.asked - n_in, dtype=np.uint64)
    asked = np.concatenate([rng.choice(stored, n_in), absent])
    rng.shuffle(asked)
    try:
        with SeenStore.open(path, create=True, sync=False) as s:
            half = a.stored // 2
            s.add_new(stored[:half])
            s.add_new(stored[half:])
            t0 = time.perf_counter()
            s.contains(asked[:100_000])
            print(f"JIT warm-up and first small call: {time.perf_counter() - t0:.2f} s "
                  "(not counted)")
            per = 1e9 / a.asked
            readers = [(shard, r) for shard, rs in sorted(s._runs.items()) for r in rs]

            def drop_cache():  # runs are written O_DIRECT: a real store's are rarely cached
                for _, r in readers:
                    fd = os.open(r.path, os.O_RDONLY)
                    try:
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    finally:
                        os.close(fd)

            t_all, got = best(a.reps, lambda: (drop_cache(), s.contains(asked))[1])
            t_sort, uniq = best(a.reps, prepare, asked)
            t_bloom, maybe = best(a.reps, s.bloom.query, uniq)
            cand = uniq[maybe]
            bounds = shard_bounds(cand, s.shard_bits)

            def check():
                drop_cache()
                found = np.zeros(len(cand), np.bool_)
                for shard, r in readers:
                    lo, hi = bounds[shard], bounds[shard + 1]
                    if lo < hi:
                        found[lo:hi] |= member(r.keys, cand[lo:hi])  # every live run
                return found

            t_check, found = best(a.reps, check)
            t_back, mask = best(a.reps, mark_members, asked, cand[found])
            t_back_search, mask2 = best(a.reps, member, cand[found], asked)
            assert np.array_equal(mask, mask2) and np.array_equal(mask, got)
            assert int(got.sum()) >= n_in
            print(f"store {a.stored:,} keys in {len(readers)} shards; asked {a.asked:,} "
                  f"({a.present:.0%} stored), best of {a.reps}; ns per asked key")
            print(f"  contains, whole, cold cache {t_all * per:8.1f}")
            print(f"  sort + dedup                {t_sort * per:8.1f}")
            print(f"  Bloom query                 {t_bloom * per:8.1f}")
            print(f"  check the runs, cold cache  {t_check * per:8.1f}   (binary search in each "
                  f"run's memory map)")
            print(f"  answers back (hash join)    {t_back * per:8.1f}   binary search per key: "
                  f"{t_back_search * per:6.1f}  (x{t_back_search / t_back:.2f})")
            old = t_sort + t_bloom + t_check + t_back_search
            print(f"  with the binary search back {old * per:8.1f}   "
                  f"(x{old / t_all:.2f} the call now)")
    finally:  # the store always goes; a --dir given stays
        shutil.rmtree(path if a.dir else base, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
