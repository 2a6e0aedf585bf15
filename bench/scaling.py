"""Scaling curve: cost of one batch of fixed size B against the store size N.

Grows one store with large fresh batches to geometric checkpoints N, and at each one
offers a probe batch of B keys (same mix as ``seenstore bench``: fresh, re-offered,
in-batch repeats; mask checked exactly). Beside the measurements it draws the cost model
of docs/architecture.md, sort(B) + read 8N + write 8B' (tiered runs: only the new keys
are written), with the sort rate and disk bandwidth measured in this run, and reports
where the read of N overtakes the rest. The compaction a probe pays for (run right
after it, between batches) is timed apart and its bytes counted with the probe's.

``--baseline F.json`` draws a recorded run of the rewrite design (each batch rewrote
every shard it touched: bench/results/scaling-rewrite-b28ffc0.json, from
bench/RESULTS.md) on the same plot; a second panel shows the bytes written per
offered key, which for tiered runs stays flat as N grows.

    python bench/scaling.py [--max-keys 1e9] [--batch 1e7] [--plot F.png] [--json F]
                            [--baseline bench/results/scaling-rewrite-b28ffc0.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

from seenstore.bench.probes import disk_bandwidth, peak_rss_bytes, reset_peak_rss
from seenstore.bench.units import parse_count
from seenstore.warmup import warm_up
from seenstore.store import SeenStore
from seenstore.bench.workload import CrawlStream


def checkpoints(max_keys: int, first: int) -> list[int]:
    """0 and the 1, 2, 5 x 10^k store sizes from ``first`` up to ``max_keys`` (inclusive).
    A checkpoint the store has already passed (each probe adds keys) is skipped."""
    out, k = [0], first
    while k <= max_keys:
        for m in (1, 2, 5):
            if m * k <= max_keys:
                out.append(m * k)
        k *= 10
    return sorted(set(out))


def run(args) -> dict:
    stream = CrawlStream(1, 1, args.reoffer, args.dup, seed=args.seed)  # key function only
    work = args.workdir or tempfile.mkdtemp(prefix="seenstore-scaling-")
    os.makedirs(work, exist_ok=True)  # a --workdir that does not exist yet is made
    path = os.path.join(work, "scaling-store")
    B = args.batch
    n_dup = round(args.dup * B)
    n_re = round(args.reoffer * (B - n_dup))
    n_fresh = B - n_dup - n_re
    disk = [disk_bandwidth(work, args.probe_bytes)]
    points, counter, index = [], 0, 0
    t_grow = 0.0
    try:
        warmup = warm_up(work, child=True)  # JIT outside timings
        reset_peak_rss()  # and its compiler's memory outside the peak RSS
        # Bloom sized for the largest store of the run, so no rebuild lands in a probe.
        cap = int(args.max_keys * 1.1) + 2 * B
        with SeenStore.open(path, create=True, bloom_capacity=cap) as st:
            for target in checkpoints(args.max_keys, args.first or B):
                if target and counter >= target:
                    continue
                t0 = time.perf_counter()
                while counter < target:
                    g = min(args.grow_batch, target - counter)
                    # add_new: the growth is not timed, so it skips the mask's pass
                    st.add_new(stream.batch(index, counter, g, 0, 0).keys)
                    counter, index = counter + g, index + 1
                t_grow += time.perf_counter() - t0
                assert len(st) == counter, (len(st), counter)
                re = n_re if counter else 0
                b = stream.batch(index, counter, n_fresh + n_re - re, re, n_dup)
                index += 1
                t0 = time.perf_counter()
                np.sort(b.keys)
                sort_floor = time.perf_counter() - t0
                st.wait_for_compaction()  # the growth's compaction is not the probe's
                before = st.stats()["counters"].get("bytes_compacted", 0)
                t0 = time.perf_counter()
                mask = st.add(b.keys)
                add_s = time.perf_counter() - t0
                # the compaction this batch paid for runs after it: timed apart
                compact_after_s = st.wait_for_compaction()
                compacted = st.stats()["counters"].get("bytes_compacted", 0) - before
                ok = int(mask.sum()) == b.n_fresh and bool(mask[: b.n_fresh].all())
                tm = dict(st.last_timings)
                points.append({"N": counter, "add_s": add_s, "sort_floor_s": sort_floor,
                               "new": b.n_fresh, "ok": ok, "compacted_bytes": compacted,
                               "compact_after_s": compact_after_s,
                               "runs": st.stats()["runs"], **tm})
                counter += b.n_fresh
                print(f"N={points[-1]['N']:>13,}  batch {add_s:7.2f} s  "
                      f"{add_s / B * 1e9:7.1f} ns/key  merge {tm.get('merge_s', 0):6.2f} s  "
                      f"commit {tm.get('commit_s', 0):6.2f} s  {'ok' if ok else 'WRONG'}",
                      flush=True)
            st.wait_for_compaction()
            final = st.stats()
    finally:
        disk.append(disk_bandwidth(work, args.probe_bytes))
        if not args.keep:
            shutil.rmtree(path, ignore_errors=True)
            if not args.workdir:
                shutil.rmtree(work, ignore_errors=True)
    r_bps = float(np.mean([d.read_bps for d in disk]))
    w_bps = float(np.mean([d.write_bps for d in disk]))
    sort_s = float(np.median([p["sort_floor_s"] for p in points]))
    fixed = sort_s + 8 * n_fresh / w_bps            # the model's N-independent part
    per_n = 8 / r_bps                               # the model's seconds per stored key
    Ns = np.array([p["N"] for p in points], dtype=float)
    ys = np.array([p["add_s"] for p in points])
    a, b = _fit(Ns, ys)
    return {
        "args": {k: v for k, v in vars(args).items()}, "points": points,
        "disk": [d.__dict__ for d in disk], "warmup_s": warmup, "grow_s": t_grow,
        "peak_rss": peak_rss_bytes(),
        "model": {"sort_s": sort_s, "read_bps": r_bps, "write_bps": w_bps,
                  "fixed_s": fixed, "s_per_stored_key": per_n,
                  "crossover_N": fixed / per_n},
        "fit": {"fixed_s": a, "s_per_stored_key": b,
                "crossover_N": a / b if b > 0 else None},
        "all_ok": all(p["ok"] for p in points),
        "final": {k: final.get(k) for k in ("keys", "runs", "max_runs_per_shard",
                                             "write_amplification", "counters")},
    }


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least squares y = a + b x, weighted by 1/y so small and large N count alike."""
    w = 1 / np.maximum(y, 1e-9)
    A = np.vstack([np.ones_like(x), x]).T * w[:, None]
    (a, b), *_ = np.linalg.lstsq(A, y * w, rcond=None)
    return float(a), float(b)


def report(res: dict) -> str:
    m, f, B = res["model"], res["fit"], res["args"]["batch"]
    lines = [
        f"batch B = {B:,} offered keys (reoffer {res['args']['reoffer']}, dup "
        f"{res['args']['dup']}); disk probe: write+fsync "
        + ", ".join(f"{d['write_bps'] / 1e9:.2f}" for d in res["disk"]) + " GB/s, cold read "
        + ", ".join(f"{d['read_bps'] / 1e9:.2f}" for d in res["disk"]) + " GB/s",
        "",
        "| N (keys stored) | batch s | ns/offered key | sort s | bloom s | check s | commit s "
        "| align s | other s | compaction after s | MB read | MB written | bytes written/offered "
        "key | model s | correct |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for p in res["points"]:
        model = m["fixed_s"] + m["s_per_stored_key"] * p["N"]
        lines.append(
            f"| {p['N']:,} | {p['add_s']:.2f} | {p['add_s'] / B * 1e9:.1f} | "
            f"{p.get('sort_s', 0):.2f} | {p.get('bloom_s', 0):.2f} | {p.get('merge_s', 0):.2f} "
            f"| {p.get('commit_s', 0):.2f} | {p.get('align_s', 0):.2f} "
            f"| {_other(p):.2f} | {p.get('compact_after_s', 0):.2f} "
            f"| {p.get('bytes_read', 0) / 1e6:,.0f} "
            f"| {p.get('bytes_written', 0) / 1e6:,.0f} | {_written_per_key(p, B):.1f} "
            f"| {model:.2f} | "
            f"{'yes' if p['ok'] else 'NO'} |")
    lines += [
        "",
        f"model: fixed part {m['fixed_s']:.3f} s (np.sort of B {m['sort_s']:.3f} s + write of "
        f"the new keys at {m['write_bps'] / 1e9:.2f} GB/s) + {m['s_per_stored_key'] * 1e9:.2f} "
        f"ns per stored key (read 8N at {m['read_bps'] / 1e9:.2f} GB/s); "
        f"the read of N dominates from N = {m['crossover_N']:,.0f}",
        f"measured fit: fixed {f['fixed_s']:.3f} s + {f['s_per_stored_key'] * 1e9:.2f} ns per "
        f"stored key; the read of N dominates from N = "
        + (f"{f['crossover_N']:,.0f}" if f["crossover_N"] else "n/a"),
        f"whole run: {res['final']['keys']:,} keys in {res['final']['runs']} runs (at most "
        f"{res['final']['max_runs_per_shard']} per shard), write amplification "
        + (f"{res['final']['write_amplification']:.2f}" if res['final']['write_amplification']
           else "n/a") + " (run bytes written by batches and compactions / 8 x keys stored)",
        f"(JIT warm-up {res['warmup_s']:.2f} s outside timings; growing the store took "
        f"{res['grow_s']:.0f} s; peak RSS {res['peak_rss'] / 2**20:,.0f} MiB)",
    ]
    return "\n".join(lines)


def _other(p: dict) -> float:
    """Seconds inside add() that the store's last_timings does not name."""
    named = ("sort_s", "bloom_s", "merge_s", "commit_s", "align_s", "compact_wait_s")
    return p["add_s"] - sum(p.get(k, 0.0) for k in named)


def _written_per_key(p: dict, batch: int) -> float:
    """Run bytes the probe batch wrote, plus the compaction its credit paid for (run
    right after it), per offered key."""
    return (p.get("bytes_written", 0) + p.get("compacted_bytes", 0)) / batch


def plot(res: dict, path: str, baseline: dict | None = None) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m, B = res["model"], res["args"]["batch"]
    pts = [p for p in res["points"] if p["N"] > 0]
    N = np.array([p["N"] for p in pts], dtype=float)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5))
    ax.plot(N, [p["add_s"] for p in pts], "o-", label="tiered runs: whole batch (store.add)")
    ax.plot(N, [p.get("merge_s", 0) + p.get("commit_s", 0) for p in pts], "s--",
            label="tiered runs: check + write + commit")
    bx.plot(N, [_written_per_key(p, B) for p in pts], "o-", label="tiered runs")
    if baseline:
        bp = [p for p in baseline["points"] if p["N"] > 0]
        bn = np.array([p["N"] for p in bp], dtype=float)
        bb = baseline["args"]["batch"]
        ax.plot(bn, [p["add_s"] for p in bp], "v-", color="tab:red",
                label="rewrite design (recorded): whole batch")
        bx.plot(bn, [p["bytes_written"] / bb for p in bp], "v-", color="tab:red",
                label="rewrite design (recorded)")
    grid = np.geomspace(N.min(), max(N.max(), 1) * 3, 100)
    ax.plot(grid, m["fixed_s"] + m["s_per_stored_key"] * grid, "k-", lw=1,
            label="model: sort B + read 8N + write 8B'")
    ax.axhline(m["fixed_s"], color="grey", ls="-.", lw=1, label="model: sort B + write B'")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("keys already in the store, N")
    ax.set_ylabel(f"seconds per batch of B = {B:,} offered keys")
    ax.set_title("batch cost against store size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    bx.set_xscale("log")
    bx.set_yscale("log")
    bx.set_xlabel("keys already in the store, N")
    bx.set_ylabel("run bytes written per offered key (incl. compaction)")
    bx.set_title("bytes written per offered key")
    bx.grid(True, which="both", alpha=0.3)
    bx.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-keys", type=parse_count, default=1_000_000_000)
    ap.add_argument("--first", type=parse_count, default=None,
                    help="smallest non-zero N (default: the batch size)")
    ap.add_argument("--batch", type=parse_count, default=10_000_000, help="probe batch size B")
    ap.add_argument("--grow-batch", type=parse_count, default=100_000_000,
                    help="batch size used to grow the store between checkpoints")
    ap.add_argument("--reoffer", type=float, default=0.5)
    ap.add_argument("--dup", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--probe-bytes", type=parse_count, default=1 << 30)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--plot", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--baseline", default=None,
                    help="a recorded run (JSON) of another design to draw beside this one")
    args = ap.parse_args()
    res = run(args)
    print(report(res))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh)
    if args.plot:
        baseline = json.load(open(args.baseline)) if args.baseline else None
        plot(res, args.plot, baseline)
        print(f"plot written: {args.plot}", file=sys.stderr)
    if not res["all_ok"]:
        raise SystemExit("scaling.py: a probe batch returned a wrong mask")


if __name__ == "__main__":
    main()
