"""The fixed buffers of one shard's check and run write, reused across shards and
batches (``MergeBuffers``), and their default size."""

from __future__ import annotations

import numpy as np

from seenstore.runtime.aligned import aligned_empty
from seenstore.store.runs.writer import BUF_KEYS

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
