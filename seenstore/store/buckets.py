"""The spill's bucket files: a batch bigger than memory, its keys appended by shard to
one file each, then read back one sorted key range (a slice) at a time.

Owns the memory plan of a spilled batch (``Budget``), the batch's input in chunks
(a file or generated arrays), the appends, and the slicing: a bucket larger than a
slice is split again into key ranges cut at the quantiles of a sample of its keys,
recursively, so each slice fits the budget whatever the key distribution. Knows
nothing of runs or commits (spill.py drives it).
"""

from __future__ import annotations

import os

import numpy as np

from seenstore.errors import CorruptionError, InvalidInputError, StoreNotFoundError
from seenstore.kernels.dispatch import batch as _kernels
from seenstore.keys import sort as sorting
from seenstore.runtime.pool import shared_pool
from seenstore.runtime.readahead import will_need_file

MIN_MEMORY = 16 << 20  # below this the fixed buffers alone would not fit
MAX_PARTS = 256  # a too-large bucket splits into at most this many key ranges per level
RANGE_PARTS = 8  # key ranges a busy shard's bucket is cut into while spilled (Buckets)
# (more ranges, or a cut at a quarter slice, which cut every shard of a 1e9-key batch
# at 0.2G, put more small appends on the spill than the split they save costs)


class Budget:
    """How a memory budget (bytes) is spent: read chunk keys, slice keys, I/O keys."""

    def __init__(self, memory: int):
        if memory < MIN_MEMORY:
            raise InvalidInputError(
                f"memory budget {memory} bytes is below the minimum {MIN_MEMORY >> 20} MiB")
        self.memory = memory
        # I/O buffers, in whole O_DIRECT blocks (512 keys): the run writers of a batch
        # share the spill's write buffer only if it is one (RunWriter takes a buffer
        # that is not, direct_ready, for no one and makes its own 8 MiB: with a budget
        # of no round size, every shard's writer held one until the commit)
        self.io_keys = max(1 << 14, min(1 << 20, memory // 64 // 8)) // 512 * 512
        self.chunk_keys = memory // 5 // 8  # the read chunk; its partition copy as much
        # a slice: its keys (8 B) and found mask (1 B) per key, a bit over a quarter
        # of the budget, like the spill phase's two arrays: half of it is slack for
        # the interpreter's own allocations and the I/O buffers
        self.slice_keys = max(1, memory // 32)
        # a shard's bucket past a slice (which the check would split) is cut into key
        # ranges as it is spilled (Buckets)
        self.range_keys = self.slice_keys


def read_chunks(path: str, chunk_keys: int):
    """Yield uint64 arrays of at most ``chunk_keys`` keys read from ``path`` (a
    regular file or a stream); raises InvalidInputError on a trailing partial key."""
    try:
        f = open(path, "rb", buffering=0)
    except FileNotFoundError:
        raise StoreNotFoundError(f"{path}: no such batch file") from None
    except IsADirectoryError:
        raise InvalidInputError(f"{path}: is a directory, expected a batch file") from None
    buf = np.empty(chunk_keys, dtype=np.uint64)
    raw = memoryview(buf).cast("B")
    with f:
        while True:
            got = 0
            while got < len(raw):
                r = f.readinto(raw[got:])
                if not r:
                    break
                got += r
            if got % 8:
                raise InvalidInputError(
                    f"{path}: length is not a multiple of 8 bytes (not a batch of uint64 keys)")
            if got:
                yield buf[: got // 8]
            if got < len(raw):
                return


def source_chunks(source, chunk_keys: int):
    """The keys of ``source`` as uint64 arrays of at most ``chunk_keys`` keys that the
    caller may overwrite: a batch file's path (``read_chunks``), or an iterable of
    uint64 arrays of any sizes (a generated batch streamed in; each array is taken in
    ``chunk_keys`` pieces, copied into one reused buffer)."""
    if isinstance(source, (str, bytes, os.PathLike)):
        yield from read_chunks(source, chunk_keys)
        return
    buf = np.empty(chunk_keys, dtype=np.uint64)
    for arr in source:
        arr = np.asarray(arr)
        if arr.dtype != np.uint64 or arr.ndim != 1:
            raise InvalidInputError(
                f"a streamed batch takes 1-d uint64 arrays, got {arr.dtype} with shape {arr.shape}")
        for lo in range(0, len(arr), chunk_keys):
            n = min(chunk_keys, len(arr) - lo)
            buf[:n] = arr[lo:lo + n]
            yield buf[:n]


def append(path: str, keys: np.ndarray) -> None:
    with open(path, "ab", buffering=0) as f:
        f.write(memoryview(np.ascontiguousarray(keys)).cast("B"))


def bucket_path(work: str, s: int) -> str:
    return os.path.join(work, f"s{s:04d}.bin")


class Buckets:
    """The spill phase's bucket files in ``work``: one per shard (``s<shard>.bin``)
    until a shard's bucket would pass ``range_keys`` keys; from then on that shard's
    keys go to RANGE_PARTS key-range buckets (``s<shard>.bin.d/r<i>.bin``, cut at the
    quantiles of its keys in the chunk that crossed the line, ``splitters``; what
    its one bucket held is moved into them then, at most ``range_keys`` keys). So a
    busy shard's bucket is cut as it is spilled, instead of being written whole and
    then read and written once more to be cut when it is checked (``slices``' split:
    at 1e10 keys in batches of 2.5e9, 8.6 of the 42 ns per key). A range that still
    outgrows a slice is split when checked, as before; the cut is by the keys seen,
    so a shifting stream only makes ranges uneven. ``append`` runs on one thread."""

    def __init__(self, work: str, budget: Budget, lo_of, fault) -> None:
        self.work, self.budget, self.lo_of, self.fault = work, budget, lo_of, fault
        self.sizes: dict = {}  # shard -> keys in its one bucket
        self.ranges: dict = {}  # shard -> cuts of its range buckets
        piece = max(1, budget.chunk_keys // 8)  # partition buffers: a piece at a time
        self._ids = np.empty(piece, dtype=np.int32)
        self._part = np.empty(piece, dtype=np.uint64)

    def append(self, part: np.ndarray, bounds: np.ndarray, shards) -> None:
        """Append each of ``shards``' keys of the partitioned chunk ``part`` (shard s:
        ``part[bounds[s]:bounds[s + 1]]``) to its bucket(s)."""
        for s in shards.tolist():
            seg = part[bounds[s]:bounds[s + 1]]
            if s not in self.ranges:
                n = self.sizes.get(s, 0)
                if n + len(seg) <= self.budget.range_keys:
                    append(bucket_path(self.work, s), seg)
                    self.sizes[s] = n + len(seg)
                    continue
                self._cut(s, seg, n)
            self._append_ranges(s, seg)

    def _cut(self, s: int, seg: np.ndarray, n: int) -> None:
        lo, hi = self.lo_of(s)
        step = max(1, len(seg) // (1 << 16))
        cuts = splitters(np.sort(seg[::step]), RANGE_PARTS, lo, hi)
        self.ranges[s] = cuts
        path = bucket_path(self.work, s)
        os.makedirs(path + ".d", exist_ok=True)
        if n:  # what the one bucket held moves into the ranges
            split(path, path + ".d", cuts, self.budget, self.fault)
        self.sizes.pop(s, None)

    def _append_ranges(self, s: int, seg: np.ndarray) -> None:
        step = len(self._part)
        scatter((seg[a:a + step] for a in range(0, len(seg), step)),
                bucket_path(self.work, s) + ".d", self.ranges[s], self._ids, self._part)

    def of(self, s: int) -> list:
        """Shard ``s``'s buckets as ``(path, lo, hi)`` (hi inclusive), lowest keys
        first; a range bucket that got no key is left out."""
        lo, hi = self.lo_of(s)
        if s not in self.ranges:
            return [(bucket_path(self.work, s), lo, hi)]
        cuts = [int(c) for c in self.ranges[s]]
        bounds = [lo] + cuts + [hi + 1]
        d = bucket_path(self.work, s) + ".d"
        out = []
        for i in range(len(cuts) + 1):
            path = range_path(d, i)
            if os.path.exists(path):
                out.append((path, bounds[i], bounds[i + 1] - 1))
        return out


def sample(path: str, n: int, pieces: int = 64, piece: int = 1024) -> np.ndarray:
    """About ``pieces * piece`` keys of the ``n``-key bucket ``path``, read in
    ``pieces`` runs spread evenly over it (positional reads), sorted."""
    take = min(piece, n)
    at = np.unique(np.linspace(0, n - take, min(pieces, max(1, n // take))).astype(np.int64))
    out = np.empty(len(at) * take, dtype=np.uint64)
    raw = memoryview(out).cast("B")
    with open(path, "rb", buffering=0) as f:
        for i, a in enumerate(at.tolist()):
            if os.preadv(f.fileno(), [raw[8 * i * take: 8 * (i + 1) * take]], 8 * a) != 8 * take:
                raise CorruptionError(f"{path}: spill bucket ends early")
    out.sort()
    return out


def splitters(sample: np.ndarray, parts: int, lo: int, hi: int) -> np.ndarray:
    """Ascending keys cutting the key range [lo, hi] of a bucket whose sorted
    ``sample`` is given into about ``parts`` ranges of equal share (range i: keys k
    with splitters[i - 1] <= k < splitters[i]). A key that fills a range's share of
    the sample alone (a hot key) gets a range of its own, [k, k + 1): the one key a
    range of width one can hold, so even a bucket of one key repeated terminates."""
    m = len(sample)
    cuts = sample[(np.arange(1, parts) * m) // parts]
    vals, counts = np.unique(sample, return_counts=True)
    hot = vals[counts >= max(2, m // (2 * parts))]
    cuts = np.concatenate([cuts, hot, hot[hot < np.uint64(2**64 - 1)] + np.uint64(1)])
    cuts = np.unique(cuts)
    return cuts[(cuts > np.uint64(lo)) & (cuts <= np.uint64(hi))]


def split(src: str, dest_dir: str, cuts: np.ndarray, budget: Budget, fault,
          remove=os.unlink) -> list:
    """Split the keys of ``src`` into the key ranges ``cuts`` makes (``splitters``),
    ``dest_dir/r<i>.bin``; returns ``(path, range lo, range hi)`` of each non-empty
    range, lowest keys first (hi inclusive). Reads and partitions pieces of a
    quarter slice (the piece, its ids, order and partitioned copy: less memory
    than a slice's sort and its buffer). ``remove(src)`` once it is read."""
    os.makedirs(dest_dir, exist_ok=True)
    piece = max(1, min(budget.chunk_keys, budget.slice_keys // 4))
    seen = np.zeros(len(cuts) + 1, dtype=bool)
    ids = np.empty(piece, dtype=np.int32)
    part = np.empty(piece, dtype=np.uint64)
    scatter(read_chunks(src, piece), dest_dir, cuts, ids, part, seen, fault)
    remove(src)
    bounds = [0] + [int(c) for c in cuts] + [2**64]
    return [(range_path(dest_dir, i), bounds[i], bounds[i + 1] - 1)
            for i in np.flatnonzero(seen).tolist()]


def range_path(dest_dir: str, i: int) -> str:
    """The bucket of key range ``i`` of a bucket cut into ranges (``split``, Buckets)."""
    return os.path.join(dest_dir, f"r{i:04d}.bin")


def scatter(pieces, dest_dir: str, cuts: np.ndarray, ids: np.ndarray, part: np.ndarray,
            seen: np.ndarray | None = None, fault=None) -> None:
    """Append each key of ``pieces`` (uint64 arrays, each no longer than ``ids`` and
    ``part``, the partition buffers) to the bucket of its key range of ``cuts``
    (``range_path``); ``seen[i]`` set for every range that got a key; ``fault``
    ("spill-write") called after each piece."""
    starts = np.empty(len(cuts) + 2, dtype=np.int64)
    for chunk in pieces:
        _kernels.partition_by_cuts(chunk, cuts, ids, part, starts)
        for i in np.flatnonzero(np.diff(starts)).tolist():
            append(range_path(dest_dir, i), part[starts[i]:starts[i + 1]])
            if seen is not None:
                seen[i] = True
        if fault is not None:
            fault("spill-write")


class Remover:
    """Removes the buckets a check has read, on a thread of its own (``remover(path)``),
    so the reading thread does not wait while the kernel drops a file's cached pages,
    and waits for those still being written back: an unlink on the reading thread
    took 3.5 ns per key of wall time at 2e9 keys in batches of 1e9, more than the
    read itself (docs/architecture.md, "Batches bigger than memory"). ``wait()``
    returns once every removal asked is done and raises the first one's error (a
    bucket already gone is no error); call it before anything may make a bucket of
    the same name (the next batch's spill)."""

    def __init__(self) -> None:
        self._pool = shared_pool(1, "seenstore-bucket-remove")
        self._pending: list = []

    def __call__(self, path: str) -> None:
        self._pending.append(self._pool.submit(_remove, path))

    def wait(self) -> None:
        pending, self._pending = self._pending, []
        first = None
        for f in pending:  # every one waited for, even after an error
            try:
                f.result()
            except OSError as e:
                first = first or e
        if first is not None:
            raise first


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def slices(path: str, lo: int, hi: int, budget: Budget, slab: np.ndarray, fault,
           threads: int, clock, remove=os.unlink):
    """Yield the sorted unique keys of bucket ``path`` (every key in [lo, hi]) one
    key range at a time, lowest first, each a view of ``slab`` (``budget.slice_keys``
    keys, reused: no allocation per slice, so the heap does not grow by fragments);
    a bucket too large is split into key ranges of about half a slice each, cut at
    the quantiles of a sample of its keys (``splitters``), recursively. A split by
    key bits would not do: a busy host's keys share their top 20 bits (host-skewed
    streams), so bit splits below the shard bits would copy its bucket level by
    level without dividing it. ``clock``: the batch's stage clock (read, sort, split
    are booked on it). ``remove(path)`` once a bucket is read (``Remover``: on a
    thread)."""
    n = os.path.getsize(path) // 8
    if n <= len(slab) or lo == hi:  # a range of one key value: that key, repeated
        n = min(n, len(slab))
        t = clock.start()
        with open(path, "rb", buffering=0) as f:
            got = f.readinto(memoryview(slab[:n]).cast("B"))
        if got != 8 * n:
            raise CorruptionError(f"{path}: spill bucket ends early")
        remove(path)
        clock.stop("read", t)
        keys = slab[:n]
        t = clock.start()
        # the store's sort (radix where it is faster: its buffer is one more slice,
        # within the budget's slack, allocated per slice and freed)
        m = sorting.sort_unique_keys(keys, threads)
        clock.stop("sort", t)
        yield keys[:m]
        return
    t = clock.start()
    parts = min(MAX_PARTS, max(2, -(-2 * n // len(slab))))
    subs = split(path, path + ".d", splitters(sample(path, n), parts, lo, hi), budget, fault,
                 remove)
    clock.stop("split", t)
    for sub, a, b in subs:
        yield from slices(sub, max(a, lo), min(b, hi), budget, slab, fault, threads, clock,
                          remove)


def read_ahead(paths: list) -> None:
    """Let the OS start reading the buckets ``paths`` (the next shard's, read whole
    once this shard is checked) into the page cache: ``readahead.will_need_file``,
    whose stepped calls read all of a bucket, not just its first 2 MiB."""
    for path in paths:
        will_need_file(path)
