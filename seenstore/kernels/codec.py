"""Block codec for sorted unique uint64 keys: Rice-coded gaps in two streams.

A block holds ``n`` >= 1 keys as its first key plus the ``n - 1`` gaps
``g = x[i] - x[i-1] - 1`` (>= 0: keys are unique). Each gap is split at ``k``
bits (chosen per block): the low ``k`` bits go, fixed-width, to the *low*
stream; the quotient ``q = g >> k`` goes, unary (``q`` zeros, then a one), to
the *high* stream. This is Elias–Fano's two-stream layout applied to the gaps
(Golomb–Rice coding): ~log2(gap) + 1.5 bits per key, 0.5 bit under Elias–Fano
on the absolute values, and the same decode loop (fixed-width reads plus a
count-trailing-zeros scan). Byte layout and the choice of ``k``: docs/format.md,
"Compressed run file". Twin: tests/naive.py (``rice_encode_block_naive`` ...).

Block, in little-endian uint64 words::

    w0  first key
    w1  n (bits 0-31) | k (bits 32-39) | 0 (bits 40-47) | size in words (bits 48-63)
    w2  low stream: (n-1) k-bit fields, LSB first, padded to a whole word
    ..  high stream: unary quotients, LSB first, padded to a whole word
    last  checksum: xxh3-64 (seed 0) of the block's bytes before this word

The kernels leave the checksum word to the caller (store/runs/codec.py): the
``xxhash`` package hashes ~5x faster than a numba xxh3, and one Python call per
block of thousands of keys costs well under 1 ns per key. Decoding never reads
past a block's size field, so a kernel may decode before the checksum is
compared; nothing decoded is used unless it matches.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros  # LLVM cttz: one tzcnt

U0 = np.uint64(0)
U1 = np.uint64(1)
U32 = np.uint64(32)
U40 = np.uint64(40)
U48 = np.uint64(48)
U63 = np.uint64(63)
U6 = np.uint64(6)
U64 = np.uint64(64)
TOP = np.uint64(0xFFFFFFFFFFFFFFFF)
M8 = np.uint64(0xFF)
M32 = np.uint64(0xFFFFFFFF)
HEAD_WORDS = 2  # w0, w1; one checksum word ends the block
MAX_BLOCK_KEYS = 8192  # keeps the size field (16 bits) and n (32 bits) far from overflow

# Status codes returned by the decoding kernels (0 = fine).
OK = 0
BAD_SIZE = 1  # size field impossible or past the end of the buffer
BAD_ORDER = 2  # keys overflow 2^64 or do not ascend across blocks
BAD_STREAM = 3  # the high stream has too few or too many ones
BAD_INDEX = 4  # a block's first key differs from the block index (sweep_blocks)
# decode_block's fast path: a quotient is below 64 x max_block_words(MAX_BLOCK_KEYS)
# < 2^20 bits, so up to this k a step (q << k) + low + 1 stays below 2^63 + 2^44
FAST_MAX_K = 43
SENTINELS = 8  # sweep_blocks compares 8 keys at a time: scratch holds 8 past a block


@njit(cache=True, nogil=True)
def max_block_words(n):
    """Upper bound on the words one block of ``n`` >= 1 keys takes (see ``choose_k``):
    header, low stream <= (n-1) k bits, high stream < (n-1) (1 + 2) bits, two paddings."""
    return HEAD_WORDS + 3 + ((n - 1) * 66 + 63) // 64


@njit(cache=True, nogil=True)
def choose_k(keys, lo, hi):
    """The low-bit width for the gaps of ``keys[lo:hi]`` (hi - lo >= 2): whichever of
    ``f - 1`` and ``f`` = floor(log2(mean gap)) gives fewer bits (ties: ``f``).
    With ``f``, sum(q) <= sum(g) / 2^f < 2 (n - 1), which bounds the block size."""
    m = np.uint64(hi - lo - 1)
    span = keys[hi - 1] - keys[lo] - m  # sum of gaps; no overflow: keys are unique
    mean = span // m
    f = 0
    while f < 63 and (mean >> np.uint64(f + 1)) != U0:
        f += 1
    if f == 0:
        return 0
    kf = np.uint64(f)
    kd = np.uint64(f - 1)
    sum_f = U0
    sum_d = U0
    prev = keys[lo]
    for i in range(lo + 1, hi):
        g = keys[i] - prev - U1
        prev = keys[i]
        sum_f += g >> kf
        sum_d += g >> kd
    # cost(k) = (n-1) k + sum(g >> k) + (n-1); compare without the common terms
    if sum_d < sum_f + m:
        return f - 1
    return f


@njit(cache=True, nogil=True)
def encode_block(keys, lo, hi, out, at):
    """Encode ``keys[lo:hi]`` (1 <= hi - lo <= MAX_BLOCK_KEYS) as one block at
    ``out[at:]``; return the word just past it. Requires: keys sorted, unique;
    ``out`` has ``max_block_words(hi - lo)`` words free at ``at``."""
    n = hi - lo
    k = choose_k(keys, lo, hi) if n >= 2 else 0
    uk = np.uint64(k)
    low_mask = (U1 << uk) - U1
    low_words = ((n - 1) * k + 63) // 64
    out[at] = keys[lo]
    p = at + HEAD_WORDS
    # low stream: k-bit fields through a 64-bit accumulator
    acc = U0
    nacc = 0
    if k > 0:
        prev = keys[lo]
        for i in range(lo + 1, hi):
            v = (keys[i] - prev - U1) & low_mask
            prev = keys[i]
            acc |= v << np.uint64(nacc)
            nacc += k
            if nacc >= 64:
                out[p] = acc
                p += 1
                nacc -= 64
                acc = (v >> np.uint64(k - nacc)) if nacc > 0 else U0
        if nacc > 0:
            out[p] = acc
            p += 1
    # high stream: q zeros then a one per gap
    h0 = at + HEAD_WORDS + low_words
    pos = U0  # bit position in the high stream
    prev = keys[lo]
    for i in range(lo + 1, hi):
        g = keys[i] - prev - U1
        prev = keys[i]
        pos += g >> uk
        w = h0 + np.int64(pos >> np.uint64(6))
        while p <= w:  # zero the words the unary run skipped
            out[p] = U0
            p += 1
        out[w] |= U1 << (pos & U63)
        pos += U1
    h_end = h0 + np.int64((pos + U63) >> np.uint64(6))
    while p < h_end:
        out[p] = U0
        p += 1
    size = h_end + 1 - at
    out[at + 1] = np.uint64(n) | (uk << U32) | (np.uint64(size) << U48)
    out[h_end] = U0  # the checksum, filled in by the caller
    return h_end + 1


@njit(cache=True, nogil=True)
def encode_blocks(keys, block_keys, out, first, offsets):
    """Encode ``keys`` (sorted, unique) as ceil(len / block_keys) blocks into ``out``,
    back to back from word 0. Fills, per block b, ``first[b]`` (its first key) and
    ``offsets[b]`` (its word offset in ``out``; it ends at ``offsets[b+1]``, the last
    block at the returned word count, and its last word is the checksum slot).
    Returns the words written. Requires: ``out`` at least ``encoded_bound`` words."""
    n = keys.shape[0]
    p = 0
    b = 0
    for lo in range(0, n, block_keys):
        hi = min(lo + block_keys, n)
        first[b] = keys[lo]
        offsets[b] = p
        p = encode_block(keys, lo, hi, out, p)
        b += 1
    return p


@njit(cache=True, nogil=True)
def encoded_bound(n, block_keys):
    """Words ``encode_blocks`` may need for ``n`` keys in blocks of ``block_keys``."""
    full = n // block_keys
    rest = n - full * block_keys
    total = full * max_block_words(block_keys)
    if rest:
        total += max_block_words(rest)
    return total


@njit(cache=True, nogil=True)
def block_size(words, at, avail):
    """(n, size in words, status) of the block at ``words[at:]`` from its header
    alone; ``avail``: words readable from ``at``. Size 0 (status OK) when fewer than
    a header's words, or fewer than the size field says, are available yet."""
    if avail < HEAD_WORDS:
        return 0, 0, OK
    meta = words[at + 1]
    n = np.int64(meta & M32)
    k = np.int64((meta >> U32) & M8)
    size = np.int64(meta >> U48)
    zero = (meta >> U40) & M8
    if n < 1 or n > MAX_BLOCK_KEYS or k > 63 or zero != U0 or size > max_block_words(n):
        return n, size, BAD_SIZE
    if size < HEAD_WORDS + ((n - 1) * k + 63) // 64 + (1 if n > 1 else 0) + 1:
        return n, size, BAD_SIZE
    if size > avail:
        return n, 0, OK
    return n, size, OK


@njit(cache=True, nogil=True)
def decode_block(words, at, size, out, o):
    """Decode the block ``words[at:at+size]`` (its size from ``block_size``) into
    ``out[o:o+n]``; return a status. Reads only inside the block; does not compare
    the checksum (the caller does). ``out[o:o+n]`` is unspecified after a non-OK
    status.

    Two passes (k <= FAST_MAX_K, every block of a real store): the fixed-width low
    fields into ``out``, then the unary quotients, each step added onto its low
    field. Unsigned indices (no negative-index wraparound code) and no overflow test
    per key: a step stays below 2^63 + 2^44, so the keys pass 2^64 - 1 exactly when
    the last key wraps below the first (one test per block). 1.4-1.7x faster than
    ``_decode_block_checked``, which the rare wide-k block still takes."""
    ua = np.uint64(at)
    end = ua + np.uint64(size) - U1  # the checksum word
    meta = words[ua + U1]
    n = np.int64(meta & M32)
    k = np.int64((meta >> U32) & M8)
    uo = np.uint64(o)
    first = words[ua]
    out[uo] = first
    if n == 1:
        return OK if size == HEAD_WORDS + 1 else BAD_STREAM
    if k > FAST_MAX_K:
        return _decode_block_checked(words, at, size, out, o)
    uk = np.uint64(k)
    low_mask = (U1 << uk) - U1
    # pass 1: the k-bit fields, branch-free: the next word always exists inside the
    # block (the high stream follows); (x << 1) << (63 - lb) is x << (64 - lb)
    # without a shift by 64 when lb = 0
    bit = (ua + np.uint64(HEAD_WORDS)) * U64
    for i in range(1, n):
        wi = bit >> U6
        lb = bit & U63
        out[uo + np.uint64(i)] = ((words[wi] >> lb)
                                  | ((words[wi + U1] << U1) << (U63 - lb))) & low_mask
        bit += uk
    # pass 2: the high stream; q = zeros since the previous one
    h = ua + np.uint64(HEAD_WORDS + ((n - 1) * k + 63) // 64)
    un = np.uint64(n)
    i = U1
    last = TOP  # bit position of the previous one (-1, wrapped)
    prev = first
    for wi in range(h, end):
        w = words[wi]
        base = (wi - h) << U6
        while w != U0:
            pos = base + np.uint64(trailing_zeros(w))
            w &= w - U1
            if i == un:
                return BAD_STREAM  # more ones than gaps
            slot = uo + i
            prev = prev + ((pos - last - U1) << uk) + out[slot] + U1
            out[slot] = prev
            last = pos
            i += U1
    if i != un or last + U1 < (end - h - U1) * U64 + U1:
        return BAD_STREAM  # too few ones, or a whole padding word of zeros
    if prev <= first:  # a key passed 2^64 - 1 (at most once: the steps sum below 2^64)
        return BAD_ORDER
    return OK


@njit(cache=True, nogil=True)
def _decode_block_checked(words, at, size, out, o):
    """``decode_block`` for any k (1 <= n): one pass, each step checked for overflow."""
    end = at + size - 1  # the checksum word
    meta = words[at + 1]
    n = np.int64(meta & M32)
    k = np.int64((meta >> U32) & M8)
    uk = np.uint64(k)
    low_mask = (U1 << uk) - U1
    prev = words[at]
    out[o] = prev
    if n == 1:
        return OK if size == HEAD_WORDS + 1 else BAD_STREAM
    lp = at + HEAD_WORDS  # low stream: word and bit of the next field
    lb = 0
    h = lp + ((n - 1) * k + 63) // 64
    i = 1
    last_one = np.int64(-1)  # bit position of the previous one in the high stream
    for wi in range(h, end):
        w = words[wi]
        base = np.int64(64 * (wi - h))
        while w != U0:
            t = np.int64(trailing_zeros(w))
            w &= w - U1
            pos = base + t
            q = np.uint64(pos - last_one - 1)
            last_one = pos
            # the k-bit field at (lp, lb), branch-free: the next word always exists
            # inside the block (the high stream follows), (x << 1) << (63 - lb) is
            # x << (64 - lb) without a shift by 64 when lb = 0
            low = ((words[lp] >> np.uint64(lb))
                   | ((words[lp + 1] << U1) << np.uint64(63 - lb))) & low_mask
            lb += k
            lp += lb >> 6
            lb &= 63
            if k > 0 and q > (~U0 >> uk):  # q << k would overflow
                return BAD_ORDER
            step = (q << uk) + low
            if step >= ~prev:  # prev + step + 1 would pass 2^64 - 1
                return BAD_ORDER
            prev = prev + step + U1
            if i == n:
                return BAD_STREAM  # more ones than gaps
            out[o + i] = prev
            i += 1
    if i != n or last_one < np.int64(64 * (end - h - 1)):
        return BAD_STREAM  # too few ones, or a whole padding word of zeros
    return OK


@njit(cache=True, nogil=True)
def decode_blocks(words, avail, out, prev_last, have_prev):
    """Decode whole blocks from ``words[:avail]`` into ``out`` while both the next
    block and its keys fit. ``prev_last``/``have_prev``: the last key before these
    blocks, to check that blocks ascend.

    Returns ``(words used, keys written, blocks decoded, status, bad word)``: on a
    non-OK status, the word offset of the block at fault."""
    p = 0
    o = 0
    b = 0
    cap = out.shape[0]
    while True:
        n, size, st = block_size(words, p, avail - p)
        if st != OK:
            return p, o, b, st, p
        if size == 0 or o + n > cap:
            return p, o, b, OK, p
        st = decode_block(words, p, size, out, o)
        if st == OK and have_prev and out[o] <= prev_last:
            st = BAD_ORDER
        if st != OK:
            return p, o, b, st, p
        prev_last = out[o + n - 1]
        have_prev = True
        o += n
        p += size
        b += 1


@njit(cache=True, nogil=True)
def sweep_blocks(words, avail, first, scratch, batch, j, found, prev_last, have_prev):
    """Decode whole blocks from ``words[:avail]`` one at a time into ``scratch`` and
    mark in ``found`` the keys of ``batch[j:]`` they hold (the store's check of a
    batch against a run, without the decoded run ever leaving the L1 cache):
    ``decode_blocks`` and ``merge.sweep_step`` in one pass. ``first[b]``: the block
    index's first key of the b-th block here (checked). ``prev_last``/``have_prev``:
    the last key before these blocks (the blocks must ascend).

    Requires: ``batch`` sorted ascending, unique; ``found`` as long, only set True
    here; ``scratch`` at least the largest block's n + SENTINELS keys. Returns
    ``(words used, keys decoded, blocks, status, bad word, j, last key, have)``: j
    the first batch position above every key decoded. Twin: tests/naive.py
    ``sweep_naive`` over ``rice_decode_block_naive``."""
    p = 0
    o = 0
    b = 0
    unb = np.uint64(batch.shape[0])
    uj = np.uint64(j)
    while True:
        n, size, st = block_size(words, p, avail - p)
        if st == OK and size != 0 and (n + SENTINELS > scratch.shape[0]
                                       or b >= first.shape[0]):
            st = BAD_SIZE
        if st != OK or size == 0:
            return p, o, b, st, p, np.int64(uj), prev_last, have_prev
        st = decode_block(words, p, size, scratch, 0)
        if st == OK and have_prev and scratch[0] <= prev_last:
            st = BAD_ORDER
        if st == OK and scratch[0] != first[b]:
            st = BAD_INDEX
        if st != OK:
            return p, o, b, st, p, np.int64(uj), prev_last, have_prev
        last = scratch[n - 1]
        for t in range(SENTINELS):  # no key is below 2^64 - 1 past the block
            scratch[n + t] = TOP
        # each batch key in the block: skip the keys below it 8 at a time (compares
        # without branches: one well-predicted loop exit per batch key)
        i = U0
        while uj < unb:
            x = batch[uj]
            if x > last:
                break
            while True:
                c = U0
                for t in range(SENTINELS):
                    c += np.uint64(scratch[i + np.uint64(t)] < x)
                i += c
                if c < SENTINELS:
                    break
            found[uj] |= scratch[i] == x
            uj += U1
        prev_last = last
        have_prev = True
        o += n
        p += size
        b += 1


@njit(cache=True, nogil=True)
def lookup(words, first, offsets, queries, found, scratch):
    """Point lookups: ``found[i]`` = True when ``queries[i]`` is a key of the run
    whose body is ``words`` with block index ``first``/``offsets`` (word offsets).
    Decodes only the blocks some query falls in, each once (the caller has compared
    their checksums). ``scratch``: uint64 buffer of at least the run's block size.
    Requires: queries sorted ascending; ``first`` and ``offsets`` as written.

    Returns ``(status, bad block index)``; status OK = 0."""
    nb = first.shape[0]
    nq = queries.shape[0]
    cur = -1
    n_cur = 0
    j = 0  # position inside the decoded block
    for qi in range(nq):
        x = queries[qi]
        found[qi] = False
        if nb == 0 or x < first[0]:
            continue
        # the block holding x: last b with first[b] <= x, searched from cur on
        lo = cur if cur > 0 else 0
        hi = nb
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if first[mid] <= x:
                lo = mid
            else:
                hi = mid
        if lo != cur:
            at = np.int64(offsets[lo])
            end = np.int64(offsets[lo + 1]) if lo + 1 < nb else words.shape[0]
            n_cur, size, st = block_size(words, at, end - at)
            if st == OK and size != end - at:
                st = BAD_SIZE
            if st == OK:
                st = decode_block(words, at, size, scratch, 0)
            if st == OK and scratch[0] != first[lo]:
                st = BAD_ORDER
            if st != OK:
                return st, lo
            cur = lo
            j = 0
        while j < n_cur and scratch[j] < x:
            j += 1
        found[qi] = j < n_cur and scratch[j] == x
    return OK, -1
