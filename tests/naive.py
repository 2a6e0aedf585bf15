"""Slow, obviously-correct twins of the kernels, used as test oracles."""

from __future__ import annotations

import numpy as np


def merge_naive(old: np.ndarray, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of two sorted unique uint64 arrays and the mask of batch keys not in old."""
    old_set = set(int(x) for x in old)
    is_new = np.array([int(b) not in old_set for b in batch], dtype=bool)
    merged = np.array(sorted(old_set | set(int(b) for b in batch)), dtype=np.uint64)
    return merged, is_new


def add_naive(seen: set, keys) -> np.ndarray:
    """The brief's add() semantics over a Python set, mutating ``seen``."""
    mask = []
    for k in keys:
        k = int(k)
        mask.append(k not in seen)
        seen.add(k)
    return np.array(mask, dtype=bool)


def sweep_naive(run: np.ndarray, batch: np.ndarray) -> np.ndarray:
    """Mask over sorted ``batch``: True where the key is in ``run``."""
    s = set(int(x) for x in run)
    return np.array([int(b) in s for b in batch], dtype=bool)


def kway_naive(runs) -> np.ndarray:
    """The union of disjoint sorted runs, sorted."""
    out = sorted(int(x) for r in runs for x in r)
    return np.array(out, dtype=np.uint64)
