"""What forgetting costs a writer: ``add_new`` ns/key on a store whose tombstone set T
is empty (the code path every store without ``forget`` takes: compare it with
another checkout's by running this file under each PYTHONPATH, alternated) and on
the same store with |T| = --forget keys, offered or not; ``forget`` itself.

    python bench/bench_forget.py [--keys 1e7] [--batch 1e6] [--forget 1e5] [--phase all]

Phase ``fill``: --keys random keys into a fresh store in batches of --batch
(add_new), ns/key; any checkout. Phase ``t`` (needs forget): two stores filled the
same way, one then forgets --forget of its keys; both admit --keys more new keys
in the same batches, alternated batch by batch (ns/key each), then one batch of
--batch keys holding the forgotten ones (readmitted: new, not written again).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time

import numpy as np

from seenstore.store import SeenStore


def keys_of(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**64 - 1, n, dtype=np.uint64,
                                                endpoint=True)


def fill(path: str, keys: np.ndarray, batch: int) -> float:
    """Seconds to admit ``keys`` in batches of ``batch`` into a new store at ``path``."""
    with SeenStore.open(path, create=True) as store:
        t0 = time.perf_counter()
        for i in range(0, len(keys), batch):
            store.add_new(keys[i:i + batch])
        store.wait_for_compaction()
        return time.perf_counter() - t0


def phase_t(root: str, n: int, batch: int, n_forget: int) -> dict:
    first, more = keys_of(1, n), keys_of(2, n)
    fill(f"{root}/a", first, batch)
    fill(f"{root}/b", first, batch)
    a, b = SeenStore.open(f"{root}/a"), SeenStore.open(f"{root}/b")
    gone = first[np.random.default_rng(3).choice(n, n_forget, replace=False)]
    t0 = time.perf_counter()
    assert b.forget(gone) == n_forget
    forget_s = time.perf_counter() - t0
    spent = {"empty_t": 0.0, "with_t": 0.0}
    for i in range(0, n, batch):  # alternated, batch by batch
        for name, store in (("empty_t", a), ("with_t", b)):
            t = time.perf_counter()
            store.add_new(more[i:i + batch])
            spent[name] += time.perf_counter() - t
    a.wait_for_compaction()
    b.wait_for_compaction()
    offer = np.concatenate([gone, keys_of(4, batch - n_forget)])
    t = time.perf_counter()
    got = a.add_new(offer)
    plain_s = time.perf_counter() - t
    t = time.perf_counter()
    revived = b.add_new(offer)
    revive_s = time.perf_counter() - t
    assert len(revived) == len(got) + n_forget and b.stats()["forgotten"] == 0
    a.close()
    b.close()
    return {"keys": n, "batch": batch, "forgotten": n_forget,
            "forget_s": round(forget_s, 3),
            "forget_ns_per_forgotten_key": round(forget_s / n_forget * 1e9, 1),
            "add_new_ns_per_key_empty_t": round(spent["empty_t"] / n * 1e9, 2),
            "add_new_ns_per_key_with_t": round(spent["with_t"] / n * 1e9, 2),
            "readmit_batch_s_plain": round(plain_s, 3),
            "readmit_batch_s_with_t": round(revive_s, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=float, default=1e7)
    ap.add_argument("--batch", type=float, default=1e6)
    ap.add_argument("--forget", type=float, default=1e5)
    ap.add_argument("--phase", choices=["fill", "t", "all"], default="all")
    args = ap.parse_args()
    n, batch, n_forget = int(args.keys), int(args.batch), int(args.forget)
    root = tempfile.mkdtemp(prefix="bench-forget-")
    out: dict = {}
    try:
        if args.phase in ("fill", "all"):
            s = fill(f"{root}/fill", keys_of(1, n), batch)
            out["fill_ns_per_key"] = round(s / n * 1e9, 2)
        if args.phase in ("t", "all"):
            out.update(phase_t(root, n, batch, n_forget))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
