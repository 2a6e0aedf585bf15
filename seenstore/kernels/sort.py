"""Sort kernels: a radix sort of uint64 keys that does not depend on numpy's SIMD dispatch.

``radix_sort(a, buf)`` sorts ``a`` in place; ``sort_unique(a, buf)`` also drops
repeats and returns the count left at the front. Both make one MSD pass on the top
varying bits (``a`` scattered into ``buf`` in buckets of about ``bucket_keys`` keys,
so a bucket and its ping-pong copy fit the L2 cache), then sort each bucket in cache:
LSD passes (``width``-bit digits) over only its top ``log2(size) + extra`` varying
bits, the last pass writing straight back into ``a``, and an insertion pass that
finishes the few keys left out of order (a budget sends adversarial buckets, many
keys alike in those bits, to a full LSD sort instead). Bits constant over the array
(a shard's top bits) or over a bucket (a host's) cost no pass. The dedup of
``sort_unique`` runs on each bucket while it is in cache: no extra pass over memory.
``lsd_sort`` is the plain LSD sort the design was measured against
(bench/bench_sort.py). seenstore/sorting.py runs the building blocks
(``varying_bits``, ``msd_histogram``, ``msd_scatter``, ``sort_buckets``) on two
threads. Twins: np.sort / np.unique in tests/test_sort.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit

SMALL = 48  # a bucket this small is insertion-sorted


@njit(cache=True, nogil=True)
def varying_bits(a, lo, hi):
    """OR of ``a[i] ^ a[lo]`` over ``lo <= i < hi``: the bits that are not constant."""
    v = np.uint64(0)
    if hi <= lo:
        return v
    x = a[lo]
    for i in range(lo + 1, hi):
        v |= a[i] ^ x
    return v


@njit(cache=True, nogil=True)
def _top_bit(v):
    """Index of the highest set bit of uint64 ``v`` (-1 when v == 0)."""
    h = -1
    while v != np.uint64(0):
        v >>= np.uint64(1)
        h += 1
    return h


@njit(cache=True, nogil=True)
def msd_plan(vary, n, bucket_keys):
    """(shift, bits) of the MSD digit: the top ``bits`` of the varying bits, so that
    ``n`` keys make buckets of about ``bucket_keys`` (bits 0: one bucket)."""
    top = _top_bit(vary) + 1
    bits = 0
    while (n >> bits) > bucket_keys and bits < 12:
        bits += 1
    if bits > top:
        bits = top
    return (top - bits if bits else 0), bits  # a shift by 64 is undefined


@njit(cache=True, nogil=True)
def msd_histogram(a, lo, hi, shift, bits):
    """Count of ``a[lo:hi]`` per MSD digit ``(key >> shift) & (2**bits - 1)``."""
    mask = np.uint64((1 << bits) - 1)
    sh = np.uint64(shift)
    counts = np.zeros(1 << bits, np.uint64)
    for i in range(lo, hi):
        counts[(a[i] >> sh) & mask] += 1
    return counts


@njit(cache=True, nogil=True)
def msd_scatter(a, lo, hi, out, fill, shift, bits):
    """Scatter ``a[lo:hi]`` into ``out`` by MSD digit, stable; ``fill[d]`` is where
    digit d's next key goes (advanced in place)."""
    _scatter(a, lo, hi, out, fill, np.uint64(shift), np.uint64((1 << bits) - 1))


@njit(cache=True, nogil=True)
def _insertion_budget(a, lo, hi, budget):
    """Insertion sort of ``a[lo:hi]`` that gives up (returns False, ``a[lo:hi]``
    still a permutation) once it has moved more than ``budget`` keys."""
    moves = 0
    for i in range(lo + 1, hi):
        k = a[i]
        j = i - 1
        while j >= lo and a[j] > k:
            a[j + 1] = a[j]
            j -= 1
        moves += i - 1 - j
        a[j + 1] = k
        if moves > budget:
            return False
    return True


@njit(cache=True, nogil=True)
def _scatter(src, lo, hi, dst, fill, sh, mask):
    """``dst[fill[d]++] = k`` for each ``k`` of ``src[lo:hi]``, ``d`` = its digit.
    Unsigned indices throughout: a signed one costs a negative-index check per key
    (1.55 against 0.96 ns/key for an in-cache pass, measured)."""
    for i in range(lo, hi):
        k = src[i]
        d = (k >> sh) & mask
        p = fill[d]
        dst[p] = k
        fill[d] = p + np.uint64(1)


@njit(cache=True, nogil=True)
def _histograms(src, lo, hi, start, nd, width, counts):
    """``counts[d * 2**width + v]`` = count of keys of ``src[lo:hi]`` whose digit d (bits
    ``start + d * width`` up) is v. One loop per digit: a loop over the digits inside
    the loop over the keys ran 2x slower, measured)."""
    size = 1 << width
    mask = np.uint64(size - 1)
    counts[: nd * size] = 0
    for d in range(nd):
        c = counts[d * size:(d + 1) * size]
        sh = np.uint64(start + d * width)
        for i in range(lo, hi):
            c[(src[i] >> sh) & mask] += 1


@njit(cache=True, nogil=True)
def _lsd_digits(src, alt, out, lo, hi, start, nd, width, counts, fill):
    """Stable LSD sort of ``src[lo:hi]`` by its bits ``[start, start + nd * width)``
    into ``out[lo:hi]``, ``width``-bit digits, ping-ponging through ``alt[0:hi-lo]``;
    a digit constant over the range costs no pass. Requires: ``out`` is neither
    ``src`` nor ``alt``; ``counts`` uint64 of length >= nd * 2**width; ``fill``
    uint64 of length 2**width. ``src[lo:hi]`` is clobbered."""
    m = hi - lo
    size = 1 << width
    mask = np.uint64(size - 1)
    _histograms(src, lo, hi, start, nd, width, counts)
    first = src[lo]
    active = np.empty(nd, np.int64)
    na = 0
    for d in range(nd):
        if counts[np.uint64(d * size) + ((first >> np.uint64(start + d * width)) & mask)] != np.uint64(m):
            active[na] = d
            na += 1
    if na == 0:
        for i in range(lo, hi):
            out[i] = src[i]
        return
    in_src = True  # where the current order lives: src[lo:hi] or alt[0:m]
    for p in range(na):
        d = active[p]
        last = p == na - 1
        t = np.uint64(lo if (last or not in_src) else 0)
        for j in range(size):
            fill[j] = t
            t += counts[d * size + j]
        sh = np.uint64(start + d * width)
        if in_src:
            _scatter(src, lo, hi, out if last else alt, fill, sh, mask)
        else:
            _scatter(alt, 0, m, out if last else src, fill, sh, mask)
        in_src = not in_src


@njit(cache=True, nogil=True)
def _top_digits(src, alt, out, lo, hi, width, extra, counts, fill):
    """Sort ``src[lo:hi]`` into ``out[lo:hi]`` by only its top ``log2(m) + extra``
    varying bits (a key then shares them with another with odds ~2**-extra); return
    the lowest bit sorted (0: the range is fully sorted). Requires as ``_lsd_digits``."""
    m = hi - lo
    v = varying_bits(src, lo, hi)
    if v == np.uint64(0):
        for i in range(lo, hi):
            out[i] = src[i]
        return 0
    top = _top_bit(v) + 1
    need = extra
    while (1 << (need - extra)) < m:
        need += 1
    nd = (min(need, top) + width - 1) // width
    start = max(top - nd * width, 0)
    _lsd_digits(src, alt, out, lo, hi, start, nd, width, counts, fill)
    return start


@njit(cache=True, nogil=True)
def _sort_leaf(src, alt, out, lo, hi, width, extra, counts, fill):
    """``_top_digits``, then an insertion pass finishes the order; input that
    exhausts the insertion's budget (many keys alike in the sorted bits) gets the
    full LSD sort instead."""
    m = hi - lo
    start = _top_digits(src, alt, out, lo, hi, width, extra, counts, fill)
    if start == 0 or _insertion_budget(out, lo, hi, 4 * m):
        return
    for i in range(lo, hi):
        src[i] = out[i]
    top = _top_bit(varying_bits(src, lo, hi)) + 1
    _lsd_digits(src, alt, out, lo, hi, 0, (top + width - 1) // width, width, counts, fill)


@njit(cache=True, nogil=True)
def _sort_range(src, alt, out, lo, hi, width, extra, counts, fill):
    """Sort ``src[lo:hi]`` into ``out[lo:hi]`` (Requires as ``_lsd_digits``).

    ``_top_digits``, then every run of keys alike in the bits sorted is finished on
    its own: by insertion when small, else by ``_sort_leaf`` (a large run is one
    host's keys when a few hosts fill the range: its own varying bits are then
    sorted the same way, where one insertion pass over the range would give up)."""
    start = _top_digits(src, alt, out, lo, hi, width, extra, counts, fill)
    if start == 0:
        return
    sh = np.uint64(start)
    g0 = lo
    prefix = out[lo] >> sh
    for i in range(lo + 1, hi + 1):
        if i < hi and (out[i] >> sh) == prefix:
            continue
        if i - g0 > SMALL:
            for j in range(g0, i):
                src[j] = out[j]
            _sort_leaf(src, alt, out, g0, i, width, extra, counts, fill)
        elif i - g0 > 1:
            _insertion_budget(out, g0, i, (i - g0) ** 2)
        if i < hi:
            g0 = i
            prefix = out[i] >> sh


@njit(cache=True, nogil=True)
def sort_buckets(src, out, starts, b0, b1, bucket_keys, width, extra, unique, w):
    """Sort buckets ``b0 <= b < b1`` of ``src`` (bucket b is ``src[starts[b]:starts[b+1]]``,
    buckets ascending) into the same places of ``out``. With ``unique``, repeats are
    dropped and the unique keys packed into ``out`` from index ``w`` on (Requires:
    ``w <= starts[b0]``). Returns the index after the last key written. ``src`` is
    clobbered.

    A bucket of more than ``2 * bucket_keys`` keys (one large host, with skewed keys)
    is split again by an MSD pass on its own top varying bits (8 at most), between
    ``src`` and ``out``, until every part fits the cache; parts are then finished
    in ascending order, so the dedup can pack them as it goes."""
    leaf = 2 * bucket_keys
    biggest = 0
    for b in range(b0, b1):
        biggest = max(biggest, starts[b + 1] - starts[b])
    alt = np.empty(min(biggest, leaf), np.uint64)
    counts = np.empty(((64 + width - 1) // width) << width, np.uint64)
    fill = np.empty(1 << width, np.uint64)
    # the parts still to do: (lo, hi, 1 if the part lives in src else 0); popped last-in first
    cap = 64 * 257
    st_lo = np.empty(cap, np.int64)
    st_hi = np.empty(cap, np.int64)
    st_src = np.empty(cap, np.uint8)
    for b in range(b0, b1):
        if starts[b + 1] == starts[b]:
            continue
        top = 0
        st_lo[0], st_hi[0], st_src[0] = starts[b], starts[b + 1], 1
        top = 1
        while top > 0:
            top -= 1
            lo, hi, in_src = st_lo[top], st_hi[top], st_src[top]
            m = hi - lo
            if m > leaf:
                here = src if in_src else out
                there = out if in_src else src
                v = varying_bits(here, lo, hi)
                if v != np.uint64(0):
                    shift, bits = msd_plan(v, m, bucket_keys)
                    if bits > 8:
                        shift, bits = shift + bits - 8, 8
                    c = msd_histogram(here, lo, hi, shift, bits)
                    f = np.empty(1 << bits, np.uint64)
                    t = np.uint64(lo)
                    for d in range(1 << bits):
                        f[d] = t
                        t += c[d]
                    msd_scatter(here, lo, hi, there, f, shift, bits)
                    for d in range((1 << bits) - 1, -1, -1):  # smallest part on top
                        if c[d] > 0:
                            st_lo[top] = np.int64(f[d] - c[d])
                            st_hi[top] = np.int64(f[d])
                            st_src[top] = 1 - in_src
                            top += 1
                    continue
            # a leaf: sort it into out[lo:hi]
            if not in_src:  # it lives in out: move it to src, the leaf sorts from there
                for i in range(lo, hi):
                    src[i] = out[i]
            if m <= SMALL:
                for i in range(lo, hi):
                    out[i] = src[i]
                _insertion_budget(out, lo, hi, m * m)
            else:
                _sort_range(src, alt, out, lo, hi, width, extra, counts, fill)
            if not unique:
                continue
            last = out[lo]
            out[w] = last  # safe: w <= lo
            w += 1
            for i in range(lo + 1, hi):
                k = out[i]
                if k != last:
                    out[w] = k
                    w += 1
                    last = k
    return w if unique else (starts[b1] if b1 > b0 else w)


@njit(cache=True, nogil=True)
def _sort(a, buf, unique, bucket_keys, width, extra):
    n = a.shape[0]
    vary = varying_bits(a, 0, n)
    if vary == np.uint64(0):
        return 1 if unique and n else n
    shift, bits = msd_plan(vary, n, bucket_keys)
    counts = msd_histogram(a, 0, n, shift, bits)
    starts = np.zeros((1 << bits) + 1, np.int64)
    for d in range(1 << bits):
        starts[d + 1] = starts[d] + np.int64(counts[d])
    fill = starts[:-1].astype(np.uint64)
    msd_scatter(a, 0, n, buf, fill, shift, bits)
    return sort_buckets(buf, a, starts, 0, 1 << bits, bucket_keys, width, extra, unique, 0)


@njit(cache=True, nogil=True)
def radix_sort(a, buf, bucket_keys=32768, width=8, extra=3):
    """Sort uint64 ``a`` in place. Requires: ``buf`` uint64, len(buf) >= len(a)
    (scratch; clobbered)."""
    _sort(a, buf, False, bucket_keys, width, extra)


@njit(cache=True, nogil=True)
def sort_unique(a, buf, bucket_keys=32768, width=8, extra=3):
    """Sort uint64 ``a`` in place and move its unique keys to the front, ascending;
    return their count (``a[count:]`` is left unspecified). Requires: ``buf`` as
    for ``radix_sort``."""
    return _sort(a, buf, True, bucket_keys, width, extra)


@njit(cache=True, nogil=True)
def lsd_sort(a, buf, width=8):
    """Plain LSD radix sort of ``a`` in place (digits constant over ``a`` skipped),
    ``buf`` as for ``radix_sort``: the baseline of bench/bench_sort.py."""
    n = a.shape[0]
    size = 1 << width
    mask = np.uint64(size - 1)
    nd = (64 + width - 1) // width
    counts = np.empty(nd * size, np.uint64)
    _histograms(a, 0, n, 0, nd, width, counts)
    src, dst = a, buf
    fill = np.empty(size, np.uint64)
    for d in range(nd):
        if n == 0 or counts[np.uint64(d * size) + ((a[0] >> np.uint64(d * width)) & mask)] == np.uint64(n):
            continue
        t = np.uint64(0)
        for j in range(size):
            fill[j] = t
            t += counts[d * size + j]
        _scatter(src, 0, n, dst, fill, np.uint64(d * width), mask)
        src, dst = dst, src
    if src is not a:
        a[:] = src[:n]
