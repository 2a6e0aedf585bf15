"""Batch stage: validate offered keys, sort and deduplicate them.

``as_keys`` checks offered keys; ``prepare`` turns them (any order, repeats allowed)
into the sorted unique array a merge needs (``sorting.sorted_unique``: np.sort or the
radix sort, whichever is faster here). The store's exact
path instead partitions a batch by shard and sorts shard by shard
(``kernels/batch.py: partition_top_bits``); answers go back to the caller's order
with ``kernels/batch.py: mark_first_new``. ``read_batch_file`` loads a raw
little-endian uint64 batch file.
"""

from __future__ import annotations

import os

import numpy as np

from .errors import InvalidInputError, StoreNotFoundError
from .sorting import sorted_unique


def as_keys(keys) -> np.ndarray:
    """Offered keys as a 1-D uint64 array (no copy when already one).

    Accepts a uint64 array or a sequence of Python ints in [0, 2**64). Signed or
    float arrays are refused rather than reinterpreted."""
    if isinstance(keys, np.ndarray):
        if keys.dtype != np.uint64:
            if keys.dtype.kind == "u":
                keys = keys.astype(np.uint64)
            else:
                raise InvalidInputError(
                    f"keys must be an unsigned integer array (uint64), got {keys.dtype}")
        if keys.ndim != 1:
            raise InvalidInputError(f"keys must be 1-D, got shape {keys.shape}")
        return keys
    try:
        return np.array(keys, dtype=np.uint64).reshape(-1)
    except (OverflowError, TypeError, ValueError) as e:
        raise InvalidInputError(f"keys must be integers in [0, 2**64): {e}") from None


def prepare(keys: np.ndarray, threads: int = 1) -> np.ndarray:
    """Sorted unique copy of ``keys``. Requires: uint64 (see ``as_keys``).

    A view of the front of one sorted copy (deduplicated in place: no second
    batch-sized array to keep; the radix sort's scratch is freed on return)."""
    return sorted_unique(keys, threads)


def read_batch_file(path: str) -> np.ndarray:
    """Read a batch file of raw little-endian uint64 keys (any order, repeats allowed).

    Raises StoreNotFoundError if missing, InvalidInputError if it is empty, a
    directory, or its length is not a multiple of 8."""
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        raise StoreNotFoundError(f"{path}: no such batch file") from None
    if os.path.isdir(path):
        raise InvalidInputError(f"{path}: is a directory, expected a batch file")
    if size == 0:
        raise InvalidInputError(f"{path}: empty batch file: nothing to merge")
    if size % 8:
        raise InvalidInputError(
            f"{path}: length {size} is not a multiple of 8: not a batch of uint64 keys")
    return np.fromfile(path, dtype="<u8").astype(np.uint64, copy=False)
