"""Thread CPU of the check (``store.runs.check_runs``) on a real store's shapes.

Checks the last batch of a kept ``seenstore bench`` store against the runs the
store held before that batch (the runs of the newest generation left out), shard by
shard, as the store's shard threads do; prints the median thread CPU time per
offered key and per run key. Format 1 runs are checked from a run cache (what the
store does at 1e8); ``--format 2`` rewrites them compressed beside the store (once)
and checks them from disk.

    seenstore bench --keys 1e8 --batch 1e7 --run-format 1 --dir scratch --keep
    python bench/bench_check.py scratch/bench-store [--format 2] [--reps 5]

Run it from two worktrees in the same minute for an A/B (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from seenstore.store import manifest
from seenstore.store.runs import live as R
from seenstore.store.runcache import RunCache
from seenstore.bench.workload import CrawlStream


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("--format", type=int, choices=(1, 2), default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--keys", type=float, default=1e8, help="the bench's --keys")
    ap.add_argument("--batch", type=float, default=1e7, help="the bench's --batch")
    a = ap.parse_args()
    doc = manifest.read(a.store)
    gen = max(int(r["file"].split("-g")[1].split(".")[0]) for r in doc["runs"])
    doc["runs"] = [r for r in doc["runs"] if f"g{gen:010d}" not in r["file"]]
    by = R.readers_for(a.store, doc)
    if a.format == 2:
        from seenstore.store.runs.codec import CompressedRunWriter

        out = a.store.rstrip("/") + "-f2"
        os.makedirs(out, exist_ok=True)
        for s, rs in by.items():
            for i, r in enumerate(rs):
                p = os.path.join(out, r.name)
                if not os.path.exists(p):
                    h = r.header
                    w = CompressedRunWriter(p, h.host_bits, h.shard_bits, s, h.policy_digest)
                    w.write(np.asarray(r.keys))
                    w.finish(sync=False)
                rs[i] = R.open_reader(p)
    stream = CrawlStream(int(a.keys), int(a.batch))
    plan = list(stream.plan())
    keys = np.unique(stream.batch(*plan[-1]).keys)
    sb = doc["shard_bits"]
    bounds = np.searchsorted(keys >> np.uint64(64 - sb),
                             np.arange((1 << sb) + 1).astype(np.uint64))
    cache = RunCache(4 << 30) if a.format == 1 else None
    buf = np.empty(1 << 20, np.uint64)
    run_keys = sum(r.count for rs in by.values() for r in rs)

    def once() -> tuple[float, int]:
        t, nf = time.thread_time(), 0
        for s in range(1 << sb):
            part = keys[bounds[s]:bounds[s + 1]]
            found = np.zeros(len(part), np.bool_)
            R.check_runs(by.get(s, []), part, found, buf, cache=cache)
            nf += int(np.count_nonzero(found))
        return time.thread_time() - t, nf

    once()  # fills the run cache, compiles
    times, found = zip(*(once() for _ in range(a.reps)))
    m = statistics.median(times)
    offered = plan[-1][2] + plan[-1][3] + plan[-1][4]
    print(f"format {a.format}: {len(keys)} distinct of {offered} offered, {run_keys} run keys, "
          f"{found[0]} found; check thread CPU median {m * 1e3:.1f} ms = "
          f"{m * 1e9 / offered:.2f} ns/offered key, {m * 1e9 / run_keys:.2f} ns/run key "
          f"(reps, ms: {[round(x * 1e3) for x in times]})")


if __name__ == "__main__":
    main()
