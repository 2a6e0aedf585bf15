"""Batch kernels: collapse a sorted batch to unique keys, and map answers back.

``unique_sorted`` drops repeats from a sorted array; ``mark_first_new`` marks,
in input order, the first occurrence of each key of a set of new keys (a
radix-partitioned hash join, so its tables stay in cache at any batch size);
``mark_members`` marks every occurrence; ``first_unique`` drops the repeats of an
unsorted batch, in order (the store's pass before it partitions a batch of many repeats).
Twins: tests/naive.py and the tests' set oracles.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def unique_sorted(a):
    """Unique keys of ``a``. Requires: ``a`` sorted ascending (uint64). Returns a new array."""
    out = a.copy()
    return out[: unique_inplace(out)].copy()


@njit(cache=True, nogil=True)
def unique_inplace(a):
    """Move the unique keys of sorted ``a`` to its front, in order; return their count.

    Requires: ``a`` sorted ascending (uint64). ``a[count:]`` is left unspecified.
    In place because a fresh array of a 1e8-key batch costs more in page faults
    (up to ~1.5 s for 800 MB, by the kernel's huge-page luck) than the pass itself."""
    n = a.shape[0]
    if n == 0:
        return 0
    m = 1
    for k in range(1, n):
        if a[k] != a[m - 1]:
            a[m] = a[k]
            m += 1
    return m


@njit(cache=True, nogil=True)
def compact_inplace(a, keep):
    """Move ``a[i]`` for every i with ``keep[i]`` to the front of ``a``, in order;
    return their count. ``a[count:]`` is left unspecified. (``a[keep]`` without
    allocating a second array.)

    Branch-free: every key is written at the front position and the position moves
    on by ``keep[i]`` (m <= i: the slot written was read already). A branch on
    ``keep`` mispredicts about once per two keys when ~half are kept (a batch's
    new keys of a crawl-like stream), several times the cost of the unconditional
    write."""
    m = 0
    for k in range(a.shape[0]):
        a[m] = a[k]
        m += np.int64(keep[k])
    return m


FILTER_SLOTS = 1 << 14  # join tables above this many slots (128 KiB of keys, past L1) are filtered


@njit(cache=True, nogil=True)
def _mix(key):
    # splitmix64 finaliser: spreads keys whose top bits are a skewed host hash
    z = key
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def _partition(keys, shift, n_parts):
    """Stable counting-sort scatter of ``keys`` (with their positions) by the top
    bits of their mix. Returns (keys, positions, start of each part + end)."""
    n = keys.shape[0]
    starts = np.zeros(n_parts + 1, dtype=np.int64)
    for i in range(n):
        starts[np.int64(_mix(keys[i]) >> shift) + 1] += 1
    for p in range(n_parts):
        starts[p + 1] += starts[p]
    fill = starts[:-1].copy()
    out_keys = np.empty(n, dtype=np.uint64)
    out_pos = np.empty(n, dtype=np.int64)
    for i in range(n):
        p = np.int64(_mix(keys[i]) >> shift)
        j = fill[p]
        out_keys[j] = keys[i]
        out_pos[j] = i
        fill[p] = j + 1
    return out_keys, out_pos, starts


@njit(cache=True, nogil=True)
def mark_first_new(keys, new_keys, part_bits=-1):
    """Mask over ``keys`` (input order): True at the first occurrence of each key
    that is in ``new_keys``. Requires: ``new_keys`` unique (uint64).

    Radix-partitioned hash join: both sides are scattered by the top ``part_bits``
    bits of a mix of the key (stable, so input order is kept within a part), then
    each part gets an open-addressing table small enough for the L2 cache. A
    part_bits of -1 picks about 8192 new keys per part."""
    return _join_mark(keys, new_keys, part_bits, True)


@njit(cache=True, nogil=True)
def mark_members(keys, members, part_bits=-1):
    """Mask over ``keys`` (input order): True at every occurrence of a key that is
    in ``members``. Requires: ``members`` unique (uint64). The join of
    ``mark_first_new`` (``contains`` maps its answers back to the caller's keys with
    it: a binary search per key into a large sorted answer costs ~600 ns/key)."""
    return _join_mark(keys, members, part_bits, False)


@njit(cache=True, nogil=True)
def join_part_bits(m, part_bits):
    """The partition bits of a join against ``m`` unique keys: ``part_bits`` if not
    negative, else 0 while their table fits the caches (~4 MiB), then about 8192 keys
    per part (at most 16 bits)."""
    if part_bits >= 0:
        return part_bits
    bits = 0
    if m > (1 << 18):
        while (m >> bits) > 8192 and bits < 16:
            bits += 1
    return bits


@njit(cache=True, nogil=True)
def join_partition(keys, part_bits):
    """``_partition`` of ``keys`` by ``part_bits`` mixed top bits (0: one part, the keys
    as they are): (keys, their positions, start of each part + end)."""
    n = keys.shape[0]
    if part_bits == 0:
        return keys, np.arange(n, dtype=np.int64), np.array([0, n], dtype=np.int64)
    return _partition(keys, np.uint64(64 - part_bits), 1 << part_bits)


@njit(cache=True, nogil=True)
def join_parts(ik, ipos, istart, nk, nstart, p0, p1, first_only, out):
    """The hash join of parts ``p0 <= p < p1`` (``join_partition``'s of the input keys
    ``ik``/``ipos``/``istart`` and of the unique keys ``nk``/``nstart``): set
    ``out[ipos[j]]`` for each input key of those parts in the unique keys (its first
    occurrence only, with ``first_only``). Parts share no key, so calls over disjoint
    part ranges may run at once on one ``out``."""
    biggest = 1
    for p in range(p0, p1):
        if nstart[p + 1] - nstart[p] > biggest:
            biggest = nstart[p + 1] - nstart[p]
    size = 1
    while size < 2 * biggest:
        size *= 2
    table = np.empty(size, dtype=np.uint64)
    used = np.zeros(size, dtype=np.uint8)  # 0 empty, 1 key unclaimed, 2 key claimed
    # a part's table above FILTER_SLOTS slots (out of L1) gets a bitmap of 4 bits per
    # slot (~8 per key, in L1/L2) of other bits of the same mix: most input keys are
    # not new (a crawl's links were mostly seen) and are turned away by one bit
    pb = 0  # the partition bits: the mix's top pb bits are one part's, constant
    while (1 << pb) < nstart.shape[0] - 1:
        pb += 1
    bitmap = np.empty(max(size >> 4, 1), dtype=np.uint64)  # cleared per filtered part
    for p in range(p0, p1):
        lo, hi = nstart[p], nstart[p + 1]
        if lo == hi:
            continue
        psize = 1
        while psize < 2 * (hi - lo):
            psize *= 2
        pmask = np.uint64(psize - 1)
        used[:psize] = 0
        filtered = psize > FILTER_SLOTS
        fbits = 2
        while (1 << fbits) < 4 * psize:
            fbits += 1
        fshift = np.uint64(64 - pb - fbits)
        fmask = np.uint64((1 << fbits) - 1)
        if filtered:
            bitmap[:(1 << fbits) >> 6] = 0
        for t in range(lo, hi):
            key = nk[t]
            z = _mix(key)
            if filtered:
                b = (z >> fshift) & fmask
                bitmap[b >> np.uint64(6)] |= np.uint64(1) << (b & np.uint64(63))
            s = np.int64(z & pmask)
            while used[s] != 0:
                s = (s + 1) & (psize - 1)
            table[s] = key
            used[s] = 1
        for j in range(istart[p], istart[p + 1]):
            key = ik[j]
            z = _mix(key)
            if filtered:
                b = (z >> fshift) & fmask
                if (bitmap[b >> np.uint64(6)] >> (b & np.uint64(63))) & np.uint64(1) == 0:
                    continue  # not a new key
            s = np.int64(z & pmask)
            while used[s] != 0:
                if table[s] == key:
                    if used[s] == 1 or not first_only:
                        used[s] = 2
                        out[ipos[j]] = True
                    break
                s = (s + 1) & (psize - 1)


@njit(cache=True, nogil=True)
def _join_mark(keys, new_keys, part_bits, first_only):
    n = keys.shape[0]
    m = new_keys.shape[0]
    out = np.zeros(n, dtype=np.bool_)
    if m == 0 or n == 0:
        return out
    bits = join_part_bits(m, part_bits)
    nk, _, nstart = join_partition(new_keys, bits)
    ik, ipos, istart = join_partition(keys, bits)
    join_parts(ik, ipos, istart, nk, nstart, 0, 1 << bits, first_only, out)
    return out


@njit(cache=True, nogil=True)
def partition_top_bits(keys, bits, out, starts):
    """Copy ``keys`` into ``out`` grouped by their top ``bits`` bits, groups ascending,
    input order kept inside a group (a counting pass, then a scatter pass).

    Requires: 0 <= bits <= 16; len(out) >= len(keys); ``starts`` int64 of length
    2**bits + 1. Leaves ``starts[g]`` = index in ``out`` of group g's first key,
    ``starts[-1]`` = len(keys). The store then sorts the groups (its shards) on
    threads of their own while the sorted ones merge, so the sorting overlaps
    their disk I/O."""
    n = keys.shape[0]
    n_groups = 1 << bits
    if bits == 0:
        out[:n] = keys
        starts[0] = 0
        starts[1] = n
        return
    shift = np.uint64(64 - bits)
    fill = np.zeros(n_groups + 1, np.int64)
    for i in range(n):
        fill[np.int64(keys[i] >> shift) + 1] += 1
    for g in range(n_groups):
        fill[g + 1] += fill[g]
    starts[:] = fill
    for i in range(n):  # fill[g] ends as the end of group g
        g = np.int64(keys[i] >> shift)
        out[fill[g]] = keys[i]
        fill[g] += 1


@njit(cache=True, nogil=True)
def partition_by_cuts(keys, cuts, ids, out, starts):
    """Copy ``keys`` into ``out`` grouped by key range, groups ascending, input order
    kept inside a group: key k is in group ``np.searchsorted(cuts, k, "right")`` (the
    number of cuts <= k), found by a binary search over ``cuts`` (a counting pass
    that stores each key's group in ``ids``, then a scatter pass). A spill bucket too
    big for one slice is split so (store/buckets.py ``split``): 5-10x faster than
    numpy's searchsorted, stable argsort and gather.

    Requires: ``cuts`` ascending; ``ids`` int32 and ``out`` at least len(keys) long;
    ``starts`` int64 of length len(cuts) + 2. Leaves ``starts[g]`` = index in ``out``
    of group g's first key, ``starts[-1]`` = len(keys). Twin:
    kernels/twins/batch.py ``partition_by_cuts``."""
    n = keys.shape[0]
    c = cuts.shape[0]
    fill = np.zeros(c + 2, np.int64)
    top = 0
    if c > 0:
        top = 1
        while top * 2 <= c:
            top *= 2
    # cuts padded to 2 * top - 1 with the largest key: the search below takes the
    # same steps for every key, with no branch on the data (a key can move past the
    # padding only when it is the largest key, and is clamped back to c)
    padded = np.full(max(1, 2 * top - 1), np.uint64(0xFFFFFFFFFFFFFFFF), np.uint64)
    padded[:c] = cuts
    for i in range(n):
        x = keys[i]
        pos = 0
        step = top
        while step > 0:
            pos += step * np.int64(padded[pos + step - 1] <= x)
            step >>= 1
        pos = min(pos, c)
        ids[i] = pos
        fill[pos + 1] += 1
    for g in range(c + 1):
        fill[g + 1] += fill[g]
    starts[:] = fill
    for i in range(n):  # fill[g] ends as the end of group g
        g = ids[i]
        out[fill[g]] = keys[i]
        fill[g] += 1


@njit(cache=True, nogil=True)
def count_top_bits(keys, bits, counts):
    """Add to ``counts[g]`` the number of ``keys`` whose top ``bits`` bits equal g.

    Requires: 1 <= bits <= 16; ``counts`` int64 of length 2**bits. With
    ``scatter_top_bits``: the two passes of ``partition_top_bits``, split so that
    several threads can each run them on a slice of the keys."""
    shift = np.uint64(64 - bits)
    for i in range(keys.shape[0]):
        counts[np.int64(keys[i] >> shift)] += 1


@njit(cache=True, nogil=True)
def scatter_top_bits(keys, bits, out, fill):
    """Copy each key, in input order, to ``out[fill[g]]`` (g: its top ``bits`` bits)
    and advance ``fill[g]``.

    Requires: 1 <= bits <= 16; ``fill`` int64 of length 2**bits; the slots each
    group gets (``count_top_bits`` of ``keys``) inside ``out`` and apart from any
    other thread's."""
    shift = np.uint64(64 - bits)
    for i in range(keys.shape[0]):
        g = np.int64(keys[i] >> shift)
        out[fill[g]] = keys[i]
        fill[g] += 1


FIRST_UNIQUE_BITS = 15  # first_unique's table: 2**15 slots (256 KiB) to start with


@njit(cache=True, nogil=True)
def first_unique(keys, out, pos, check_at, max_unique):
    """Write the unique keys of ``keys`` to ``out`` in order of first occurrence, the
    index in ``keys`` of each to ``pos``, and return their count; or return -1 as
    soon as the first ``check_at`` keys hold more than ``max_unique`` distinct ones,
    or ``keys`` more distinct ones than ``out`` holds (a batch with few repeats,
    where this pass would only add to the sort's work; ``out`` then holds some of
    them). An open-addressing table of the keys seen (``_mix``, linear probing, kept
    at most half full: doubled and refilled from ``out``); key 0, its empty slot, is
    tracked apart. Requires: ``out`` uint64 and ``pos`` int64, as long as each other."""
    n = keys.shape[0]
    room = out.shape[0]
    bits = FIRST_UNIQUE_BITS
    table = np.zeros(1 << bits, np.uint64)
    mask = np.uint64((1 << bits) - 1)
    sh = np.uint64(64 - bits)
    m = 0
    zero = False
    for i in range(n):
        if i == check_at and m > max_unique:
            return -1
        k = keys[i]
        if k == np.uint64(0):
            if not zero:
                if m == room:
                    return -1
                zero = True
                out[m] = k
                pos[m] = i
                m += 1
            continue
        h = _mix(k) >> sh
        while True:
            s = table[h]
            if s == k:
                break
            if s == np.uint64(0):
                if m == room:
                    return -1
                table[h] = k
                out[m] = k
                pos[m] = i
                m += 1
                if 2 * m > table.shape[0]:
                    bits += 1
                    table = _refill(out, m, bits)
                    mask = np.uint64((1 << bits) - 1)
                    sh = np.uint64(64 - bits)
                break
            h = (h + np.uint64(1)) & mask
    return m


@njit(cache=True, nogil=True)
def _refill(out, m, bits):
    """first_unique's table of 2**bits slots holding the nonzero keys of ``out[:m]``."""
    table = np.zeros(1 << bits, np.uint64)
    mask = np.uint64((1 << bits) - 1)
    sh = np.uint64(64 - bits)
    for j in range(m):
        x = out[j]
        if x == np.uint64(0):
            continue
        g = _mix(x) >> sh
        while table[g] != np.uint64(0):
            g = (g + np.uint64(1)) & mask
        table[g] = x
    return table
