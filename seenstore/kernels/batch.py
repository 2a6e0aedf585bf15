"""Batch kernels: collapse a batch to sorted unique keys, and map answers back.

Two ways to align the merge's answers with the caller's input order:
``unique_sorted`` + ``mark_first_new`` (sort, then an open-addressing table of
the new keys: cheap when few keys are new), or ``unique_first`` over an argsort
(constant cost, better when most keys are new). Twins: tests/naive.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def unique_sorted(a):
    """Unique keys of ``a``. Requires: ``a`` sorted ascending (uint64). Returns a new array."""
    n = a.shape[0]
    out = np.empty(n, dtype=np.uint64)
    if n == 0:
        return out
    out[0] = a[0]
    m = 1
    for k in range(1, n):
        if a[k] != out[m - 1]:
            out[m] = a[k]
            m += 1
    return out[:m].copy()


@njit(cache=True, nogil=True)
def _slot(key, mask):
    # splitmix64 finaliser: spreads keys whose top bits are a skewed host hash
    z = key
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return np.int64(z & mask)


@njit(cache=True, nogil=True)
def mark_first_new(keys, new_keys):
    """Mask over ``keys`` (input order): True at the first occurrence of each key
    that is in ``new_keys``. Requires: ``new_keys`` unique (uint64)."""
    n = keys.shape[0]
    m = new_keys.shape[0]
    out = np.zeros(n, dtype=np.bool_)
    if m == 0:
        return out
    size = 1
    while size < 2 * m:
        size *= 2
    mask = np.uint64(size - 1)
    table = np.full(size, -1, dtype=np.int64)  # index into new_keys, -1 = empty
    for t in range(m):
        s = _slot(new_keys[t], mask)
        while table[s] != -1:
            s = (s + 1) & (size - 1)
        table[s] = t
    claimed = np.zeros(m, dtype=np.bool_)
    for i in range(n):
        key = keys[i]
        s = _slot(key, mask)
        while True:
            t = table[s]
            if t == -1:
                break
            if new_keys[t] == key:
                if not claimed[t]:
                    claimed[t] = True
                    out[i] = True
                break
            s = (s + 1) & (size - 1)
    return out


@njit(cache=True, nogil=True)
def unique_first(sorted_keys, order):
    """Unique keys and the first input position of each.

    Requires: ``sorted_keys = keys[order]`` for a permutation ``order`` that sorts
    ``keys`` (stable or not). Returns ``(uniq, first)``: unique keys ascending and,
    for each, the smallest index ``i`` with ``keys[i] == uniq[k]``."""
    n = sorted_keys.shape[0]
    uniq = np.empty(n, dtype=np.uint64)
    first = np.empty(n, dtype=np.int64)
    m = 0
    k = 0
    while k < n:
        key = sorted_keys[k]
        best = order[k]
        k += 1
        while k < n and sorted_keys[k] == key:
            if order[k] < best:
                best = order[k]
            k += 1
        uniq[m] = key
        first[m] = best
        m += 1
    return uniq[:m].copy(), first[:m].copy()
