"""Reading URL lines from files and streams into a URL batch's arrays.

Owns the input side of ``URLBuffer.iter_file``: a stream read in blocks (or a large
regular file mapped, its consumed pages dropped) and split into lines by the line
kernel (kernels/lines.py) straight into the arrays of a batch, with no Python
object per line; and ``iter_lines`` (plain bytes lines, for the scalar paths).
Promises: bounded memory whatever the input (a line over ``max_line`` bytes is
never held whole), lines as a plain read would give them (also of a file appended
to while it is read). Knows nothing of URLBuffer: buffer.py wraps the arrays.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np

DEFAULT_BLOCK_BYTES = 16 << 20
DEFAULT_MAX_LINE = 1 << 20  # bytes; a longer line is rejected too-long without being read whole


def iter_line_arrays(f: BinaryIO, pairs: bool, base: str | None, block_bytes: int,
                     chunk_urls: int | None, max_line: int) -> Iterator[tuple]:
    """The lines of ``f`` as batches of arrays (``_LineBatch.result``: what a URLBuffer
    is made of), split by the kernel (kernels/lines.py) straight
    into the batch's arrays: ``chunk_urls`` URLs each (the last may be fewer), or
    with None the lines each block read completes. Reads at most ``block_bytes`` per
    call (``readinto1`` where the stream has it, so a pipe's lines are handled as
    they arrive) into one reused buffer; the unfinished last line is carried over.
    A regular file of at least MAP_MIN_BYTES is mapped instead (``_mapped``) and
    the kernel handed the same windows of it, ``block_bytes`` more per step; if the
    file has grown when the mapped part is done, the rest is read (``_unmapped``).
    A line over ``max_line`` bytes is never held whole: it becomes an empty URL
    listed in ``too_long``. Memory: the buffer (block_bytes + max_line) + the batch
    (mapped: the window's pages; those consumed are dropped, ``_release``)."""
    from seenstore.kernels import dispatch  # the kernel (numba) only once the input is large

    hint = _size_hint(f)  # a regular file's size: a large one takes the kernel at once
    room = block_bytes + max_line + 3  # the read buffer's size
    # mapped (mm: the mmap object): the file's pages read in place, no copy into buf
    buf, start, size, mm = _mapped(f, hint) or (np.empty(room, dtype=np.uint8), 0, 0, None)
    end = start
    readinto = getattr(f, "readinto1", None) or getattr(f, "readinto", None)
    skip = total = released = 0
    at_start, final, need_read = True, False, True
    out = _LineBatch(base)
    while True:
        if need_read and mm is not None:  # the same windows as the reads below
            got = min(block_bytes, size - end)
            if got == 0 and _size_hint(f) > size:  # appended to since it was mapped
                buf, start, end = _unmapped(f, buf[start:end], size, room)
                mm = None  # the rest is read as from any stream, below (unmapped)
            else:
                end += got
                total += got
                final = got == 0
        if need_read and mm is None:
            buf[: end - start] = buf[start:end]
            end, start = end - start, 0
            if readinto is not None:
                with memoryview(buf) as mv:
                    got = readinto(mv[end : end + block_bytes]) or 0
            else:
                chunk = f.read(block_bytes) or b""
                got = len(chunk)
                buf[end : end + got] = np.frombuffer(chunk, dtype=np.uint8)
            end += got
            total += got
            final = got == 0
        n = end - start
        split_lines = dispatch.split_lines_for(max(total, hint))
        limit = out.reserve(n, chunk_urls)
        consumed, skip = split_lines(buf[start:end], n, final, pairs, max_line, skip, at_start,
                                     out.gbase_id, limit, *out.arrays())
        at_start = at_start and consumed == 0
        start += consumed
        if mm is not None and start - released >= block_bytes:
            released = _release(mm, released, start)
        full = out.counts[0] == chunk_urls
        if out.counts[0] and (full or chunk_urls is None or final):
            yield out.result()
            out = _LineBatch(base)
        if final and not full:
            if mm is not None:
                f.seek(size)  # where reading it to its end leaves the stream
            return
        need_read = not full  # a full batch may leave whole lines in the buffer


MAP_MIN_BYTES = 1 << 24  # a regular file from this size (a block) is read through a mapping


RELEASE_ALIGN = 1 << 21  # whole huge pages: a file's page cache may map 2 MiB at a time


def _release(mm, lo: int, hi: int) -> int:
    """Drop bytes ``lo:hi`` of the mapping ``mm`` (lines the kernel has copied out),
    in whole RELEASE_ALIGN units, from this process (MADV_DONTNEED; they stay in the
    page cache), so that the RSS of a mapped read is bounded by a window, not the
    file. Requires: ``lo`` a multiple of RELEASE_ALIGN. Returns the new ``lo``."""
    import mmap

    hi -= hi % RELEASE_ALIGN
    if hi > lo:
        with contextlib.suppress(AttributeError, OSError, ValueError):
            mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
        return hi
    return lo


def _unmapped(f: BinaryIO, tail: np.ndarray, size: int,
              room: int) -> tuple[np.ndarray, int, int]:
    """Leave a mapped read for reading the stream: a file appended to since it was
    mapped (``size`` bytes) is read on from there, as reading it from the start would
    have (lines appended before the end is reached are read). Returns the block
    buffer for the reads (``room`` bytes past ``tail``, the unfinished last line of
    the mapped part, which it holds first), and its (start, end)."""
    buf = np.empty(len(tail) + room, dtype=np.uint8)
    buf[: len(tail)] = tail
    f.seek(size)
    return buf, 0, len(tail)


def _mapped(f: BinaryIO, size: int) -> tuple[np.ndarray, int, int, object] | None:
    """(the whole file as a read-only uint8 array, the stream's position, the file's
    size, the mmap object) for a regular file of at least MAP_MIN_BYTES, mapped
    read-only; else None (pipes, small files, a platform or file that cannot be
    mapped: the caller reads into its buffer). Reading into a buffer copies each
    page out of the page cache, several times the CPU of mapping the pages and
    faulting them in (docs/fastpath.md, "Reading the input"). The same byte windows are handed to
    the line kernel either way, so the buffers made are the same. A file truncated
    by another process while it is read this way ends the process (SIGBUS), as for
    any program reading a mapped file; the store keeps its last committed batch.
    Lines appended while it is read are read as reading would (``_unmapped``)."""
    if size < MAP_MIN_BYTES:
        return None
    import mmap

    try:
        pos = f.tell()
        m = mmap.mmap(f.fileno(), size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None
    if not 0 <= pos <= size:
        m.close()
        return None
    with contextlib.suppress(AttributeError, OSError, ValueError):
        m.madvise(mmap.MADV_SEQUENTIAL)  # read ahead, drop behind
    return np.frombuffer(m, dtype=np.uint8), pos, size, m


def _size_hint(f: BinaryIO) -> int:
    """The size of a regular file behind ``f``, else 0 (pipes, sockets, BytesIO)."""
    try:
        st = os.fstat(f.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


class _LineBatch:
    """The output arrays split_lines appends to, grown as needed (see its contract)."""

    def __init__(self, base: str | None) -> None:
        gb = b"" if base is None else base.encode("utf-8", "surrogatepass")
        self.gbase_id = -1 if base is None else 0
        self.data = np.empty(0, np.uint8)
        self.bdata = np.frombuffer(gb, dtype=np.uint8).copy()
        self.offsets = np.zeros(1, np.int64)
        self.boffsets = np.array([0, len(gb)] if base is not None else [0], dtype=np.int64)
        self.ids, self.too_long = np.empty(0, np.int64), np.empty(0, np.int64)
        self.counts = np.array([0, 0, self.gbase_id + 1, len(gb), 0], dtype=np.int64)

    def arrays(self) -> tuple:
        return (self.data, self.offsets, self.bdata, self.boffsets, self.ids, self.too_long,
                self.counts)

    def reserve(self, nbytes: int, chunk_urls: int | None) -> int:
        """Make room for the lines of nbytes more input; return the URL limit to pass.
        A batch of chunk_urls URLs gets its URL arrays at once (pages are touched only
        as they fill) and its byte arrays sized from the bytes per URL seen so far."""
        nu, nd, nb, nbd, _ = self.counts.tolist()
        limit = nu + nbytes // 2 + 2
        if chunk_urls is not None:
            limit = min(limit, chunk_urls)
        room = limit if chunk_urls is None or chunk_urls > 1 << 24 else chunk_urls
        guess = 0 if nu == 0 else int(nd / nu * room * 1.1)
        nt = int(self.counts[4])
        self.data = _room(self.data, nd + nbytes, nd, guess)
        self.bdata = _room(self.bdata, nbd + nbytes, nbd, guess // 4)
        self.offsets = _room(self.offsets, limit + 1, nu + 1, room + 1)
        self.boffsets = _room(self.boffsets, nb + limit - nu + 1, nb + 1, nb + room + 1)
        self.ids = _room(self.ids, limit, nu, room)
        self.too_long = _room(self.too_long, limit, nt, room)
        return limit

    def result(self) -> tuple:
        """The batch's arrays, shrunk to what is used (they are not shared):
        (data, offsets, bases, base_ids, too_long); ``bases`` is (data, offsets) or
        None, ``base_ids`` None without bases, ``too_long`` None when empty."""
        nu, nd, nb, nbd, nt = self.counts.tolist()
        ids = _exact(self.ids, nu)
        bases = None
        if nb and bool(np.any(ids >= 0)):
            bases = (_exact(self.bdata, nbd), _exact(self.boffsets, nb + 1))
        return (_exact(self.data, nd), _exact(self.offsets, nu + 1), bases,
                None if bases is None else ids, _exact(self.too_long, nt) if nt else None)


def _room(a: np.ndarray, need: int, used: int, guess: int = 0) -> np.ndarray:
    """``a`` if it holds ``need`` items, else a larger array (max of need, guess and
    twice its size) holding a copy of the first ``used`` items only: np.empty, so no
    page beyond them is written (copying the unused capacity too would write fresh
    pages the batch may never fill)."""
    if need <= len(a):
        return a
    b = np.empty(max(need, guess, 2 * len(a)), dtype=a.dtype)
    b[:used] = a[:used]
    return b


def _exact(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` shrunk in place to n items. Requires: ``a`` owns its data, no view in use."""
    a.resize(n, refcheck=False)
    return a


_BOM = b"\xef\xbb\xbf"


def _blocks(f: BinaryIO, block_bytes: int, max_line: int | None = None) -> Iterator[np.ndarray]:
    """Yield uint8 views of whole lines (each ending in ``\\n`` except maybe the last),
    reading at most ``block_bytes`` per call (``readinto1`` where the stream has it, so
    a pipe's lines are processed as they arrive). A view is valid only until the
    next one is requested (one buffer is reused); a line longer than it grows it,
    unless ``max_line`` is given: then a line is cut to its first ``max_line`` bytes
    and the rest skipped up to its newline (memory stays bounded whatever the line).
    A UTF-8 byte order mark at the start of the stream is skipped."""
    buf = bytearray(block_bytes)
    carry = 0
    skipping = False  # inside the rest of a line already cut to max_line bytes
    at_start = True
    readinto = getattr(f, "readinto1", None) or getattr(f, "readinto", None)
    while True:
        if carry == len(buf):
            if max_line is not None and carry >= max_line:
                carry, skipping = max_line, True  # keep the head: enough to reject it
            else:  # a fresh, larger buffer: views of the old one may live on
                bigger = bytearray(2 * len(buf))
                bigger[:carry] = buf
                buf = bigger
        if readinto is not None:
            with memoryview(buf) as mv:
                got = readinto(mv[carry:]) or 0
        else:
            data = f.read(len(buf) - carry) or b""
            got = len(data)
            buf[carry : carry + got] = data
        n = carry + got
        if at_start and (n >= len(_BOM) or got == 0):
            at_start = False
            if buf.startswith(_BOM):
                buf[: n - 3] = buf[3:n]
                n -= 3
        if skipping and got:
            nl = buf.find(b"\n", carry, n)
            if nl < 0:  # still inside the cut line: drop what was read
                continue
            buf[carry : carry + n - nl] = buf[nl:n]
            n = carry + n - nl
            skipping = False
        if got == 0:
            if n:
                yield np.frombuffer(buf, dtype=np.uint8, count=n)
            return
        cut = buf.rfind(b"\n", 0, n) + 1
        if cut == 0:  # no complete line yet: keep reading
            carry = n
            if max_line is not None and carry > max_line:
                carry, skipping = max_line, True
            continue
        yield np.frombuffer(buf, dtype=np.uint8, count=cut)
        buf[: n - cut] = buf[cut:n]
        carry = n - cut


def iter_lines(f: BinaryIO, max_line: int | None = None,
               block_bytes: int = DEFAULT_BLOCK_BYTES) -> Iterator[bytes]:
    """The lines of a binary stream as bytes, without ``\\n`` and one trailing ``\\r``
    (blank lines kept), read as ``_blocks`` does (BOM skipped, lines cut to
    ``max_line`` bytes)."""
    for block in _blocks(f, block_bytes, max_line):
        parts = block.tobytes().split(b"\n")
        if parts[-1] == b"":
            parts.pop()
        for line in parts:
            yield line[:-1] if line.endswith(b"\r") else line
