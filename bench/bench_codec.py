"""Compressed runs: codec speed against raw reads, bytes per key against the bound.

For each store density N (--densities, default 1e8, 1e9, 1e10 keys in the 64-bit
space) it draws --keys sorted unique keys with the gaps of N uniform keys (a narrow
range of the same density: sizes depend only on the gaps) inside shard 5 of 256,
and reports:

- bytes per key of the 2.0 run file (whole file, header and index included) and of
  the blocks alone, against the information bound log2(2^64/N) + log2(e) bits, and
  beside it what bit-packed deltas (per-block bit width) and Elias-Fano per block
  would take for the same blocks (computed exactly from the gaps, not encoded);
- in memory, CPU time of one thread (best of --reps; time descheduled on a shared
  machine is not counted): encode (kernel + block checksums) and decode (kernel +
  checksum check), in GB/s of keys (8 bytes a key) and ns/key;
- from a file in --dir: ``np.fromfile`` of the raw keys and a streamed read of the
  compressed run (``CompressedRunReader.chunks``, 1 Mi-key buffer, checksums
  checked), wall time (and the stream's CPU time), GB/s of keys delivered; page cache
  warm (best of --reps) and, when this process may write /proc/sys/vm/drop_caches
  (root), cold: the caches are dropped before each cold read (this affects everyone
  on the machine: --no-cold skips it).

JIT warm-up (first calls, compile or cache load) is timed apart and printed.

    python bench/bench_codec.py [--keys 1e7] [--densities 1e8,1e9,1e10] [--reps 3]
        [--block-keys 4096] [--dir scratch/bench-codec] [--no-cold]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from seenstore.kernels import codec as K
from seenstore.store.runs.codec import (BLOCK_KEYS, CompressedRunReader, CompressedRunWriter,
                                        block_ends, block_sums)
from seenstore.store.runs.format import policy_digest

MAX_SHARD_BITS = 8
DROP = "/proc/sys/vm/drop_caches"


def keys_at_density(n: int, density: float, seed: int = 1) -> tuple[np.ndarray, int, int]:
    """``n`` sorted unique keys whose gaps are those of ``density`` uniform keys in
    2^64, in one shard of 2^S (S <= 8, as many shard bits as the range leaves);
    returns the keys, S and the shard."""
    rng = np.random.default_rng(seed)
    span = int(n * 2.0**64 / density)
    shard_bits = max(0, min(MAX_SHARD_BITS, 64 - span.bit_length()))
    shard = (1 << shard_bits) // 3
    keys = np.unique(rng.integers(0, span, int(n * 1.001) + 16, dtype=np.uint64))[:n]
    if shard_bits:
        keys |= np.uint64(shard << (64 - shard_bits))
    return keys, shard_bits, shard


def bound_bits(density: float) -> float:
    return np.log2(2.0**64 / density) + np.log2(np.e)


def other_codecs_bits(keys: np.ndarray, block_keys: int) -> tuple[float, float]:
    """Bits per key of the same blocks as bit-packed deltas (first key, width byte
    padded to a word, gaps at the block's max width) and as Elias-Fano (first key,
    L = floor(log2(span / n)), n L low bits + n + (span >> L) + 1 high bits), each
    padded to whole words, plus the 16-byte index entry and checksum word both would
    need like the Rice blocks."""
    n = len(keys) // block_keys * block_keys  # whole blocks only
    blocks = keys[:n].reshape(-1, block_keys)
    gaps = np.diff(blocks, axis=1) - np.uint64(1)
    width = np.ceil(np.log2(gaps.max(axis=1).astype(np.float64) + 1)).astype(np.int64)
    m = block_keys - 1
    words = lambda bits: -(-bits // 64)  # noqa: E731
    fixed = 64 * (2 + 1) + 128  # first key, meta, checksum, index entry
    packed = (fixed + 64 * words(m * width)).sum() / n
    span = (blocks[:, -1] - blocks[:, 0]).astype(np.float64)
    low = np.maximum(np.floor(np.log2(span / m)), 0).astype(np.int64)
    high = m + (span / 2.0**low).astype(np.int64) + 1
    ef = (fixed + 64 * (words(m * low) + words(high))).sum() / n
    return float(packed), float(ef)


def best(fn, reps: int, clock=time.thread_time) -> float:
    times = []
    for _ in range(reps):
        t = clock()
        fn()
        times.append(clock() - t)
    return min(times)


def encode_in_memory(keys, block_keys, out, first, offsets):
    end = K.encode_blocks(keys, block_keys, out, first, offsets)
    body = out[:end]
    body[block_ends(offsets, end) - 1] = block_sums(body, offsets, end)
    return end


def decode_in_memory(words, out, offsets):
    bad = block_sums(words, offsets, len(words)) != words[block_ends(offsets, len(words)) - 1]
    r = K.decode_blocks(words, len(words), out, np.uint64(0), False)
    assert r[3] == K.OK and not bad.any()
    return r[1]


def drop_caches() -> bool:
    try:
        os.sync()
        with open(DROP, "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def cold_time(fn) -> float | None:
    """Wall time of ``fn`` right after the page cache is dropped (None if it cannot be)."""
    if not drop_caches():
        return None
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def stream_all(path: str, buf: np.ndarray) -> int:
    return sum(CompressedRunReader(path).chunks(buf))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=float, default=1e7)
    ap.add_argument("--densities", default="1e8,1e9,1e10")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--block-keys", type=int, default=BLOCK_KEYS)
    ap.add_argument("--dir", default="scratch/bench-codec")
    ap.add_argument("--no-cold", action="store_true")
    a = ap.parse_args()
    n, bk = int(a.keys), a.block_keys
    os.makedirs(a.dir, exist_ok=True)
    print(f"# bench_codec: {n:.0e} keys per density, blocks of {bk} keys, best of {a.reps}; "
          f"cpu: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} "
          f"(a shared machine: figures are noisy)")

    t = time.perf_counter()
    small = keys_at_density(10_000, 1e9)[0]
    out = np.empty(K.encoded_bound(len(small), bk), np.uint64)
    nb = -(-len(small) // bk)
    first, offsets = np.empty(nb, np.uint64), np.empty(nb, np.int64)
    end = encode_in_memory(small, bk, out, first, offsets)
    decode_in_memory(out[:end], np.empty(len(small), np.uint64), offsets)
    print(f"JIT warm-up (compile or cache load of encode + decode): "
          f"{time.perf_counter() - t:.2f} s, excluded below")

    cold_ok = not a.no_cold and os.access(DROP, os.W_OK)
    rows = []
    for density in (float(d) for d in a.densities.split(",")):
        keys, shard_bits, shard = keys_at_density(n, density)
        nb = -(-n // bk)
        out = np.empty(K.encoded_bound(n, bk), np.uint64)
        first, offsets = np.empty(nb, np.uint64), np.empty(nb, np.int64)
        dec = np.empty(n, np.uint64)
        t_enc = best(lambda: encode_in_memory(keys, bk, out, first, offsets), a.reps)
        end = encode_in_memory(keys, bk, out, first, offsets)
        words = out[:end]
        t_dec = best(lambda: decode_in_memory(words, dec, offsets), a.reps)
        assert np.array_equal(dec, keys)

        raw_path = os.path.join(a.dir, f"raw-{density:.0e}.bin")
        run_path = os.path.join(a.dir, f"run-{density:.0e}.run")
        for p in (raw_path, run_path):
            if os.path.exists(p):
                os.unlink(p)
        keys.tofile(raw_path)
        t = time.perf_counter()
        w = CompressedRunWriter(run_path, 20, shard_bits, shard, policy_digest("bench"), bk)
        for lo in range(0, n, 1 << 20):
            w.write(keys[lo: lo + (1 << 20)])
        w.finish()
        t_write = time.perf_counter() - t
        size = os.path.getsize(run_path)
        buf = np.empty(1 << 20, np.uint64)
        wall = time.perf_counter
        t_raw = best(lambda: np.fromfile(raw_path, dtype=np.uint64), a.reps, wall)
        t_run = best(lambda: stream_all(run_path, buf), a.reps, wall)
        t_run_cpu = best(lambda: stream_all(run_path, buf), a.reps)
        cold = (None, None)
        if cold_ok:
            cold = (cold_time(lambda: np.fromfile(raw_path, dtype=np.uint64)),
                    cold_time(lambda: stream_all(run_path, buf)))
        packed, ef = other_codecs_bits(keys, bk)
        rows.append((density, size, 8 * end, packed, ef, t_enc, t_dec, t_write, t_raw, t_run,
                     t_run_cpu, cold))
        os.unlink(raw_path)
        os.unlink(run_path)

    gb = 8 * n / 1e9
    print("\n## Size (bytes per key)\n")
    print("| density N | bound log2(2^64/N)+1.44 b | run file | blocks only | over bound "
          "| bit-packed deltas | Elias-Fano |")
    print("|---|---|---|---|---|---|---|")
    for density, size, body, packed, ef, *_ in rows:
        b = bound_bits(density) / 8
        print(f"| {density:.0e} | {b:.3f} | {size / n:.3f} | {body / n:.3f} | "
              f"+{8 * (size / n - b):.2f} bits | {packed / 8:.3f} | {ef / 8:.3f} |")
    print("\n## Speed (GB/s of keys = 8 bytes/key; ns/key in brackets)\n")
    print("| density N | encode (CPU) | decode (CPU) | write run file (wall) | "
          "np.fromfile raw warm | stream run warm | its CPU | np.fromfile raw cold "
          "| stream run cold |")
    print("|---|---|---|---|---|---|---|---|---|")

    def fmt(t):
        return "n/a" if t is None else f"{gb / t:.2f} ({t / n * 1e9:.2f})"

    for density, *_, t_enc, t_dec, t_write, t_raw, t_run, t_run_cpu, cold in rows:
        print(f"| {density:.0e} | {fmt(t_enc)} | {fmt(t_dec)} | {fmt(t_write)} | {fmt(t_raw)} "
              f"| {fmt(t_run)} | {fmt(t_run_cpu)} | {fmt(cold[0])} | {fmt(cold[1])} |")
    if not cold_ok:
        print("\ncold reads not measured (--no-cold, or not allowed to drop the page cache)")


if __name__ == "__main__":
    main()
