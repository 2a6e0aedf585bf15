"""Many small batches: does compaction keep up, and what does a batch cost as the store grows?

A server's group commits (seenstore serve) and a stage's merges are small batches:
a few hundred keys per shard each. This feeds a store opened with defaults (16
shards, ``sync=False``, the run cache at 64 MiB as ``serve`` has it) ``--batches``
batches of ``--batch`` keys each (half fresh, half re-offered from recent batches)
and prints, every tenth of the way: keys stored, live runs (all shards and the most
crowded), and the median and p99 batch time over that tenth. The kernels are
compiled (or loaded) before the first batch.

    python bench/bench_small_batches.py [--batches 1000] [--batch 2e4] [--dir scratch/small-batches]
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
import numpy as np

from seenstore.bench.units import parse_count
from seenstore.keys.sort import machine_summary
from seenstore.store import SeenStore
from seenstore.warmup import warm_up

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--batch", type=parse_count, default=20_000)
    ap.add_argument("--dir", default=os.path.join(REPO, "scratch", "small-batches"))
    args = ap.parse_args()
    os.environ.setdefault("SEENSTORE_JIT_MIN", "0")  # the kernels, as a warm server runs
    warm_up()
    print(machine_summary())
    shutil.rmtree(args.dir, ignore_errors=True)
    rng = np.random.default_rng(1)
    recent: list[np.ndarray] = []
    times: list[float] = []
    step = max(1, args.batches // 10)
    t0 = time.perf_counter()
    with SeenStore.open(args.dir, create=True, sync=False, cache_bytes=64 << 20) as st:
        for b in range(args.batches):
            fresh = rng.integers(0, 2**64 - 1, args.batch // 2, dtype=np.uint64)
            pool = np.concatenate(recent[-20:]) if recent else fresh
            keys = np.concatenate([fresh, rng.choice(pool, args.batch - len(fresh))])
            recent.append(fresh)
            t = time.perf_counter()
            st.add(keys)
            times.append(time.perf_counter() - t)
            if (b + 1) % step == 0:
                stats = st.stats()
                last = np.array(times[-step:]) * 1e3
                print(f"{b + 1:6,} batches  {len(st):13,} keys  runs {stats['runs']:6,} "
                      f"(most in a shard {stats['max_runs_per_shard']:4,})  batch median "
                      f"{np.median(last):6.1f} ms  p99 {np.percentile(last, 99):6.1f} ms  "
                      f"elapsed {time.perf_counter() - t0:6.1f} s", flush=True)
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
