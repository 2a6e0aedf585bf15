"""Reading a spill bucket after asking the OS to read it ahead: what each way leaves.

Writes a file of --keys uint64 keys (default 1e7: 80 MB, a bucket of a 1e10-key run)
in --dir (default scratch/readahead, git-ignored), then for each way of asking drops
the file's cached pages (fsync, posix_fadvise DONTNEED), asks, sleeps --pause
seconds (the time a check of the shard before would take) and times one read of the
whole file into a reused array, as the check reads a bucket. Ways: ``cold`` (nothing
asked), ``willneed-once`` (one WILLNEED over the whole file: what the check asked
before), ``willneed-steps`` (``runtime/readahead.py: will_need_file``: WILLNEED in 2
MiB steps, what it asks now; the calls' own time is printed too), ``read-through``
(the file read through an 8 MiB buffer first: a full read's worth of copying, the
upper bound). Prints ns per key of the read, the median of --reps, and the kernel.

    python bench/bench_readahead.py [--keys 1e7] [--reps 3] [--pause 1.0] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

from seenstore.runtime.readahead import will_need_file


def _drop(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _once(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(fd)


def _through(path: str) -> None:
    buf = bytearray(8 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


WAYS = {"cold": None, "willneed-once": _once, "willneed-steps": will_need_file,
        "read-through": _through}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=float, default=1e7)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pause", type=float, default=1.0)
    ap.add_argument("--dir", default="scratch/readahead")
    a = ap.parse_args()
    if not hasattr(os, "posix_fadvise"):
        raise SystemExit("this OS has no posix_fadvise: nothing to measure")
    n = int(a.keys)
    os.makedirs(a.dir, exist_ok=True)
    path = os.path.join(a.dir, "bucket.bin")
    np.random.default_rng(1).integers(0, 2**64, n, dtype=np.uint64).tofile(path)
    slab = np.zeros(n, dtype=np.uint64)  # faulted in once, reused like the check's slab
    print(f"kernel {platform.release()}; {n:,} keys ({8 * n / 1e6:.0f} MB); "
          f"pause {a.pause} s; median of {a.reps}")
    try:
        for name, ask in WAYS.items():
            reads, asks = [], []
            for _ in range(a.reps):
                _drop(path)
                t = time.perf_counter()
                if ask is not None:
                    ask(path)
                asks.append(time.perf_counter() - t)
                time.sleep(a.pause)
                t = time.perf_counter()
                with open(path, "rb", buffering=0) as f:
                    f.readinto(memoryview(slab).cast("B"))
                reads.append(time.perf_counter() - t)
            print(f"{name:15s} read {1e9 * statistics.median(reads) / n:5.2f} ns/key"
                  f"   asking took {1e3 * statistics.median(asks):6.1f} ms")
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
