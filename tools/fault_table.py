#!/usr/bin/env python3
"""The fault table (issue 41): random single-byte damages of every kind of store
file, every read path run on each damaged copy, outcomes counted.

Builds small stores (tests/faults.py ``Stores``: raw runs 1.1 and 1.0, compressed
runs 2.0, MANIFEST, BLOOM, a stage's WAL segment), then for each damage flips or
zeroes one random byte of a random file of the next kind, runs the twelve read
paths (contains read-only and writer, check, export, dump-run, verify, merge,
a small merge's lookups, a spilled merge's windows, compact, the stage, upgrade)
and sorts each outcome into right / clear error / wrong. Prints the table per
file kind and path, the damages per kind, the seconds, and every wrong outcome;
exits 1 if there was one.

    python tools/fault_table.py                     # 1,200 damages, 40,000 keys
    python tools/fault_table.py --damages 3000 --seed 7 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("SEENSTORE_JIT_MIN", "0")  # the kernels on every path, as in the tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests"))
import faults


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--damages", type=int, default=1200)
    ap.add_argument("--keys", type=int, default=40_000,
                    help="keys per store (runs of keys/8: several 4 KiB pages each)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default=None, help="working folder (default: a temp folder)")
    ap.add_argument("--json", dest="json_out", default=None, help="also write the counts here")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="faults-", dir=a.dir)
    t0 = time.perf_counter()
    stores = faults.Stores(root, keys=a.keys, seed=a.seed + 41)
    built = time.perf_counter() - t0

    def progress(i, d, res):
        if (i + 1) % 100 == 0:
            print(f"  {i + 1} damages ({time.perf_counter() - t1:.0f} s)", file=sys.stderr)

    t1 = time.perf_counter()
    counts, per_kind, wrong = faults.run(stores, a.damages, seed=a.seed, log=progress)
    spent = time.perf_counter() - t1
    print(f"{a.damages} single-byte damages (flipped or zeroed, random position) of stores "
          f"of {a.keys:,} keys; seed {a.seed}; stores built in {built:.1f} s, damages "
          f"run in {spent:.1f} s")
    print("damages per file kind: " + ", ".join(f"{k} {n}" for k, n in per_kind.items()))
    print()
    print(faults.table(counts))
    total = {o: sum(c.get(o, 0) for c in counts.values()) for o in faults.OUTCOMES}
    print(f"\npath runs: {sum(total.values())}: right {total['right']}, clear error "
          f"{total['error']}, wrong {total['wrong']}")
    for d, p, why in wrong:
        print(f"WRONG: {p}: {os.path.basename(d.file)} byte {d.offset} {d.op} "
              f"({d.old:#04x}): {why}")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"damages": a.damages, "keys": a.keys, "seed": a.seed,
                       "per_kind": per_kind, "totals": total,
                       "counts": {f"{k}|{p}": c for (k, p), c in counts.items()}}, f, indent=1)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
