"""Values beside keys: what ``check_update`` costs over a key-only store, and DuckDB.

The same crawl-like stream (seenstore/bench/workload.py ``CrawlStream``: fresh keys,
keys re-offered from earlier batches, repeats within a batch) is offered to:

  * ``add``        a key-only store, ``SeenStore.add`` (the mask ``check_update`` returns)
  * ``add_new``    a key-only store, ``SeenStore.add_new``
  * ``values``     a store created with ``values=True``, ``check_update(keys,
                   next_due=<an int64 per key>)``: every new key gets a record
  * ``duckdb``     a table ``seen(k UBIGINT PRIMARY KEY, state UTINYINT, next_due BIGINT)``:
                   per batch, in one transaction, the new keys by an anti-join and
                   ``INSERT ... ON CONFLICT DO NOTHING`` of them with their records

Each figure is wall time of the store calls only (the stream is made outside the
timing), in ns per offered key; then bytes on disk per stored key (runs, value
files, manifest; the Bloom filter apart) and, on the values store, ``update`` of one
batch's worth of stored keys, ``get`` of 1e6 keys and ``due`` / ``counts``.

    python bench/bench_values.py [--keys 1e7] [--batch 1e7] [--dir /tmp] [--no-duckdb]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import numpy as np

from seenstore.bench.workload import CrawlStream
from seenstore import State
from seenstore.store import SeenStore


def due_of(keys: np.ndarray) -> np.ndarray:
    """A next_due per key: a day's spread of seconds after a fixed epoch."""
    return (np.int64(1_700_000_000) + (keys % np.uint64(86_400)).astype(np.int64))


def dir_bytes(path: str) -> int:
    """The store's bytes on disk but the Bloom filter's."""
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path)
               if not n.startswith("BLOOM") and os.path.isfile(os.path.join(path, n)))


def run_store(kind: str, stream: CrawlStream, path: str) -> dict:
    store = SeenStore.open(path, create=True, values=kind == "values")
    spent = 0.0
    for b in stream:
        keys = b.keys
        due = due_of(keys) if kind == "values" else None
        t0 = time.perf_counter()
        if kind == "add":
            got = int(store.add(keys).sum())
        elif kind == "add_new":
            got = len(store.add_new(keys))
        else:
            got = int(store.check_update(keys, next_due=due).sum())
        spent += time.perf_counter() - t0
        assert got == b.expected_new, (kind, b.index, got, b.expected_new)
    store.wait_for_compaction()
    out = {"s": spent, "keys": len(store), "bytes": dir_bytes(path)}
    if kind == "values":
        out.update(value_calls(store, stream))
    store.close()  # saves the Bloom filter
    out["bloom_bytes"] = sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path)
                             if n.startswith("BLOOM"))
    return out


def value_calls(store, stream: CrawlStream) -> dict:
    """Times of the other value calls on the filled store."""
    rng = np.random.default_rng(1)
    first = next(iter(stream)).keys
    some = first[rng.integers(0, len(first), min(len(first), 1_000_000))]
    out = {}
    t0 = time.perf_counter()
    store.update(first, state=State.DONE, status=200, fetched_at=1_700_000_000)
    out["update_s"], out["update_keys"] = time.perf_counter() - t0, len(first)
    t0 = time.perf_counter()
    rows = store.get(some)
    out["get_s"], out["get_keys"] = time.perf_counter() - t0, len(some)
    assert rows["present"].all()
    t0 = time.perf_counter()
    out["due_n"] = len(store.due(1_700_000_000 + 3_600))
    out["due_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    counts = store.counts()
    out["counts_s"] = time.perf_counter() - t0
    assert sum(counts.values()) == len(store)
    out["value_files"] = len(store._doc.get("value_files", []))
    return out


def run_duckdb(stream: CrawlStream, path: str) -> dict:
    import duckdb
    os.makedirs(path, exist_ok=True)
    db = duckdb.connect(os.path.join(path, "seen.duckdb"))
    db.execute("CREATE TABLE seen(k UBIGINT PRIMARY KEY, state UTINYINT, next_due BIGINT)")
    spent = 0.0
    for b in stream:
        batch = {"k": b.keys, "d": due_of(b.keys)}  # noqa: F841  (scanned by name)
        t0 = time.perf_counter()
        db.execute("BEGIN")
        db.execute("CREATE OR REPLACE TEMP TABLE fresh AS SELECT k, first(d) AS d FROM batch "
                   "ANTI JOIN seen USING (k) GROUP BY k")
        db.execute("INSERT INTO seen SELECT k, 0, d FROM fresh ON CONFLICT DO NOTHING")
        got = db.execute("SELECT count(*) FROM fresh").fetchone()[0]
        db.execute("COMMIT")
        spent += time.perf_counter() - t0
        assert got == b.expected_new, ("duckdb", b.index, got, b.expected_new)
    db.execute("CHECKPOINT")
    n = db.execute("SELECT count(*) FROM seen").fetchone()[0]
    db.close()
    return {"s": spent, "keys": n, "bytes": dir_bytes(path), "bloom_bytes": 0}


def warm_up(base: str) -> None:
    """Load (or compile) the kernels a batch of this size takes, untimed."""
    stream = CrawlStream(400_000, 200_000, seed=99)
    for kind in ("add", "values"):
        run_store(kind, stream, os.path.join(base, f"warm-{kind}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=float, default=1e7)
    ap.add_argument("--batch", type=float, default=1e7)
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temp dir)")
    ap.add_argument("--no-duckdb", action="store_true")
    ap.add_argument("--kinds", default="add,add_new,values,duckdb")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="bench-values-", dir=args.dir)
    try:
        stream = CrawlStream(int(args.keys), int(args.batch))
        warm_up(base)
        kinds = [k for k in args.kinds.split(",") if not (k == "duckdb" and args.no_duckdb)]
        print(f"stream: {int(args.keys):,} keys offered in batches of {int(args.batch):,}, "
              f"{stream.expected_total_new:,} distinct; cores: {os.cpu_count()}")
        for kind in kinds:
            path = os.path.join(base, kind)
            r = (run_duckdb(stream, path) if kind == "duckdb" else run_store(kind, stream, path))
            line = (f"{kind:8s} {1e9 * r['s'] / args.keys:7.1f} ns/key  {r['s']:7.2f} s  "
                    f"{r['bytes'] / max(r['keys'], 1):6.2f} B/key on disk "
                    f"(+{r['bloom_bytes'] / max(r['keys'], 1):.2f} Bloom)")
            print(line, flush=True)
            if kind == "values":
                print(f"         update {r['update_keys']:,} keys: {r['update_s']:.2f} s "
                      f"({1e9 * r['update_s'] / r['update_keys']:.0f} ns/key); "
                      f"get {r['get_keys']:,}: {r['get_s']:.2f} s; due: {r['due_n']:,} keys "
                      f"in {r['due_s']:.2f} s; counts {1e3 * r['counts_s']:.2f} ms; "
                      f"value files {r['value_files']}", flush=True)
            shutil.rmtree(path, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
