"""Twins of kernels/fuse.py: the query in numpy (whole arrays), the build in plain
Python integers (one key at a time, the reference's steps). Both give the kernel's
bits and answers; the build is for small inputs only (tests)."""

from __future__ import annotations

import numpy as np

_U = np.uint64
MAX_ITERATIONS = 100  # kernels/fuse.py's (the twins import no numba; tested equal)
RNG_START = 0x726B2B9D438B9D4D
_M64 = (1 << 64) - 1
_M36 = (1 << 36) - 1


def murmur64(h):
    """numpy uint64 arrays or Python ints (wrapped to 64 bits)."""
    if isinstance(h, int):
        h ^= h >> 33
        h = (h * 0xFF51AFD7ED558CCD) & _M64
        h ^= h >> 33
        h = (h * 0xC4CEB9FE1A85EC53) & _M64
        return h ^ (h >> 33)
    with np.errstate(over="ignore"):
        h = h ^ (h >> _U(33))
        h = h * _U(0xFF51AFD7ED558CCD)
        h = h ^ (h >> _U(33))
        h = h * _U(0xC4CEB9FE1A85EC53)
        return h ^ (h >> _U(33))


def _slot(index: int, h: int, seg_len: int, scl: int) -> int:
    return (((h * scl) >> 64) + index * seg_len) ^ (((h & _M36) >> (36 - 18 * index))
                                                    & (seg_len - 1))


def _fp(bits_of: int, i: int, f: int) -> int:
    return (bits_of >> (i * f)) & ((1 << f) - 1)


def fuse_query(words, keys, seed, seg_len, scl, f, out):
    """As the kernel: out[i] = keys[i] maybe in the filter."""
    f = int(f)
    with np.errstate(over="ignore"):
        h = murmur64(np.asarray(keys, _U) + _U(seed))
    lo, hi = h & _U(0xFFFFFFFF), h >> _U(32)
    top = (hi * _U(scl) + ((lo * _U(scl)) >> _U(32))) >> _U(32)  # (h * scl) >> 64
    v = (h ^ hi) & _U((1 << f) - 1)
    for index in range(3):
        s = (top + _U(index * seg_len)) ^ (((h & _U(_M36)) >> _U(36 - 18 * index))
                                          & _U(seg_len - 1))
        bit = s * _U(f)
        w, sh = (bit >> _U(6)).astype(np.int64), bit & _U(63)
        part = words[w] >> sh
        spill = (sh + _U(f)) > _U(64)
        nxt = words[np.minimum(w + 1, len(words) - 1)]
        with np.errstate(over="ignore"):
            part = part | np.where(spill, nxt << ((_U(64) - sh) & _U(63)), _U(0))
        v = v ^ (part & _U((1 << f) - 1))
    out[:] = v == _U(0)


def fuse_build(keys, seg_len, scl, array_length, f, words):
    """As the kernel (same seeds, same order, same bits), in Python integers."""
    n = len(keys)
    fmask = (1 << f) - 1
    seg_count = scl // seg_len
    block_bits = 1
    while (1 << block_bits) < seg_count:
        block_bits += 1
    block = 1 << block_bits
    state = RNG_START
    for tries in range(1, MAX_ITERATIONS + 1):
        state = (state + 0x9E3779B97F4A7C15) & _M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        seed = z ^ (z >> 31)
        rev = [0] * (n + 1)
        rev[n] = 1
        start = [(b * n) >> block_bits for b in range(block)]
        for k in keys:
            h = murmur64((int(k) + seed) & _M64)
            b = h >> (64 - block_bits)
            while rev[start[b]]:
                b = (b + 1) & (block - 1)
            rev[start[b]] = h
            start[b] += 1
        count = [0] * array_length
        xhash = [0] * array_length
        error, dups = False, 0
        for i in range(n):
            h = rev[i]
            a = [_slot(j, h, seg_len, scl) for j in range(3)]
            for j in range(3):
                count[a[j]] = (count[a[j]] + 4) & 255 ^ j
                xhash[a[j]] ^= h
            if xhash[a[0]] & xhash[a[1]] & xhash[a[2]] == 0 and any(
                    xhash[a[j]] == 0 and count[a[j]] == 8 for j in range(3)):
                dups += 1
                for j in range(3):
                    count[a[j]] = (count[a[j]] - 4) & 255 ^ j
                    xhash[a[j]] ^= h
            error = error or any(count[a[j]] < 4 for j in range(3))
        if error:
            continue
        alone = [i for i in range(array_length) if count[i] >> 2 == 1]
        order, owner = [], []
        while alone:
            idx = alone.pop()
            if count[idx] >> 2 != 1:
                continue
            h = xhash[idx]
            a = [_slot(j, h, seg_len, scl) for j in range(3)]
            found = count[idx] & 3
            order.append(h)
            owner.append(found)
            for d in (1, 2):
                other = a[(found + d) % 3]
                if count[other] >> 2 == 2:
                    alone.append(other)
                count[other] = (count[other] - 4) & 255 ^ ((found + d) % 3)
                xhash[other] ^= h
        if len(order) + dups == n:
            bits_of = 0
            for h, found in zip(reversed(order), reversed(owner)):
                a = [_slot(j, h, seg_len, scl) for j in range(3)]
                v = (h ^ (h >> 32)) & fmask
                v ^= _fp(bits_of, a[(found + 1) % 3], f) ^ _fp(bits_of, a[(found + 2) % 3], f)
                bits_of |= v << (a[found] * f)
            words[:] = 0
            for w in range(len(words)):
                words[w] = (bits_of >> (64 * w)) & _M64
            return _U(seed), tries
    return _U(0), -1
