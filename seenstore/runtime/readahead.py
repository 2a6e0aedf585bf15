"""Asking the OS to read a file range into the page cache before it is read.

``will_need(fd, offset, length)`` is ``posix_fadvise(POSIX_FADV_WILLNEED)`` over the
range in steps of ``STEP`` bytes. One call over a whole range is not enough: Linux
reads ahead at most one step's worth of it (2 MiB, the cap of its forced readahead)
and ignores the rest, so a later read of a 78 MB spill bucket still waited for the
disk (``bench/bench_readahead.py``: a bucket read 4.2 ns per key cold, 3.9 after one
WILLNEED over the whole file, 1.75 after the stepped calls). The calls start the
reads and return; the pages arrive while the caller does other work. A hint: without
``posix_fadvise`` it does nothing, and an error (a file removed meanwhile) is
ignored.
"""

from __future__ import annotations

import os

STEP = 2 << 20  # bytes per call: the most one forced readahead reads


def will_need(fd: int, offset: int, length: int) -> None:
    """Start reading ``length`` bytes of ``fd`` from ``offset`` into the page cache."""
    if not hasattr(os, "posix_fadvise") or length <= 0:
        return
    try:
        for at in range(offset, offset + length, STEP):
            os.posix_fadvise(fd, at, min(STEP, offset + length - at), os.POSIX_FADV_WILLNEED)
    except OSError:
        pass


def will_need_file(path: str) -> None:
    """``will_need`` over the whole file ``path``; a file that is gone is ignored."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return
    try:
        will_need(fd, 0, os.fstat(fd).st_size)
    finally:
        os.close(fd)
