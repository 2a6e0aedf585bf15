"""Page-aligned buffers and O_DIRECT: what run files and Bloom filter files share.

Owns: ``ALIGN`` (the O_DIRECT block size), buffers that start on a boundary,
rounding to whole blocks, and switching O_DIRECT on a file descriptor. Promises:
pure helpers, no state; ``set_direct`` fails quietly where O_DIRECT is refused.
"""

from __future__ import annotations

import fcntl
import os

import numpy as np

ALIGN = 4096  # O_DIRECT block: buffers, offsets and lengths are multiples of it


def whole_blocks(nbytes: int) -> int:
    """``nbytes`` rounded up to a multiple of ALIGN (O_DIRECT moves whole blocks)."""
    return -(-nbytes // ALIGN) * ALIGN


def direct_ready(buf: np.ndarray) -> bool:
    """True when ``buf`` (uint64) can take O_DIRECT transfers: it starts on an ALIGN
    boundary and holds whole blocks."""
    return buf.ctypes.data % ALIGN == 0 and (8 * len(buf)) % ALIGN == 0


def aligned_empty(n_keys: int, align: int = ALIGN, zero: bool = False) -> np.ndarray:
    """A uint64 array of ``n_keys`` whose data starts on an ``align``-byte boundary
    (default ALIGN: O_DIRECT reads and writes of run bodies; the Bloom filter asks for
    cache lines). ``zero``: zeroed (lazily, by the OS) rather than left as is."""
    raw = (np.zeros if zero else np.empty)(n_keys + align // 8, dtype=np.uint64)
    skip = (-raw.ctypes.data % align) // 8
    return raw[skip: skip + n_keys]


def set_direct(fd: int, on: bool) -> bool:
    """Turn O_DIRECT on or off for ``fd``; return whether it is now on. Turning it on
    fails quietly (False) where the platform or file system refuses it."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return False
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, (flags | flag) if on else (flags & ~flag))
    except OSError:
        if on:
            return False
        raise
    return on

