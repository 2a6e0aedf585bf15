"""Keys grouped by their top bits: the one partition of a batch, on one or more threads.

``partition(keys, bits, threads)`` copies ``keys`` grouped by their top ``bits``
bits (groups ascending, input order kept inside each) and returns the start offset
of every group plus the end: the store groups a batch by shard with it
(store/scheduling.py), the cluster client by shard range (cluster/sharded.py).
One thread runs ``partition_top_bits`` (its numpy twin below dispatch.SMALL keys);
several each count then scatter a slice of the keys, with the same result.
"""

from __future__ import annotations

from concurrent.futures import Executor

import numpy as np

from seenstore.kernels import dispatch
from seenstore.runtime import parallel

PARALLEL_PARTITION_KEYS = 1 << 20  # keys per thread below which one thread partitions


def partition(keys: np.ndarray, bits: int, threads: int = 1, out: np.ndarray | None = None,
              *, pool: Executor | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(grouped, bounds)``: ``keys`` grouped by their top ``bits`` bits (groups
    ascending, input order kept inside each: what ``partition_top_bits`` gives), and
    ``bounds``, int64 of length 2**bits + 1: ``bounds[g]`` is the offset of group g
    in ``grouped``, ``bounds[-1]`` = len(keys). ``out``: the uint64 array to write
    the groups to (at least ``len(keys)`` long; a new one if None); ``grouped`` is it.

    With ``threads`` > 1 and at least PARALLEL_PARTITION_KEYS keys per thread, each of
    up to ``threads`` threads counts then scatters its slice of the keys into its own
    slots of every group (those the slices before it leave), so the result is the
    one thread's, byte for byte: the partition was the one pass of a batch on one
    core (~4 ns/key), the others idle. The threads are ``pool``'s, else the shared
    pool of runtime/parallel.py (this thread runs the first slice).

    Requires: ``keys`` uint64; 0 <= bits <= 16."""
    n = len(keys)
    if out is None:
        out = np.empty(n, dtype=np.uint64)
    bounds = np.empty((1 << bits) + 1, dtype=np.int64)
    t = min(threads, max(1, n // PARALLEL_PARTITION_KEYS)) if bits else 1
    if t <= 1:
        dispatch.batch.partition_top_bits(keys, bits, out, bounds)
        return out, bounds
    from seenstore.kernels.batch import count_top_bits, scatter_top_bits  # JIT: a large batch

    cuts = [n * j // t for j in range(t + 1)]
    counts = np.zeros((t, 1 << bits), dtype=np.int64)
    _run([lambda j=j: count_top_bits(keys[cuts[j]:cuts[j + 1]], bits, counts[j])
          for j in range(t)], pool)
    bounds[0] = 0
    np.cumsum(counts.sum(axis=0), out=bounds[1:])
    slots = np.ascontiguousarray(bounds[:-1] + np.cumsum(counts, axis=0) - counts)
    _run([lambda j=j: scatter_top_bits(keys[cuts[j]:cuts[j + 1]], bits, out, slots[j])
          for j in range(t)], pool)
    return out, bounds


def _run(calls: list, pool: Executor | None) -> None:
    """Run every call (nogil kernels) on ``pool``, else on runtime/parallel.py's."""
    if pool is None:
        parallel.run_all(calls)
    else:
        list(pool.map(lambda call: call(), calls))


__all__ = ["PARALLEL_PARTITION_KEYS", "partition"]
