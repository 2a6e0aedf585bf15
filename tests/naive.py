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


def split_lines_naive(text: bytes, pairs: bool, base: bytes | None, max_line: int):
    """Twin of kernels/lines.py over a whole stream: [(href, base or None, too_long)].
    A leading UTF-8 BOM is dropped; lines end at b"\\n", one b"\\r" before it goes;
    blank lines are skipped; a line over max_line bytes is (b"", None, True); with
    ``pairs`` a line is split at its first TAB into (href, base)."""
    if text.startswith(b"\xef\xbb\xbf"):
        text = text[3:]
    out = []
    for line in text.split(b"\n"):
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            continue
        if len(line) > max_line:
            out.append((b"", None, True))
        elif pairs and b"\t" in line:
            b, href = line.split(b"\t", 1)
            out.append((href, b, False))
        else:
            out.append((line, base, False))
    return out
