"""Scale benchmark of the core engine: sort, merge and commit against the disk.

Merges --keys random keys into a fresh store in batches of --batch keys and
prints, per batch and in total, ns/key for sort, merge and commit, and the disk
bandwidth the merges reached, beside a plain sequential write+fsync and read of
a scratch file of the same size (dd-style) measured in the same run.

    python bench/bench_merge.py --keys 1e8 --batch 1e7 [--dir scratch/bench] [--shard-bits 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

import numpy as np

from seenstore.store import SeenStore


def dd_baseline(path: str, nbytes: int, chunk: int = 64 << 20) -> tuple[float, float]:
    """Sequential write (+fsync) then read of ``nbytes``; returns (write GB/s, read GB/s)."""
    buf = np.random.default_rng(0).integers(0, 255, chunk, dtype=np.uint8).tobytes()
    t0 = time.perf_counter()
    with open(path, "wb", buffering=0) as f:
        left = nbytes
        while left > 0:
            left -= f.write(buf[: min(chunk, left)])
        os.fsync(f.fileno())
    w = nbytes / (time.perf_counter() - t0) / 1e9
    out = bytearray(chunk)
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(out):
            pass
    r = nbytes / (time.perf_counter() - t0) / 1e9
    os.unlink(path)
    return w, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--keys", type=float, default=1e8)
    ap.add_argument("--batch", type=float, default=1e7)
    ap.add_argument("--dir", default="scratch/bench_merge")
    ap.add_argument("--shard-bits", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-bloom", action="store_true", help="open the store without a Bloom filter")
    a = ap.parse_args()
    total, batch = int(a.keys), int(a.batch)
    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir)
    rng = np.random.default_rng(42)

    t0 = time.perf_counter()
    with SeenStore.open(os.path.join(a.dir, "warm"), create=True) as s:  # JIT caches
        s.add(rng.integers(0, 2**64, 1000, dtype=np.uint64))
    print(f"JIT warm-up (load/compile kernels): {time.perf_counter() - t0:.2f}s, not counted")

    store = SeenStore.open(os.path.join(a.dir, "store"), create=True, shard_bits=a.shard_bits,
                           bloom=not a.no_bloom, bloom_capacity=total)
    store.threads = a.threads
    stages = ("sort", "align", "bloom", "merge", "commit")
    sums = dict(sort=0.0, align=0.0, bloom=0.0, merge=0.0, commit=0.0, read=0, written=0, wall=0.0)
    print(f"shard_bits={a.shard_bits} threads={a.threads} bloom={'off' if a.no_bloom else 'on'}")
    print(f"{'batch':>5} {'store keys':>12} {'sort':>7} {'align':>7} {'bloom':>7} "
          f"{'merge':>7} {'commit':>7}"
          f" {'ns/key':>8} {'merge GB/s':>10}   (ns per offered key)")
    done = 0
    while done < total:
        n = min(batch, total - done)
        keys = rng.integers(0, 2**64, n, dtype=np.uint64)
        t = time.perf_counter()
        mask = store.add(keys)
        wall = time.perf_counter() - t
        assert mask.sum() == n - (n - len(np.unique(keys)))  # random 64-bit: all new
        tm = store.last_timings
        io = tm["bytes_read"] + tm["bytes_written"]
        for k in stages:
            sums[k] += tm[f"{k}_s"]
        sums["read"] += tm["bytes_read"]
        sums["written"] += tm["bytes_written"]
        sums["wall"] += wall
        done += n
        print(f"{done // n:>5} {len(store):>12,} " + " ".join(
            f"{tm[f'{k}_s'] * 1e9 / n:>7.1f}" for k in stages)
            + f" {wall * 1e9 / n:>8.1f} {io / (tm['merge_s'] + tm['commit_s']) / 1e9:>10.2f}")
    store.verify()
    disk = store.stats()["bytes_on_disk"]
    store.close()

    moved = sums["read"] + sums["written"]
    w_bw, r_bw = dd_baseline(os.path.join(a.dir, "dd.tmp"), max(sums["written"] // 10, 1 << 28))
    floor_io = sums["written"] / (w_bw * 1e9) + sums["read"] / (r_bw * 1e9)
    print()
    print(f"total {total:,} keys in {sums['wall']:.2f}s = {sums['wall'] * 1e9 / total:.1f} ns/key "
          f"({total / sums['wall'] / 1e6:.2f} M keys/s)")
    for k in stages:
        print(f"  {k:>6}: {sums[k] * 1e9 / total:7.1f} ns/key")
    print(f"  other (bloom insert after commit, bookkeeping): "
          f"{(sums['wall'] - sum(sums[k] for k in stages)) * 1e9 / total:7.1f} ns/key")
    print(f"  bytes read {sums['read'] / 1e9:.2f} GB, written {sums['written'] / 1e9:.2f} GB; "
          f"merge+commit moved {moved / (sums['merge'] + sums['commit']) / 1e9:.2f} GB/s")
    print(f"  dd-style baseline (same run): write+fsync {w_bw:.2f} GB/s, read {r_bw:.2f} GB/s")
    print(f"  merge+commit time / dd time for the same bytes: "
          f"{(sums['merge'] + sums['commit']) / floor_io:.2f}x")
    print(f"  disk: {disk / total:.3f} bytes/key")
    shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
