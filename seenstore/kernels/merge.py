"""Merge kernels: sorted unique batches checked against sorted unique runs, and
runs merged, in one streamed pass each.

``sweep_step`` / ``sweep_sorted`` mark the batch keys a run chunk holds (the first
checks the chunk's order on the way); ``kway_step`` merges k sorted disjoint runs'
buffers (compaction, export); ``sparse_member`` looks needles up through a run's
sparse index; ``is_strictly_increasing`` checks order. Requires: every run and
batch sorted ascending without repeats (checked where the docstring says so).
Twins: kernels/twins/merge.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def is_strictly_increasing(a):
    """True when ``a`` (uint64) is sorted ascending with no repeats."""
    for k in range(1, a.shape[0]):
        if a[k] <= a[k - 1]:
            return False
    return True


@njit(cache=True, nogil=True)
def first_above(a, lo, hi, x):
    """The first position in ``a[lo:hi]`` (sorted ascending) whose key is above ``x``
    (``hi`` if none): a binary search."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True, inline="always")
def skip_below(a, i, end, x):
    """The first position in ``a[i:end]`` (sorted ascending) whose key is not below
    ``x`` (``end`` if none): 8 keys skipped at a time, then the 8 below ``x``
    counted without a branch."""
    full = end - 8
    while i <= full and a[i + 7] < x:
        i += 8
    if i <= full:
        c = 0
        for t in range(8):
            c += a[i + t] < x
        return i + c
    while i < end and a[i] < x:
        i += 1
    return i


@njit(cache=True, nogil=True)
def sweep_step(old, n_old, batch, j, found, prev, have_prev):
    """Mark the keys of ``batch[j:]`` present in ``old[:n_old]`` (one chunk of a run
    read from disk), checking the chunk's order first.

    Requires: ``batch`` sorted ascending and unique (uint64); ``found`` a bool array
    as long as ``batch``, only set to True here. ``prev``/``have_prev``: the run's
    last key of the previous chunk. Returns ``(j, prev, have_prev, ok)``: the first
    batch position above every key of the chunk, the chunk's last key, and ``ok``
    False when the run is not strictly increasing (corruption; nothing is marked
    then). Twin: tests/naive.py ``sweep_naive``.

    The order is checked in a pass of its own (no branch per key: it vectorises),
    then ``sweep_sorted`` places the batch keys. Keys already checked when they
    entered memory (the run cache, store/runcache.py) go to ``sweep_sorted`` alone.
    """
    if n_old == 0:
        return j, prev, have_prev, True
    if have_prev and old[0] <= prev:
        return j, prev, have_prev, False
    bad = False
    for t in range(1, n_old):
        bad |= old[t] <= old[t - 1]
    if bad:
        return j, prev, have_prev, False
    return sweep_sorted(old, n_old, batch, j, found), old[n_old - 1], True, True


@njit(cache=True, nogil=True, inline="always")
def _lower_bound8(a, i, x):
    """The first position of ``a`` not below ``x``, from ``i`` (not past it):
    8 keys skipped at a time, then a branch-free binary search of the last 8.
    Requires: that position + 8 < len(a)."""
    while a[i + 7] < x:
        i += 8
    i += (a[i + 3] < x) * 4
    i += (a[i + 1] < x) * 2
    i += a[i] < x
    return i


@njit(cache=True, nogil=True, inline="always")
def _lower_bound8_wide(a, i, x):
    """``_lower_bound8`` for runs 5-16x the batch keys of their range: a gap of 8-15
    keys is crossed without a branch (one more dependent load); the loop only for
    the rarer gaps of 16 and more. Requires: as ``_lower_bound8``."""
    return _lower_bound8(a, i + (a[i + 7] < x) * 8, x)


SAFE_TAIL = 16  # the lower bounds read 8 keys past their answer: the chains stop 16 short
WIDE_RATIO = (5, 16)  # run/batch ratios (of a chunk's range) taking _lower_bound8_wide


@njit(cache=True, nogil=True)
def _chains4(old, batch, found, j, js, n_old, wide):
    """Place ``batch[j:js]`` in ``old`` in four independent chains over four quarters
    (``_lower_bound8``, or ``_lower_bound8_wide`` with ``wide``), marking the keys
    found; return ``(i, j)``: where the last chain stopped in both."""
    q = (js - j) >> 2
    if q <= 0:
        return 0, j
    j0 = j
    j1 = j0 + q
    j2 = j1 + q
    j3 = j2 + q
    i0 = 0
    i1 = first_above(old, 0, n_old, batch[j1] - np.uint64(1))  # batch[j1] > batch[j] >= 0
    i2 = first_above(old, i1, n_old, batch[j2] - np.uint64(1))
    i3 = first_above(old, i2, n_old, batch[j3] - np.uint64(1))
    for _ in range(q):
        x0 = batch[j0]
        x1 = batch[j1]
        x2 = batch[j2]
        x3 = batch[j3]
        if wide:  # loop-invariant: compiled as two loops
            i0 = _lower_bound8_wide(old, i0, x0)
            i1 = _lower_bound8_wide(old, i1, x1)
            i2 = _lower_bound8_wide(old, i2, x2)
            i3 = _lower_bound8_wide(old, i3, x3)
        else:
            i0 = _lower_bound8(old, i0, x0)
            i1 = _lower_bound8(old, i1, x1)
            i2 = _lower_bound8(old, i2, x2)
            i3 = _lower_bound8(old, i3, x3)
        found[j0] |= old[i0] == x0
        found[j1] |= old[i1] == x1
        found[j2] |= old[i2] == x2
        found[j3] |= old[i3] == x3
        j0 += 1
        j1 += 1
        j2 += 1
        j3 += 1
    return i3, j3


@njit(cache=True, nogil=True, inline="always")
def _merge_step(old, batch, found, i, j):
    """One step of a branch-free merge of ``old`` and ``batch``: mark ``batch[j]``
    when equal to ``old[i]``, advance whichever is smaller (both when equal)."""
    a = old[i]
    b = batch[j]
    found[j] |= a == b
    return i + np.int64(a <= b), j + np.int64(b <= a)


@njit(cache=True, nogil=True)
def _merge_chain(old, batch, found, i, ie, j, je):
    while i < ie and j < je:
        i, j = _merge_step(old, batch, found, i, j)


@njit(cache=True, nogil=True)
def merge_mark4(old, n_old, batch, j, jend, found):
    """Mark the keys of ``batch[j:jend]`` present in ``old[:n_old]`` by a branch-free
    merge, in four independent chains over four quarters of those batch keys (each
    with the run keys of its key range), so the core overlaps their latencies.
    Requires: both sorted ascending and unique; ``batch[jend - 1] <= old[n_old - 1]``
    (``sweep_sorted``'s range). Twin: ``np.isin`` (tests/unit/store/test_tiers.py)."""
    q = (jend - j) >> 2
    i0 = first_above(old, 0, n_old, batch[j] - np.uint64(1)) if batch[j] else 0
    if q == 0:
        _merge_chain(old, batch, found, i0, n_old, j, jend)
        return
    j0, j1, j2, j3 = j, j + q, j + 2 * q, j + 3 * q
    i1 = first_above(old, i0, n_old, batch[j1] - np.uint64(1))  # batch[j1] > batch[j0]
    i2 = first_above(old, i1, n_old, batch[j2] - np.uint64(1))
    i3 = first_above(old, i2, n_old, batch[j3] - np.uint64(1))
    e0, e1, e2 = i1, i2, i3
    f0, f1, f2 = j1, j2, j3
    while (i0 < e0 and j0 < f0 and i1 < e1 and j1 < f1 and i2 < e2 and j2 < f2
           and i3 < n_old and j3 < jend):
        i0, j0 = _merge_step(old, batch, found, i0, j0)
        i1, j1 = _merge_step(old, batch, found, i1, j1)
        i2, j2 = _merge_step(old, batch, found, i2, j2)
        i3, j3 = _merge_step(old, batch, found, i3, j3)
    _merge_chain(old, batch, found, i0, e0, j0, f0)
    _merge_chain(old, batch, found, i1, e1, j1, f1)
    _merge_chain(old, batch, found, i2, e2, j2, f2)
    _merge_chain(old, batch, found, i3, n_old, j3, jend)


@njit(cache=True, nogil=True)
def sweep_sorted(old, n_old, batch, j, found):
    """Mark the keys of ``batch[j:]`` present in ``old[:n_old]``; return the first
    batch position above ``old[n_old - 1]`` (``j`` when ``n_old`` is 0).

    Requires: ``old[:n_old]`` and ``batch`` sorted ascending and unique (uint64; the
    order of ``old`` is NOT checked here: ``sweep_step`` does for keys read from
    disk); ``found`` as long as ``batch``, only set to True here. Twin:
    tests/naive.py ``sweep_naive``.

    Where the batch keys outnumber the chunk's 5 to 1 (a young run, a batch's own),
    each run key skips the batch 8 keys at a time, marking the batch key equal to
    it. Where the chunk holds at most 1.5x the batch keys of its range, a branch-free
    merge in four chains (``merge_mark4``). Otherwise each batch key finds its place
    in the run from the previous one's (``_lower_bound8``: no mispredicted branch
    while the gaps stay under 8 keys), in four independent chains over four
    quarters of the batch keys, so the core overlaps their load-compare-add
    latencies (about half the time of a single chain). The merge's window (run/batch
    0.2-1.5) is where it beats both other paths; it holds the common case, the run
    of one batch's new keys, about half its shard's batch keys. Where the run holds
    5-16x the batch keys of the chunk's range (a large compacted run: stores of 1e9
    keys and more), the chains take ``_lower_bound8_wide``, which crosses a gap of
    8-15 keys without a branch, up to ~25% fewer ns per batch key; below 5x its
    extra dependent load costs more than the branch it saves.
    """
    n_batch = batch.shape[0]
    if n_old == 0:
        return j
    jend = first_above(batch, j, n_batch, old[n_old - 1])  # the first key above the chunk
    if jend > j and 5 * n_old >= jend - j and 2 * n_old <= 3 * (jend - j):
        merge_mark4(old, n_old, batch, j, jend, found)
        return jend
    if n_old * 2 < jend - j:  # batch denser than the run: skip it 8 keys at a time
        for i in range(n_old):
            a = old[i]
            j = skip_below(batch, j, jend, a)
            if j < jend:
                found[j] |= batch[j] == a
        return jend
    i = 0
    if n_old > SAFE_TAIL:
        # batch keys up to old[n_old - SAFE_TAIL]: their place is at most n_old - SAFE_TAIL
        js = first_above(batch, j, jend, old[n_old - SAFE_TAIL])
        m = jend - j
        wide = WIDE_RATIO[0] * m <= n_old < WIDE_RATIO[1] * m
        i, j = _chains4(old, batch, found, j, js, n_old, wide)
        while j < js:
            x = batch[j]
            i = _lower_bound8(old, i, x)
            found[j] |= old[i] == x
            j += 1
    while j < jend:  # the last keys of the chunk: bounded skips
        b = batch[j]
        i = skip_below(old, i, n_old, b)  # < n_old: b <= the chunk's last key
        found[j] |= old[i] == b
        j += 1
    return jend


KWAY_FULL, KWAY_DONE, KWAY_BAD = -1, -2, -3  # = kernels/status.py (no import: numba's
# cache only notices edits in this file)


@njit(cache=True, nogil=True)
def kway_step(bufs, pos, fill, last, out, prev, have_prev):
    """Merge the rows of ``bufs`` (row r holds ``bufs[r, pos[r]:fill[r]]``, a chunk
    of run r) into ``out`` from position 0, ascending.

    Requires: every run sorted ascending; runs pairwise disjoint (a store's runs of
    one shard are). ``last[r]``: row r holds its run's final chunk. Stops when
    ``out`` is full, when a row that is not its run's last chunk runs empty (the
    caller refills it) or when everything is merged. Returns ``(n_out, status,
    prev, have_prev)``: status is the row to refill (>= 0), KWAY_FULL, KWAY_DONE or
    KWAY_BAD (a run out of order, or a key in two runs: corruption). Twin: sorted
    concatenation (tests/naive.py ``kway_naive``).

    The rows' next keys are kept in ``heads`` (an exhausted row: 2^64 - 1, and a
    row really holding that key, necessarily its run's last, is found by a scan):
    each output key is one branch-free minimum over the k heads and one load, not a
    scan of the rows with a branch per row, which mispredicts (which row is least is
    random) more the more runs merge (bench/bench_kway.py)."""
    k = bufs.shape[0]
    cap = out.shape[0]
    n = 0
    top = np.uint64(0xFFFFFFFFFFFFFFFF)
    heads = np.empty(k, np.uint64)
    for r in range(k):
        if pos[r] < fill[r]:
            heads[r] = bufs[r, pos[r]]
        elif not last[r]:
            return n, r, prev, have_prev
        else:
            heads[r] = top
    while n < cap:
        best = 0
        bv = heads[0]
        for r in range(1, k):
            v = heads[r]
            c = v < bv
            best = r if c else best
            bv = v if c else bv
        if pos[best] >= fill[best]:  # every head is 2^64 - 1: a real one, or done
            best = -1
            for r in range(k):
                if pos[r] < fill[r]:
                    best = r
                    break
            if best < 0:
                return n, KWAY_DONE, prev, have_prev
        if have_prev and bv <= prev:
            return n, KWAY_BAD, prev, have_prev
        out[n] = bv
        n += 1
        prev = bv
        have_prev = True
        p = pos[best] + 1
        pos[best] = p
        if p < fill[best]:
            heads[best] = bufs[best, p]
        else:
            heads[best] = top
            if not last[best]:
                return n, best, prev, have_prev
    return n, KWAY_FULL, prev, have_prev


@njit(cache=True, nogil=True)
def sparse_member(run, sparse, stride, needles, found):
    """Set ``found[i]`` where ``needles[i]`` is in ``run``: a binary search in the
    sparse index ``sparse`` (= ``run[::stride]``, kept in memory) names the one block
    of ``stride`` keys that can hold it, and a binary search inside that block (one
    or two pages of a memory-mapped run) decides. Requires: ``run`` sorted ascending
    and unique. Twin: ``np.isin``."""
    n = run.shape[0]
    ns = sparse.shape[0]
    for i in range(needles.shape[0]):
        x = needles[i]
        b = first_above(sparse, 0, ns, x) - 1  # last sparse entry <= x
        if b < 0:
            continue
        lo = b * stride
        hi = min(lo + stride, n)
        while lo < hi:
            mid = (lo + hi) >> 1
            if run[mid] < x:
                lo = mid + 1
            else:
                hi = mid
        if lo < n and run[lo] == x:
            found[i] = True
