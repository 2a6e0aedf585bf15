"""The run cache: the sorted keys of live runs kept in memory, so a batch's check
sweeps them there instead of re-reading every run from disk (docs/architecture.md,
"The run cache").

Entries are filled as runs are written (a batch's new runs, compaction's output: the
writer has the keys anyway) or read (a run's first sweep from disk), and leave when
their run retires (commit.py) or a write is aborted. An entry is named by the run's
file name, key count and body checksum, so a name reused after an aborted batch never
finds stale keys. Keys live in fixed blocks of BLOCK_KEYS from one pool, kept for reuse
when entries leave (fresh pages fault in at only 0.3-1 GB/s, so a store in steady
state re-fills blocks it already touched), except an entry's last, partly filled block:
sealing copies its keys to an array of their size and gives the block back, so a run
of a few thousand keys holds its 8 B/key, not a 1 MiB block (a server committing
small groups keeps hundreds of such runs live). Pool blocks and those exact tails
together never exceed ``budget`` bytes (``stats()["held_bytes"]``).
Admission, not eviction: every batch sweeps every run, so any cached byte saves the
same read; a run that does not fit is simply not cached (an LRU would thrash on
sweeps larger than the budget). The keys cached are exactly the run's (checked when
written or read): answers never depend on the cache.
Thread-safe: shard threads fill and use it side by side.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from seenstore.kernels.dispatch import merge as _merge
from seenstore.errors import InvalidInputError

BLOCK_KEYS = 1 << 17  # 1 MiB blocks: small runs waste little, sweeps stay long
BLOCK_BYTES = 8 * BLOCK_KEYS
# Blocks are carved from slabs of up to SLAB_BLOCKS: numpy asks for huge pages from
# 4 MiB up, and a 16 MiB slab faults in over twice as fast as 1 MiB arrays do
# (~1.7 against ~0.7 GB/s)
SLAB_BLOCKS = 16
DEFAULT_SHARE = 4  # the default budget: 1/DEFAULT_SHARE of the memory available at open


def check_budget(cache_bytes) -> None:
    """Refuse a ``cache_bytes`` option that is not None or a whole number >= 0
    (InvalidInputError): ``SeenStore.open`` and ``ShardedStore.open`` take it."""
    if cache_bytes is not None and (isinstance(cache_bytes, bool)
                                    or not isinstance(cache_bytes, int) or cache_bytes < 0):
        raise InvalidInputError(f"cache_bytes must be a whole number >= 0, got "
                                f"{cache_bytes!r}")


def default_budget() -> int:
    """Bytes of the default cache: a quarter of the memory available now (0 where
    the system does not say)."""
    try:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0
    try:  # MemAvailable counts the page cache the kernel can drop, AVPHYS does not
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    return max(0, avail // DEFAULT_SHARE)


def run_key(reader) -> tuple:
    """What names a run's entry: file name, key count, body checksum."""
    return (reader.name, reader.count, reader.header.body_checksum)


class Entry:
    """A cached run: its keys in ``blocks`` (each full but the last), ``count`` keys.
    Once sealed, a last block not full is an array of exactly its keys (not a pool
    block). Pinned while a sweep reads it; its blocks go back to the pool once it has
    left the cache and no sweep holds it."""

    __slots__ = ("key", "blocks", "count", "pins", "gone")

    def __init__(self, key: tuple) -> None:
        self.key = key
        self.blocks: list = []
        self.count = 0
        self.pins = 0
        self.gone = False

    def chunks(self):
        """``(block, n)`` for every block: its first ``n`` keys are the run's next."""
        left = self.count
        for b in self.blocks:
            n = min(left, BLOCK_KEYS)
            yield b, n
            left -= n


class Builder:
    """Keys streamed into a new entry (``add`` chunk by chunk, ascending), then
    ``seal``-ed under the run's key. Gives up (``ok`` False, its blocks back to the
    pool) when the pool has no room."""

    def __init__(self, cache: "RunCache") -> None:
        self.cache = cache
        self.entry = Entry(())
        self.ok = cache.budget > 0
        self._fill = BLOCK_KEYS  # keys in the last block
        self._last = None  # the last key added

    def add(self, keys: np.ndarray) -> None:
        """Append ``keys``, checked strictly above every key added before: sweeps of
        the entry skip the order check (runs/live.py ``sweep_cached``), so keys out of order are
        never cached (the builder gives up; the run's next check reads the file,
        whose sweep refuses it as corrupt)."""
        if not self.ok:
            return
        e, i, n = self.entry, 0, len(keys)
        if n and ((self._last is not None and keys[0] <= self._last)
                  or not _merge.is_strictly_increasing(keys)):
            self.abandon()
            return
        if n:
            self._last = keys[n - 1]
        while i < n:
            if self._fill == BLOCK_KEYS:
                b = self.cache._take()
                if b is None:
                    self.abandon()
                    return
                e.blocks.append(b)
                self._fill = 0
            m = min(n - i, BLOCK_KEYS - self._fill)
            e.blocks[-1][self._fill:self._fill + m] = keys[i:i + m]
            self._fill += m
            i += m
        e.count += n

    def abandon(self) -> None:
        if self.ok:
            self.ok = False
            self.cache._give(self.entry.blocks)
            self.entry.blocks = []

    def seal(self, key: tuple) -> None:
        """File the keys as the entry of run ``key`` (count, checksum as its header)."""
        if not self.ok:
            return
        self.ok = False
        if key[1] != self.entry.count:  # not the whole run: never file a part
            self.cache._give(self.entry.blocks)
            return
        self.entry.key = key
        self.cache._shrink_tail(self.entry, self._fill)
        self.cache._file(self.entry)


class RunCache:
    """Cached runs by ``run_key``, in blocks from a pool of at most ``budget`` bytes."""

    def __init__(self, budget: int) -> None:
        self._lock = threading.Lock()
        self._entries: dict = {}
        self._free: list = []
        self._blocks = 0  # blocks allocated (in entries, builders or free)
        self._tails = 0  # bytes of the sealed entries' exact last arrays
        self._slab: list = []  # blocks of the newest slab not handed out yet
        self.budget = max(0, int(budget))
        self.hits = 0
        self.misses = 0

    # -- the pool
    def _take(self) -> np.ndarray | None:
        with self._lock:
            if self._free:
                return self._free.pop()
            room = (self.budget - self._tails) // BLOCK_BYTES - self._blocks
            if room <= 0:
                return None
            self._blocks += 1
            if not self._slab:  # a block is a view: its slab lives while one is used
                n = min(SLAB_BLOCKS, room)
                self._slab = list(np.empty(n * BLOCK_KEYS, np.uint64).reshape(n, BLOCK_KEYS))
            return self._slab.pop()

    def _give(self, blocks: list) -> None:
        with self._lock:
            self._put_back(blocks)
            self._trim()

    def _put_back(self, blocks: list) -> None:
        """Pool blocks to the free list; an exact tail is simply let go. Holds the lock."""
        for b in blocks:
            if len(b) == BLOCK_KEYS:
                self._free.append(b)
            else:
                self._tails -= b.nbytes

    def _held(self) -> int:
        return self._blocks * BLOCK_BYTES + self._tails

    def _trim(self) -> None:
        """Drop free blocks while the pool and the tails exceed the budget (after it
        was lowered, or a tail was cut). Holds the lock."""
        if self._held() > self.budget:
            self._slab = []
        while self._free and self._held() > self.budget:
            self._free.pop()  # its memory goes once no block of its slab is used
            self._blocks -= 1

    def _shrink_tail(self, entry: Entry, fill: int) -> None:
        """Replace ``entry``'s last block, ``fill`` keys used, by a copy of exactly those
        keys, and give the block back (it stays in the pool while under the budget)."""
        if not entry.blocks or fill >= BLOCK_KEYS:
            return
        block = entry.blocks[-1]
        entry.blocks[-1] = block[:fill].copy()
        with self._lock:
            self._tails += 8 * fill
            self._free.append(block)
            self._trim()

    def _file(self, entry: Entry) -> None:
        with self._lock:
            old = self._entries.get(entry.key)
            self._entries[entry.key] = entry
        if old is not None:
            self._drop(old)

    def _drop(self, entry: Entry) -> None:
        with self._lock:
            entry.gone = True
            if entry.pins == 0 and entry.blocks:
                self._put_back(entry.blocks)
                entry.blocks = []
                self._trim()

    # -- the store's calls
    def builder(self) -> Builder:
        return Builder(self)

    def acquire(self, reader) -> Entry | None:
        """The entry of ``reader``'s run, pinned (``release`` it), or None."""
        with self._lock:
            e = self._entries.get(run_key(reader))
            if e is None:
                self.misses += 1
                return None
            e.pins += 1
            self.hits += 1
            return e

    def release(self, entry: Entry) -> None:
        with self._lock:
            entry.pins -= 1
            free = entry.gone and entry.pins == 0
        if free:
            self._drop(entry)

    def holds(self, reader) -> bool:
        with self._lock:
            return run_key(reader) in self._entries

    def forget(self, names) -> None:
        """Runs ``names`` (file names) left the store: their entries leave."""
        names = set(names)
        with self._lock:
            gone = [e for k, e in self._entries.items() if k[0] in names]
            for e in gone:
                del self._entries[e.key]
        for e in gone:
            self._drop(e)

    def set_budget(self, budget: int) -> None:
        """Change the budget; a lower one drops entries (newest first) until the
        blocks fit (0: every entry, and the pool)."""
        with self._lock:
            self.budget = max(0, int(budget))
            self._trim()
            held = self._held()
            victims = []
            for k in reversed(list(self._entries)):
                if held <= self.budget:
                    break
                e = self._entries.pop(k)
                victims.append(e)
                held -= sum(b.nbytes for b in e.blocks)
        for e in victims:
            self._drop(e)

    def clear(self) -> None:
        self.set_budget(self.budget)  # keeps the budget
        with self._lock:
            gone = list(self._entries.values())
            self._entries.clear()
        for e in gone:
            self._drop(e)
        with self._lock:
            self._blocks -= len(self._free)
            self._free.clear()
            self._slab = []

    def stats(self) -> dict:
        with self._lock:
            cached = sum(e.count for e in self._entries.values())
            return {"budget_bytes": self.budget, "runs": len(self._entries),
                    "keys": cached, "bytes": 8 * cached,
                    "pool_bytes": self._blocks * BLOCK_BYTES, "tail_bytes": self._tails,
                    "held_bytes": self._held(),
                    "hits": self.hits, "misses": self.misses}
