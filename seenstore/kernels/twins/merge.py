"""numpy twins of kernels/merge.py (sweeps, k-way merge, sparse lookup): the same
contract and outputs, for small inputs and as the kernel tests' oracle."""

from __future__ import annotations

import numpy as np

from seenstore.kernels.status import KWAY_BAD, KWAY_DONE, KWAY_FULL

_U = np.uint64


def is_strictly_increasing(a):
    return bool(np.all(a[1:] > a[:-1]))


def sweep_step(old, n_old, batch, j, found, prev, have_prev):
    a = old[:n_old]
    if n_old == 0:
        return j, prev, have_prev, True
    if not is_strictly_increasing(a) or (have_prev and a[0] <= prev):
        return j, prev, have_prev, False
    return sweep_sorted(old, n_old, batch, j, found), a[-1], True, True


def sweep_sorted(old, n_old, batch, j, found):
    if n_old == 0:
        return j
    a = old[:n_old]
    end = max(j, int(np.searchsorted(batch, a[-1], side="right")))
    b = batch[j:end]
    pos = np.minimum(np.searchsorted(a, b), n_old - 1)
    found[j:end] |= a[pos] == b
    return end


def kway_step(bufs, pos, fill, last, out, prev, have_prev):
    """kernels/merge.py ``kway_step`` for sorted, disjoint runs (what a store holds);
    on a run out of order or a key in two runs it answers KWAY_BAD having written
    nothing (the caller raises CorruptionError and drops the output either way)."""
    for r in range(len(pos)):
        if pos[r] >= fill[r] and not last[r]:
            return 0, r, prev, have_prev
    rows = [bufs[r, pos[r]:fill[r]] for r in range(len(pos))]
    keys = np.concatenate(rows)
    row_of = np.repeat(np.arange(len(rows)), [len(x) for x in rows])
    order = np.argsort(keys, kind="stable")
    merged, row_of = keys[order], row_of[order]
    if any(not is_strictly_increasing(x) for x in rows) or not is_strictly_increasing(merged) \
            or (have_prev and len(merged) and merged[0] <= prev):
        return 0, KWAY_BAD, prev, have_prev
    # a row that is not its run's last chunk stops the merge right after its last key
    stops = [int(np.flatnonzero(row_of == r)[-1]) + 1 for r in range(len(rows))
             if not last[r] and len(rows[r])]
    stop = min(stops) if stops else len(merged)
    n = min(stop, len(out))
    out[:n] = merged[:n]
    pos += np.bincount(row_of[:n], minlength=len(pos))
    if n:
        prev, have_prev = merged[n - 1], True
    if n == len(out):
        return n, KWAY_FULL, prev, have_prev
    if n < len(merged) or stops:
        return n, int(row_of[n - 1]), prev, have_prev
    return n, KWAY_DONE, prev, have_prev


def sparse_member(run, sparse, stride, needles, found):
    if len(run) and len(needles):  # a binary search in the (memory-mapped) run itself
        pos = np.minimum(np.searchsorted(run, needles), len(run) - 1)
        found |= np.asarray(run[pos]) == needles
