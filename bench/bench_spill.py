"""The spilled path's cost per offered key by stage, as the store grows.

Offers a CrawlStream (the bench's stream: reoffer 0.5, dup 0.1, host-skewed) in
batches of --batch keys through ``SeenStore.add_new_file`` (spilled, DRUM-style,
compressed runs) and prints, per batch, the store size before it, stored keys per
offered key (N/B: what every batch sweeps) and the wall and process-CPU ns per
offered key of each stage (runtime/clock.py): spill (partition + bucket appends), read
(buckets read back), split, sort, check (runs read, decoded and swept), write
(encode + write of the new run), sync (its index, header, fsync), bloom (waiting
for the inserts, which run on a thread of their own: their wall time is printed
apart), commit;
``compact``: compaction between batches (it runs on beside the next batch's spill
phase and is waited for after it, before the check);
``gen``: the stream generator (not the store's). On a shared machine read the CPU
columns: wall time includes waiting for a core.

At the end, per stage, a least-squares fit ``cpu ns/offered key = a + b * N/B`` over
the batches (the first one excluded: nothing stored), i.e. ``b`` ns per stored key
swept per batch, and the prediction at the N/B of a 1e10 run.

Per-shard sizes like those of ``bench --keys 1e10`` (8 shard bits) at 1/16 of the
keys: --shard-bits 4 --batch 1.25e8 for batches of 2e9, --batch 5.2e7 for batches of
8.3e8 (the plan's batch depends on the free disk: plan.plan_resources). Note the
CPU columns are the whole process's (process_time): the Bloom inserts and the
compaction, on their own threads, count in the stage they run beside.

    python bench/bench_spill.py [--keys 6.25e8] [--batch 5.2e7] [--shard-bits 4]
        [--memory 1.9G] [--no-bloom] [--dir scratch/bench-spill] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time

import numpy as np

from seenstore.store import SeenStore
from seenstore.bench.workload import CrawlStream

STAGES = ("spill", "read", "split", "sort", "check", "write", "sync", "bloom", "commit")


def run(keys: int, batch: int, shard_bits: int, memory: int, bloom: bool, work: str) -> list:
    st = CrawlStream(keys, batch, 0.5, 0.1, seed=0)
    path = os.path.join(work, "store")
    shutil.rmtree(path, ignore_errors=True)
    rows = []
    with SeenStore.open(path, create=True, bloom=bloom,
                        bloom_capacity=st.expected_total_new if bloom else None,
                        run_format=2, shard_bits=shard_bits) as store:
        for plan in st.plan():
            gen = [0.0, 0.0]

            def chunks():
                it = st.batch_chunks(*plan, chunk_keys=1 << 22)
                while True:
                    t, c = time.perf_counter(), time.thread_time()
                    x = next(it, None)
                    gen[0] += time.perf_counter() - t
                    gen[1] += time.thread_time() - c
                    if x is None:
                        return
                    yield x

            n_stored = len(store)
            t, c = time.perf_counter(), time.process_time()
            fig = store.add_new_file(chunks(), memory=memory)
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            n = fig["offered"]
            assert fig["new"] == plan[2], "wrong count of new keys"
            row = {"stored": n_stored, "offered": n, "new": fig["new"], "nb": n_stored / n,
                   "wall_ns": 1e9 * (wall - gen[0]) / n, "cpu_ns": 1e9 * (cpu - gen[1]) / n,
                   "gen_cpu_ns": 1e9 * gen[1] / n,
                   "compact_wall_ns": 1e9 * store.last_timings.get("compact_wait_s", 0.0) / n,
                   "bytes_read": fig["bytes_read"] / n, "bytes_written": fig["bytes_written"] / n}
            for s in STAGES:
                g = fig["stages"].get(s, {"wall_s": 0.0, "cpu_s": 0.0})
                row[s + "_wall_ns"] = 1e9 * g["wall_s"] / n
                row[s + "_cpu_ns"] = 1e9 * g["cpu_s"] / n
            # the Bloom inserts on their own thread (wall; "bloom" is the time waited)
            row["bloom_bg_wall_ns"] = 1e9 * fig["stages"].get("bloom_bg", {}).get("wall_s", 0) / n
            named = sum(row[s + "_cpu_ns"] for s in STAGES)
            row["other_cpu_ns"] = row["cpu_ns"] - named  # compaction joined, Python glue
            rows.append(row)
            print(f"{len(rows) - 1:3d} stored {n_stored:>13,} N/B {row['nb']:4.2f} "
                  f"wall {row['wall_ns']:6.1f} cpu {row['cpu_ns']:6.1f} | "
                  + " ".join(f"{s} {row[s + '_cpu_ns']:5.1f}" for s in STAGES)
                  + f" other {row['other_cpu_ns']:5.1f}"
                  f" (compact wall {row['compact_wall_ns']:5.1f},"
                  f" bloom thread wall {row['bloom_bg_wall_ns']:5.1f})"
                  f" gen {row['gen_cpu_ns']:5.1f}", flush=True)
    shutil.rmtree(path, ignore_errors=True)
    return rows


def fit(rows: list, at_nb: float) -> dict:
    """Per stage: (a, b) of cpu ns/offered key = a + b * N/B, and the value at ``at_nb``."""
    full = max(r["offered"] for r in rows)  # a short last batch is left out
    rs = [r for r in rows[1:] if r["offered"] > full // 2] if len(rows) > 2 else rows
    x = np.array([r["nb"] for r in rs])
    out = {}
    for s in STAGES + ("other", ""):
        col = (s + "_cpu_ns") if s else "cpu_ns"
        y = np.array([r[col] for r in rs])
        b, a = np.polyfit(x, y, 1) if len(set(x)) > 1 else (0.0, float(y.mean()))
        out[s or "total"] = (float(a), float(b), float(a + b * at_nb))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=float, default=6.25e8)
    ap.add_argument("--batch", type=float, default=5.2e7)
    ap.add_argument("--shard-bits", type=int, default=4)
    ap.add_argument("--memory", type=float, default=1.9e9)
    ap.add_argument("--no-bloom", action="store_true")
    ap.add_argument("--dir", default="scratch/bench-spill")
    ap.add_argument("--at-nb", type=float, default=2.9,
                    help="N/B to predict at (1e10 in 12 batches: 2.9 on average)")
    ap.add_argument("--json")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    rows = run(int(a.keys), int(a.batch), a.shard_bits, int(a.memory), not a.no_bloom, a.dir)
    f = fit(rows, a.at_nb)
    print(f"fit: cpu ns per offered key = a + b * N/B (batches 1..), and at N/B = {a.at_nb}")
    for s, (ca, cb, at) in f.items():
        print(f"  {s:7s} a {ca:7.1f}  b {cb:6.2f}  at {at:7.1f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"args": vars(a), "rows": rows, "fit": f}, fh, indent=1)


if __name__ == "__main__":
    main()
