"""Merge stage: one sequential pass of a sorted batch against one run (the rewrite
design before tiered runs; the store now uses only ``MergeBuffers`` from here).

``merge_run`` streams the old run through a fixed buffer (checking its checksum
and order on the way), merges it with the batch in the numba kernel, and writes
old ∪ batch to a RunWriter. Memory: the batch plus the fixed buffers of
``MergeBuffers`` (reused across shards and batches by the store).
"""

from __future__ import annotations

import numpy as np

from .errors import CorruptionError
from .dispatch import merge as _kernels
from .runreader import RunReader
from .runformat import aligned_empty
from .runwriter import BUF_KEYS, RunWriter

merge_step = _kernels.merge_step  # numpy twin below dispatch.SMALL keys

DEFAULT_CHUNK_KEYS = 1 << 20  # 8 MiB buffers: large sequential I/O, small footprint


class MergeBuffers:
    """The fixed buffers of one shard merge: ``old`` (the run streaming in; page-aligned
    for O_DIRECT reads), ``out`` (merged keys) and ``write`` (the RunWriter's aligned
    block buffer). Kept and reused by the store: fresh 8 MiB arrays per shard and batch
    cost page faults, and huge-page compaction stalls when the page cache is full."""

    def __init__(self, chunk_keys: int = DEFAULT_CHUNK_KEYS):
        self.chunk_keys = chunk_keys
        self.old = aligned_empty(chunk_keys)
        self.out = np.empty(chunk_keys, dtype=np.uint64)
        self.write = aligned_empty(BUF_KEYS)


def merge_run(reader: RunReader | None, batch: np.ndarray, writer: RunWriter,
              chunk_keys: int = DEFAULT_CHUNK_KEYS,
              buffers: MergeBuffers | None = None) -> np.ndarray:
    """Write ``old ∪ batch`` to ``writer``; return the mask of batch keys not in old.

    Requires: ``batch`` sorted unique uint64. ``reader`` None means an empty run.
    ``buffers``: reused buffers (their ``chunk_keys`` wins), else fresh ones.
    Raises CorruptionError (and writes garbage the caller must abort) if the old
    run is unsorted or fails its checksum."""
    is_new = np.zeros(len(batch), dtype=np.bool_)
    if buffers is None:
        buffers = MergeBuffers(chunk_keys)
    out, old = buffers.out, buffers.old
    state = [0, np.uint64(0), False]  # j, prev, have_prev

    def drain(n_old: int, last: bool) -> None:
        i = 0
        j, prev, have = state
        while True:
            i, j, n, prev, have, ok = merge_step(old, i, n_old, last, batch, j, is_new,
                                                 out, prev, have)
            prev = np.uint64(prev)  # numba hands uint64 back as a Python int
            if not ok:
                name = reader.name if reader is not None else "batch"
                raise CorruptionError(f"{name}: keys are not sorted and unique")
            if n:
                writer.write(out[:n])
            if n < len(out):
                break
        state[:] = [j, prev, have]

    if reader is None or reader.count == 0:
        drain(0, True)
    else:
        seen = 0
        for n_old in reader.chunks(old):
            seen += n_old
            drain(n_old, seen == reader.count)
    return is_new
