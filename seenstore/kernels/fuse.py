"""Binary fuse filter kernels (Graf and Lemire, "Binary Fuse Filters: Fast and Smaller
Than Xor Filters", 2022): a static filter over a set of distinct uint64 keys.

Each key maps to three slots of an array of ``f``-bit fingerprints, one in each of
three consecutive segments of ``seg_len`` slots; the build assigns the slots so that
the three XOR to the key's own ``f``-bit fingerprint. A query answers *maybe present*
when they do: never a false negative for a key built in, false positives at about
2^-f, at about 1.125 f bits per key (arity 3, from ~1e6 keys). The fingerprints are
packed ``f`` bits each, LSB first, in uint64 words (``f`` in 1..16), so any ``f``
costs what it stores. Layout and parameters: docs/bloom.md, "Static filters";
sizes: ``seenstore/bloom/fuse.py``. Twin: ``kernels/twins/fuse.py`` (same bits).

All arithmetic is uint64, wrapping. Requires: keys distinct (a repeat is dropped by
the build, as the reference does; the store's keys are unique by construction).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from seenstore.kernels.bloom import prefetch_read

_U = np.uint64
M36 = (1 << 36) - 1
MAX_ITERATIONS = 100  # seeds tried before a build gives up (each fails with p < ~1e-3)
RNG_START = 0x726B2B9D438B9D4D  # the reference's first splitmix64 state


@njit(cache=True, nogil=True)
def murmur64(h):
    h ^= h >> _U(33)
    h *= _U(0xFF51AFD7ED558CCD)
    h ^= h >> _U(33)
    h *= _U(0xC4CEB9FE1A85EC53)
    h ^= h >> _U(33)
    return h


@njit(cache=True, nogil=True)
def splitmix64(state):
    """(next state, output) of splitmix64."""
    state = state + _U(0x9E3779B97F4A7C15)
    z = state
    z = (z ^ (z >> _U(30))) * _U(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> _U(27))) * _U(0x94D049BB133111EB)
    return state, z ^ (z >> _U(31))


@njit(cache=True, nogil=True)
def mulhi32(a, b):
    """floor(a * b / 2^64) for b < 2^32 (exact, no 128-bit product needed)."""
    m = _U(0xFFFFFFFF)
    return ((a >> _U(32)) * b + (((a & m) * b) >> _U(32))) >> _U(32)


@njit(cache=True, nogil=True)
def slot(index, h, seg_len, scl):
    """Slot ``index`` (0, 1, 2) of hash ``h``: segment start by the top bits, the
    offset inside it from bits 36-18*index.. of the low 36 bits (the reference's)."""
    s = mulhi32(h, scl) + _U(index) * seg_len
    hh = h & _U(M36)
    return s ^ ((hh >> _U(36 - 18 * index)) & (seg_len - _U(1)))


@njit(cache=True, nogil=True)
def get_fp(words, i, f):
    bit = i * f
    w = bit >> _U(6)
    s = bit & _U(63)
    v = words[w] >> s
    if s + f > _U(64):
        v |= words[w + _U(1)] << (_U(64) - s)
    return v & ((_U(1) << f) - _U(1))


@njit(cache=True, nogil=True)
def or_fp(words, i, f, v):
    bit = i * f
    w = bit >> _U(6)
    s = bit & _U(63)
    words[w] |= v << s
    if s + f > _U(64):
        words[w + _U(1)] |= v >> (_U(64) - s)


QUERY_GROUP = 32  # keys whose three slots are prefetched before any is read


@njit(cache=True, nogil=True)
def fuse_query(words, keys, seed, seg_len, scl, f, out):
    """out[i] = keys[i] maybe in the filter (``words`` as built by ``fuse_build``
    with ``seed``, ``seg_len`` slots per segment, ``scl`` = segments x seg_len).

    Keys go in groups of QUERY_GROUP: a group's hashes are made and the words of its
    three slots each prefetched before any is read, so the cache misses of a group
    overlap (as the Bloom kernels' groups do, docs/bloom.md "The kernels")."""
    seed = _U(seed)
    seg_len = _U(seg_len)
    scl = _U(scl)
    f = _U(f)
    fmask = (_U(1) << f) - _U(1)
    hs = np.empty(QUERY_GROUP, np.uint64)
    n = len(keys)
    for g0 in range(0, n, QUERY_GROUP):
        g1 = min(g0 + QUERY_GROUP, n)
        for i in range(g0, g1):
            h = murmur64(keys[i] + seed)
            hs[i - g0] = h
            prefetch_read(words, (slot(0, h, seg_len, scl) * f) >> _U(6))
            prefetch_read(words, (slot(1, h, seg_len, scl) * f) >> _U(6))
            prefetch_read(words, (slot(2, h, seg_len, scl) * f) >> _U(6))
        for i in range(g0, g1):
            h = hs[i - g0]
            v = (h ^ (h >> _U(32))) & fmask
            v ^= get_fp(words, slot(0, h, seg_len, scl), f)
            v ^= get_fp(words, slot(1, h, seg_len, scl), f)
            v ^= get_fp(words, slot(2, h, seg_len, scl), f)
            out[i] = v == _U(0)


@njit(cache=True, nogil=True)
def fuse_build(keys, seg_len, scl, array_length, f, words):
    """Build the filter of ``keys`` (distinct) into ``words`` (zeroed, at least
    ceil(array_length * f / 64) + 1 words). Returns (seed, tries): the seed the
    filter was built with and the seeds tried, or (0, -1) after MAX_ITERATIONS."""
    n = len(keys)
    seg_len = _U(seg_len)
    scl = _U(scl)
    f = _U(f)
    fmask = (_U(1) << f) - _U(1)
    seg_count = int(scl // seg_len)
    rev = np.zeros(n + 1, np.uint64)
    rev_h = np.zeros(max(n, 1), np.uint8)
    alone = np.empty(array_length, np.uint32)
    count = np.zeros(array_length, np.uint8)
    xhash = np.zeros(array_length, np.uint64)
    block_bits = 1
    while (1 << block_bits) < seg_count:
        block_bits += 1
    block = 1 << block_bits
    start = np.empty(block, np.int64)
    h012 = np.empty(5, np.uint64)
    state = _U(RNG_START)
    for tries in range(1, MAX_ITERATIONS + 1):
        state, seed = splitmix64(state)
        rev[:] = 0
        count[:] = 0
        xhash[:] = 0
        rev[n] = 1
        # the hashes in order of their segment (cache locality of the next pass)
        for b in range(block):
            start[b] = (b * n) >> block_bits
        shift = _U(64 - block_bits)
        mask = _U(block - 1)
        for i in range(n):
            h = murmur64(keys[i] + seed)
            c = h >> shift
            while rev[start[c]] != _U(0):
                c = (c + _U(1)) & mask
            rev[start[c]] = h
            start[c] += 1
        error = False
        dups = 0
        for i in range(n):
            h = rev[i]
            a0 = slot(0, h, seg_len, scl)
            a1 = slot(1, h, seg_len, scl)
            a2 = slot(2, h, seg_len, scl)
            count[a0] += 4
            xhash[a0] ^= h
            count[a1] += 4
            count[a1] ^= 1
            xhash[a1] ^= h
            count[a2] += 4
            count[a2] ^= 2
            xhash[a2] ^= h
            if (xhash[a0] & xhash[a1] & xhash[a2]) == _U(0):
                if ((xhash[a0] == _U(0) and count[a0] == 8)
                        or (xhash[a1] == _U(0) and count[a1] == 8)
                        or (xhash[a2] == _U(0) and count[a2] == 8)):
                    dups += 1  # the same hash twice: undo the second
                    count[a0] -= 4
                    xhash[a0] ^= h
                    count[a1] -= 4
                    count[a1] ^= 1
                    xhash[a1] ^= h
                    count[a2] -= 4
                    count[a2] ^= 2
                    xhash[a2] ^= h
            if count[a0] < 4 or count[a1] < 4 or count[a2] < 4:
                error = True  # a count wrapped past 63 keys in one slot
        if error:
            continue
        q = 0
        for i in range(array_length):
            alone[q] = i
            if (count[i] >> 2) == 1:
                q += 1
        stack = 0
        while q > 0:
            q -= 1
            idx = alone[q]
            if (count[idx] >> 2) == 1:
                h = xhash[idx]
                h012[1] = slot(1, h, seg_len, scl)
                h012[2] = slot(2, h, seg_len, scl)
                h012[3] = slot(0, h, seg_len, scl)
                h012[4] = h012[1]
                found = count[idx] & 3
                rev_h[stack] = found
                rev[stack] = h
                stack += 1
                for d in range(1, 3):
                    other = h012[found + d]
                    alone[q] = other
                    if (count[other] >> 2) == 2:
                        q += 1
                    count[other] -= 4
                    count[other] ^= (found + d) % 3
                    xhash[other] ^= h
        if stack + dups == n:
            words[:] = 0
            for i in range(stack - 1, -1, -1):
                h = rev[i]
                found = rev_h[i]
                h012[0] = slot(0, h, seg_len, scl)
                h012[1] = slot(1, h, seg_len, scl)
                h012[2] = slot(2, h, seg_len, scl)
                h012[3] = h012[0]
                h012[4] = h012[1]
                v = (h ^ (h >> _U(32))) & fmask
                v ^= get_fp(words, h012[found + 1], f) ^ get_fp(words, h012[found + 2], f)
                or_fp(words, h012[found], f, v)
            return seed, tries
    return _U(0), -1
