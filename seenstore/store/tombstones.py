"""Forgetting: the tombstone set T of a store (docs/format.md, "Tombstone file";
docs/frontier.md, "Forgetting").

T holds stored keys that were forgotten (``SeenStore.forget``, ``drop_host``): sorted,
unique uint64, each in exactly one live run. Invariant: T is a subset of the keys in
the runs, and ``len(store)`` = sum of run counts - |T|. A key in T is absent to every
reader (``contains``, ``iter_keys``, ``bounds``, ``stats``) and new to every writer:
a batch offering it answers it new and takes it out of T in the batch's commit; it
is not written again (it is still in its run: no key in two runs). A compaction
(exact mode) drops the keys of T it meets from the run it writes and takes them out
of T in the same commit. When T is empty nothing of this runs.

T is persisted in one checksummed file (``t-gGGGGGGGGGG-XXXXXXXX.tomb``, a new name
for every change) named by the manifest's ``tombstones`` field (file, count,
checksum); the commit that names a new one makes it T. ``Tombstones`` keeps the set
of the file the current manifest names in memory.
"""

from __future__ import annotations

import os
import secrets
import struct
from collections.abc import Iterator

import numpy as np
import xxhash

from seenstore.errors import CorruptionError, NotSupportedError, StoreIOError
from seenstore.store.files import fault, write_replacing

MAGIC = b"SEENTOMB"
MAJOR, MINOR = 1, 0
# magic, major, minor, (reserved u32), count, body checksum (xxh3-64 of the keys'
# bytes), (reserved 24 bytes), header checksum (xxh3-64 of the 56 bytes before it)
HEADER = struct.Struct("<8sHHIQQ24xQ")
assert HEADER.size == 64
FIELD = "tombstones"  # the manifest field naming the file
EMPTY = np.empty(0, dtype=np.uint64)


def file_name(generation: int) -> str:
    """A new tombstone file's name for the commit of ``generation`` (a random tail:
    two commits of one generation, or a failed one before, never share a name)."""
    return f"t-g{generation:010d}-{secrets.token_hex(4)}.tomb"


def write_file(path: str, keys: np.ndarray, sync: bool = True) -> dict:
    """Write sorted unique uint64 ``keys`` to ``path`` (through ``path``.tmp, renamed;
    fsynced with ``sync``); return the manifest entry ``{file, count, checksum}``."""
    body = np.ascontiguousarray(keys, dtype="<u8").tobytes()
    bsum = xxhash.xxh3_64_intdigest(body)
    head = HEADER.pack(MAGIC, MAJOR, MINOR, 0, len(keys), bsum, 0)
    head = head[:56] + struct.pack("<Q", xxhash.xxh3_64_intdigest(head[:56]))
    write_replacing(path, (head, body), sync)
    return {"file": os.path.basename(path), "count": int(len(keys)), "checksum": f"{bsum:016x}"}


def read_file(path: str, entry: dict | None = None) -> np.ndarray:
    """The keys of the tombstone file at ``path``, checked (magic, version, both
    checksums, sorted and unique) and, with ``entry``, matched to its manifest entry.
    Raises CorruptionError / NotSupportedError naming the file; FileNotFoundError
    when it is gone (a reader behind a writer that replaced it)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise StoreIOError(f"{path}: cannot read tombstone file: {e.strerror}") from e
    if len(raw) < HEADER.size or raw[:8] != MAGIC:
        raise CorruptionError(f"{path}: not a tombstone file (bad magic or too short)")
    magic, major, minor, _, count, bsum, hsum = HEADER.unpack(raw[:HEADER.size])
    if major != MAJOR:
        raise NotSupportedError(f"{path}: tombstone format {major}.{minor} is not one this "
                                f"seenstore reads ({MAJOR}.x)")
    if xxhash.xxh3_64_intdigest(raw[:56]) != hsum:
        raise CorruptionError(f"{path}: tombstone header checksum mismatch")
    body = raw[HEADER.size:]
    if len(body) != 8 * count or xxhash.xxh3_64_intdigest(body) != bsum:
        raise CorruptionError(f"{path}: tombstone keys damaged or truncated")
    if entry is not None and (entry["count"] != count or entry["checksum"] != f"{bsum:016x}"):
        raise CorruptionError(f"{path}: tombstone file does not match the manifest")
    keys = np.frombuffer(body, dtype="<u8").astype(np.uint64)
    if count > 1 and not bool(np.all(keys[1:] > keys[:-1])):
        raise CorruptionError(f"{path}: tombstone keys are not sorted and unique")
    return keys


def count(doc: dict) -> int:
    """|T| of manifest ``doc`` (no file read)."""
    return (doc.get(FIELD) or {}).get("count", 0)


# member(): a batch of at least PREFILTER_MIN_KEYS keys is first looked up in a
# byte map of T's hashes (16 bytes per key of T, at most PREFILTER_MAX_T keys: 32 MiB)
# and only its hits are searched in T. A binary search per key costs ~100-500 ns on
# 1e6 keys against |T| = 1e5 (a cache miss per step); the map ~25-50, with ~5 % of
# the keys left to search.
PREFILTER_MIN_KEYS = 1 << 12
PREFILTER_MAX_T = 1 << 21
_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd: multiplying by it spreads keys' bits up


def member(t: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Mask over ``keys`` (any order): True where the key is in sorted unique ``t``."""
    if len(t) == 0 or len(keys) == 0:
        return np.zeros(len(keys), dtype=np.bool_)
    if len(keys) < PREFILTER_MIN_KEYS or len(t) > PREFILTER_MAX_T:
        return _search(t, keys)
    bits = max(10, (16 * len(t) - 1).bit_length())
    shift = np.uint64(64 - bits)
    marks = np.zeros(1 << bits, dtype=np.bool_)
    marks[(t * _MIX) >> shift] = True
    idx = np.flatnonzero(marks[(keys * _MIX) >> shift])
    out = np.zeros(len(keys), dtype=np.bool_)
    out[idx] = _search(t, keys[idx])
    return out


def in_sorted(t: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Positions in sorted ``keys`` of the keys in sorted unique ``t``: only the keys of
    ``t`` within ``[keys[0], keys[-1]]`` are searched in ``keys`` (O(|t part| log n),
    nothing per key of ``keys``)."""
    if len(t) == 0 or len(keys) == 0:
        return np.empty(0, dtype=np.int64)
    sub = t[np.searchsorted(t, keys[0]):np.searchsorted(t, keys[-1], "right")]
    pos = np.searchsorted(keys, sub)  # < len(keys): every key of sub <= keys[-1]
    return pos[keys[pos] == sub]


def _search(t: np.ndarray, keys: np.ndarray) -> np.ndarray:
    pos = np.searchsorted(t, keys)
    pos[pos == len(t)] = len(t) - 1
    return t[pos] == keys


def joined(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The union of two disjoint sorted unique uint64 arrays, sorted (a merge of two
    runs: numpy's union1d hashes, ~10x slower on 2e5 keys)."""
    out = np.concatenate([a, b])
    out.sort(kind="stable")  # timsort: two sorted runs are merged in one pass
    return out


def less(t: np.ndarray, gone: np.ndarray) -> np.ndarray:
    """Sorted unique ``t`` without the keys of ``gone`` (any order)."""
    return np.delete(t, in_sorted(np.sort(gone), t))


class Tombstones:
    """T of the store at ``path``, read from the file a manifest names and kept (the
    last two files read or written, so a reader of the previous generation and the
    writer's next one both find theirs). Thread-safe for readers: entries are only
    added whole."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._held: dict[str, np.ndarray] = {}

    def keys(self, doc: dict) -> np.ndarray:
        """T of manifest ``doc`` (sorted unique uint64; empty without a file). Raises
        as ``read_file``."""
        entry = doc.get(FIELD)
        if not entry:
            return EMPTY
        got = self._held.get(entry["file"])
        if got is None:
            got = read_file(os.path.join(self.path, entry["file"]), entry)
            self._keep(entry["file"], got)
        return got

    def _keep(self, name: str, keys: np.ndarray) -> None:
        held = dict(self._held)
        held[name] = keys
        while len(held) > 2:
            held.pop(next(iter(held)))
        self._held = held

    def write(self, keys: np.ndarray, generation: int, sync: bool) -> dict | None:
        """Write T = ``keys`` (sorted unique) as the file of the commit of
        ``generation``; return its manifest field value (None for an empty T: no file).
        The caller commits it or deletes the file (``discard``)."""
        if len(keys) == 0:
            return None
        name = file_name(generation)
        entry = write_file(os.path.join(self.path, name), keys, sync)
        self._keep(name, keys)
        return entry

    def discard(self, entry: dict | None) -> None:
        """Delete the file of ``entry`` (written, not committed); never raises: a file
        left behind is a leftover the next open removes."""
        if entry:
            self._held.pop(entry["file"], None)
            try:
                os.unlink(os.path.join(self.path, entry["file"]))
            except OSError:
                pass

    def retire(self, old: dict | None, new: dict | None) -> None:
        """After a commit replaced T's file ``old`` by ``new``: delete the old file
        (best effort: a reader still on the old generation may miss it and moves on,
        ``current``; a file left is removed by the next open)."""
        if old and (not new or old["file"] != new["file"]):
            fault("tombstones-retire")
            self.discard(old)


def snapshot(store) -> tuple[dict, dict, np.ndarray]:
    """(manifest, live runs by shard, T) of one generation of ``store`` (a read-only
    one moves to the newest first). T's file is read only when T is not empty; when
    a commit replaced it meanwhile, the next snapshot is taken. Raises
    CorruptionError when the file the current manifest names is missing."""
    for attempt in range(20):
        store._refresh()
        doc, runs = store._snapshot()
        if not count(doc):
            return doc, runs, EMPTY
        try:
            return doc, runs, store._tomb.keys(doc)
        except FileNotFoundError:
            # a commit replaced T's file after this snapshot was taken: take the next
            # (a writer's own store moves with its commits, a read-only one refreshes)
            moved = store._lock is None or store._snapshot()[0] is not doc
            if not moved or attempt == 19:
                raise CorruptionError(
                    f"{store.path}: tombstone file {doc[FIELD]['file']} is missing")
    raise AssertionError("unreachable")


def on_forgotten(store, keys: np.ndarray, generation: int) -> None:
    """The seam for state kept beside keys: called by ``forget`` with the keys it is
    about to forget (sorted unique, each stored and not yet in T) before the commit
    of ``generation``; what it stages in ``store._batch_fields`` is committed with T.
    A store with values (store/values.py) moves the keys' states out of its counters
    and stages all-zero records for them (a readmitted key starts QUEUED); a store
    with nothing beside its keys has nothing to do."""
    if store._doc.get("values"):
        store._forget_values(keys)


def on_readmitted(store, keys: np.ndarray, generation: int) -> None:
    """The other seam: called by a batch with the forgotten keys it offers (sorted
    unique; answered new, left in their runs, taken out of T by the batch's commit
    of ``generation``) before that commit. They do not pass through the store's
    ``_on_new`` hook, which gets the keys the batch writes; a ``check_update``'s
    values hook (``_on_values``) gets them here, so they get their records too."""
    if store._on_values is not None:
        store._on_values(keys, generation)


def without(t: np.ndarray, chunks) -> Iterator[np.ndarray]:
    """``chunks`` (arrays of sorted keys) less the keys in ``t``; empty ones are
    skipped."""
    for c in chunks:
        hit = in_sorted(t, c)
        if len(hit):
            c = np.delete(c, hit)
        if len(c):
            yield c


def shards(keys: np.ndarray, shard_bits: int) -> frozenset:
    """The shards ``keys`` fall in."""
    if not len(keys):
        return frozenset()
    if not shard_bits:
        return frozenset({0})
    return frozenset(np.unique(keys >> np.uint64(64 - shard_bits)).astype(np.int64).tolist())


def live_bounds(runs: dict, forgotten: np.ndarray, lo: int, hi: int) -> tuple[int, int] | None:
    """(smallest, largest) key of ``runs`` not in ``forgotten``, given the runs' own
    ends ``lo``, ``hi``; None when every key is forgotten. Reads key windows growing
    from each end (a window of only forgotten keys holds at most |T| keys)."""
    from seenstore.store.runs.live import iter_range

    def first_in(a: int, b: int):
        for c in iter_range(runs, a, b):
            c = np.delete(c, in_sorted(forgotten, c))
            if len(c):
                return int(c[0])
        return None

    def last_in(a: int, b: int):
        best = None
        for c in iter_range(runs, a, b):
            c = np.delete(c, in_sorted(forgotten, c))
            if len(c):
                best = int(c[-1])
        return best

    start = first_in(lo, hi + 1)
    if start is None:
        return None
    width = max(1, len(forgotten))
    while True:  # the largest: windows below hi, doubling, until one holds a key
        a = max(start, hi - width)
        end = last_in(a, hi + 1)
        if end is not None:
            return start, end
        width *= 2
