"""A deterministic, crawl-like stream of fingerprint batches with an exact expectation.

``CrawlStream(total_keys, batch_size, reoffer, dup, seed)`` yields ``Batch``es of
uint64 keys mixing fresh keys, keys re-offered from earlier batches and duplicates
inside the batch, with host-skewed top bits like real fingerprints. Only a counter
is kept, never the keys; any batch can be regenerated alone from ``(seed, index)``.

Construction (why the expectation is exact):
  * Every key is a pure function of an integer id: ``key(id) = host(id) << L | perm_L(id)``
    with ``L = 64 - host_bits``. ``perm_L`` is a bijection on L-bit integers (xor-shifts
    and odd multiplications mod 2**L, seeded), so distinct ids < 2**L have distinct low
    bits and hence distinct keys whatever their host bits. ``host(id)`` is Zipf-like
    (exponent 1: rank = floor((n_hosts+1)**u) - 1 for u uniform from a hash of the id),
    and the rank is scattered over the bucket space by a bijection on host_bits bits.
  * Batch ``b`` is laid out as three blocks: ``n_fresh`` fresh ids (a counter, never
    used before), then ``n_reoffer`` ids drawn uniformly with replacement below the
    counter as it was when the batch began (all admitted earlier), then ``n_dup``
    copies of random earlier positions of the same batch.
  * Hence the keys first admitted by batch ``b`` are exactly its first ``n_fresh``
    positions, each the first occurrence of its key: ``expected_new == n_fresh``
    and the expected ``add`` mask is ``arange(B) < n_fresh``. No collision can break
    this, because ``key`` is injective on ids < 2**L (checked: total_keys < 2**L).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from seenstore.errors import InvalidInputError
from seenstore.layout import DEFAULT_LAYOUT

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1
_CHUNK = 1 << 16  # ids per generation step


@dataclass(frozen=True)
class Batch:
    """One batch: ``keys`` (uint64, len B) and the exact counts of its three blocks.

    ``keys[:n_fresh]`` are never-offered keys (all distinct); ``keys[n_fresh:n_fresh+n_reoffer]``
    were offered by earlier batches; the last ``n_dup`` repeat earlier positions of this batch.
    """

    index: int
    keys: np.ndarray
    n_fresh: int
    n_reoffer: int
    n_dup: int

    @property
    def expected_new(self) -> int:
        """Number of True entries ``SeenStore.add(keys)`` must return."""
        return self.n_fresh

    def expected_mask(self) -> np.ndarray:
        """The exact mask ``add(keys)`` must return: True on the first ``n_fresh`` positions."""
        mask = np.zeros(len(self.keys), dtype=bool)
        mask[: self.n_fresh] = True
        return mask


def _odd_constant(seed: int, salt: int, bits: int) -> int:
    """A seed-dependent odd multiplier below 2**bits (bijective multiplication mod 2**bits)."""
    z = (seed * _GOLDEN + salt * 0xD1B54A32D192ED03 + 1) & _MASK64
    z = ((z ^ (z >> 31)) * 0xBF58476D1CE4E5B9) & _MASK64
    z ^= z >> 29
    return (z | 1) & ((1 << bits) - 1) if bits < 64 else z | 1


def perm_bits(x: np.ndarray, bits: int, seed: int) -> np.ndarray:
    """A seeded bijection on ``bits``-bit integers (1 <= bits <= 64), applied in place to a copy.

    Requires: uint64 ``x`` with every value < 2**bits. Returns a new uint64 array.
    Each step (xor with a constant, xor-shift right, odd multiply mod 2**bits) is invertible.
    """
    if not 1 <= bits <= 64:
        raise InvalidInputError(f"perm_bits needs 1..64 bits, got {bits}")
    mask = np.uint64((1 << bits) - 1)
    z = np.bitwise_xor(x, np.uint64(_odd_constant(seed, 0, bits) & int(mask)))
    for rnd in (1, 2):
        shift = np.uint64(max(1, (bits + 1) // 2))
        np.bitwise_xor(z, np.right_shift(z, shift), out=z)
        np.multiply(z, np.uint64(_odd_constant(seed, rnd, bits)), out=z)
        if bits < 64:
            np.bitwise_and(z, mask, out=z)
    np.bitwise_xor(z, np.right_shift(z, np.uint64(max(1, bits // 3))), out=z)
    return z


def mix64(x: np.ndarray, seed: int) -> np.ndarray:
    """splitmix64 finaliser of ``x ^ seed-constant``: uniform-looking uint64 (new array)."""
    z = np.bitwise_xor(x, np.uint64((seed * _GOLDEN + 0x632BE59BD9B4E019) & _MASK64))
    np.bitwise_xor(z, np.right_shift(z, np.uint64(30)), out=z)
    np.multiply(z, _M1, out=z)
    np.bitwise_xor(z, np.right_shift(z, np.uint64(27)), out=z)
    np.multiply(z, _M2, out=z)
    np.bitwise_xor(z, np.right_shift(z, np.uint64(31)), out=z)
    return z


def host_rank(ids: np.ndarray, n_hosts: int, seed: int) -> np.ndarray:
    """Zipf-like (exponent 1) host rank in [0, n_hosts) of each id: rank 0 is the busiest."""
    u = np.right_shift(mix64(ids, seed ^ 0x5EED), np.uint64(11)).astype(np.float64)
    u *= 2.0**-53
    u *= math.log(n_hosts + 1.0)
    np.exp(u, out=u)
    r = u.astype(np.uint64)  # floor((n+1)**u) in [1, n+1)
    r -= np.uint64(1)
    np.minimum(r, np.uint64(n_hosts - 1), out=r)  # guard float rounding at the top
    return r


def keys_of_ids(ids: np.ndarray, host_bits: int, n_hosts: int, seed: int) -> np.ndarray:
    """The key of each id: ``host_bucket(id) << L | perm_L(id)``; injective on ids < 2**L.

    Requires: uint64 ``ids``, each < 2**(64 - host_bits).
    """
    low_bits = 64 - host_bits
    keys = perm_bits(ids, low_bits, seed)
    if host_bits:
        bucket = perm_bits(host_rank(ids, n_hosts, seed), host_bits, seed ^ 0xB0C)
        np.left_shift(bucket, np.uint64(low_bits), out=bucket)
        np.bitwise_or(keys, bucket, out=keys)
    return keys


class CrawlStream:
    """Deterministic stream of ``Batch``es totalling ``total_keys`` offered keys.

    ``reoffer``: share of each batch's non-duplicate slots given to keys of earlier batches
    (the first batch has none). ``dup``: share of each batch's slots that repeat an earlier
    position of the same batch. Keys are uint64 with ``host_bits`` top bits from
    ``n_hosts`` Zipf-distributed hosts (default 2**host_bits).
    """

    def __init__(
        self,
        total_keys: int,
        batch_size: int,
        reoffer: float = 0.5,
        dup: float = 0.1,
        seed: int = 0,
        host_bits: int = DEFAULT_LAYOUT.host_bits,
        n_hosts: int | None = None,
    ) -> None:
        if total_keys < 0 or batch_size < 1:
            raise InvalidInputError("total_keys must be >= 0 and batch_size >= 1")
        if not (0.0 <= reoffer <= 1.0 and 0.0 <= dup < 1.0):
            raise InvalidInputError("reoffer must be in [0, 1] and dup in [0, 1)")
        if not 0 <= host_bits <= 32:
            raise InvalidInputError(f"host_bits must be in 0..32, got {host_bits}")
        if total_keys >= 1 << (64 - host_bits):
            raise InvalidInputError("total_keys must be < 2**(64 - host_bits)")
        self.total_keys = int(total_keys)
        self.batch_size = int(batch_size)
        self.reoffer = float(reoffer)
        self.dup = float(dup)
        self.seed = int(seed)
        self.host_bits = int(host_bits)
        self.n_hosts = int(n_hosts or (1 << host_bits))
        if not 1 <= self.n_hosts <= 1 << host_bits:
            raise InvalidInputError(f"n_hosts must be in 1..2**host_bits, got {self.n_hosts}")

    @property
    def n_batches(self) -> int:
        return -(-self.total_keys // self.batch_size)

    def plan(self) -> Iterator[tuple[int, int, int, int, int]]:
        """Yields ``(index, first_fresh_id, n_fresh, n_reoffer, n_dup)`` per batch, no keys."""
        counter = 0
        for b in range(self.n_batches):
            size = min(self.batch_size, self.total_keys - b * self.batch_size)
            n_dup = int(round(self.dup * size)) if size > 1 else 0
            distinct_slots = size - n_dup
            n_re = int(round(self.reoffer * distinct_slots)) if counter > 0 else 0
            n_fresh = distinct_slots - n_re
            if n_fresh == 0 and n_re == 0:  # a duplicate needs something to copy
                n_fresh, n_dup = 1, n_dup - 1
            yield b, counter, n_fresh, n_re, n_dup
            counter += n_fresh

    @property
    def expected_total_new(self) -> int:
        """Distinct keys offered by the whole stream (= keys a correct store holds at the end)."""
        return sum(p[2] for p in self.plan())

    def batch(self, index: int, first_id: int, n_fresh: int, n_re: int, n_dup: int) -> Batch:
        """Builds batch ``index`` from its plan entry (deterministic in seed and index)."""
        rng = np.random.default_rng([self.seed, index])
        n_ids = n_fresh + n_re
        out = np.empty(n_ids + n_dup, dtype=np.uint64)
        for lo in range(0, n_ids, _CHUNK):  # chunks keep temporaries in cache
            hi = min(lo + _CHUNK, n_ids)
            ids = np.empty(hi - lo, dtype=np.uint64)
            f_hi = max(lo, min(hi, n_fresh))
            ids[: f_hi - lo] = np.arange(first_id + lo, first_id + f_hi, dtype=np.uint64)
            if hi > f_hi:
                ids[f_hi - lo :] = rng.integers(0, first_id, size=hi - f_hi, dtype=np.uint64)
            out[lo:hi] = keys_of_ids(ids, self.host_bits, self.n_hosts, self.seed)
        if n_dup:
            src = rng.integers(0, n_ids, size=n_dup, dtype=np.int64)
            out[n_ids:] = out[src]
        return Batch(index, out, n_fresh, n_re, n_dup)

    def batch_chunks(self, index: int, first_id: int, n_fresh: int, n_re: int, n_dup: int,
                     chunk_keys: int = 1 << 22) -> Iterator[np.ndarray]:
        """Batch ``index`` as a sequence of uint64 arrays of at most ``chunk_keys`` keys,
        for batches larger than memory (``SeenStore.add_new_file`` takes them as they come).

        The same three blocks as ``batch`` and the same exact expectation (the new keys
        are the ``n_fresh`` fresh ids' keys, each first seen in this batch, so
        ``expected_new == n_fresh``); the fresh block is identical to ``batch``'s, the
        others are drawn from a per-chunk random stream: a re-offered slot is a uniform
        id below ``first_id``; an in-batch repeat copies a uniform position of the batch's
        distinct slots, recomputed from its id when it is a fresh one and drawn as one
        more re-offered id otherwise (no chunk needs the rest of the batch in memory).
        Each chunk is a new array the caller may modify."""
        if chunk_keys < 1:
            raise InvalidInputError("chunk_keys must be >= 1")
        n_ids = n_fresh + n_re
        total = n_ids + n_dup
        for c, lo in enumerate(range(0, total, chunk_keys)):
            hi = min(lo + chunk_keys, total)
            rng = np.random.default_rng([self.seed, index, c, 0xC4])
            ids = np.empty(hi - lo, dtype=np.uint64)
            f_hi = max(lo, min(hi, n_fresh))  # fresh positions [lo, f_hi)
            ids[: f_hi - lo] = np.arange(first_id + lo, first_id + f_hi, dtype=np.uint64)
            r_hi = max(f_hi, min(hi, n_ids))  # re-offered positions [f_hi, r_hi)
            if r_hi > f_hi:
                ids[f_hi - lo: r_hi - lo] = rng.integers(0, first_id, size=r_hi - f_hi,
                                                         dtype=np.uint64)
            if hi > r_hi:  # repeats: a fresh position's id, or an earlier batch's id
                src = rng.integers(0, n_ids, size=hi - r_hi, dtype=np.uint64)
                fresh = src < np.uint64(n_fresh)
                old = rng.integers(0, max(first_id, 1), size=hi - r_hi, dtype=np.uint64)
                ids[r_hi - lo:] = np.where(fresh, src + np.uint64(first_id), old)
            out = np.empty(hi - lo, dtype=np.uint64)
            for a in range(0, hi - lo, _CHUNK):  # generation steps keep temporaries in cache
                b = min(a + _CHUNK, hi - lo)
                out[a:b] = keys_of_ids(ids[a:b], self.host_bits, self.n_hosts, self.seed)
            yield out

    def __iter__(self) -> Iterator[Batch]:
        for p in self.plan():
            yield self.batch(*p)
