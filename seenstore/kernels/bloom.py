"""Bloom filter kernels: cache-line-blocked add/query over uint64 keys, plus fill counts.

The filter is a uint64 array of ``8 * n_blocks`` words; each key touches one
64-byte block (8 words, 512 bits) and sets/tests ``k`` bits inside it. Bit
positions come from ``locate`` (scheme 1, docs/bloom.md). A classic (unblocked)
variant is kept for the benchmark that justifies the blocked design. Twins:
tests/test_bloom_kernels.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def fmix64(x):
    """MurmurHash3's 64-bit finaliser: a bijection on uint64 that spreads every bit."""
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return x


@njit(cache=True, nogil=True)
def stream_word(seed, j):
    """Word ``j`` (j >= 1) of the splitmix64 stream started at ``seed`` (uint64)."""
    z = seed + np.uint64(j) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def locate(key, n_blocks, pos):
    """Fill ``pos`` (uint64[k]) with the key's k bit numbers (0..511); return its first word.

    Scheme 1: seed = fmix64(key); w1 = stream_word(seed, 1); block =
    ((w1 >> 32) * n_blocks) >> 32 (Requires: n_blocks < 2**32); then 9-bit fields
    are taken low bits first from the low 32 bits of w1 (3 fields), then 7 fields
    from each of stream_word(seed, 2), (seed, 3) ... Returns 8 * block (uint64).
    """
    seed = fmix64(key)
    w = stream_word(seed, 1)
    block = ((w >> np.uint64(32)) * n_blocks) >> np.uint64(32)
    pool = w & np.uint64(0xFFFFFFFF)
    avail = 32
    j = 1
    for p in range(pos.shape[0]):
        if avail < 9:
            j += 1
            pool = stream_word(seed, j)
            avail = 64
        pos[p] = pool & np.uint64(511)
        pool >>= np.uint64(9)
        avail -= 9
    return block << np.uint64(3)


@njit(cache=True, nogil=True)
def set_bits(words, base, pos):
    """Set bit ``pos[p]`` counted from word ``base``, for each p; True if any was clear."""
    changed = False
    for p in range(pos.shape[0]):
        w = base + (pos[p] >> np.uint64(6))
        old = words[w]
        new = old | (np.uint64(1) << (pos[p] & np.uint64(63)))
        if new != old:
            words[w] = new
            changed = True
    return changed


@njit(cache=True, nogil=True)
def all_bits_set(words, base, pos):
    """True when bit ``pos[p]`` counted from word ``base`` is set for every p."""
    for p in range(pos.shape[0]):
        w = base + (pos[p] >> np.uint64(6))
        if (words[w] >> (pos[p] & np.uint64(63))) & np.uint64(1) == np.uint64(0):
            return False
    return True


@njit(cache=True, nogil=True)
def bloom_add(words, keys, k):
    """Insert every key; return how many keys set at least one bit that was clear.

    Requires: words uint64 of length 8 * n_blocks, n_blocks < 2**32; keys uint64.
    A key repeated (in this call or earlier) sets nothing and is not counted.
    """
    n_blocks = np.uint64(words.shape[0] >> 3)
    pos = np.empty(k, np.uint64)
    fresh = 0
    for i in range(keys.shape[0]):
        if set_bits(words, locate(keys[i], n_blocks, pos), pos):
            fresh += 1
    return fresh


@njit(cache=True, nogil=True)
def bloom_query(words, keys, k, out):
    """Set ``out[i]`` (bool) True when all k bits of ``keys[i]`` are set (maybe present).

    Requires: as ``bloom_add``; ``out`` as long as ``keys``. Never writes ``words``.
    """
    n_blocks = np.uint64(words.shape[0] >> 3)
    pos = np.empty(k, np.uint64)
    for i in range(keys.shape[0]):
        out[i] = all_bits_set(words, locate(keys[i], n_blocks, pos), pos)


@njit(cache=True, nogil=True)
def bloom_add_query(words, keys, k, out):
    """For each key in order: ``out[i]`` = maybe present before it, then insert it.

    An earlier occurrence in the same call counts as present. Returns the number
    of keys for which ``out[i]`` is False (each set at least one bit).
    """
    n_blocks = np.uint64(words.shape[0] >> 3)
    pos = np.empty(k, np.uint64)
    fresh = 0
    for i in range(keys.shape[0]):
        changed = set_bits(words, locate(keys[i], n_blocks, pos), pos)
        out[i] = not changed
        if changed:
            fresh += 1
    return fresh


@njit(cache=True, nogil=True)
def popcount64(x):
    """Number of set bits of a uint64 (SWAR)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (x * np.uint64(0x0101010101010101)) >> np.uint64(56)


@njit(cache=True, nogil=True)
def block_fill_histogram(words, words_per_block, hist):
    """Add to ``hist[c]`` the number of blocks with exactly c bits set.

    Requires: len(words) a multiple of words_per_block; hist int64 of length
    64 * words_per_block + 1.
    """
    for b in range(words.shape[0] // words_per_block):
        c = 0
        for w in range(b * words_per_block, (b + 1) * words_per_block):
            c += popcount64(words[w])
        hist[c] += 1


@njit(cache=True, nogil=True)
def classic_locate(key, m, pos):
    """Fill ``pos`` with the key's k bit numbers in a classic filter of m bits (m < 2**32).

    Position p is ((h >> 32) * m) >> 32 for p even and ((h & 0xFFFFFFFF) * m) >> 32
    for p odd, where h = stream_word(fmix64(key), p // 2 + 1).
    """
    seed = fmix64(key)
    h = np.uint64(0)
    for p in range(pos.shape[0]):
        if p % 2 == 0:
            h = stream_word(seed, p // 2 + 1)
            pos[p] = ((h >> np.uint64(32)) * m) >> np.uint64(32)
        else:
            pos[p] = ((h & np.uint64(0xFFFFFFFF)) * m) >> np.uint64(32)


@njit(cache=True, nogil=True)
def classic_add(words, keys, k):
    """Classic (unblocked) insert over m = 64 * len(words) bits: the benchmark baseline."""
    m = np.uint64(words.shape[0]) << np.uint64(6)
    pos = np.empty(k, np.uint64)
    for i in range(keys.shape[0]):
        classic_locate(keys[i], m, pos)
        set_bits(words, np.uint64(0), pos)


@njit(cache=True, nogil=True)
def classic_query(words, keys, k, out):
    """Classic query, positions as ``classic_locate``; ``out[i]`` True = maybe present."""
    m = np.uint64(words.shape[0]) << np.uint64(6)
    pos = np.empty(k, np.uint64)
    for i in range(keys.shape[0]):
        classic_locate(keys[i], m, pos)
        out[i] = all_bits_set(words, np.uint64(0), pos)
