"""Writes one run file sequentially: header placeholder, body chunks, page index,
header, fsync.

The writer never renames: it writes to the final path chosen by the store (a
fresh name no manifest references yet), so an interrupted write leaves only an
unreferenced file that the next writer's open removes.

Body bytes go through one page-aligned buffer of ``BUF_KEYS`` keys and are
written with ``O_DIRECT`` where the file system allows it: no copy into the page
cache, no dirty pages for the kernel to write back later, so the commit's fsync
has little left to do. The last block is padded and the file truncated to its
exact length. Where ``O_DIRECT`` is refused (tmpfs, some network file systems)
the same buffer is written through the page cache. The page index (format 1.1:
first key and xxh3-64 of every 4 KiB page of body, pages.py) follows the body
through the same buffer.
"""

from __future__ import annotations

import errno
import os
from typing import Callable

import numpy as np
import xxhash

from seenstore.store.runs.format import (HEADER_SIZE, KEY_DTYPE, MINOR, PAGE_KEYS, SPARSE_STRIDE,
                                        RunHeader)
from seenstore.store.runs.pages import PageIndex, page_sums
from seenstore.runtime.aligned import ALIGN, aligned_empty, direct_ready, set_direct, whole_blocks

BUF_KEYS = 1 << 20  # 8 MiB writes


class RunWriter:
    """Append sorted keys, then ``finish()``. Requires: keys given in ascending order
    across all ``write`` calls (the merge kernel guarantees it). ``direct``: try
    O_DIRECT (falls back silently where refused); ``self.direct`` tells which.
    ``buf``: a page-aligned uint64 block buffer to use (default: a new BUF_KEYS one).
    ``minor``: the format's minor version, MINOR (1: with the page index); 0 writes
    a 1.0 run (no page index), for tests of what older seenstore wrote."""

    def __init__(self, path: str, host_bits: int, shard_bits: int, shard: int,
                 policy_digest: bytes, direct: bool = True, buf: np.ndarray | None = None,
                 minor: int = MINOR):
        self.path = path
        self._meta = (host_bits, shard_bits, shard, policy_digest)
        self.minor = minor
        self._sums: list = []  # the checksums of the pages written (minor >= 1)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        self._fd = os.open(path, flags, 0o644)
        self.direct = direct and set_direct(self._fd, True)  # else buffered writes
        if buf is None or not direct_ready(buf):
            buf = aligned_empty(BUF_KEYS)
        self._buf = buf  # page-aligned, whole blocks (so whole pages); may be lent to reuse
        self._fill = 0
        self._hash = xxhash.xxh3_64()
        self.count = 0
        self._sparse: list = []  # every SPARSE_STRIDE-th key, taken as the keys go by
        self._write_all(memoryview(aligned_empty(HEADER_SIZE // 8)).cast("B"), zero=True)

    def _write_all(self, view: memoryview, zero: bool = False) -> None:
        if zero:
            view[:] = b"\0" * len(view)
        while view:  # writes may be short
            try:
                done = os.write(self._fd, view)
            except OSError as e:
                if e.errno != errno.EINVAL or not self.direct:
                    raise
                self._drop_direct()  # refused at write time (odd alignment rules): buffered
                continue
            if done % ALIGN and self.direct and done < len(view):
                self._drop_direct()  # a short write left the offset unaligned
            view = view[done:]

    def _drop_direct(self) -> None:
        self.direct = set_direct(self._fd, False)

    def write(self, keys: np.ndarray) -> None:
        if keys.dtype != np.dtype(KEY_DTYPE):
            keys = keys.astype(KEY_DTYPE)
        self._hash.update(memoryview(np.ascontiguousarray(keys)).cast("B"))
        first = -self.count % SPARSE_STRIDE
        if first < len(keys):
            self._sparse.append(np.array(keys[first::SPARSE_STRIDE], dtype=np.uint64))
        self.count += len(keys)
        self._fill = fill_buffer(self._buf, self._fill, keys, self._flush)

    def _flush(self, full: np.ndarray) -> None:
        """Write the full buffer (whole pages of body: their checksums taken first)."""
        if self.minor:
            self._sums.append(page_sums(full, PAGE_KEYS))
        self._write_all(memoryview(full).cast("B"))

    def _put_words(self, words: np.ndarray) -> None:
        """Append ``words`` after the body (the page index): through the buffer, not
        hashed into the body checksum nor into pages."""
        self._fill = fill_buffer(self._buf, self._fill, words,
                                 lambda full: self._write_all(memoryview(full).cast("B")))

    def finish(self, sync: bool = True) -> RunHeader:
        """Write the last block, the page index and the header, fsync, close. Returns
        the header written."""
        host_bits, shard_bits, shard, pdigest = self._meta
        index_sum, page_keys = 0, 0
        if self.minor:
            if self._fill:
                self._sums.append(page_sums(self._buf[:self._fill], PAGE_KEYS))
            self._index = PageIndex(self.sparse_keys(), self._concat_sums(), PAGE_KEYS,
                                    os.path.basename(self.path))
            words = self._index.words()
            index_sum, page_keys = xxhash.xxh3_64_intdigest(words), PAGE_KEYS
            self._put_words(words)
        if self._fill:
            nbytes = 8 * self._fill
            if self.direct:  # whole blocks only: pad, then cut the file to its length
                padded = whole_blocks(nbytes)
                tail = memoryview(self._buf).cast("B")[:padded]
                tail[nbytes:] = b"\0" * (padded - nbytes)
                self._write_all(tail)
            else:
                self._write_all(memoryview(self._buf).cast("B")[:nbytes])
            self._fill = 0
        header = RunHeader(self.count, host_bits, shard_bits, shard, pdigest,
                           self._hash.intdigest(), minor=self.minor, page_keys=page_keys,
                           index_checksum=index_sum)
        size = header.file_size
        if os.fstat(self._fd).st_size != size:
            os.ftruncate(self._fd, size)
        head = aligned_empty(HEADER_SIZE // 8)
        memoryview(head).cast("B")[:] = header.pack()
        close_with_header(self._fd, memoryview(head).cast("B"), sync)
        self._fd = -1
        # a writer is kept until its batch commits (spill.py keeps one per shard):
        # its block buffer (8 MiB when it made its own) goes now
        self._buf = None
        return header

    def sparse_keys(self) -> np.ndarray:
        """Every SPARSE_STRIDE-th key written (each page's first key)."""
        if not self._sparse:
            return np.empty(0, dtype=np.uint64)
        return np.concatenate(self._sparse)

    def _concat_sums(self) -> np.ndarray:
        return np.concatenate(self._sums) if self._sums else np.empty(0, dtype=np.uint64)

    def sparse_index(self) -> PageIndex | np.ndarray:
        """What the run's reader takes from its writer (``RunReader(path, index)``) so it
        need not read it back: the page index of a finished 1.1 run, the sparse keys of
        a 1.0 one."""
        return self._index if self.minor else self.sparse_keys()

    def abort(self) -> None:
        """Close and delete the partial file; never raises."""
        remove_partial(self._fd, self.path)
        self._fd = -1


def fill_buffer(buf: np.ndarray, fill: int, keys: np.ndarray,
                flush: Callable[[np.ndarray], None]) -> int:
    """Copy ``keys`` into ``buf`` after the ``fill`` keys it holds; each time ``buf``
    is full, ``flush(buf)`` writes it all out and the copy goes on from its start.
    Returns how many keys ``buf`` holds then. Shared with codec.py."""
    at = 0
    while at < len(keys):
        take = min(len(keys) - at, len(buf) - fill)
        buf[fill: fill + take] = keys[at: at + take]
        fill += take
        at += take
        if fill == len(buf):
            flush(buf)
            fill = 0
    return fill


def close_with_header(fd: int, head, sync: bool) -> None:
    """Write the header block ``head`` at offset 0 (last, so a file with a valid
    header is whole), fsync if asked, close ``fd``. Shared with codec.py."""
    done = os.pwrite(fd, head, 0)
    if done != HEADER_SIZE:
        raise OSError(errno.EIO, f"short header write ({done} of {HEADER_SIZE} bytes)")
    if sync:
        os.fsync(fd)
    os.close(fd)


def remove_partial(fd: int, path: str) -> None:
    """Close ``fd`` (when >= 0) and delete ``path``; never raises."""
    try:
        if fd >= 0:
            os.close(fd)
    except OSError:
        pass
    try:
        os.unlink(path)
    except OSError:
        pass
