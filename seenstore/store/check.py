"""The read path: which keys a store holds (``SeenStore.contains``), and which keys
of a spilled batch's slice a shard's runs hold (``check_slice``, spill.py).

Keys of a stage's write-ahead log first, then the runs of one snapshot of the live
generation: each shard's keys looked up run by run (the run cache where it holds
the run, else the run's sparse index or memory map), Bloom negatives skipped. Reads
only; never changes the store.
"""

from __future__ import annotations

import os

import numpy as np

from seenstore.errors import CorruptionError
from seenstore.kernels.dispatch import batch as _kernels  # numpy twins below dispatch.SMALL keys
from seenstore.kernels.dispatch import merge as _merge_kernels
from seenstore.keys.batch import prepare
from seenstore.store import report, tombstones
from seenstore.store.runs import live as runsmod
from seenstore.store.runs.format import HEADER_SIZE

mark_members = _kernels.mark_members


def shard_range(shard: int, shard_bits: int) -> tuple[int, int]:
    """The keys of shard ``shard`` (those whose top ``shard_bits`` bits are it):
    ``(lo, hi)``, hi inclusive."""
    lo = shard << (64 - shard_bits) if shard_bits else 0
    return lo, lo + (1 << (64 - shard_bits)) - 1


def shard_bounds(sorted_keys: np.ndarray, shard_bits: int) -> np.ndarray:
    """Start index in ``sorted_keys`` of every shard of ``shard_bits`` bits, plus the end."""
    if shard_bits == 0:
        return np.array([0, len(sorted_keys)], dtype=np.int64)
    starts = np.arange(1 << shard_bits, dtype=np.uint64) << np.uint64(64 - shard_bits)
    return np.append(np.searchsorted(sorted_keys, starts), len(sorted_keys))


def contains(store, keys: np.ndarray) -> np.ndarray:
    """Mask over ``keys`` (uint64): True where ``store`` holds the key (see
    ``SeenStore.contains``): in its runs and not forgotten (tombstones.py), or in a
    stage's write-ahead log."""
    # WAL keys first, then the runs: a segment is deleted only after its merge
    # committed, so a key is in one or the other (wal.PendingKeys)
    pending = store._pending.keys()
    _, runs, forgotten = tombstones.snapshot(store)
    uniq = prepare(keys, store.threads)
    bf = store.bloom  # once: a failed insert on the writer's thread may drop it
    if bf is not None:
        uniq = uniq[bf.query(uniq)]  # Bloom negatives are certainly absent
    found = in_runs(store, runs, uniq)
    stored = uniq[found]
    if len(forgotten):  # forgotten keys are in their runs, but absent
        stored = np.delete(stored, tombstones.in_sorted(forgotten, stored))
    mask = mark_members(keys, stored)  # every occurrence, not just the first
    if len(pending):
        mask |= report.member(pending, keys)
    return mask


def in_runs(store, runs: dict, uniq: np.ndarray) -> np.ndarray:
    """Mask over sorted unique ``uniq``: True where one of ``runs`` (one snapshot's
    live runs by shard) holds the key (forgotten keys too)."""
    found = np.zeros(len(uniq), dtype=np.bool_)
    bounds = shard_bounds(uniq, store.shard_bits)
    cache = store._live.cache
    for shard, shard_runs in runs.items():
        lo, hi = bounds[shard], bounds[shard + 1]
        for reader in shard_runs:
            todo = lo + np.flatnonzero(~found[lo:hi])
            if len(todo) == 0:
                break
            sub = np.zeros(len(todo), dtype=np.bool_)
            entry = cache.acquire(reader) if cache.budget else None
            if entry is None:
                runsmod.lookup(reader, uniq[todo], sub)  # sparse index, or the memory map
            else:  # a writer's run cache holds it: no page of the run is read
                try:
                    runsmod.lookup_cached(entry, uniq[todo], sub)
                finally:
                    cache.release(entry)
            found[todo[sub]] = True
    return found


HALVES_MIN_KEYS = 1 << 16  # a smaller slice is checked on one thread (check_slice)


def check_window(readers: list, batch: np.ndarray, found: np.ndarray, buf: np.ndarray) -> int:
    """Mark in ``found`` the keys of sorted unique ``batch`` (one key range of a shard)
    held by any of ``readers``, reading of each run only the part that can hold the
    range (positional reads into ``buf``, not the memory map: the pages read do not
    stay in this process). Returns bytes read."""
    read = 0
    lo, hi = int(batch[0]), int(batch[-1])
    for reader in readers:
        if reader.count == 0:
            continue
        if runsmod.compressed(reader):  # the blocks that can hold [lo, hi], swept
            read += reader.sweep(batch, found, lo, hi)
            continue
        if reader.paged:  # the pages that can hold [lo, hi], each checked
            read += _window_pages(reader, batch, found, buf)
            continue
        reader.check_whole()  # a 1.0 run (no page index): checked whole, once
        with open(reader.path, "rb", buffering=0) as f:
            a = _bisect(f.fileno(), reader.count, lo, lambda k, x: k < x)
            b = _bisect(f.fileno(), reader.count, hi, lambda k, x: k <= x)
            read += _sweep_span(reader.name, f, a, b, len(buf), batch, found, buf)
    return read


def _sweep_span(name: str, f, a: int, b: int, step: int, batch: np.ndarray,
                found: np.ndarray, buf: np.ndarray, check=None) -> int:
    """Sweep keys ``[a, b)`` of the raw run open as ``f`` through ``buf``, ``step`` keys
    per positional read, marking in ``found`` the keys of ``batch`` they hold;
    ``check(buf, off, n)`` first, where given (a 1.1 run's pages). Returns bytes
    read; raises CorruptionError on a short body or keys out of order."""
    j, prev, have, read = 0, np.uint64(0), False, 0
    raw = memoryview(buf).cast("B")
    for off in range(a, b, step):
        n = min(step, b - off)
        if os.preadv(f.fileno(), [raw[: 8 * n]], HEADER_SIZE + 8 * off) != 8 * n:
            raise CorruptionError(f"{name}: body ends early")
        if check is not None:
            check(buf, off, n)
        j, prev, have, ok = _merge_kernels.sweep_step(buf, n, batch, j, found, prev, have)
        prev = np.uint64(prev)
        if not ok:
            raise CorruptionError(f"{name}: keys are not sorted and unique")
        read += 8 * n
    return read


def _window_pages(reader, batch: np.ndarray, found: np.ndarray, buf: np.ndarray) -> int:
    """``check_window`` of one 1.1 raw run: the pages that can hold keys in
    [batch[0], batch[-1]] (its page index says which), read whole by positional reads
    into ``buf``, each checked against the index before its keys are compared.
    Returns bytes read; raises CorruptionError naming the first bad page."""
    idx = reader.pages
    pk = reader.header.page_keys
    p0 = max(0, int(np.searchsorted(idx.first, batch[0], "right")) - 1)
    p1 = int(np.searchsorted(idx.first, batch[-1], "right"))
    a, b = p0 * pk, min(p1 * pk, reader.count)
    if len(buf) < pk:
        buf = np.empty(pk, np.uint64)
    step = len(buf) // pk * pk
    with open(reader.path, "rb", buffering=0) as f:
        return _sweep_span(reader.name, f, a, b, step, batch, found, buf, idx.check_span)


def check_slice(readers: list, keys: np.ndarray, found: np.ndarray, buf: np.ndarray,
                whole: bool, halves) -> int:
    """Mark in ``found`` the keys of sorted unique ``keys`` (a slice of a shard's
    bucket) that ``readers`` (the shard's live runs) hold; returns bytes read.

    ``halves``: an executor of one thread, or None. With it, and every run
    compressed, the slice is checked in two key halves at once, one on the
    executor's thread: each reads and decodes only the blocks that can hold its half
    (each block checked by its checksum, as a window of a split bucket is), so two
    cores decode instead of one. Otherwise a whole shard is swept run by run
    (``runsmod.check_runs``: the run's count and body checksum checked too) and a
    window of a split bucket by ``check_window``."""
    if (halves is not None and len(keys) >= HALVES_MIN_KEYS and readers
            and all(runsmod.compressed(r) for r in readers)):
        mid = len(keys) // 2
        upper = halves.submit(check_window, readers, keys[mid:], found[mid:], buf)
        try:
            lower = check_window(readers, keys[:mid], found[:mid], buf)
        finally:
            read = upper.result()
        return lower + read
    if whole:
        return runsmod.check_runs(readers, keys, found, buf)
    return check_window(readers, keys, found, buf)


def _bisect(fd: int, count: int, x: int, before) -> int:
    """First position in a run file's body whose key ``k`` is not ``before(k, x)``,
    by positional reads of single keys (not the memory map: each page it faults
    in would count in this process's resident memory, about 1 MiB per search)."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        k = int.from_bytes(os.pread(fd, 8, HEADER_SIZE + 8 * mid), "little")
        if before(k, x):
            lo = mid + 1
        else:
            hi = mid
    return lo
