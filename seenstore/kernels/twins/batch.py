"""numpy twins of kernels/batch.py: the same contract and outputs, for small inputs
(below dispatch.SMALL keys) and as the oracle the kernel tests compare against."""

from __future__ import annotations

import numpy as np

_U = np.uint64


def unique_inplace(a):
    if len(a) == 0:
        return 0
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    m = int(keep.sum())
    a[:m] = a[keep]
    return m


def unique_sorted(a):
    out = a.copy()
    return out[: unique_inplace(out)].copy()


def compact_inplace(a, keep):
    sel = a[np.asarray(keep, dtype=bool)]
    a[: len(sel)] = sel
    return len(sel)


def mark_first_new(keys, new_keys, part_bits=-1):
    out = np.zeros(len(keys), dtype=bool)
    if len(keys) and len(new_keys):
        _, first = np.unique(keys, return_index=True)
        out[first[np.isin(keys[first], new_keys)]] = True
    return out


def mark_members(keys, members, part_bits=-1):
    return np.isin(keys, members) if len(members) else np.zeros(len(keys), dtype=bool)


def first_unique(keys, out, pos, check_at, max_unique):
    if check_at < len(keys) and len(np.unique(keys[:check_at])) > max_unique:
        return -1
    _, first = np.unique(keys, return_index=True)
    m = len(first)
    if m > len(out):
        return -1
    pos[:m] = np.sort(first)
    out[:m] = keys[pos[:m]]
    return m


def partition_top_bits(keys, bits, out, starts):
    n = len(keys)
    if bits == 0:
        out[:n] = keys
        starts[0], starts[1] = 0, n
        return
    groups = (keys >> _U(64 - bits)).astype(np.int64)
    out[:n] = keys[np.argsort(groups, kind="stable")]
    starts[0] = 0
    np.cumsum(np.bincount(groups, minlength=1 << bits), out=starts[1:])


def partition_by_cuts(keys, cuts, ids, out, starts):
    n = len(keys)
    ids[:n] = np.searchsorted(cuts, keys, "right")
    out[:n] = keys[np.argsort(ids[:n], kind="stable")]
    starts[0] = 0
    np.cumsum(np.bincount(ids[:n], minlength=len(cuts) + 1), out=starts[1:])
