"""Batch stage: validate offered keys, sort and deduplicate them.

``as_keys`` checks offered keys; ``prepare`` turns them (any order, repeats allowed)
into the sorted unique array a merge needs (keys/sort.py ``sorted_unique``: np.sort or
the radix sort, whichever is faster on this machine). The store's exact
path instead partitions a batch by shard and sorts shard by shard
(``kernels/batch.py: partition_top_bits``); answers go back to the caller's order
with ``kernels/batch.py: mark_first_new``. ``read_batch_file`` loads a raw
little-endian uint64 batch file.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

import numpy as np

from seenstore.errors import InvalidInputError, StoreIOError, StoreNotFoundError
from seenstore.kernels.dispatch import batch as _kernels
from seenstore.keys.sort import sorted_unique

unique_inplace = _kernels.unique_inplace  # numpy twin below dispatch.SMALL keys


def as_keys(keys) -> np.ndarray:
    """Offered keys as a 1-D uint64 array (no copy when already one).

    Accepts a uint64 (or other unsigned) array, or any iterable of ints in
    [0, 2**64) (Python or numpy integers). Signed, float or bool arrays, and
    floats, bools, strings or other items in a list, are refused (InvalidInputError
    naming the first bad item) rather than truncated or reinterpreted."""
    if isinstance(keys, np.ndarray):
        if keys.dtype != np.uint64:
            if keys.dtype.kind == "u":
                keys = keys.astype(np.uint64)
            else:
                raise InvalidInputError(
                    f"keys must be an unsigned integer array (uint64), got {keys.dtype}")
        if keys.ndim != 1:
            raise InvalidInputError(f"keys must be 1-D, got shape {keys.shape}")
        return keys
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        raise InvalidInputError(
            f"keys must be a uint64 array or an iterable of ints, not {type(keys).__name__}")
    if not isinstance(keys, (list, tuple)):
        keys = list(keys)
    kinds = set(map(type, keys))
    if not kinds <= {int}:
        for i, k in enumerate(keys):  # np.uint64 would truncate 1.5 and take True as 1
            if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
                raise InvalidInputError(
                    f"keys must be integers in [0, 2**64): item {i} is "
                    f"{type(k).__name__} {k!r:.60}")
    try:
        return np.array(keys, dtype=np.uint64).reshape(-1)
    except (OverflowError, TypeError, ValueError):
        bad = next((i for i, k in enumerate(keys) if not 0 <= int(k) < 2**64), None)
        raise InvalidInputError(
            f"keys must be integers in [0, 2**64): item {bad} is {keys[bad]!r}") from None


def prepare(keys: np.ndarray, threads: int = 1) -> np.ndarray:
    """Sorted unique copy of ``keys``. Requires: uint64 (see ``as_keys``).

    A view of the front of one sorted copy (deduplicated in place: no second
    batch-sized array to keep; the radix sort's scratch is freed on return)."""
    return sorted_unique(keys, threads)


def unique_first(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_index=True)``: the sorted unique keys and the index of
    each one's first occurrence in ``keys``. numpy 2.4 answers that with a stable
    sort of uint64 (~110 ns/key at 1e6 keys); one argsort and the least index of each
    run of equal keys (``np.minimum.reduceat``) give the same in ~40-45 ns/key."""
    if len(keys) == 0:
        return keys[:0].copy(), np.empty(0, np.intp)
    order = np.argsort(keys)
    s = keys[order]
    head = np.empty(len(s), dtype=np.bool_)
    head[0] = True
    np.not_equal(s[1:], s[:-1], out=head[1:])
    starts = np.flatnonzero(head)
    return s[starts], np.minimum.reduceat(order, starts)


# From this many offered keys on, ``first_new_mask`` joins on two threads; below, the
# new keys rarely need more than one cache-sized table, which cannot be split; above,
# two threads take ~40 % less wall time than one (random keys, 10 % repeats, half new).
PARALLEL_JOIN_KEYS = 1 << 20


def first_new_mask(keys: np.ndarray, new_keys: np.ndarray, threads: int = 1,
                   part_bits: int = -1) -> np.ndarray:
    """``mark_first_new(keys, new_keys)`` (the mask ``SeenStore.add`` returns: True at
    the first occurrence of each key of the unique ``new_keys``), on ``threads``
    threads from PARALLEL_JOIN_KEYS keys: the two partitions (of the keys and of the
    new keys) side by side, then the parts' hash joins split in two by input keys (a
    key lives in one part, with its first occurrence: the halves share nothing).
    Same mask as one thread (tested)."""
    n, m = len(keys), len(new_keys)
    if threads < 2 or n < PARALLEL_JOIN_KEYS or m == 0:
        return _kernels.mark_first_new(keys, new_keys, part_bits)
    from seenstore.kernels import batch as kb
    from seenstore.runtime.parallel import run_all

    bits = int(kb.join_part_bits(m, part_bits))
    if bits == 0:  # one part (its table fits the caches): nothing to split
        return kb.mark_first_new(keys, new_keys, 0)
    (ik, ipos, istart), (nk, _, nstart) = run_all(
        [lambda: kb.join_partition(keys, bits), lambda: kb.join_partition(new_keys, bits)])
    out = np.zeros(n, dtype=np.bool_)
    parts = 1 << bits
    mid = min(max(int(np.searchsorted(istart, n // 2)), 1), parts)
    run_all([lambda: kb.join_parts(ik, ipos, istart, nk, nstart, 0, mid, True, out),
             lambda: kb.join_parts(ik, ipos, istart, nk, nstart, mid, parts, True, out)])
    return out


def first_new_mask_of_distinct(n: int, distinct: np.ndarray, pos: np.ndarray,
                               new_keys: np.ndarray) -> np.ndarray:
    """``first_new_mask(keys, new_keys)`` of ``n`` keys given their distinct keys in
    order of first occurrence and the index of each (``kernels/batch.py:
    first_unique``): the join runs over the distinct keys alone (a crawl batch's
    5-9 %), and their first occurrences are marked by index. The kernel itself, as
    ``first_new_mask``'s two threads call theirs, whatever the count of distinct
    keys: their batch took the kernels already (a count below dispatch.SMALL would
    take the twin, np.isin, ~100 ns/key, while the kernel is not in memory)."""
    from seenstore.kernels import batch as kb

    out = np.zeros(n, dtype=np.bool_)
    if len(new_keys):
        out[pos[kb.mark_members(distinct, new_keys, -1)]] = True
    return out


def read_batch_file(path: str, memory_limit: int | None = None) -> np.ndarray:
    """Read a batch file of raw little-endian uint64 keys (any order, repeats allowed).

    An empty file is an empty batch. A FIFO, character device or /proc file (no
    size known up front) is read to its end. Raises StoreNotFoundError if missing,
    InvalidInputError if it is a directory or its length is not a multiple of 8,
    StoreIOError if the batch cannot fit in memory (``memory_limit`` bytes, default
    the memory available now; a merge needs about 3x the file)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise StoreNotFoundError(f"{path}: no such batch file") from None
    if stat.S_ISDIR(st.st_mode):
        raise InvalidInputError(f"{path}: is a directory, expected a batch file")
    limit = available_memory() if memory_limit is None else memory_limit
    if stat.S_ISREG(st.st_mode) and st.st_size and not _is_proc(path):
        _check_fits(path, st.st_size, limit)
        _check_whole_keys(path, st.st_size)
        return np.fromfile(path, dtype="<u8").astype(np.uint64, copy=False)
    data = _read_stream(path, limit)
    _check_whole_keys(path, len(data))
    return np.frombuffer(data, dtype="<u8").astype(np.uint64, copy=False)


_MERGE_MEMORY_FACTOR = 3  # the batch, its sorted copy, the answer (README: ~3x the file)


def available_memory() -> int | None:
    """Bytes of memory available now (Linux MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _check_fits(path: str, nbytes: int, limit: int | None) -> None:
    if limit is not None and nbytes * _MERGE_MEMORY_FACTOR > limit:
        raise StoreIOError(
            f"{path}: a batch of {nbytes:,} bytes needs about {_MERGE_MEMORY_FACTOR}x that in "
            f"memory and {limit:,} bytes are available: split it into smaller batch files; "
            "nothing was committed")


def _check_whole_keys(path: str, size: int) -> None:
    if size % 8:
        raise InvalidInputError(
            f"{path}: length {size} is not a multiple of 8: not a batch of uint64 keys")


def _is_proc(path: str) -> bool:
    real = os.path.realpath(path)
    return real.startswith(("/proc/", "/sys/"))


def _read_stream(path: str, limit: int | None) -> bytearray:
    """Read a file with no trustworthy size (FIFO, device, /proc) to its end, in
    blocks, refusing it once it outgrows ``limit`` / 3."""
    data = bytearray()
    with open(path, "rb", buffering=0) as f:
        while True:
            block = f.read(1 << 22)
            if not block:
                return data
            data += block
            _check_fits(path, len(data), limit)
