"""The Bloom filter in front of the store: sizing, batch add/query, persistence, stats.

A cache-line-blocked Bloom filter over uint64 keys (one 512-bit block per key,
k bits inside it), held in one uint64 numpy array. Sized from (expected keys,
target false-positive rate) with the exact FPR of the blocked design. Saved
atomically in a checksummed file (docs/bloom.md) that records the store
generation it reflects. ``BloomCounters`` keeps the exact/approximate-mode
counts. Kernels: seenstore/kernels/bloom.py.
"""

from __future__ import annotations

import errno
import functools
import math
import os
import struct
import sys
import threading
import time
from dataclasses import asdict, dataclass

import numpy as np
import xxhash

from .errors import (
    CorruptionError,
    DiskFullError,
    InvalidInputError,
    NotSupportedError,
    StoreIOError,
    StoreNotFoundError,
)
from .dispatch import bloom as _k  # numpy twins below dispatch.SMALL items
from .runformat import aligned_empty

BLOCK_BITS = 512
WORDS_PER_BLOCK = BLOCK_BITS // 64
MAX_BLOCKS = 2**32 - 1  # block index is ((w >> 32) * n_blocks) >> 32: 256 GiB at most
MAX_HASHES = 32  # sizing searches k in 1..MAX_HASHES; files may hold up to 64
GROUP = 32  # keys located (and prefetched) ahead in the kernels; see bench/bench_bloom.py
# Region inserts: keys bucketed so each pass writes one ~REGION_BYTES slice of the
# filter (measured flat from 256 KiB to 4 MiB on this machine, bench/bench_bloom.py).
REGION_BYTES = 1 << 20
REGION_MIN_KEYS = 1 << 16  # below this the bucketing passes cost more than they save


def block_aligned(n_words: int, zero: bool = True) -> np.ndarray:
    """A uint64 array of ``n_words`` whose data starts on a 64-byte boundary, so every
    8-word block of the filter is exactly one cache line. numpy's own alignment (16
    bytes) made each block straddle two lines, and the kernels prefetch one: key-order
    inserts ran 60 ns/key against 23 aligned (1e7 keys into 124 MB,
    bench/bench_bloom.py). ``zero``: zeroed (lazily, by the OS) rather than left as is."""
    return aligned_empty(n_words, align=8 * WORDS_PER_BLOCK, zero=zero)


def region_bits(filter_bytes: int) -> int:
    """log2 of the number of regions an insert into a filter this size uses (0: none)."""
    if filter_bytes <= 2 * REGION_BYTES:
        return 0
    return min(16, math.ceil(math.log2(filter_bytes / REGION_BYTES)))

# ---------------------------------------------------------------------------
# Theory: the false-positive rate of the blocked design.
# ---------------------------------------------------------------------------


class _OccupancyMoments:
    """``table(t)[s, k]`` = E[(X_s / 512) ** k], X_s = bits set after s uniform throws.

    X_s follows the occupancy distribution of s balls in 512 bins, computed by the
    exact recursion; the table grows on demand and is shared by all callers.
    """

    def __init__(self) -> None:
        x = np.arange(BLOCK_BITS + 1, dtype=np.float64)
        self._stay = x / BLOCK_BITS
        self._move = (BLOCK_BITS - x) / BLOCK_BITS
        self._powers = (x[:, None] / BLOCK_BITS) ** np.arange(MAX_HASHES + 1)[None, :]
        self._p = np.zeros(BLOCK_BITS + 1)
        self._p[0] = 1.0
        self._rows: list[np.ndarray] = []
        self._table = np.empty((0, MAX_HASHES + 1))
        self._lock = threading.Lock()

    def table(self, t_max: int) -> np.ndarray:
        with self._lock:
            if self._table.shape[0] <= t_max:
                while len(self._rows) <= t_max + 1024:
                    self._rows.append(self._p @ self._powers)
                    nxt = self._p * self._stay
                    nxt[1:] += self._p[:-1] * self._move[:-1]
                    self._p = nxt
                self._table = np.array(self._rows)
            return self._table


_MOMENTS = _OccupancyMoments()


def blocked_fpr(keys_per_block: float, k: int) -> float:
    """False-positive rate of this design at ``keys_per_block`` = n_keys / n_blocks.

    Poisson over blocks: a block holds i keys with probability Pois(i; lambda);
    its k*i positions are uniform in 512 bits, so a query probing k uniform bits
    of it hits with probability E[(X_{k i}/512)^k] (exact occupancy law).
    """
    lam = float(keys_per_block)
    if lam <= 0.0:
        return 0.0
    i = np.arange(int(lam + 12.0 * math.sqrt(lam) + 30.0))
    log_fact = np.concatenate(([0.0], np.cumsum(np.log(i[1:]))))
    log_pois = i * math.log(lam) - lam - log_fact
    table = _MOMENTS.table(int(k * i[-1]))
    return float(np.sum(np.exp(log_pois) * table[k * i, k]))


def classic_fpr(bits_per_key: float, k: int) -> float:
    """False-positive rate of a classic (unblocked) Bloom filter: (1 - e^(-k/b))^k."""
    return (1.0 - math.exp(-k / bits_per_key)) ** k


@functools.lru_cache(maxsize=256)  # ~1,400 FPR evaluations: worth remembering
def max_loads(fpr: float) -> tuple:
    """``((k, load), ...)``: for each k in 1..MAX_HASHES meeting ``fpr`` at all, the
    largest keys per block whose ``blocked_fpr`` is <= fpr. Independent of the key
    count, so a filter of any size at this rate is sized from it in microseconds
    (the store's Bloom layers ask for a new size at a known rate as they grow)."""
    out = []
    for k in range(1, MAX_HASHES + 1):
        lo, hi = 0.0, 1.0
        while blocked_fpr(hi, k) <= fpr and hi < 4 * BLOCK_BITS:
            lo, hi = hi, hi * 2.0
        for _ in range(40):  # largest load (keys per block) meeting the target
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if blocked_fpr(mid, k) <= fpr else (lo, mid)
        if lo > 0.0:
            out.append((k, lo))
    return tuple(out)


@functools.lru_cache(maxsize=256)
def size_for(n_keys: int, fpr: float) -> tuple[int, int]:
    """``(n_blocks, k)`` of the smallest filter whose ``blocked_fpr`` at n_keys is <= fpr.

    Among equally small filters the one with the lowest FPR at n_keys wins (this
    matters only for tiny filters). Requires: 1e-9 <= fpr <= 0.5.
    """
    n = max(int(n_keys), 1)
    best: tuple[int, float, int] | None = None
    for k, load in max_loads(float(fpr)):
        n_blocks = max(1, math.ceil(n / load))
        cand = (n_blocks, blocked_fpr(n / n_blocks, k), k)
        best = cand if best is None or cand < best else best
    assert best is not None  # k = 1 always meets any fpr >= 1e-9 at some load
    return best[0], best[2]


# ---------------------------------------------------------------------------
# File format (docs/bloom.md, "File format").
# ---------------------------------------------------------------------------

MAGIC = b"\x89SBF\r\n\x1a\n"  # PNG-style: high bit, name, CRLF, EOF, LF catch mangled transfers
MAJOR = 1
MINOR = 1  # 1.1: the store binding (store id, keys, runs digest) in bytes 88..120
SCHEME = 1  # bit-position scheme of kernels/bloom.py ``locate``
HEADER_LEN = 128
MAX_HEADER_LEN = 65536
_PREFIX = struct.Struct("<8sHHI")  # magic, major, minor, header_len
# flags, scheme, block_bits, n_hashes, n_blocks, n_added, generation, capacity,
# target_fpr, body_len, body_checksum
_FIELDS = struct.Struct("<IIIIQQQQdQQ")
_BIND = struct.Struct("<16sQQ")  # minor 1: store id, store keys, runs digest (zero: unbound)
_SUM = struct.Struct("<Q")


@dataclass(frozen=True)
class Binding:
    """What a saved filter was built from: the store's identity (32 hex digits,
    ``manifest.store_id``), its key count and the digest of its runs
    (``manifest.runs_digest``). A store loads a filter only when all three match."""

    store_id: str
    keys: int
    digest: int

    def pack(self) -> bytes:
        return _BIND.pack(bytes.fromhex(self.store_id.rjust(32, "0")), self.keys, self.digest)

    @classmethod
    def unpack(cls, raw: bytes) -> Binding | None:
        sid, keys, digest = _BIND.unpack(raw)
        if not any(raw):
            return None  # a minor-0 file, or saved unbound
        return cls(sid.hex(), keys, digest)


def _pack_header(bf: BloomFilter, generation: int, body_sum: int,
                 binding: Binding | None = None) -> bytes:
    head = _PREFIX.pack(MAGIC, MAJOR, MINOR, HEADER_LEN) + _FIELDS.pack(
        0, SCHEME, BLOCK_BITS, bf.n_hashes, bf.n_blocks, bf.n_added, generation,
        bf.capacity, bf.target_fpr, bf.nbytes, body_sum)
    head += binding.pack() if binding is not None else b"\0" * _BIND.size
    head += b"\0" * (HEADER_LEN - _SUM.size - len(head))
    return head + _SUM.pack(xxhash.xxh3_64_intdigest(head))


def _read_header(f, name: str, file_size: int) -> tuple[int, tuple]:
    """Read and check the header; return ``(header_len, fields)``. Typed errors only."""
    raw = f.read(_PREFIX.size)
    if not raw.startswith(MAGIC[: len(raw)]):
        raise NotSupportedError(f"{name}: not a seenstore Bloom filter file (bad magic)")
    if len(raw) < _PREFIX.size:
        raise CorruptionError(f"{name}: truncated Bloom filter header ({file_size} bytes)")
    _, major, minor, header_len = _PREFIX.unpack(raw)
    if major != MAJOR:
        raise NotSupportedError(
            f"{name}: Bloom filter format version {major}.{minor} is not readable by "
            f"this seenstore (reads {MAJOR}.x); rebuild it or upgrade seenstore")
    if not HEADER_LEN <= header_len <= MAX_HEADER_LEN or header_len % 8:
        raise CorruptionError(f"{name}: implausible Bloom filter header length {header_len}")
    raw += f.read(header_len - _PREFIX.size)
    if len(raw) < header_len:
        raise CorruptionError(f"{name}: truncated Bloom filter header ({file_size} bytes)")
    (want,) = _SUM.unpack_from(raw, header_len - _SUM.size)
    if xxhash.xxh3_64_intdigest(raw[: header_len - _SUM.size]) != want:
        raise CorruptionError(f"{name}: Bloom filter header checksum mismatch")
    fields = _FIELDS.unpack_from(raw, _PREFIX.size)
    at = _PREFIX.size + _FIELDS.size
    return header_len, fields + (Binding.unpack(raw[at:at + _BIND.size]),)


def _load_body(f, name: str, fields: tuple, header_len: int, file_size: int) -> np.ndarray:
    flags, scheme, block_bits, n_hashes, n_blocks, _, _, _, _, body_len, body_sum, _ = fields
    if flags != 0 or scheme != SCHEME or block_bits != BLOCK_BITS:
        raise NotSupportedError(
            f"{name}: unsupported Bloom filter variant (flags {flags}, scheme {scheme}, "
            f"block bits {block_bits})")
    if not (1 <= n_hashes <= 64 and 1 <= n_blocks <= MAX_BLOCKS
            and body_len == n_blocks * WORDS_PER_BLOCK * 8):
        raise CorruptionError(f"{name}: inconsistent Bloom filter header fields")
    if file_size != header_len + body_len:
        what = "truncated" if file_size < header_len + body_len else "trailing bytes in"
        raise CorruptionError(
            f"{name}: {what} Bloom filter body ({file_size} bytes, expected "
            f"{header_len + body_len})")
    words = block_aligned(n_blocks * WORDS_PER_BLOCK, zero=False)
    if f.readinto(memoryview(words).cast("B")) != body_len:
        raise CorruptionError(f"{name}: truncated Bloom filter body")
    if xxhash.xxh3_64_intdigest(words) != body_sum:
        raise CorruptionError(f"{name}: Bloom filter body checksum mismatch")
    if sys.byteorder == "big":  # the file is little-endian
        words.byteswap(inplace=True)
    return words


def _io_error(e: OSError, what: str) -> StoreIOError:
    kind = DiskFullError if e.errno in (errno.ENOSPC, errno.EFBIG) else StoreIOError
    return kind(f"{what}: {e.strerror or e}")


# ---------------------------------------------------------------------------
# The filter.
# ---------------------------------------------------------------------------


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
        keys, bf, n_regions = self.keys, self.bf, 1 << self.bits
        tmp = bf._region_scratch(len(keys))
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
    """An insert running on its own thread (``BloomFilter.add_in_background``).

    ``wait()`` helps with what is left of a large (region) insert on the calling
    thread, joins it (idempotent) and returns how many keys set a clear bit (keys
    certainly new to the filter; repeats in the same call count once);
    ``elapsed_s`` is the time from start to the end of the background thread."""

    def __init__(self, bf: BloomFilter, keys: np.ndarray) -> None:
        self._bf, self._keys = bf, keys
        self.fresh = 0
        self.elapsed_s = 0.0
        self.dropped = False  # set by an owner that gave up on the filter (store.py)
        self._error: BaseException | None = None
        bits = bf._region_bits_for(len(keys))
        self._shared = _SharedInsert(bf, keys, bits) if bits else None
        self._thread = threading.Thread(target=self._run, name="bloom-insert", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        t0 = time.perf_counter()
        try:
            if self._shared is not None:
                self._shared.run_owner()
            else:
                self.fresh = self._bf._add_counting(self._keys)
        except BaseException as e:  # handed to the waiter, never lost in the thread
            self._error = e
        self.elapsed_s = time.perf_counter() - t0

    def wait(self) -> int:
        if self._shared is not None:
            self._shared.help()
        self._thread.join()
        if self._shared is not None:
            self.fresh = self._bf._record_insert(self._shared.fresh)
            self._shared = None
        self._keys = None
        if self._error is not None:
            raise self._error
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
        if not 1e-9 <= fpr <= 0.5:
            raise InvalidInputError(f"Bloom filter target FPR must be in [1e-9, 0.5], got {fpr}")
        n_blocks, k = size_for(int(n_keys), float(fpr))
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
            fresh = int(_k.bloom_add_regions(self._words, keys, self._k, GROUP, bits,
                                             self._region_scratch(len(keys))))
        else:
            fresh = int(_k.bloom_add_query(self._words, keys, self._k, GROUP,
                                           np.empty(0, np.bool_), False))
        return self._record_insert(fresh)

    def _record_insert(self, fresh: int) -> int:
        """Book ``fresh`` keys that set a clear bit; the fill figures are stale now."""
        self._n_added += fresh
        self._hist = None
        return fresh

    def _region_bits_for(self, n_keys: int) -> int:
        """Region bits an insert of ``n_keys`` uses here; 0: insert in key order."""
        return region_bits(self.nbytes) if n_keys >= REGION_MIN_KEYS else 0

    def _region_scratch(self, n_keys: int) -> np.ndarray:
        """Seed buffer of a region insert of ``n_keys``: at most one uint64 per filter
        word (the filter's own size); fewer keys per chunk would sweep it more often."""
        return np.empty(min(n_keys, max(REGION_MIN_KEYS, len(self._words))), np.uint64)

    def query(self, keys: np.ndarray) -> np.ndarray:
        """Bool array aligned with ``keys``: True = maybe present, False = certainly absent.

        Key order, always: with one cache line per block a query costs one miss, and
        the region scheme of inserts measured slower for queries (docs/bloom.md)."""
        keys = _as_keys(keys)
        out = np.empty(keys.shape[0], dtype=np.bool_)
        _k.bloom_query(self._words, keys, self._k, GROUP, out)
        return out

    def add_query(self, keys: np.ndarray) -> np.ndarray:
        """For each key in order: was it maybe present before (True), then insert it.

        An earlier occurrence of the same key in this call counts as present, so
        False marks exactly the keys that were certainly new when reached.
        """
        keys = _as_keys(keys)
        out = np.empty(keys.shape[0], dtype=np.bool_)
        self._record_insert(int(_k.bloom_add_query(self._words, keys, self._k, GROUP, out, True)))
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
        if not isinstance(generation, (int, np.integer)) or not 0 <= generation < 2**64:
            raise InvalidInputError(f"generation must be an int in [0, 2**64), got {generation!r}")
        path = os.fspath(path)
        body = np.asarray(self._words, dtype="<u8")
        header = _pack_header(self, int(generation), xxhash.xxh3_64_intdigest(body), binding)
        tmp = f"{path}.tmp.{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                f.write(header)
                f.write(memoryview(body).cast("B"))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise _io_error(e, f"cannot save Bloom filter {path}") from e

    @classmethod
    def load(cls, path: str | os.PathLike) -> tuple[BloomFilter, int]:
        """Read a filter saved by ``save``; return ``(filter, generation)``; the
        filter's ``binding`` is what the file records (None for an unbound file).

        Raises StoreNotFoundError if missing, NotSupportedError for a foreign file
        or an unknown major version / variant, CorruptionError for a truncated,
        padded or checksum-failing file, StoreIOError for other OS failures.
        """
        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                header_len, fields = _read_header(f, path, size)
                words = _load_body(f, path, fields, header_len, size)
        except FileNotFoundError as e:
            raise StoreNotFoundError(f"no Bloom filter at {path}") from e
        except OSError as e:
            raise _io_error(e, f"cannot read Bloom filter {path}") from e
        _, _, _, n_hashes, n_blocks, n_added, generation, capacity, fpr, _, _, binding = fields
        bf = cls(n_blocks, n_hashes, capacity=capacity, target_fpr=fpr, words=words,
                 n_added=n_added)
        bf.binding = binding
        return bf, generation


# ---------------------------------------------------------------------------
# Mode bookkeeping.
# ---------------------------------------------------------------------------


@dataclass
class BloomCounters:
    """Running counts of the filter's answers, for ``stats`` (the store persists them).

    negatives: keys answered absent (certainly new, both modes).
    positives: keys answered maybe present (both modes).
    false_positives: exact mode, positives the merge found new.
    exact_new: exact mode, keys found new (negatives and false positives).
    approx_answered: approximate mode, positives taken as seen without the disk.
    """

    negatives: int = 0
    positives: int = 0
    false_positives: int = 0
    exact_new: int = 0
    approx_answered: int = 0

    def record_exact(self, maybe: np.ndarray, is_new: np.ndarray) -> None:
        """Count one exact-mode batch. Requires: bool arrays aligned on the batch's
        unique keys: the filter's answers and the verdicts (True = new; a Bloom
        negative is new by definition)."""
        maybe, is_new = np.asarray(maybe, np.bool_), np.asarray(is_new, np.bool_)
        if maybe.shape != is_new.shape or maybe.ndim != 1:
            raise InvalidInputError("maybe and is_new must be aligned 1-D bool arrays")
        pos = int(np.count_nonzero(maybe))
        self.positives += pos
        self.negatives += maybe.shape[0] - pos
        self.false_positives += int(np.count_nonzero(maybe & is_new))
        self.exact_new += int(np.count_nonzero(is_new))

    def record_approximate(self, maybe: np.ndarray) -> None:
        """Count one approximate-mode batch: every positive is answered without the disk."""
        pos = int(np.count_nonzero(np.asarray(maybe, np.bool_)))
        self.positives += pos
        self.negatives += len(maybe) - pos
        self.approx_answered += pos

    @property
    def measured_fpr(self) -> float | None:
        """False positives over new keys seen in exact mode; None before any."""
        return self.false_positives / self.exact_new if self.exact_new else None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> BloomCounters:
        """Inverse of ``to_dict``; missing fields are 0 (older stores). CorruptionError
        if a field is not a non-negative int."""
        names = cls.__dataclass_fields__
        vals = {k: d.get(k, 0) for k in names}
        if any(type(v) is not int or v < 0 for v in vals.values()):
            raise CorruptionError(f"bad Bloom counters {d!r}")
        return cls(**vals)
