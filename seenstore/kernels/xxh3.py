"""numba XXH3-64 (seed 0, default secret), bit-identical to ``xxhash.xxh3_64``.

``xxh3_64(buf, start, end)`` hashes the bytes ``buf[start:end]`` of a uint8
array without copying, so a kernel can hash slices of one big URL buffer. All
code paths of XXH 0.8 are implemented: 0, 1-3, 4-8, 9-16, 17-128, 129-240 and
>240 bytes (stripes, blocks, scramble). The oracle is the ``xxhash`` package.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# XXH3_kSecret, the 192-byte default secret (xxhash.h, "taken from FARSH").
_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"
)
# S64[k] = little-endian uint64 read at secret byte offset k (every offset the
# algorithm uses is < 185). A module global: numba freezes it as a constant.
S64 = np.array(
    [int.from_bytes(_SECRET[k : k + 8], "little") for k in range(185)], dtype=np.uint64
)

P32_1 = np.uint64(0x9E3779B1)
P32_2 = np.uint64(0x85EBCA77)
P32_3 = np.uint64(0xC2B2AE3D)
P64_1 = np.uint64(0x9E3779B185EBCA87)
P64_2 = np.uint64(0xC2B2AE3D27D4EB4F)
P64_3 = np.uint64(0x165667B19E3779F9)
P64_4 = np.uint64(0x85EBCA77C2B2AE63)
P64_5 = np.uint64(0x27D4EB2F165667C5)
MX1 = np.uint64(0x165667919E3779F9)
MX2 = np.uint64(0x9FB21C651E98DF25)
M32 = np.uint64(0xFFFFFFFF)
U1 = np.uint64(1)
U2 = np.uint64(2)
U3 = np.uint64(3)
U4 = np.uint64(4)
U8 = np.uint64(8)
U16 = np.uint64(16)
U24 = np.uint64(24)
U32 = np.uint64(32)


@njit(cache=True, nogil=True)
def _rd32(buf, p):
    """Little-endian uint32 at buf[p:p+4], as uint64. Requires: 0 <= p, p + 4 <= len(buf).

    Unsigned indices skip numba's negative-index fix-up, so LLVM merges the
    byte loads into one wide load (also across the two halves of ``_rd64``).
    """
    q = np.uint64(p)
    return (
        np.uint64(buf[q])
        | (np.uint64(buf[q + U1]) << U8)
        | (np.uint64(buf[q + U2]) << U16)
        | (np.uint64(buf[q + U3]) << U24)
    )


@njit(cache=True, nogil=True)
def _rd64(buf, p):
    """Little-endian uint64 at buf[p:p+8]. Requires: 0 <= p, p + 8 <= len(buf)."""
    return _rd32(buf, p) | (_rd32(buf, p + 4) << U32)


@njit(cache=True, nogil=True)
def _rotl(x, r):
    """Rotate uint64 x left by r (1 <= r <= 63, uint64)."""
    return (x << r) | (x >> (np.uint64(64) - r))


@njit(cache=True, nogil=True)
def _bswap64(x):
    """Byte-swap a uint64."""
    x = ((x & np.uint64(0x00FF00FF00FF00FF)) << U8) | ((x >> U8) & np.uint64(0x00FF00FF00FF00FF))
    x = ((x & np.uint64(0x0000FFFF0000FFFF)) << U16) | ((x >> U16) & np.uint64(0x0000FFFF0000FFFF))
    return (x << U32) | (x >> U32)


@njit(cache=True, nogil=True)
def _mul128_fold64(a, b):
    """(low 64 bits) XOR (high 64 bits) of the 128-bit product a*b, by 32-bit halves."""
    a_lo = a & M32
    a_hi = a >> U32
    b_lo = b & M32
    b_hi = b >> U32
    lo_lo = a_lo * b_lo
    hi_lo = a_hi * b_lo
    lo_hi = a_lo * b_hi
    hi_hi = a_hi * b_hi
    cross = (lo_lo >> U32) + (hi_lo & M32) + lo_hi
    upper = (hi_lo >> U32) + (cross >> U32) + hi_hi
    lower = (cross << U32) | (lo_lo & M32)
    return lower ^ upper


@njit(cache=True, nogil=True)
def _xxh64_avalanche(h):
    h ^= h >> np.uint64(33)
    h *= P64_2
    h ^= h >> np.uint64(29)
    h *= P64_3
    h ^= h >> U32
    return h


@njit(cache=True, nogil=True)
def _avalanche(h):
    h ^= h >> np.uint64(37)
    h *= MX1
    h ^= h >> U32
    return h


@njit(cache=True, nogil=True)
def _rrmxmx(h, n):
    h ^= _rotl(h, np.uint64(49)) ^ _rotl(h, U24)
    h *= MX2
    h ^= (h >> np.uint64(35)) + n
    h *= MX2
    return h ^ (h >> np.uint64(28))


@njit(cache=True, nogil=True)
def _mix16(buf, p, s):
    """XXH3_mix16B over buf[p:p+16] with the secret at byte offset s (seed 0)."""
    return _mul128_fold64(_rd64(buf, p) ^ S64[s], _rd64(buf, p + 8) ^ S64[s + 8])


@njit(cache=True, nogil=True)
def _accumulate_512(acc, buf, p, s):
    """One 64-byte stripe at buf[p:] into the 8 accumulators, secret offset s."""
    for lane in range(8):
        v = _rd64(buf, p + 8 * lane)
        k = v ^ S64[s + 8 * lane]
        acc[lane ^ 1] += v
        acc[lane] += (k & M32) * (k >> U32)


@njit(cache=True, nogil=True)
def _hash_long(buf, start, n):
    """XXH3_hashLong_64b for n > 240 bytes at buf[start:start+n]."""
    acc = np.empty(8, dtype=np.uint64)
    acc[0] = P32_3
    acc[1] = P64_1
    acc[2] = P64_2
    acc[3] = P64_3
    acc[4] = P64_4
    acc[5] = P32_2
    acc[6] = P64_5
    acc[7] = P32_1
    # 16 stripes of 64 bytes per 1024-byte block, then a scramble.
    nb_blocks = (n - 1) // 1024
    for b in range(nb_blocks):
        base = start + b * 1024
        for st in range(16):
            _accumulate_512(acc, buf, base + 64 * st, 8 * st)
        for lane in range(8):
            a = acc[lane]
            a ^= a >> np.uint64(47)
            a ^= S64[128 + 8 * lane]
            acc[lane] = a * P32_1
    base = start + nb_blocks * 1024
    nb_stripes = ((n - 1) - 1024 * nb_blocks) // 64
    for st in range(nb_stripes):
        _accumulate_512(acc, buf, base + 64 * st, 8 * st)
    _accumulate_512(acc, buf, start + n - 64, 192 - 64 - 7)
    r = np.uint64(n) * P64_1
    for i in range(4):
        r += _mul128_fold64(acc[2 * i] ^ S64[11 + 16 * i], acc[2 * i + 1] ^ S64[11 + 16 * i + 8])
    return _avalanche(r)


@njit(cache=True, nogil=True)
def xxh3_64(buf, start, end):
    """XXH3-64 (seed 0) of buf[start:end]. Requires: buf uint8, 0 <= start <= end <= len(buf)."""
    n = end - start
    un = np.uint64(n)
    if n <= 16:
        if n > 8:
            lo = _rd64(buf, start) ^ (S64[24] ^ S64[32])
            hi = _rd64(buf, end - 8) ^ (S64[40] ^ S64[48])
            return _avalanche(un + _bswap64(lo) + hi + _mul128_fold64(lo, hi))
        if n >= 4:
            in1 = _rd32(buf, start)
            in2 = _rd32(buf, end - 4)
            keyed = (in2 + (in1 << U32)) ^ (S64[8] ^ S64[16])
            return _rrmxmx(keyed, un)
        if n > 0:
            c1 = np.uint64(buf[start])
            c2 = np.uint64(buf[start + (n >> 1)])
            c3 = np.uint64(buf[end - 1])
            combined = (c1 << U16) | (c2 << U24) | c3 | (un << U8)
            bitflip = (S64[0] & M32) ^ (S64[4] & M32)
            return _xxh64_avalanche(combined ^ bitflip)
        return _xxh64_avalanche(S64[56] ^ S64[64])
    if n <= 128:
        acc = un * P64_1
        if n > 32:
            if n > 64:
                if n > 96:
                    acc += _mix16(buf, start + 48, 96)
                    acc += _mix16(buf, end - 64, 112)
                acc += _mix16(buf, start + 32, 64)
                acc += _mix16(buf, end - 48, 80)
            acc += _mix16(buf, start + 16, 32)
            acc += _mix16(buf, end - 32, 48)
        acc += _mix16(buf, start, 0)
        acc += _mix16(buf, end - 16, 16)
        return _avalanche(acc)
    if n <= 240:
        acc = un * P64_1
        for i in range(8):
            acc += _mix16(buf, start + 16 * i, 16 * i)
        acc_end = _mix16(buf, end - 16, 136 - 17)
        acc = _avalanche(acc)
        for i in range(8, n // 16):
            acc_end += _mix16(buf, start + 16 * i, 16 * (i - 8) + 3)
        return _avalanche(acc + acc_end)
    return _hash_long(buf, start, n)


@njit(cache=True, nogil=True)
def xxh3_64_batch(buf, offsets):
    """XXH3-64 of each string i = buf[offsets[i]:offsets[i+1]]; returns uint64[len(offsets)-1].

    Requires: offsets int64, non-decreasing, offsets[-1] <= len(buf).
    """
    n = offsets.shape[0] - 1
    out = np.empty(n, dtype=np.uint64)
    for i in range(n):
        out[i] = xxh3_64(buf, offsets[i], offsets[i + 1])
    return out
