"""The blocked Bloom filter's geometry and false-positive arithmetic.

One 512-bit block (a cache line) per key, k bits inside it. ``blocked_fpr`` is the
exact false-positive rate of that design (docs/bloom.md, "Sizing"); ``size_for``
and ``max_loads`` size a filter from (keys, target rate); ``block_aligned``
allocates the words so each block is one cache line. No state, no kernels.
"""

from __future__ import annotations

import ctypes
import functools
import math
import sys
import threading

import numpy as np

from seenstore.errors import InvalidInputError
from seenstore.runtime.aligned import aligned_empty
from seenstore.bloom.loads_table import KNOWN_LOADS

MIN_FPR, MAX_FPR = 1e-9, 0.5  # the false-positive targets a filter may be sized for


def check_fpr(fpr, what: str = "Bloom filter target FPR") -> float:
    """``fpr`` as a float when it is a number in [MIN_FPR, MAX_FPR]; else
    InvalidInputError naming ``what`` (the one check of every caller: the filter's
    sizing, the store's open, which records the target before any filter is built)."""
    if isinstance(fpr, bool) or not isinstance(fpr, (int, float, np.integer, np.floating)) \
            or not MIN_FPR <= fpr <= MAX_FPR:
        raise InvalidInputError(f"{what} must be in [{MIN_FPR:g}, {MAX_FPR:g}], got {fpr!r}")
    return float(fpr)

BLOCK_BITS = 512
WORDS_PER_BLOCK = BLOCK_BITS // 64
MAX_BLOCKS = 2**32 - 1  # block index is ((w >> 32) * n_blocks) >> 32: 256 GiB at most
MAX_HASHES = 32  # sizing searches k in 1..MAX_HASHES; files may hold up to 64


HUGE_PAGE = 2 << 20  # x86-64 transparent huge page
HUGE_MIN_BYTES = 4 << 20  # smaller filters fit the TLB with 4 KiB pages anyway
MADV_HUGEPAGE = 14  # linux/mman.h


def _advise_huge(words: np.ndarray) -> bool:
    """Ask Linux to back ``words`` with transparent huge pages (madvise MADV_HUGEPAGE);
    True if it accepted. A hint: without it (other OS, THP "never") nothing changes
    but speed. numpy gives the same hint for large arrays unless told not to
    (NUMPY_MADVISE_HUGEPAGE=0); the filter asks itself, so it never depends on that."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        return libc.madvise(words.ctypes.data, words.nbytes, MADV_HUGEPAGE) == 0
    except (OSError, AttributeError):
        return False


def block_aligned(n_words: int, zero: bool = True) -> np.ndarray:
    """A uint64 array of ``n_words`` whose data starts on a 64-byte boundary, so every
    8-word block of the filter is exactly one cache line. numpy's own alignment (16
    bytes) would make each block straddle two lines while the kernels prefetch one:
    key-order inserts then cost over twice as much (bench/bench_bloom.py). ``zero``:
    zeroed (lazily, by the OS) rather than left as is.

    Arrays of HUGE_MIN_BYTES or more start on a 2 MiB boundary and are advised to
    transparent huge pages (``_advise_huge``): a probe is a random access, and with
    4 KiB pages each one is also a TLB miss (huge pages: about 30 % fewer ns per key,
    docs/bloom.md)."""
    if 8 * n_words < HUGE_MIN_BYTES:
        return aligned_empty(n_words, align=8 * WORDS_PER_BLOCK, zero=zero)
    words = aligned_empty(n_words, align=HUGE_PAGE, zero=zero)
    _advise_huge(words)
    return words


# ---------------------------------------------------------------------------
# Theory: the false-positive rate of the blocked design.
# ---------------------------------------------------------------------------


PREFAULT_CHUNK = 64 << 20


def prefault(words: np.ndarray) -> None:
    """Make the OS back every page of the fresh, still-zero ``words`` now (by writing
    zeros over them, in 64 MiB steps through ``ctypes.memset``, which releases the
    GIL), so the first insert does not pay the page faults (seconds for a layer of a
    few hundred MB). Requires: nobody else uses ``words`` yet."""
    base, n = words.ctypes.data, words.nbytes
    for at in range(0, n, PREFAULT_CHUNK):
        ctypes.memset(base + at, 0, min(PREFAULT_CHUNK, n - at))


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
    (the store's Bloom layers ask for a new size at a known rate as they grow).

    The default layer rates are precomputed (loads_table.py, checked equal by the
    tests): computing one takes 0.02-0.15 s of CPU, which every new store would pay."""
    known = KNOWN_LOADS.get(float(fpr))
    return known if known is not None else compute_max_loads(fpr)


def compute_max_loads(fpr: float) -> tuple:
    """``max_loads`` computed: bisection on ``blocked_fpr`` for each k."""
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


# An insert or query costs time per bit (k of them: make the bit number, set or test
# it; 2-3 ns each), memory only through the block's one cache line.
# So ``size_for`` takes the smallest k whose filter is at most MEMORY_SLACK larger
# than the smallest filter: at 0.05% (the store's first layer at its default 0.1%)
# k = 8 instead of 10 for 2% more memory (docs/bloom.md).
MEMORY_SLACK = 0.025


@functools.lru_cache(maxsize=256)
def size_for(n_keys: int, fpr: float) -> tuple[int, int]:
    """``(n_blocks, k)``: the smallest k whose filter meeting ``fpr`` at n_keys has at
    most (1 + MEMORY_SLACK) times the blocks of the smallest filter meeting it (any
    k), with the fewest blocks that k needs.

    Requires: 1e-9 <= fpr <= 0.5.
    """
    n = max(int(n_keys), 1)
    sizes = [(max(1, math.ceil(n / load)), k) for k, load in max_loads(float(fpr))]
    fewest = min(blocks for blocks, _ in sizes)  # k = 1 always meets fpr >= 1e-9
    return min(((blocks, k) for blocks, k in sizes
                if blocks <= fewest * (1 + MEMORY_SLACK)), key=lambda bk: bk[1])
