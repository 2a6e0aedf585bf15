"""Merge kernel: one sorted unique batch against one sorted unique run, streamed.

``merge_step`` merges ``old[i:]`` (one chunk of the run) with ``batch[j:]`` into
``out`` until ``out`` is full or the chunk is used up, marking batch keys that
are not in the run. The caller loops: refill the chunk, flush ``out``. Memory is
the batch plus the fixed ``old`` and ``out`` buffers. Twin: tests/naive.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def merge_step(old, i, n_old, last_chunk, batch, j, is_new, out, prev, have_prev):
    """Merge ``old[i:n_old]`` with ``batch[j:]`` into ``out`` from position 0.

    Requires: ``old[:n_old]`` and ``batch`` sorted ascending and unique (uint64);
    ``is_new`` is a bool array as long as ``batch``, False where not yet decided.
    ``last_chunk``: True when ``old`` holds the final chunk of the run, so batch
    keys above its last key are emitted too; otherwise they wait for the next
    chunk. ``prev``/``have_prev``: the last key written before this call.

    Returns ``(i, j, n_out, prev, have_prev, ok)``: positions reached, number of
    keys written to ``out``, the last key written, and ``ok`` False when the
    output would not be strictly increasing (the run is unsorted or duplicated:
    corruption) — the caller must then abandon the merge.
    """
    n_batch = batch.shape[0]
    cap = out.shape[0]
    n = 0
    ok = True
    while n < cap:
        if i < n_old:
            a = old[i]
            if j < n_batch:
                b = batch[j]
                if a < b:
                    key = a
                    i += 1
                elif b < a:
                    key = b
                    is_new[j] = True
                    j += 1
                else:
                    key = a
                    i += 1
                    j += 1
            else:
                key = a
                i += 1
        elif last_chunk and j < n_batch:
            key = batch[j]
            is_new[j] = True
            j += 1
        else:
            break
        if have_prev and key <= prev:
            ok = False
            break
        out[n] = key
        n += 1
        prev = key
        have_prev = True
    return i, j, n, prev, have_prev, ok


@njit(cache=True, nogil=True)
def is_strictly_increasing(a):
    """True when ``a`` (uint64) is sorted ascending with no repeats."""
    for k in range(1, a.shape[0]):
        if a[k] <= a[k - 1]:
            return False
    return True
