"""Batch stage: validate offered keys, sort and deduplicate them.

``as_keys`` checks offered keys; ``prepare`` turns them (any order, repeats allowed)
into the sorted unique array a merge needs (np.sort + one pass). The store's exact
path instead partitions a batch by shard and sorts shard by shard
(``kernels/batch.py: partition_top_bits``); answers go back to the caller's order
with ``kernels/batch.py: mark_first_new``. ``read_batch_file`` loads a raw
little-endian uint64 batch file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np

from .errors import InvalidInputError, StoreNotFoundError
from .kernels.batch import unique_inplace


def as_keys(keys) -> np.ndarray:
    """Offered keys as a 1-D uint64 array (no copy when already one).

    Accepts a uint64 (or other unsigned) array, or any iterable of ints in
    [0, 2**64) (Python or numpy integers). Signed, float or bool arrays, and
    floats, bools, strings or other items in a list, are refused (InvalidInputError
    naming the first bad item) rather than truncated or reinterpreted."""
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
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        raise InvalidInputError(
            f"keys must be a uint64 array or an iterable of ints, not {type(keys).__name__}")
    if not isinstance(keys, (list, tuple)):
        keys = list(keys)
    kinds = set(map(type, keys))
    if not kinds <= {int}:
        for i, k in enumerate(keys):  # np.uint64 would truncate 1.5 and take True as 1
            if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
                raise InvalidInputError(
                    f"keys must be integers in [0, 2**64): item {i} is "
                    f"{type(k).__name__} {k!r:.60}")
    try:
        return np.array(keys, dtype=np.uint64).reshape(-1)
    except (OverflowError, TypeError, ValueError):
        bad = next((i for i, k in enumerate(keys) if not 0 <= int(k) < 2**64), None)
        raise InvalidInputError(
            f"keys must be integers in [0, 2**64): item {bad} is {keys[bad]!r}") from None


def prepare(keys: np.ndarray) -> np.ndarray:
    """Sorted unique copy of ``keys``. Requires: uint64 (see ``as_keys``).

    A view of the front of one sorted copy (deduplicated in place): no second
    batch-sized array to allocate and fault in."""
    s = np.sort(keys)
    return s[: unique_inplace(s)]


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
