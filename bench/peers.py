"""Peers table: the same crawl-like stream through seenstore and what a user would pick instead.

Each peer runs alone in its own subprocess (so its peak RSS is its own), one after the
other, on the same deterministic ``CrawlStream``; only the peer's work is timed (not the
generator, not the check). Each batch's new keys are checked against the stream's exact
expectation. A peer over ``--time-limit`` is killed and reported with how far it got.
Before each peer the host's speed is probed (``seenstore.bench.probes.cpu_probe``:
np.sort of 2^20 keys, thread CPU) and printed: a shared VM's speed moves, and a ratio
between two peers that ran at different speeds says little.

    python bench/peers.py --keys 1e7 [--batch N] [--peers set,sqlite,...] [--plot F.png]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from seenstore.bench.probes import dir_bytes, reset_peak_rss
from seenstore.bench.units import parse_count
from seenstore.warmup import warm_up
from seenstore.bench.workload import CrawlStream

PEERS = ("seenstore", "seenstore-nobloom", "set", "sqlite", "rocksdb", "duckdb", "lmdb", "rbloom")
INSTALL = {"rocksdb": "rocksdict", "duckdb": "duckdb", "lmdb": "lmdb", "rbloom": "rbloom"}


# ---------------------------------------------------------------- the peers
# Each peer: open(path, stream) -> state; add(state, keys) -> new keys of the batch
# (uint64 array, each once, any order); close(state). Durable per batch where the
# engine offers it (fsync on commit), as seenstore is.

class SeenStorePeer:
    def __init__(self, path, stream):
        from seenstore.store import SeenStore
        # Opened with defaults, as a user would: the Bloom filter starts small
        # and grows by layers as the stream fills it, not sized ahead for the stream.
        self.st = SeenStore.open(path, create=True)

    def add(self, keys):
        return self.st.add_new(keys)  # the sorted new keys, as the others return them

    def stages(self) -> dict:
        """The last batch's figures by stage (``SeenStore.last_timings``): seconds
        (``*_s``) and counts, for the report of a slow batch."""
        return {k: v for k, v in self.st.last_timings.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}

    def close(self):
        self.st.close()


class SeenStoreNoBloomPeer(SeenStorePeer):
    """seenstore without its Bloom filter (``bloom=False``, ``merge --no-bloom``): exact
    answers come from the merge alone; what a pipeline that never asks ``contains``
    or runs the stage would choose."""

    def __init__(self, path, stream):
        from seenstore.store import SeenStore
        self.st = SeenStore.open(path, create=True, bloom=False)


class SetPeer:
    def __init__(self, path, stream):
        self.seen: set[int] = set()

    def add(self, keys):
        new = set(keys.tolist())
        new -= self.seen
        self.seen |= new
        return new

    def close(self):
        pass


class SqlitePeer:
    """WITHOUT ROWID primary key; batch deduplicated in a temp table, anti-join, insert."""

    def __init__(self, path, stream):
        import sqlite3
        os.makedirs(path, exist_ok=True)
        self.db = sqlite3.connect(os.path.join(path, "seen.sqlite"), isolation_level=None)
        for pragma in ("journal_mode=WAL", "synchronous=FULL", "temp_store=MEMORY",
                       "cache_size=-262144"):
            self.db.execute(f"PRAGMA {pragma}")
        self.db.execute("CREATE TABLE seen(k INTEGER PRIMARY KEY) WITHOUT ROWID")
        self.db.execute("CREATE TEMP TABLE b(k INTEGER PRIMARY KEY) WITHOUT ROWID")

    def add(self, keys):
        db = self.db
        db.execute("BEGIN")
        db.execute("DELETE FROM b")
        db.executemany("INSERT OR IGNORE INTO b VALUES (?)", zip(keys.view(np.int64).tolist()))
        new = [r[0] for r in db.execute("SELECT k FROM b WHERE k NOT IN seen")]
        db.executemany("INSERT INTO seen VALUES (?)", zip(new))
        db.execute("COMMIT")
        return np.array(new, dtype=np.int64).view(np.uint64)

    def close(self):
        self.db.close()


class RocksPeer:
    """rocksdict raw mode, 8-byte big-endian keys, table Bloom 10 bits/key, multi-get +
    synced WriteBatch."""

    def __init__(self, path, stream):
        from rocksdict import BlockBasedOptions, Options, Rdict, WriteOptions
        opt = Options(raw_mode=True)
        opt.create_if_missing(True)
        opt.increase_parallelism(os.cpu_count() or 2)
        opt.set_write_buffer_size(256 << 20)
        table = BlockBasedOptions()
        table.set_bloom_filter(10, False)
        opt.set_block_based_table_factory(table)
        self.db = Rdict(path, opt)
        self.wo = WriteOptions()
        self.wo.sync = True

    def add(self, keys):
        from rocksdict import WriteBatch
        u = np.unique(keys)
        raw = u.astype(">u8").tobytes()
        ks = [raw[i:i + 8] for i in range(0, len(raw), 8)]
        got = self.db.get(ks)
        wb = WriteBatch(raw_mode=True)
        isnew = [v is None for v in got]
        for k, n in zip(ks, isnew):
            if n:
                wb.put(k, b"")
        self.db.write(wb, self.wo)
        return u[np.array(isnew, dtype=bool)]

    def close(self):
        self.db.close()


class DuckPeer:
    """Table without index; per batch: SELECT DISTINCT ... ANTI JOIN seen, then INSERT."""

    def __init__(self, path, stream):
        import duckdb
        os.makedirs(path, exist_ok=True)
        self.db = duckdb.connect(os.path.join(path, "seen.duckdb"))
        self.db.execute("CREATE TABLE seen(k UBIGINT)")

    def add(self, keys):
        db = self.db
        batch = {"k": keys}  # noqa: F841  (DuckDB scans the local variable by name)
        db.execute("BEGIN")
        db.execute("CREATE OR REPLACE TEMP TABLE fresh AS "
                   "SELECT DISTINCT batch.k FROM batch ANTI JOIN seen ON batch.k = seen.k")
        db.execute("INSERT INTO seen SELECT k FROM fresh")
        new = db.execute("SELECT k FROM fresh").fetchnumpy()["k"]
        db.execute("COMMIT")
        return np.asarray(new, dtype=np.uint64)

    def close(self):
        self.db.execute("CHECKPOINT")
        self.db.close()


class LmdbPeer:
    """One write transaction per batch (synced commit), put(overwrite=False) says new."""

    def __init__(self, path, stream):
        import lmdb
        self.env = lmdb.open(path, map_size=1 << 40, sync=True, metasync=True)

    def add(self, keys):
        u = np.unique(keys)
        raw = u.astype(">u8").tobytes()
        with self.env.begin(write=True) as txn:
            put = txn.put
            isnew = [put(raw[i:i + 8], b"", overwrite=False) for i in range(0, len(raw), 8)]
        return u[np.array(isnew, dtype=bool)]

    def close(self):
        self.env.close()


class RbloomPeer:
    """Approximate: a Bloom positive counts as seen (new keys may be lost, never repeated)."""

    def __init__(self, path, stream, fp_rate=0.001):
        from rbloom import Bloom
        self.bf = Bloom(max(1, stream.expected_total_new), fp_rate)
        self.approximate = True

    def add(self, keys):
        bf = self.bf
        new = []
        for k in keys.tolist():
            if k not in bf:
                bf.add(k)
                new.append(k)
        return np.array(new, dtype=np.uint64)

    def close(self):
        pass


PEER_CLASSES = {"seenstore": SeenStorePeer, "seenstore-nobloom": SeenStoreNoBloomPeer,
                "set": SetPeer, "sqlite": SqlitePeer,
                "rocksdb": RocksPeer, "duckdb": DuckPeer, "lmdb": LmdbPeer, "rbloom": RbloomPeer}


# ---------------------------------------------------------------- child side

def _check(peer, batch, got) -> tuple[bool, int]:
    """(correct, lost): exact peers must return exactly the fresh keys; approximate ones a
    subset of them (lost = fresh keys answered as seen)."""
    fresh = batch.keys[: batch.n_fresh]
    got = np.sort(np.fromiter(got, dtype=np.uint64, count=len(got))
                  if not isinstance(got, np.ndarray) else got)
    if getattr(peer, "approximate", False):
        inside = np.isin(got, fresh)
        return bool(inside.all() and len(np.unique(got)) == len(got)), batch.n_fresh - len(got)
    return bool(np.array_equal(got, np.sort(fresh))), 0


def _pretouch(nbytes: int) -> None:
    """Write ``nbytes`` of fresh memory and free it. On a VM whose host takes back the
    memory a guest left free (free page reporting, ballooning), the first write to a
    page after an idle spell costs a fault in the host too; this moves that cost, for
    up to ``nbytes`` of the peer's allocations, before the clock (every peer alike)."""
    a = np.ones(nbytes // 8, dtype=np.uint64)
    del a


PROBE_KEYS = 1 << 17


def _probe(keys: np.ndarray) -> float:
    """Wall ns/key of np.sort of a copy of ``keys`` (~5 ms), best of 2: the host's
    speed just before and just after a batch, outside its timing. Wall time, so a
    host that takes the vCPU away (steal) or a busy SMT sibling shows in it."""
    best = float("inf")
    for _ in range(2):
        a = keys.copy()
        t = time.perf_counter()
        a.sort()
        best = min(best, time.perf_counter() - t)
    return best / len(keys) * 1e9


def _cpu_seconds() -> tuple[float, float, int]:
    """The process's (user, system) CPU seconds and its page faults (minor + major)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, r.ru_minflt + r.ru_majflt


def run_child(name: str, args, progress_path: str) -> None:
    """Run one peer over the stream; append one JSON line per batch, then a 'done' line."""
    stream = CrawlStream(args.keys, args.batch, args.reoffer, args.dup, seed=args.seed)
    path = os.path.join(args.workdir, name)
    out = open(progress_path, "a", buffering=1)
    try:
        cls = PEER_CLASSES[name]
        peer = cls(path, stream)
    except ImportError as e:
        pip = INSTALL.get(name, name)
        out.write(json.dumps({"done": True, "status": "not installed",
                              "message": f"{e} (pip install {pip})"}) + "\n")
        return
    if args.pretouch:  # the VM's memory backed again before the clock (--pretouch)
        _pretouch(args.pretouch)
        reset_peak_rss()  # not the peer's memory
    rss_base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if name.startswith("seenstore"):  # compile kernels outside the timing, on a throwaway store
        out.write(json.dumps({"warmup_s": warm_up(args.workdir, child=True)}) + "\n")
        reset_peak_rss()  # the JIT compiler's memory (cold numba cache) is not the run's
    total_s, correct, lost, offered = 0.0, True, 0, 0
    probe_keys = np.random.default_rng(7).integers(0, 2**64, PROBE_KEYS, dtype=np.uint64)
    for plan in stream.plan():
        batch = stream.batch(*plan)
        before = _probe(probe_keys)
        c0 = _cpu_seconds()
        t0 = time.perf_counter()
        got = peer.add(batch.keys)
        dt = time.perf_counter() - t0
        c1 = _cpu_seconds()  # every thread's, the peer's background work included
        cpu, sys_s, faults = c1[0] - c0[0] + c1[1] - c0[1], c1[1] - c0[1], c1[2] - c0[2]
        after = _probe(probe_keys)
        ok, lost_b = _check(peer, batch, got)
        total_s += dt
        offered += len(batch.keys)
        correct &= ok
        lost += lost_b
        line = {"batch": batch.index, "offered": len(batch.keys), "s": dt,
                "stored_before": plan[1], "ok": ok, "lost": lost_b, "cpu_s": cpu,
                "sys_s": sys_s, "faults": faults, "probe_ns": [before, after]}
        if hasattr(peer, "stages"):
            line["stages"] = peer.stages()
        out.write(json.dumps(line) + "\n")
    t0 = time.perf_counter()
    peer.close()
    close_s = time.perf_counter() - t0
    out.write(json.dumps({
        "done": True, "status": "ok", "seconds": total_s + close_s, "close_s": close_s,
        "offered": offered, "correct": correct, "lost": lost,
        "approximate": bool(getattr(peer, "approximate", False)),
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "rss_base": rss_base, "disk_bytes": dir_bytes(path) if os.path.exists(path) else 0,
        "expected_total_new": stream.expected_total_new,
    }) + "\n")


# ---------------------------------------------------------------- parent side

def run_peer(name: str, args) -> dict:
    """Run one peer in a subprocess with the time limit; return its summary row."""
    fd, progress = tempfile.mkstemp(prefix=f"peer-{name}-", suffix=".jsonl")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--progress", progress,
           "--keys", str(args.keys), "--batch", str(args.batch), "--reoffer", str(args.reoffer),
           "--dup", str(args.dup), "--seed", str(args.seed), "--workdir", args.workdir,
           "--pretouch", str(args.pretouch)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=args.time_limit)
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        timed_out = True
    wall = time.perf_counter() - t0
    lines = [json.loads(x) for x in open(progress) if x.strip()]
    os.unlink(progress)
    shutil.rmtree(os.path.join(args.workdir, name), ignore_errors=True)
    batches = [x for x in lines if "batch" in x]
    final = next((x for x in lines if x.get("done")), None)
    row = {"peer": name, "batches": batches, "wall_s": wall,
           "warmup_s": next((x["warmup_s"] for x in lines if "warmup_s" in x), None)}
    if timed_out:
        done = sum(b["offered"] for b in batches)
        secs = sum(b["s"] for b in batches)
        row.update(status=f"timeout after {args.time_limit:.0f} s ({done:,} keys done)",
                   offered=done, seconds=secs, correct=all(b["ok"] for b in batches))
    elif final is None:
        last = (err.strip().splitlines() or ["no message"])[-1]
        row.update(status=f"crashed (exit {proc.returncode}): {last[-200:]}".replace("|", "/"))
    else:
        row.update(final)
    return row


def fmt_table(rows: list, args) -> str:
    """Markdown table; ratios against the seenstore row of the same run."""
    base = next((r for r in rows if r["peer"] == "seenstore" and r.get("status") == "ok"), None)
    base_ns = base["seconds"] / base["offered"] * 1e9 if base else None
    head = ("| peer | status | keys/s | ns/key | x seenstore (time) | peak RSS MiB "
            "| disk B/key | correct |\n|---|---|---:|---:|---:|---:|---:|---|")
    out = [head]
    for r in rows:
        if not r.get("offered"):
            out.append(f"| {r['peer']} | {r.get('status')} | | | | | | |")
            continue
        ns = r["seconds"] / r["offered"] * 1e9
        ratio = f"{ns / base_ns:.1f}" if base_ns else "-"
        rss = f"{r['peak_rss'] / 2**20:,.0f}" if r.get("peak_rss") else "-"
        stored = r.get("expected_total_new") or 0
        disk = (f"{r['disk_bytes'] / stored:.1f}" if r.get("disk_bytes") and stored
                else ("in memory" if r.get("status") == "ok" else "-"))
        if r.get("approximate"):
            correct = (f"approx: {r['lost']:,} lost ({r['lost'] / max(1, stored):.3%})"
                       if r["correct"] else "NO")
        else:
            correct = "yes" if r.get("correct") else "NO"
        if r.get("status") != "ok":
            correct += " (so far)"
        out.append(f"| {r['peer']} | {r['status']} | {r['offered'] / r['seconds'] / 1e6:.2f} M "
                   f"| {ns:,.0f} | {ratio} | {rss} | {disk} | {correct} |")
    return "\n".join(out)


def fmt_verdict(rows: list) -> str | None:
    """One line: seenstore against the fastest exact peer that finished, and what the
    issue's target (5x faster than it) asks in ns/key."""
    def ns(r):
        return r["seconds"] / r["offered"] * 1e9

    ok = [r for r in rows if r.get("status") == "ok" and r.get("correct") and r.get("offered")]
    base = next((r for r in ok if r["peer"] == "seenstore"), None)
    peers = [r for r in ok if not r["peer"].startswith("seenstore") and not r.get("approximate")]
    if base is None or not peers:
        return None
    best = min(peers, key=ns)
    return (f"Fastest exact peer: {best['peer']}, {ns(best):,.0f} ns/key; seenstore "
            f"{ns(base):,.0f} ns/key is {ns(best) / ns(base):.1f}x faster (5x would need "
            f"<= {ns(best) / 5:,.0f} ns/key).")


def fmt_steadiness(rows: list, limit: float = 1.5) -> str:
    """Per peer: each batch's seconds against the median batch (the issue's "no batch
    over 1.5x the median"); for a seenstore batch past ``limit`` x the median, its
    seconds by stage (the store's ``last_timings``), to say where it went."""
    out = []
    for r in rows:
        bs = r.get("batches") or []
        if len(bs) < 2:
            continue
        secs = np.array([b["s"] for b in bs])
        med = float(np.median(secs))
        worst = int(np.argmax(secs))
        out.append(f"{r['peer']}: median batch {med:.3f} s, slowest batch {bs[worst]['batch']} "
                   f"{secs[worst]:.3f} s = {secs[worst] / med:.2f}x the median; "
                   "per batch (x median): " + " ".join(f"{s / med:.2f}" for s in secs))
        probes = [max(b["probe_ns"]) for b in bs if b.get("probe_ns")]
        cpus = [b["cpu_s"] for b in bs if "cpu_s" in b]
        if probes and cpus:
            pmed, cmed = float(np.median(probes)), float(np.median(cpus))
            out.append("    host probe around each batch (slower of before/after, x its median): "
                       + " ".join(f"{p / pmed:.2f}" for p in probes)
                       + "\n    process CPU seconds in each batch (x its median): "
                       + " ".join(f"{c / cmed:.2f}" for c in cpus))
        if all("sys_s" in b for b in bs):
            out.append("    of which system (kernel) seconds, and page faults in thousands: "
                       + " ".join(f"{b['sys_s']:.3f}/{b['faults'] / 1e3:.0f}k" for b in bs))
        for b, s in zip(bs, secs):
            if s > limit * med and b.get("stages"):
                parts = ", ".join(f"{k[:-2]} {v:.3f}" for k, v in b["stages"].items()
                                  if k.endswith("_s") and v >= 0.005)
                out.append(f"    batch {b['batch']} ({s:.3f} s) by stage, s: {parts}")
    return "\n".join(out)


def plot(rows: list, path: str, args) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8))
    for r in rows:
        bs = r.get("batches") or []
        if not bs:
            continue
        x = [(b["stored_before"] + 1) / 1e6 for b in bs]
        y = [b["s"] / b["offered"] * 1e9 for b in bs]
        ax.plot(x, y, marker="o", label=r["peer"] + ("" if r.get("status") == "ok" else " (cut)"))
    ax.set_yscale("log")
    ax.set_xlabel("distinct keys already stored before the batch (millions)")
    ax.set_ylabel("ns per offered key (log scale)")
    ax.set_title(f"Same stream, one peer at a time: {args.keys:,} keys, batch {args.batch:,}, "
                 f"reoffer {args.reoffer}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=parse_count, default=10_000_000)
    ap.add_argument("--batch", type=parse_count, default=None,
                    help="keys per batch (default keys/10, within 1e5..1e7)")
    ap.add_argument("--reoffer", type=float, default=0.5)
    ap.add_argument("--dup", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--time-limit", type=float, default=900.0, help="seconds per peer")
    ap.add_argument("--workdir", default=None, help="where peers keep their files")
    ap.add_argument("--pretouch", type=parse_count, default=0, metavar="BYTES",
                    help="each peer writes and frees this much memory before its clock starts "
                         "(a VM's host-side faults after an idle spell, outside the timing)")
    ap.add_argument("--plot", default=None, help="PNG: ns/key per batch vs store size")
    ap.add_argument("--json", default=None, help="write all rows to this JSON file")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--progress", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.batch is None:
        args.batch = max(100_000, min(10_000_000, args.keys // 10))
    if args.child:
        run_child(args.child, args, args.progress)
        return
    names = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in names if p not in PEER_CLASSES]
    if unknown:
        sys.exit(f"peers.py: unknown peer(s) {unknown}; choose from {', '.join(PEERS)}")
    own = args.workdir is None
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="seenstore-peers-")
    os.makedirs(args.workdir, exist_ok=True)
    from seenstore.keys.sort import machine_summary
    print(f"Stream: {args.keys:,} keys in batches of {args.batch:,}, reoffer {args.reoffer}, "
          f"dup {args.dup}, seed {args.seed}; time limit {args.time_limit:.0f} s per peer.\n"
          f"Machine: {machine_summary()}; load average {os.getloadavg()[0]:.1f} at the start.\n",
          flush=True)
    from seenstore.bench.probes import cpu_probe
    rows = []
    try:
        for name in names:
            probe = cpu_probe()  # the host's speed as this peer starts
            row = run_peer(name, args)
            row["cpu_probe_ns"] = probe
            rows.append(row)
            ns = (f"{row['seconds'] / row['offered'] * 1e9:,.0f} ns/key"
                  if row.get("offered") else "")
            print(f"#   {name}: {row.get('status')} {ns} (wall {row['wall_s']:.0f} s; "
                  f"host probe {probe:.1f} ns/key)", file=sys.stderr, flush=True)
    finally:
        if own:
            shutil.rmtree(args.workdir, ignore_errors=True)
    print(fmt_table(rows, args))
    verdict = fmt_verdict(rows)
    if verdict:
        print("\n" + verdict)
    steady = fmt_steadiness(rows)
    if steady:
        print("\nBatch times against each peer's median batch:\n" + steady)
    print("\nHost probe as each peer started (np.sort of 2^20 keys, ns/key of thread CPU; "
          "this VM's speed moves, so ratios compare like with like only where these agree): "
          + ", ".join(f"{r['peer']} {r['cpu_probe_ns']:.1f}" for r in rows))
    warm = next((r["warmup_s"] for r in rows if r.get("warmup_s") is not None), None)
    if warm is not None:
        print(f"\n(seenstore JIT warm-up {warm:.2f} s, outside the timing; peak RSS includes the "
              "interpreter, numpy and one generated batch)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f)
    if args.plot:
        plot(rows, args.plot, args)
        print(f"plot written: {args.plot}", file=sys.stderr)


if __name__ == "__main__":
    main()
