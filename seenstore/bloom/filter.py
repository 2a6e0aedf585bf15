"""The Bloom filter in front of the store: one blocked filter's batch add and query.

A cache-line-blocked Bloom filter over uint64 keys (one 512-bit block per key,
k bits inside it), held in one uint64 numpy array, sized from (expected keys,
target false-positive rate) by sizing.py and saved by file.py. Large inserts go
region by region, on a background thread a waiter can help (``add_in_background``).
Kernels: seenstore/kernels/bloom.py.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time

import numpy as np

from seenstore.kernels import dispatch as _dispatch
from seenstore.kernels.dispatch import bloom as _k  # numpy twins below dispatch.SMALL items
from seenstore.errors import InvalidInputError
from seenstore.runtime.worker import Worker
from seenstore.bloom import file as _file
from seenstore.bloom.file import Binding
from seenstore.bloom.sizing import (BLOCK_BITS, MAX_BLOCKS, WORDS_PER_BLOCK, blocked_fpr,
                                    block_aligned, check_fpr, size_for)

GROUP = 32  # keys located (and prefetched) ahead in the kernels; see bench/bench_bloom.py
# Region inserts: keys bucketed so each pass writes one ~REGION_BYTES slice of the
# filter (measured flat from 256 KiB to 4 MiB on this machine, bench/bench_bloom.py).
REGION_BYTES = 1 << 20
REGION_MIN_KEYS = 1 << 16  # below this the bucketing passes cost more than they save
# Into a filter this large even an insert of fewer keys than blocks goes by regions,
# of about KEYS_PER_REGION keys each: its keys then meet no cache line twice, but the
# keys of one region share a few 2 MiB pages, so the insert stops paying a TLB miss
# (a two-dimensional page walk in a VM) per key: 2^20 keys into 9.8 GiB (the spilled
# path's deferred insert at 1e10) 87 -> 48-51 ns/key, into 3.3 GiB 54 -> 37-41, bucketing
# included, into 1.5 GiB 50-65 -> 40-44; into 0.9 GiB 42 -> 42-50 on a quieter minute,
# 53 -> 46 on a busier one (docs/bloom.md, "Speed").
TLB_REGION_MIN_BYTES = 1 << 30
KEYS_PER_REGION = 1 << 10
# The seed buffer of a region insert is kept for the next one when at most this large
# (one, shared by every filter): fresh pages fault in at 0.3-1 GB/s on a VM, and a
# new buffer per shard insert (9 MB) would cost 10-30 ms a call.
SCRATCH_KEEP_BYTES = 64 << 20
_kept_scratch: list = []  # at most one uint64 buffer, taken and given back under the lock
_scratch_lock = threading.Lock()


@contextlib.contextmanager
def _scratch(n_keys: int):
    """A uint64 buffer of ``n_keys`` for one region insert: the kept one if large
    enough, else a new one; given back (kept if at most SCRATCH_KEEP_BYTES and larger
    than the one kept) when the insert is done."""
    with _scratch_lock:
        buf = _kept_scratch.pop() if _kept_scratch and len(_kept_scratch[-1]) >= n_keys else None
    if buf is None:
        buf = np.empty(n_keys, np.uint64)
    try:
        yield buf[:n_keys]
    finally:
        if buf.nbytes <= SCRATCH_KEEP_BYTES:
            with _scratch_lock:
                if not _kept_scratch or len(_kept_scratch[0]) < len(buf):
                    _kept_scratch[:] = [buf]


# A filter this large runs the numba kernels even for calls of fewer than
# dispatch.SMALL keys once this process runs kernels (dispatch.running_kernels): the
# numpy twins cost ~1.8 us/key there (the store's fill put 97,000 keys into a new
# 129 MiB layer through the twin: 0.17 s, against ~3 ms through the kernel). Before
# that (a fresh process: a small `seenstore merge`, the open's sample check) the twin:
# importing numba and loading a kernel cost ~0.5 s, more than any call below SMALL.
KERNEL_MIN_BYTES = 4 << 20


class _Kernels:
    """The Bloom kernels themselves (``dispatch.bloom.kernel``), never the twins."""

    def __getattr__(self, name: str):
        fn = _k.kernel(name)
        _dispatch.announce(fn)
        return fn


_KERNELS = _Kernels()


def region_bits(filter_bytes: int) -> int:
    """log2 of the number of regions an insert into a filter this size uses (0: none)."""
    if filter_bytes <= 2 * REGION_BYTES:
        return 0
    return min(16, math.ceil(math.log2(filter_bytes / REGION_BYTES)))


def _as_keys(keys) -> np.ndarray:
    """Requires: a 1-D numpy uint64 array (any strides); returns it C-contiguous."""
    if not isinstance(keys, np.ndarray) or keys.dtype != np.uint64 or keys.ndim != 1:
        got = (f"{keys.dtype}[{keys.ndim}-D]" if isinstance(keys, np.ndarray)
               else type(keys).__name__)
        raise InvalidInputError(f"Bloom filter keys must be a 1-D uint64 array, got {got}")
    return np.ascontiguousarray(keys)


class _SharedInsert:
    """A region insert (``kernels/bloom.py``) that a second thread can join.

    The owner buckets each chunk of keys by region (``bucket_seeds``), cuts the
    regions into TASKS contiguous runs and inserts them from the front; a helper
    (the thread that calls ``PendingAdd.wait``, idle until then) takes them from
    the back. Tasks write disjoint slices of the filter except one block that two
    neighbouring regions can share: when the two threads met mid-chunk, the owner
    re-inserts the two regions beside the meeting point once both are done (an
    insert is an OR: repeating it restores any bit a simultaneous write lost)."""

    TASKS = 32

    def __init__(self, bf: BloomFilter, keys: np.ndarray, bits: int) -> None:
        self.bf, self.keys, self.bits = bf, keys, bits
        self.cv = threading.Condition()
        self.tasks: list = []
        self.seeds = np.empty(0, np.uint64)
        self.front = self.back = 0
        self.helping = 0
        self.done = False
        self.fresh = 0
        self.seams_mended = 0  # chunks where owner and helper met (for the tests)

    def _insert(self, seeds: np.ndarray) -> int:
        bf = self.bf
        return int(_k.insert_seeds(bf._words, seeds, bf._k, GROUP))

    def run_owner(self) -> None:
        try:
            self._run_owner()
        finally:
            with self.cv:
                self.done = True
                self.cv.notify_all()

    def _run_owner(self) -> None:
        with _scratch(self.bf._region_scratch_len(len(self.keys))) as tmp:
            self._run_chunks(tmp)

    def _run_chunks(self, tmp: np.ndarray) -> None:
        keys, n_regions = self.keys, 1 << self.bits
        starts = np.empty(n_regions + 1, np.int64)
        edges = np.unique(np.linspace(0, n_regions, self.TASKS + 1).astype(np.int64))
        for c0 in range(0, len(keys), len(tmp)):
            m = min(len(keys) - c0, len(tmp))
            _k.bucket_seeds(keys[c0:c0 + m], self.bits, tmp, starts)
            tasks = [(int(starts[a]), int(starts[b])) for a, b in zip(edges, edges[1:])]
            with self.cv:
                self.seeds, self.tasks = tmp[:m], tasks
                self.front, self.back = 0, len(tasks)
                self.cv.notify_all()
            got = 0
            while True:
                with self.cv:
                    if self.front >= self.back:
                        break
                    t = self.front
                    self.front += 1
                got += self._insert(tmp[tasks[t][0]:tasks[t][1]])
            with self.cv:
                self.fresh += got
                while self.helping:
                    self.cv.wait()
                meet = self.back
                self.tasks = []
            if 0 < meet < len(tasks):  # the helper took tasks[meet:]: mend the seam
                r = int(edges[meet])
                self._insert(tmp[starts[r - 1]:starts[r + 1]])
                self.seams_mended += 1

    def help(self) -> None:
        while True:
            with self.cv:
                while not self.done and self.front >= self.back:
                    self.cv.wait()
                if self.done:
                    return
                self.back -= 1
                lo, hi = self.tasks[self.back]
                seeds = self.seeds
                self.helping += 1
            try:
                got = self._insert(seeds[lo:hi])
            finally:
                with self.cv:
                    self.helping -= 1
                    self.cv.notify_all()
            with self.cv:
                self.fresh += got


class PendingAdd:
    """An insert running on its own thread (a Worker; ``BloomFilter.add_in_background``).

    ``wait()`` helps with what is left of a large (region) insert on the calling
    thread, joins it (idempotent), raises the insert's error if it failed, and
    returns how many keys set a clear bit (keys certainly new to the filter; repeats
    in the same call count once); ``elapsed_s`` is the time from start to the end of
    the background thread; ``cpu_s`` the CPU time the insert took, on its thread and
    on the waiter's while it helped (wall time on a busy 2-core machine counts the
    other threads' turns too)."""

    def __init__(self, bf: BloomFilter, keys: np.ndarray) -> None:
        self._bf, self._keys = bf, keys
        self.fresh = 0
        self._help_cpu_s = 0.0  # the waiter's, helping
        self.dropped = False  # set by an owner that gave up on the filter (keeper.py)
        bits = bf._region_bits_for(len(keys))
        self._shared = _SharedInsert(bf, keys, bits) if bits else None
        self._worker = Worker(self._run, "bloom-insert")

    def _run(self) -> None:
        if self._shared is not None:
            self._shared.run_owner()
        else:
            self.fresh = self._bf._add_counting(self._keys)

    @property
    def elapsed_s(self) -> float:
        return self._worker.elapsed_s

    @property
    def cpu_s(self) -> float:
        return self._worker.cpu_s + self._help_cpu_s

    def wait(self) -> int:
        if self._shared is not None:
            c0 = time.thread_time()
            self._shared.help()
            self._help_cpu_s += time.thread_time() - c0
        self._worker.join(raise_error=False)
        if self._shared is not None:
            self.fresh = self._bf._record_insert(self._shared.fresh)
            self._shared = None
        self._keys = None
        self._worker.join()  # the insert's error, if any, raised here
        return self.fresh


class BloomFilter:
    """A blocked Bloom filter: ``query`` is True for every key added (no false negatives)
    and for roughly ``expected_fpr`` of the keys never added.

    Memory is ``words``: one uint64 array of 8 * n_blocks words. Not thread-safe for
    writers: at most one thread may run ``add``/``add_query`` at a time, and no query
    may run concurrently with them if its answer must include keys being added.
    Kernels release the GIL, so queries from several threads run in parallel.
    """

    def __init__(self, n_blocks: int, n_hashes: int, *, capacity: int = 0,
                 target_fpr: float = 0.0, words: np.ndarray | None = None,
                 n_added: int = 0) -> None:
        if not 1 <= n_blocks <= MAX_BLOCKS:
            raise InvalidInputError(f"Bloom filter needs 1..{MAX_BLOCKS} blocks, got {n_blocks}")
        if not 1 <= n_hashes <= 64:
            raise InvalidInputError(f"Bloom filter needs 1..64 hashes, got {n_hashes}")
        if words is None:
            words = block_aligned(n_blocks * WORDS_PER_BLOCK)
        elif words.dtype != np.uint64 or words.shape != (n_blocks * WORDS_PER_BLOCK,):
            raise InvalidInputError("Bloom filter words must be uint64[8 * n_blocks]")
        elif words.ctypes.data % (8 * WORDS_PER_BLOCK):  # one cache line per block
            aligned = block_aligned(len(words), zero=False)
            aligned[:] = words
            words = aligned
        self._words = words
        self._k = int(n_hashes)
        self._capacity = int(capacity)
        self._target_fpr = float(target_fpr)
        self._n_added = int(n_added)
        self._hist: np.ndarray | None = None  # block fill histogram, None when stale
        self.binding: Binding | None = None  # what ``load`` found in the file

    @classmethod
    def for_capacity(cls, n_keys: int, fpr: float) -> BloomFilter:
        """An empty filter whose FPR stays <= ``fpr`` until ``n_keys`` distinct keys are in.

        Requires: n_keys >= 0, 1e-9 <= fpr <= 0.5. Raises InvalidInputError otherwise,
        or when the filter would exceed 2**32 blocks (256 GiB).
        """
        if not isinstance(n_keys, (int, np.integer)) or n_keys < 0:
            raise InvalidInputError(f"Bloom filter capacity must be an int >= 0, got {n_keys!r}")
        fpr = check_fpr(fpr)
        n_blocks, k = size_for(int(n_keys), fpr)
        if n_blocks > MAX_BLOCKS:
            raise InvalidInputError(
                f"Bloom filter for {n_keys} keys at FPR {fpr} needs {n_blocks} blocks "
                f"(> {MAX_BLOCKS}); lower the capacity or raise the FPR")
        return cls(n_blocks, k, capacity=int(n_keys), target_fpr=float(fpr))

    # -- batch operations ---------------------------------------------------

    def add(self, keys: np.ndarray) -> None:
        """Insert every key. Requires: 1-D uint64 array (InvalidInputError otherwise)."""
        self._add_counting(_as_keys(keys))

    def add_in_background(self, keys: np.ndarray) -> PendingAdd:
        """Start inserting ``keys`` on another thread (the kernel releases the GIL);
        return a handle whose ``wait()`` blocks until they are in.

        The caller must not touch the filter until ``wait()`` has returned (the
        class is not thread-safe for writers). Requires: 1-D uint64 array."""
        return PendingAdd(self, _as_keys(keys))

    def _add_counting(self, keys: np.ndarray) -> int:
        """Insert C-contiguous uint64 ``keys``; return how many set a clear bit.

        Large inserts into a large filter go region by region (``bloom_add_regions``:
        the same bits, 3x fewer ns/key at 1e8 keys into 900 MiB, bench/bench_bloom.py),
        using scratch of at most one key per filter word (the filter's own size)."""
        bits = self._region_bits_for(len(keys))
        if bits:
            with _scratch(self._region_scratch_len(len(keys))) as tmp:
                fresh = int(self._kernels.bloom_add_regions(self._words, keys, self._k, GROUP,
                                                           bits, tmp))
        else:
            fresh = int(self._kernels.bloom_add_query(self._words, keys, self._k, GROUP,
                                           np.empty(0, np.bool_), False))
        return self._record_insert(fresh)

    def _record_insert(self, fresh: int) -> int:
        """Book ``fresh`` keys that set a clear bit; the fill figures are stale now."""
        self._n_added += fresh
        self._hist = None
        return fresh

    @property
    def _kernels(self):
        """Where this filter's calls go: ``dispatch.bloom`` (numpy twins below SMALL
        keys), or for a filter of KERNEL_MIN_BYTES or more in a process that runs
        kernels already, the kernels themselves."""
        if self._words.nbytes >= KERNEL_MIN_BYTES and _dispatch.running_kernels():
            return _KERNELS
        return _k

    def _region_bits_for(self, n_keys: int) -> int:
        """Region bits an insert of ``n_keys`` uses here; 0: insert in key order. Fewer
        keys than blocks go in key order: a region pass then meets about one key per
        cache line, as key order does, and the bucketing (~10 ns/key) is pure cost,
        except into a filter of TLB_REGION_MIN_BYTES or more, where regions of about
        KEYS_PER_REGION keys save a TLB miss per key (the spilled path feeds 2^20 new
        keys at a time into a filter of GBs)."""
        if n_keys < REGION_MIN_KEYS:
            return 0
        if n_keys >= self.n_blocks:
            return region_bits(self.nbytes)
        if self.nbytes >= TLB_REGION_MIN_BYTES:  # for the TLB's sake, not the cache's
            return min(region_bits(self.nbytes), (n_keys // KEYS_PER_REGION).bit_length() - 1)
        return 0

    def _region_scratch_len(self, n_keys: int) -> int:
        """Seed buffer length of a region insert of ``n_keys``: at most one uint64 per
        filter word (the filter's own size); fewer keys per chunk would sweep it more often."""
        return min(n_keys, max(REGION_MIN_KEYS, len(self._words)))

    def query(self, keys: np.ndarray) -> np.ndarray:
        """Bool array aligned with ``keys``: True = maybe present, False = certainly absent.

        Key order, always: with one cache line per block a query costs one miss, and
        the region scheme of inserts measured slower for queries (docs/bloom.md)."""
        keys = _as_keys(keys)
        out = np.empty(keys.shape[0], dtype=np.bool_)
        self._kernels.bloom_query(self._words, keys, self._k, GROUP, out)
        return out

    def add_query(self, keys: np.ndarray) -> np.ndarray:
        """For each key in order: was it maybe present before (True), then insert it.

        An earlier occurrence of the same key in this call counts as present, so
        False marks exactly the keys that were certainly new when reached.
        """
        keys = _as_keys(keys)
        out = np.empty(keys.shape[0], dtype=np.bool_)
        self._record_insert(int(self._kernels.bloom_add_query(self._words, keys, self._k, GROUP,
                                                              out, True)))
        return out

    # -- figures ------------------------------------------------------------

    @property
    def words(self) -> np.ndarray:
        """The bit array (uint64[8 * n_blocks], bit b of word w = filter bit 64 w + b).
        Read-only by contract: writing it voids every guarantee."""
        return self._words

    @property
    def n_blocks(self) -> int:
        return self._words.shape[0] // WORDS_PER_BLOCK

    @property
    def n_bits(self) -> int:
        return self._words.shape[0] * 64

    @property
    def n_hashes(self) -> int:
        return self._k

    @property
    def n_added(self) -> int:
        """Keys inserted that set at least one clear bit: distinct keys added, less
        the few that were already false positives when added (they change nothing)."""
        return self._n_added

    @property
    def capacity(self) -> int:
        """The ``n_keys`` the filter was sized for (0 if built directly)."""
        return self._capacity

    @property
    def target_fpr(self) -> float:
        """The FPR the filter was sized for (0.0 if built directly)."""
        return self._target_fpr

    @property
    def nbytes(self) -> int:
        return int(self._words.nbytes)

    @property
    def bits_per_key(self) -> float:
        """Memory per key at capacity: n_bits / max(capacity, 1)."""
        return self.n_bits / max(self._capacity, 1)

    def _fill_histogram(self) -> np.ndarray:
        """``hist[c]`` = number of blocks with c bits set (one pass, cached until a write)."""
        hist = self._hist
        if hist is None:
            hist = np.zeros(BLOCK_BITS + 1, dtype=np.int64)
            _k.block_fill_histogram(self._words, WORDS_PER_BLOCK, hist)
            self._hist = hist
        return hist

    @property
    def fill_ratio(self) -> float:
        """Share of bits set. Costs one pass over the array after each write."""
        hist = self._fill_histogram()
        return float(np.dot(hist, np.arange(BLOCK_BITS + 1))) / self.n_bits

    @property
    def expected_fpr(self) -> float:
        """FPR now, from the actual bits: mean over blocks of (bits set / 512) ** k.
        Exact for a key never added whose positions are uniform (one pass, cached)."""
        hist = self._fill_histogram()
        share = np.arange(BLOCK_BITS + 1, dtype=np.float64) / BLOCK_BITS
        return float(np.dot(hist, share**self._k)) / self.n_blocks

    def theoretical_fpr(self, n_keys: int | None = None) -> float:
        """FPR this design predicts with ``n_keys`` distinct keys in (default: ``n_added``)."""
        n = self._n_added if n_keys is None else n_keys
        return blocked_fpr(n / self.n_blocks, self._k)

    def stats(self) -> dict:
        """Every figure above as a JSON-ready dict (one pass over the array if stale)."""
        return {"n_bits": self.n_bits, "nbytes": self.nbytes, "n_hashes": self._k,
                "n_added": self._n_added, "capacity": self._capacity,
                "target_fpr": self._target_fpr, "bits_per_key": self.bits_per_key,
                "fill_ratio": self.fill_ratio, "expected_fpr": self.expected_fpr,
                "theoretical_fpr": self.theoretical_fpr()}

    def __repr__(self) -> str:
        return (f"BloomFilter(n_blocks={self.n_blocks}, n_hashes={self._k}, "
                f"capacity={self._capacity}, target_fpr={self._target_fpr}, "
                f"n_added={self._n_added})")

    # -- persistence --------------------------------------------------------

    def save(self, path: str | os.PathLike, generation: int,
             binding: Binding | None = None) -> None:
        """Write the filter to ``path`` atomically, recording the store ``generation``
        and ``binding`` (what it was built from; None: unbound, zeros).

        Writes ``<path>.tmp.<pid>``, fsyncs it, renames it over ``path`` and fsyncs
        the directory: ``path`` holds the old or the new filter, never a mix.
        Requires: 0 <= generation < 2**64. Raises DiskFullError / StoreIOError
        (the temp file is removed, ``path`` is untouched).
        """
        _file.write(self, path, generation, binding)

    @classmethod
    def load(cls, path: str | os.PathLike) -> tuple[BloomFilter, int]:
        """Read a filter saved by ``save``; return ``(filter, generation)``; the
        filter's ``binding`` is what the file records (None for an unbound file).

        Raises StoreNotFoundError if missing, NotSupportedError for a foreign file
        or an unknown major version / variant, CorruptionError for a truncated,
        padded or checksum-failing file, StoreIOError for other OS failures.
        """
        fields, words = _file.read(path)
        _, _, _, n_hashes, n_blocks, n_added, generation, capacity, fpr, _, _, binding = fields
        bf = cls(n_blocks, n_hashes, capacity=capacity, target_fpr=fpr, words=words,
                 n_added=n_added)
        bf.binding = binding
        return bf, generation

