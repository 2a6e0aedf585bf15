"""Writes one run file sequentially: header placeholder, body chunks, header, fsync.

The writer never renames: it writes to the final path chosen by the store (a
fresh name no manifest references yet), so an interrupted write leaves only an
unreferenced file that the next writer's open removes.
"""

from __future__ import annotations

import os

import numpy as np
import xxhash

from .runformat import HEADER_SIZE, KEY_DTYPE, RunHeader


class RunWriter:
    """Append sorted keys, then ``finish()``. Requires: keys given in ascending order
    across all ``write`` calls (the merge kernel guarantees it)."""

    def __init__(self, path: str, host_bits: int, shard_bits: int, shard: int,
                 policy_digest: bytes):
        self.path = path
        self._meta = (host_bits, shard_bits, shard, policy_digest)
        self._f = open(path, "xb", buffering=0)
        self._f.write(b"\0" * HEADER_SIZE)
        self._hash = xxhash.xxh3_64()
        self.count = 0

    def write(self, keys: np.ndarray) -> None:
        if keys.dtype != np.dtype(KEY_DTYPE):
            keys = keys.astype(KEY_DTYPE)
        view = memoryview(keys).cast("B")
        self._hash.update(view)
        while view:  # raw unbuffered writes may be short
            done = self._f.write(view)
            view = view[done:]
        self.count += len(keys)

    def finish(self, sync: bool = True) -> RunHeader:
        """Write the header, fsync, close. Returns the header written."""
        host_bits, shard_bits, shard, pdigest = self._meta
        header = RunHeader(self.count, host_bits, shard_bits, shard, pdigest,
                           self._hash.intdigest())
        self._f.seek(0)
        self._f.write(header.pack())
        if sync:
            os.fsync(self._f.fileno())
        self._f.close()
        return header

    def abort(self) -> None:
        """Close and delete the partial file; never raises."""
        try:
            self._f.close()
        except OSError:
            pass
        try:
            os.unlink(self.path)
        except OSError:
            pass
