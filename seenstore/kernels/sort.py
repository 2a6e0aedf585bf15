"""Sort kernels: a radix sort of uint64 keys that does not depend on numpy's SIMD dispatch.

``radix_sort(a, buf)`` sorts ``a`` in place; ``sort_unique(a, buf)`` also drops
repeats and returns the count left at the front. Both are an MSD radix sort on the
bits that vary:

* one pass scatters ``a`` into ``buf`` by its top varying bits (at most ``max_bits``:
  a scatter to DRAM costs ~2.4 ns/key up to 2**9 destinations, ~5 at 2**11),
  aiming at buckets of ``bucket_keys / 4`` keys (a bucket, its copy and the output
  fit the L2 cache); the digit is planned on a sample's varying bits
  (``sampled_bits``) and checked by the histogram's pass (``msd_histogram_vary``);
* a bucket above ``2 * bucket_keys`` (a large host's keys, with skewed keys) is split
  again on its own top ``max_bits`` varying bits (all of them: a host's keys stay
  together while the bits are the host's, and fewer bits per pass would peel a large
  host over more passes), ping-ponging between ``buf`` and ``a``; consecutive parts (and
  buckets) of at most ``bucket_keys`` keys are sorted together, as one leaf;
* a leaf is sorted in cache into its place in ``a`` by its top
  ``ceil(log2(size)) + extra`` varying bits (so that most keys are alone in them): one
  counting pass when that is at most ``single`` bits, else LSD passes of ``width``
  bits (two for a bucket of 2**14 keys; one more below when many keys would still be
  alike in them, ``ALIKE``); where keys alike in the bits sorted are rare, one
  branchless bubble pass, then if need be one insertion pass over the leaf (given
  up past half the leaf's size in moves) finish it; else each run of keys alike in
  the bits sorted is sorted by insertion (at most ``SMALL`` keys) or again the same
  way on its own varying bits (one host's keys).

Bits constant over the array (a shard's top bits) or over a bucket (a host's) cost no
pass. ``sort_unique`` drops repeats from each leaf while it is in cache: no extra
pass over memory. ``lsd_sort`` is the plain LSD sort the design is measured against
(bench/bench_sort.py). keys/sort.py runs the building blocks
(``sampled_bits``, ``msd_plan``, ``msd_histogram_vary``, ``msd_scatter``, ``sort_buckets``)
on two threads. Twins: np.sort / np.unique in tests/unit/keys/test_sort.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit

SMALL = 16  # a run of at most this many alike keys is sorted by insertion
ALIKE = 0.25  # one more LSD digit when about this share of a leaf's keys would share their run
FEW_ALIKE = 64  # slots of the bits a leaf sorted per key from which _bubble is tried first


@njit(cache=True, nogil=True)
def varying_bits(a, lo, hi):
    """OR of ``a[i] ^ a[lo]`` over ``lo <= i < hi``: the bits that are not constant."""
    v = np.uint64(0)
    if hi <= lo:
        return v
    s = a[lo:hi]  # a loop from 0 over a slice vectorizes (4x faster, measured)
    x = s[0]
    for i in range(s.shape[0]):
        v |= s[i] ^ x
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
def msd_plan(vary, n, bucket_keys, max_bits=12):
    """(shift, bits) of an MSD digit: the top ``bits`` (at most ``max_bits``) of the
    varying bits ``vary``, so that ``n`` keys make buckets of about ``bucket_keys``
    (bits 0: one bucket)."""
    top = _top_bit(vary) + 1
    bits = 0
    while (n >> bits) > bucket_keys and bits < max_bits:
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
    _count_halves(a, lo, hi, sh, mask, counts, np.empty(1 << bits, np.uint64))
    return counts


@njit(cache=True, nogil=True)
def sampled_bits(a, lo, hi, step=67):
    """OR of ``a[i] ^ a[lo]`` over every ``step``-th key of ``a[lo:hi]``: some of the
    varying bits (all of them, on most inputs), read from a few cache lines."""
    v = np.uint64(0)
    if hi <= lo:
        return v
    x = a[lo]
    for i in range(lo, hi, step):
        v |= a[i] ^ x
    return v


@njit(cache=True, nogil=True)
def msd_histogram_vary(a, lo, hi, shift, bits, x):
    """``msd_histogram``, and the OR of ``k ^ x`` over the keys ``k`` of ``a[lo:hi]``
    (with ``x`` one of the keys: the varying bits) from the same pass."""
    mask = np.uint64((1 << bits) - 1)
    sh = np.uint64(shift)
    counts = np.zeros(1 << bits, np.uint64)
    c2 = np.zeros(1 << bits, np.uint64)  # the second half's (see _count_halves)
    v = np.uint64(0)
    s = a[lo:hi]
    h = s.shape[0] // 2
    s0, s1 = s[:h], s[h:2 * h]
    for i in range(h):
        k, k1 = s0[i], s1[i]
        counts[(k >> sh) & mask] += 1
        c2[(k1 >> sh) & mask] += 1
        v |= (k ^ x) | (k1 ^ x)
    if s.shape[0] & 1:
        k = s[s.shape[0] - 1]
        counts[(k >> sh) & mask] += 1
        v |= k ^ x
    counts += c2
    return counts, v


@njit(cache=True, nogil=True)
def _count_halves(src, lo, hi, sh, mask, c, tmp):
    """``_count``, the two halves of ``src[lo:hi]`` counted side by side into ``c``
    and ``tmp`` (clobbered; as long as ``c``), then added. Where most keys share a
    digit (a large host's), each count of one histogram waits for the store of the
    last: 2.0 against 1.0 ns/key with 90% of keys on one digit, in cache (measured)."""
    s = src[lo:hi]
    h = s.shape[0] // 2
    s0, s1 = s[:h], s[h:2 * h]
    tmp[:] = 0
    for i in range(h):
        c[(s0[i] >> sh) & mask] += 1
        tmp[(s1[i] >> sh) & mask] += 1
    if s.shape[0] & 1:
        c[(s[s.shape[0] - 1] >> sh) & mask] += 1
    for d in range(c.shape[0]):
        c[d] += tmp[d]


@njit(cache=True, nogil=True)
def _count(src, lo, hi, sh, mask, c):
    """``c[d] += 1`` for the digit ``d = (k >> sh) & mask`` of each ``k`` of
    ``src[lo:hi]`` (a loop over a slice from 0: no negative-index check)."""
    s = src[lo:hi]
    for i in range(s.shape[0]):
        c[(s[i] >> sh) & mask] += 1


@njit(cache=True, nogil=True)
def msd_scatter(a, lo, hi, out, fill, shift, bits):
    """Scatter ``a[lo:hi]`` into ``out`` by MSD digit, stable; ``fill[d]`` is where
    digit d's next key goes (advanced in place)."""
    _scatter(a, lo, hi, out, fill, np.uint64(shift), np.uint64((1 << bits) - 1))


@njit(cache=True, nogil=True)
def _scatter(src, lo, hi, dst, fill, sh, mask):
    """``dst[fill[d]++] = k`` for each ``k`` of ``src[lo:hi]``, ``d`` = its digit.
    Unsigned indices throughout: a signed one costs a negative-index check per key
    (1.55 against 0.96 ns/key for an in-cache pass, measured)."""
    s = src[lo:hi]
    for i in range(s.shape[0]):
        _put(dst, fill, s[i], sh, mask)


@njit(cache=True, nogil=True, inline="always")
def _put(dst, fill, k, sh, mask):
    """``dst[fill[d]++] = k``, ``d`` the digit ``(k >> sh) & mask``."""
    d = (k >> sh) & mask
    p = fill[d]
    dst[p] = k
    fill[d] = p + np.uint64(1)


@njit(cache=True, nogil=True)
def _scatter_count(src, lo, hi, dst, fill, sh, mask, sh2, c2):
    """``_scatter``, counting meanwhile the digit ``(k >> sh2) & mask`` of each key
    into ``c2`` (the next LSD pass's histogram: no pass of its own over the keys)."""
    s = src[lo:hi]
    for i in range(s.shape[0]):
        k = s[i]
        _put(dst, fill, k, sh, mask)
        c2[(k >> sh2) & mask] += 1


@njit(cache=True, nogil=True)
def _count2(src, lo, hi, sh, c, sh2, c2, mask, tmp):
    """``_count`` of two digits in one pass; the second (a leaf's top digit: its
    hosts' bits, which most keys may share) counted as ``_count_halves`` does, with
    ``tmp``."""
    s = src[lo:hi]
    h = s.shape[0] // 2
    s0, s1 = s[:h], s[h:2 * h]
    tmp[:] = 0
    for i in range(h):
        k, k1 = s0[i], s1[i]
        c[(k >> sh) & mask] += 1
        c[(k1 >> sh) & mask] += 1
        c2[(k >> sh2) & mask] += 1
        tmp[(k1 >> sh2) & mask] += 1
    if s.shape[0] & 1:
        k = s[s.shape[0] - 1]
        c[(k >> sh) & mask] += 1
        c2[(k >> sh2) & mask] += 1
    for d in range(c2.shape[0]):
        c2[d] += tmp[d]


@njit(cache=True, nogil=True)
def _lsd_digits(src, alt, out, lo, hi, start, nd, width, vary, counts, fill):
    """Stable LSD sort of ``src[lo:hi]`` by its bits ``[start, start + nd * width)``
    into ``out[lo:hi]``, ``width``-bit digits, ping-ponging through ``alt[0:hi-lo]``;
    a digit with no bit of ``vary`` (the range's varying bits) costs no pass. The
    lowest and the top digit are counted in one pass, a digit between them while the
    digit below it is scattered. When the top digit's counts say that many keys would
    still be alike in the bits sorted (groups of keys sharing it, a few large hosts'
    keys: each left to an insertion sort of its run), one more digit below ``start``
    is sorted first. Returns the lowest bit sorted (``start`` or ``start - width``).
    Requires: ``out`` is neither ``src`` nor ``alt``; ``counts`` of length >=
    ``(nd + 1) * 2**width``; ``fill`` uint64 of length 2**width.
    ``src[lo:hi]`` is clobbered."""
    m = hi - lo
    size = 1 << width
    mask = np.uint64(size - 1)
    sh = np.empty(nd + 1, np.int64)  # the active digits' shifts from sh[1]; sh[0]: one added
    known = np.zeros(nd + 1, np.bool_)
    na = 0
    for d in range(nd):
        if (vary >> np.uint64(start + d * width)) & mask != np.uint64(0):
            na += 1
            sh[na] = start + d * width
    if na == 0:
        out[lo:hi] = src[lo:hi]
        return start
    counts[size:2 * size] = 0
    known[1] = known[na] = True
    if na == 1:
        _count(src, lo, hi, np.uint64(sh[1]), mask, counts[size:2 * size])
    else:
        top = counts[na * size:(na + 1) * size]
        top[:] = 0
        _count2(src, lo, hi, np.uint64(sh[1]), counts[size:2 * size], np.uint64(sh[na]), top, mask,
                counts[:size])  # free until the digit added below is counted
    first = 1
    if na >= 2 and start >= width and (vary >> np.uint64(start - width)) & mask != np.uint64(0):
        b = float(1 << (sh[na] - start))  # values of the bits sorted below the top digit
        alike = 0.0  # about how many keys share those bits with another key of their group
        for j in range(size):
            g = counts[na * size + j]
            if g > 32:
                x = g / b
                alike += g * x / (1.0 + x)
        if alike > ALIKE * m:
            first = 0
            start -= width
            sh[0] = start
            known[0] = True
            counts[:size] = 0
            _count(src, lo, hi, np.uint64(start), mask, counts[:size])
    in_src = True  # where the current order lives: src[lo:hi] or alt[0:m]
    for p in range(first, na + 1):
        last = p == na
        t = np.uint64(lo if (last or not in_src) else 0)
        for j in range(size):
            fill[j] = t
            t += np.uint64(counts[p * size + j])
        here, h0, h1 = (src, lo, hi) if in_src else (alt, 0, m)
        there = out if last else (alt if in_src else src)
        if last or known[p + 1]:
            _scatter(here, h0, h1, there, fill, np.uint64(sh[p]), mask)
        else:
            nxt = counts[(p + 1) * size:(p + 2) * size]
            nxt[:] = 0
            _scatter_count(here, h0, h1, there, fill, np.uint64(sh[p]), mask,
                           np.uint64(sh[p + 1]), nxt)
        in_src = not in_src
    return start


@njit(cache=True, nogil=True)
def _sort_top(src, alt, out, lo, hi, extra, width, single, counts, fill, stack, top):
    """Sort ``src[lo:hi]`` into ``out[lo:hi]`` by its top ``ceil(log2(m)) + extra``
    varying bits (most keys then alone in them): in one counting pass when that is at
    most ``single`` bits, else by LSD passes of ``width`` bits. Push onto ``stack``
    (from ``top``) the ``(lo, hi)`` of every run of more than SMALL keys alike in the
    bits sorted; return the new top. ``src[lo:hi]`` is clobbered."""
    m = hi - lo
    v = varying_bits(src, lo, hi)
    if v == np.uint64(0):
        out[lo:hi] = src[lo:hi]
        return top
    hb = _top_bit(v) + 1
    need = extra
    while (1 << (need - extra)) < m:
        need += 1
    need = min(need, hb)
    if need <= single:
        sh = np.uint64(hb - need)
        size = 1 << need
        mask = np.uint64(size - 1)
        c = counts[:size]
        c[:] = 0
        _count(src, lo, hi, sh, mask, c)
        t = np.uint64(lo)
        for d in range(size):
            fill[d] = t
            t += np.uint64(c[d])
        _scatter(src, lo, hi, out, fill, sh, mask)
        if hb == need:
            return top
        return _finish(out, lo, hi, sh, need, stack, top)
    nd = (need + width - 1) // width
    start = max(hb - nd * width, 0)
    start = _lsd_digits(src, alt, out, lo, hi, start, nd, width, v, counts, fill)
    if start == 0:
        return top
    return _finish(out, lo, hi, np.uint64(start), hb - start, stack, top)


@njit(cache=True, nogil=True)
def _finish(out, lo, hi, sh, sorted_bits, stack, top):
    """Finish sorted-by-``key >> sh`` ``out[lo:hi]`` (``sorted_bits`` bits sorted):
    when keys alike in those bits are rare (at least FEW_ALIKE slots per key), a
    branchless bubble pass (``_bubble``) first, which sorts every run of equal keys
    and every run of two; when that left the leaf unsorted (a host-skewed leaf: a
    large host's keys fill its slots three or more deep), an insertion pass over the
    whole leaf (``_insertion``) that gives up past ``(hi - lo) / 2`` moves; the run
    scan (``_runs``) only after that. On host-skewed leaves (the largest host 16-30 %
    of the keys) the insertion pass saves ~1.5 ns/key over the scan, whose branch at
    each run boundary mispredicts on runs of one to three keys.
    Returns the new top of ``stack``."""
    if sorted_bits < 60 and (np.int64(1) << sorted_bits) >= FEW_ALIKE * (hi - lo):
        if _bubble(out, lo, hi):
            return top
        if _insertion(out, lo, hi, (hi - lo) >> 1):
            return top
    return _runs(out, lo, hi, sh, stack, top)


@njit(cache=True, nogil=True)
def _bubble(out, lo, hi):
    """One bubble pass over ``out[lo:hi]`` with no branch (each key swapped with the
    largest before it when smaller); return True when ``out[lo:hi]`` is then
    sorted. Requires ``out[lo:hi]`` sorted on some top bits: the pass swaps only keys
    alike in them, so it stays so sorted either way. (A run scan's branch, taken at
    each repeat, mispredicts: ~2 ns/key with 10% repeats, measured.)"""
    s = out[lo:hi]
    carry = s[0]
    prev = np.uint64(0)
    bad = False
    for i in range(1, s.shape[0]):
        y = s[i]
        low = min(carry, y)
        carry = max(carry, y)
        s[i - 1] = low
        bad |= prev > low
        prev = low
    s[s.shape[0] - 1] = carry
    return not bad


@njit(cache=True, nogil=True)
def _insertion(out, lo, hi, limit):
    """Insertion sort of ``out[lo:hi]``, given up (False) once more than ``limit``
    keys have been moved past; True when it finished. Requires ``out[lo:hi]`` sorted
    on some top bits: a key then only moves past larger keys alike in them, so a
    leaf given up on is still so sorted (and a permutation of what it was). On a leaf
    left nearly sorted the loop's branch is predicted: one compare per key."""
    s = out[lo:hi]
    moves = 0
    for i in range(1, s.shape[0]):
        moves += _insert(s, 0, i)
        if moves > limit:
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def _insert(s, g0, i):
    """Insertion sort's step: move ``s[i]`` left into sorted ``s[g0:i]``; return how
    many keys it moved past."""
    k = s[i]
    j = i
    while j > g0 and s[j - 1] > k:
        s[j] = s[j - 1]
        j -= 1
    s[j] = k
    return i - j


@njit(cache=True, nogil=True)
def _runs(out, lo, hi, sh, stack, top):
    """Finish sorted-by-``key >> sh`` ``out[lo:hi]``: each run of keys alike in those
    bits (``_run``). Returns the new top of ``stack``."""
    s = out[lo:hi]  # a loop from 0 over a slice: no negative-index check
    g0 = 0
    prefix = s[0] >> sh
    for i in range(1, s.shape[0]):
        p = s[i] >> sh
        if p != prefix:
            if i - g0 > 1:
                top = _run(s, g0, i, lo, stack, top)
            g0 = i
            prefix = p
    if s.shape[0] - g0 > 1:
        top = _run(s, g0, s.shape[0], lo, stack, top)
    return top


@njit(cache=True, nogil=True, inline="always")
def _run(s, g0, g1, base, stack, top):
    """A run ``s[g0:g1]`` of keys alike in the bits sorted so far: sorted now by
    insertion when it has at most SMALL keys, else pushed onto ``stack`` (as
    ``base + g0, base + g1``) to be sorted again on its own varying bits. Returns the
    new top. (No slice here: a slice made per run costs two atomic reference counts,
    ~4 ns/key on host-skewed leaves, measured.)"""
    if g1 - g0 > SMALL:
        stack[top, 0] = base + g0
        stack[top, 1] = base + g1
        return top + 1
    for i in range(g0 + 1, g1):
        _insert(s, g0, i)
    return top


@njit(cache=True, nogil=True)
def _leaf(src, alt, out, lo, hi, extra, width, single, counts, fill, stack):
    """Sort ``src[lo:hi]`` into ``out[lo:hi]``: ``_sort_top``, then every run it leaves
    of more than SMALL alike keys sorted again the same way on its own varying bits.
    Requires: ``out`` is neither ``src`` nor ``alt``; ``alt`` of at least ``hi - lo``
    keys; ``counts`` (int64) of at least ``max(2**single, ceil(64 / width) * 2**width)``,
    ``fill`` (uint64) as long; ``stack`` int64
    (k, 2) with k > (hi - lo) / SMALL. ``src[lo:hi]`` is clobbered."""
    # np.int64(0), not 0 (a literal type): one specialisation of _sort_top and below
    top = _sort_top(src, alt, out, lo, hi, extra, width, single, counts, fill, stack,
                    np.int64(0))
    while top > 0:
        top -= 1
        g0, g1 = stack[top, 0], stack[top, 1]
        src[g0:g1] = out[g0:g1]
        top = _sort_top(src, alt, out, g0, g1, extra, width, single, counts, fill, stack, top)


@njit(cache=True, nogil=True)
def _dedup(a, lo, hi, d, w):
    """Copy the unique keys of sorted ``a[lo:hi]`` to ``d[w:]``; return the index
    after the last. Requires: ``lo < hi``; ``w <= lo`` when ``d`` is ``a``."""
    s = a[lo:hi]
    last = s[0]
    d[w] = last
    w += 1
    for i in range(1, s.shape[0]):  # no branch: a repeat is written, then overwritten
        k = s[i]
        d[w] = k
        w += np.int64(k != last)
        last = k
    return w


@njit(cache=True, nogil=True)
def _push_parts(c, hi, bucket_keys, in_src, st_lo, st_hi, st_src, top):
    """Push the parts of an MSD split ending at ``hi`` (part d has ``c[d]`` keys,
    ascending) so that the lowest is on top; consecutive parts of at most
    ``bucket_keys`` keys together go as one (a split of a bucket just above the leaf
    size, or a large host's neighbours, leaves many small parts, each a leaf's fixed
    costs otherwise). Returns the new top."""
    end = np.int64(hi)
    acc = np.int64(0)  # keys of the group ending at ``end``
    for d in range(c.shape[0] - 1, -1, -1):
        k = np.int64(c[d])
        if k == 0:
            continue
        if acc + k > bucket_keys and acc > 0:
            st_lo[top], st_hi[top], st_src[top] = end - acc, end, in_src
            top += 1
            end -= acc
            acc = np.int64(0)
        acc += k
    if acc > 0:
        st_lo[top], st_hi[top], st_src[top] = end - acc, end, in_src
        top += 1
    return top


@njit(cache=True, nogil=True)
def sort_buckets(src, out, starts, b0, b1, bucket_keys, extra, width, single, max_bits, unique, w,
                 dst):
    """Sort buckets ``b0 <= b < b1`` of ``src`` (bucket b is ``src[starts[b]:starts[b+1]]``,
    buckets ascending) into the same places of ``out``. With ``unique``, repeats are
    dropped and the unique keys packed into ``dst`` (``out``, or ``src``: no copy
    back when the keys are wanted where they were) from index ``w`` on (Requires:
    ``w <= starts[b0]``). Returns the index after the last key written. ``src`` is
    clobbered (below ``w``, the unique keys when ``dst`` is ``src``): a part is
    finished before any of higher index, so what lies below it is consumed.

    A bucket of more than ``2 * bucket_keys`` keys is split again by an MSD pass on its
    own top varying bits, between ``src`` and ``out``, until every part fits the
    cache; parts are finished in ascending order, so the dedup can pack them as it goes."""
    leaf = 2 * bucket_keys
    span = starts[b1] - starts[b0] if b1 > b0 else 0
    alt = np.empty(min(span, leaf), np.uint64)
    nc = max(1 << single, ((64 + width - 1) // width) << width)
    counts = np.empty(nc, np.int64)
    fill = np.empty(nc, np.uint64)
    stack = np.empty((min(span, leaf) // SMALL + 2, 2), np.int64)
    # the parts still to do: (lo, hi, 1 if the part lives in src else 0); popped last-in first
    cap = 64 * ((1 << max_bits) + 1)
    st_lo = np.empty(cap, np.int64)
    st_hi = np.empty(cap, np.int64)
    st_src = np.empty(cap, np.uint8)
    b = b0
    while b < b1:
        # consecutive buckets of at most bucket_keys keys together make one leaf
        e = b + 1
        while e < b1 and starts[e + 1] - starts[b] <= bucket_keys:
            e += 1
        lo, hi = starts[b], starts[e]
        b = e
        if hi == lo:
            continue
        st_lo[0], st_hi[0], st_src[0] = lo, hi, 1
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
                    # all max_bits: a large host keeps its keys together while the bits are
                    # its own; fewer bits per pass would peel it over more passes
                    shift, bits = msd_plan(v, m, 1, max_bits)
                    c = msd_histogram(here, lo, hi, shift, bits)
                    f = np.empty(1 << bits, np.uint64)
                    t = np.uint64(lo)
                    for d in range(1 << bits):
                        f[d] = t
                        t += c[d]
                    msd_scatter(here, lo, hi, there, f, shift, bits)
                    top = _push_parts(c, hi, bucket_keys, 1 - in_src, st_lo, st_hi, st_src, top)
                    continue
            if not in_src:  # the leaf sorts from src: move the part there
                src[lo:hi] = out[lo:hi]
            _leaf(src, alt, out, lo, hi, extra, width, single, counts, fill, stack)
            if unique:
                w = _dedup(out, lo, hi, dst, w)
    return w if unique else (starts[b1] if b1 > b0 else w)


@njit(cache=True, nogil=True)
def _sort(a, buf, unique, bucket_keys, extra, width, single, max_bits):
    n = a.shape[0]
    if n == 0:
        return 0
    # the digit planned on a sample's varying bits, checked by the histogram's pass
    # (planned again in the rare case that a higher bit varies): no pass of its own
    vary = sampled_bits(a, 0, n)
    while True:
        shift, bits = msd_plan(vary, n, bucket_keys >> 2, max_bits)
        counts, full = msd_histogram_vary(a, 0, n, shift, bits, a[0])
        if full == np.uint64(0):
            return 1 if unique else n
        if _top_bit(full) == _top_bit(vary):
            break
        vary = full
    starts = np.zeros((1 << bits) + 1, np.int64)
    for d in range(1 << bits):
        starts[d + 1] = starts[d] + np.int64(counts[d])
    fill = starts[:-1].astype(np.uint64)
    msd_scatter(a, 0, n, buf, fill, shift, bits)
    # run-time values, not constants (numba would type 0 or False as a literal): the
    # same specialisation of sort_buckets, and of every kernel below it, as the store's
    # own calls, so a process that runs both compiles that tree once (a cold compile
    # of both: ~30% less CPU)
    return sort_buckets(buf, a, starts, np.int64(0), np.int64(1 << bits), np.int64(bucket_keys),
                        np.int64(extra), np.int64(width), np.int64(single), np.int64(max_bits),
                        np.bool_(unique), np.int64(0), a)


@njit(cache=True, nogil=True)
def radix_sort(a, buf, bucket_keys=16384, extra=1, width=11, single=11, max_bits=9):
    """Sort uint64 ``a`` in place. Requires: ``buf`` uint64, len(buf) >= len(a)
    (scratch; clobbered)."""
    _sort(a, buf, False, bucket_keys, extra, width, single, max_bits)


@njit(cache=True, nogil=True)
def sort_unique(a, buf, bucket_keys=16384, extra=1, width=11, single=11, max_bits=9):
    """Sort uint64 ``a`` in place and move its unique keys to the front, ascending;
    return their count (``a[count:]`` is left unspecified). Requires: ``buf`` as
    for ``radix_sort``."""
    return _sort(a, buf, True, bucket_keys, extra, width, single, max_bits)


@njit(cache=True, nogil=True)
def lsd_sort(a, buf, width=8):
    """Plain LSD radix sort of ``a`` in place (digits constant over ``a`` skipped),
    ``buf`` as for ``radix_sort``: the baseline of bench/bench_sort.py."""
    n = a.shape[0]
    size = 1 << width
    mask = np.uint64(size - 1)
    nd = (64 + width - 1) // width
    counts = np.zeros(nd * size, np.uint64)
    for d in range(nd):
        c = counts[d * size:(d + 1) * size]
        sh = np.uint64(d * width)
        for i in range(n):
            c[(a[i] >> sh) & mask] += np.uint64(1)
    src, dst = a, buf
    fill = np.empty(size, np.uint64)
    for d in range(nd):
        if n == 0 or (counts[np.uint64(d * size) + ((a[0] >> np.uint64(d * width)) & mask)]
                      == np.uint64(n)):
            continue
        t = np.uint64(0)
        for j in range(size):
            fill[j] = t
            t += counts[d * size + j]
        _scatter(src, 0, n, dst, fill, np.uint64(d * width), mask)
        src, dst = dst, src
    if src is not a:
        a[:] = src[:n]
