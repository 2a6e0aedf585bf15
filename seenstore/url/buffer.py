"""URLBuffer: a batch of URLs with no Python object per URL (Arrow string layout).

URL i is ``data[offsets[i]:offsets[i+1]]`` (UTF-8 bytes); ``offsets`` is int64
of length n+1, non-decreasing. A URL may carry a base for resolving relative
references: ``bases`` (another URLBuffer) and ``base_ids`` (int64, -1 = none).
Built from a file or stream (split into lines by a numba kernel over large
blocks, kernels/lines.py), a list of str, a pyarrow string array (pyarrow optional,
imported lazily) or ``base<TAB>href`` lines. Lines end at ``\\n``; one trailing
``\\r`` is dropped; blank lines and a leading UTF-8 BOM are skipped; a line over
``max_line`` bytes is kept as an empty URL listed in ``too_long`` (never held whole).
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from seenstore.errors import InvalidInputError, StoreNotFoundError

DEFAULT_BLOCK_BYTES = 16 << 20
DEFAULT_MAX_LINE = 1 << 20  # bytes; a longer line is rejected too-long without being read whole


def join_utf8(items: Sequence, errors: str = "strict", *, bytes_ok: bool = False
              ) -> tuple[bytes, np.ndarray]:
    """The UTF-8 encodings of ``items`` end to end, and their offsets (int64, one more
    than the items, from 0). A list of strings is joined and encoded at once, the
    offsets taken from the strings' lengths, corrected for the few that are not ASCII
    (``str.isascii`` is a flag: no scan); one encode per item cost twice as much
    (515 -> 250 ns per real canonical URL here, docs/fastpath.md). With ``bytes_ok``
    a list of bytes-like items is joined as it is; a list mixing them with strings,
    or holding strings that do not encode, is encoded item by item. Raises what
    encoding an item raises: UnicodeEncodeError, AttributeError for a non-string."""
    n = len(items)
    offsets = np.zeros(n + 1, dtype=np.int64)
    raw = lengths = None
    try:
        lengths = np.fromiter(map(len, items), dtype=np.int64, count=n)
        raw = "".join(items).encode("utf-8", errors)
        if len(raw) != lengths.sum():  # a byte per character for ASCII strings only
            wide = np.flatnonzero(~np.fromiter(map(str.isascii, items), dtype=np.bool_, count=n))
            for i in wide.tolist():  # (each character encodes alone: the sums agree)
                lengths[i] = len(items[i].encode("utf-8", errors))
    except UnicodeEncodeError:  # not encodable: item by item raises it
        raw = None
    except TypeError:  # an item without a length (lengths None), or not all strings
        raw = _joined_bytes(items, lengths) if bytes_ok and lengths is not None else None
    if raw is not None:
        np.cumsum(lengths, out=offsets[1:])
        return raw, offsets
    enc = [bytes(u) if bytes_ok and not isinstance(u, str) else u.encode("utf-8", errors)
           for u in items]
    np.cumsum(np.fromiter(map(len, enc), dtype=np.int64, count=len(enc)), out=offsets[1:])
    return b"".join(enc), offsets


def _joined_bytes(items: Sequence, lengths: np.ndarray) -> bytes | None:
    """``b"".join(items)`` when every item is bytes-like and its ``len()`` counts its
    bytes (``lengths``), else None."""
    try:
        raw = b"".join(items)
    except TypeError:
        return None
    return raw if len(raw) == lengths.sum() else None


@dataclass
class URLBuffer:
    """A batch of URLs. Requires: data uint8 1-D, offsets int64 non-decreasing within data."""

    data: np.ndarray
    offsets: np.ndarray
    bases: URLBuffer | None = None
    base_ids: np.ndarray | None = None
    strs: Sequence[str | bytes] | None = None  # the original objects, when built from them
    too_long: np.ndarray | None = None  # int64 increasing: URLs whose line was over max_line

    def __post_init__(self) -> None:
        d, o = self.data, self.offsets
        if d.dtype != np.uint8 or d.ndim != 1 or o.dtype != np.int64 or o.ndim != 1 or len(o) < 1:
            raise InvalidInputError("URLBuffer needs uint8 data and int64 offsets of length n+1")
        if len(o) > 1 and (o[0] < 0 or o[-1] > len(d) or bool(np.any(o[1:] < o[:-1]))):
            raise InvalidInputError("URLBuffer offsets must be non-decreasing and inside data")
        if (self.bases is None) != (self.base_ids is None):
            raise InvalidInputError("URLBuffer bases and base_ids go together")
        if self.base_ids is not None:
            b = self.base_ids
            if b.dtype != np.int64 or b.shape != (len(o) - 1,):
                raise InvalidInputError("URLBuffer base_ids must be int64, one per URL")
            if len(b) and (b.min() < -1 or b.max() >= len(self.bases)):
                raise InvalidInputError("URLBuffer base_ids out of range")
        if self.strs is not None and len(self.strs) != len(o) - 1:
            raise InvalidInputError("URLBuffer strs must have one entry per URL")
        t = self.too_long
        if t is not None and (t.dtype != np.int64 or t.ndim != 1 or (len(t) and (
                t[0] < 0 or t[-1] >= len(o) - 1 or bool(np.any(t[1:] <= t[:-1]))))):
            raise InvalidInputError("URLBuffer too_long must be increasing int64 URL indices")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def raw(self, i: int) -> bytes:
        """The bytes of URL i."""
        return self.data[self.offsets[i] : self.offsets[i + 1]].tobytes()

    def __getitem__(self, i: int) -> str:
        """URL i as str: the original object if built from str, else UTF-8 decoded
        with ``surrogateescape`` (invalid bytes survive as lone surrogates)."""
        if self.strs is not None:
            return self.strs[i]
        return self.raw(i).decode("utf-8", "surrogateescape")

    def base(self, i: int) -> str | None:
        """The base URL of URL i, or None."""
        if self.base_ids is None or self.base_ids[i] < 0:
            return None
        return self.bases[int(self.base_ids[i])]

    def slice(self, a: int, b: int) -> URLBuffer:
        """URLs a..b-1 as a URLBuffer sharing this one's bytes (no copy). Its bases
        are the range of bases those URLs use, so a slice never drags all of them."""
        strs = None if self.strs is None else self.strs[a:b]
        bases = ids = None
        if self.base_ids is not None:
            ids = self.base_ids[a:b]
            used = ids[ids >= 0]
            if len(used):
                lo, hi = int(used.min()), int(used.max()) + 1
                bases = self.bases.slice(lo, hi)
                ids = np.where(ids >= 0, ids - lo, -1)
            else:
                ids = None
        too_long = None
        if self.too_long is not None:
            t = self.too_long
            t = t[(t >= a) & (t < b)] - a
            too_long = t if len(t) else None
        return URLBuffer(self.data, self.offsets[a : b + 1], bases, ids, strs, too_long)

    def tolist(self) -> list[str]:
        """``[self[i] for i in range(len(self))]``, in one pass: the bytes are taken
        out of the array once and, when they are all ASCII (canonical URLs), decoded
        once and sliced (2.9 -> 0.4 s for a million canonical URLs here, most of
        ``normalise_many``'s time); else each URL is decoded on its own."""
        if self.strs is not None:
            return list(self.strs)
        lo = int(self.offsets[0])
        raw = self.data[lo: int(self.offsets[-1])].tobytes()
        offs = (self.offsets - lo).tolist()
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            return [raw[a:b].decode("utf-8", "surrogateescape") for a, b in zip(offs, offs[1:])]
        return [text[a:b] for a, b in zip(offs, offs[1:])]

    def nbytes(self) -> int:
        n = self.data.nbytes + self.offsets.nbytes
        if self.bases is not None:
            n += self.bases.nbytes() + self.base_ids.nbytes
        return n

    # ---- construction ------------------------------------------------------

    @classmethod
    def from_strs(cls, urls: Sequence[str | bytes], base: str | None = None) -> URLBuffer:
        """From a sequence of str (kept as ``strs``), all relative to ``base`` if given.
        Lone surrogates are encoded with ``surrogatepass`` (never UTF-8 valid).
        A bytes item is taken as is (and kept as bytes in ``strs``)."""
        raw, offsets = join_utf8(urls, "surrogatepass", bytes_ok=True)
        data = np.frombuffer(bytearray(raw), dtype=np.uint8)  # writable, like files
        bases, ids = _single_base(base, len(urls))
        return cls(data, offsets, bases, ids, urls)

    @classmethod
    def from_pairs(cls, urls: Sequence[str | bytes], bases: Sequence[str | None]) -> URLBuffer:
        """URL i relative to ``bases[i]`` (None = no base). Consecutive equal bases
        are stored once (links arrive grouped by the page they were found on)."""
        if len(bases) != len(urls):
            raise InvalidInputError("from_pairs needs one base per URL")
        ub = cls.from_strs(urls)
        distinct: list[str] = []
        ids = np.full(len(urls), -1, dtype=np.int64)
        for i, b in enumerate(bases):
            if b is not None:
                if not distinct or distinct[-1] != b:
                    distinct.append(b)
                ids[i] = len(distinct) - 1
        if not distinct:
            return ub
        return cls(ub.data, ub.offsets, cls.from_strs(distinct), ids, ub.strs)

    @classmethod
    def from_bytes(cls, text: bytes, *, pairs: bool = False, base: str | None = None) -> URLBuffer:
        """From newline-separated bytes (see ``from_file``)."""
        return cls.from_file(io.BytesIO(text), pairs=pairs, base=base)

    @classmethod
    def from_file(
        cls,
        source: str | os.PathLike | BinaryIO,
        *,
        pairs: bool = False,
        base: str | None = None,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        max_line: int = DEFAULT_MAX_LINE,
    ) -> URLBuffer:
        """All lines of a path or binary stream in one buffer.

        ``pairs``: a line ``base<TAB>href`` is href relative to base (split at the
        first TAB); lines without TAB use ``base``. Peak memory is about the
        batch plus one block.
        """
        for whole in cls.iter_file(source, pairs=pairs, base=base, block_bytes=block_bytes,
                                   max_line=max_line, chunk_urls=sys.maxsize):
            return whole
        return cls(np.zeros(0, np.uint8), np.zeros(1, np.int64))

    @classmethod
    def iter_file(
        cls,
        source: str | os.PathLike | BinaryIO,
        *,
        pairs: bool = False,
        base: str | None = None,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        chunk_urls: int | None = None,
        max_line: int | None = None,
    ) -> Iterator[URLBuffer]:
        """Yield URLBuffers of whole lines, reading ``block_bytes`` at a time.

        Each yielded buffer holds the lines of about one block (at least one line),
        or of up to ``chunk_urls`` URLs if given (several blocks merged). A line over
        ``max_line`` bytes (None: DEFAULT_MAX_LINE) is an empty URL listed in the
        buffer's ``too_long``.
        """
        max_line = DEFAULT_MAX_LINE if max_line is None else max_line
        if block_bytes < 1 or max_line < 0:
            raise InvalidInputError("block_bytes must be positive and max_line >= 0")
        if isinstance(source, (str, os.PathLike)):
            try:
                f = open(source, "rb", buffering=0)  # noqa: SIM115 (closed below)
            except FileNotFoundError as e:
                raise StoreNotFoundError(f"no such file: {os.fspath(source)}") from e
            with f:
                yield from _iter_stream(f, pairs, base, block_bytes, chunk_urls, max_line)
        else:
            yield from _iter_stream(source, pairs, base, block_bytes, chunk_urls, max_line)

    @classmethod
    def from_arrow(cls, array, base: str | None = None) -> URLBuffer:
        """From a pyarrow (large_)string array or chunked array, zero-copy when it
        has no nulls and one chunk. Nulls become empty strings."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
            raise InvalidInputError(f"expected an Arrow string array, got {array.type}")
        if array.null_count:
            array = pc.fill_null(array, "")
        _, obuf, dbuf = array.buffers()
        odt = np.int32 if pa.types.is_string(array.type) else np.int64
        offsets = np.frombuffer(obuf, dtype=odt)[array.offset : array.offset + len(array) + 1]
        offsets = offsets.astype(np.int64)
        data = np.frombuffer(dbuf, dtype=np.uint8) if dbuf is not None else np.zeros(0, np.uint8)
        bases, ids = _single_base(base, len(array))
        return cls(data, offsets, bases, ids)

    def to_arrow(self):
        """A pyarrow large_string array over the same bytes (zero-copy)."""
        import pyarrow as pa

        return pa.LargeStringArray.from_buffers(
            len(self), pa.py_buffer(self.offsets), pa.py_buffer(self.data)
        )


def _single_base(base: str | None, n: int) -> tuple[URLBuffer | None, np.ndarray | None]:
    if base is None:
        return None, None
    return URLBuffer.from_strs([base]), np.zeros(n, dtype=np.int64)


class _Grow:
    """An append-only numpy array with amortised growth (realloc in place when it can)."""

    def __init__(self, dtype, capacity: int) -> None:
        self.a = np.empty(max(capacity, 16), dtype=dtype)
        self.n = 0

    def append(self, x: np.ndarray) -> None:
        need = self.n + len(x)
        if need > len(self.a):
            self.a.resize(max(need, len(self.a) * 3 // 2), refcheck=False)
        self.a[self.n : need] = x
        self.n = need

    def result(self) -> np.ndarray:
        self.a.resize(self.n, refcheck=False)
        return self.a


class _Builder:
    """Appends URLBuffers into one, copying each part's bytes once."""

    def __init__(self, data_bytes: int = 0, urls: int = 0) -> None:
        self.data = _Grow(np.uint8, data_bytes)
        self.offsets = _Grow(np.int64, urls + 1)
        self.offsets.append(np.zeros(1, np.int64))
        self.ids: _Grow | None = None
        self.bases: _Builder | None = None
        self.strs: list[str] | None = []
        self.too_long: list[np.ndarray] = []

    def append(self, p: URLBuffer) -> None:
        lo, hi = int(p.offsets[0]), int(p.offsets[-1])
        n_before = self.offsets.n - 1
        if p.too_long is not None:
            self.too_long.append(p.too_long + n_before)
        self.offsets.append(p.offsets[1:] - lo + self.data.n)
        self.data.append(p.data[lo:hi])
        if self.strs is not None and p.strs is not None:
            self.strs.extend(p.strs)
        else:
            self.strs = None
        if p.bases is None and self.ids is None:
            return
        if self.ids is None:
            self.ids, self.bases = _Grow(np.int64, n_before + len(p)), _Builder()
            self.ids.append(np.full(n_before, -1, np.int64))
        if p.bases is None:
            self.ids.append(np.full(len(p), -1, np.int64))
            return
        nb = self.bases.offsets.n - 1
        self.ids.append(np.where(p.base_ids >= 0, p.base_ids + nb, -1))
        self.bases.append(p.bases)

    def result(self) -> URLBuffer:
        bases = self.bases.result() if self.bases is not None else None
        ids = self.ids.result() if self.ids is not None else None
        too_long = np.concatenate(self.too_long) if self.too_long else None
        return URLBuffer(self.data.result(), self.offsets.result(), bases, ids, self.strs, too_long)


def concat(parts: Sequence[URLBuffer]) -> URLBuffer:
    """One URLBuffer holding the URLs of ``parts`` in order (copies the bytes once)."""
    size = sum(int(p.offsets[-1] - p.offsets[0]) for p in parts)
    b = _Builder(size, sum(len(p) for p in parts))
    for p in parts:
        b.append(p)
    return b.result()


def _iter_stream(f: BinaryIO, pairs: bool, base: str | None, block_bytes: int,
                 chunk_urls: int | None, max_line: int) -> Iterator[URLBuffer]:
    """URLBuffers of the lines of ``f``, split by the kernel (kernels/lines.py) straight
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
    page out of the page cache: 33-45 ns per line of CPU on the 6.47 M real link
    lines here (~100 bytes each), against ~5 for mapping them and faulting them in
    (docs/fastpath.md, "Reading the input"). The same byte windows are handed to
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

    def result(self) -> URLBuffer:
        """The batch, its arrays shrunk to what is used (they are not shared)."""
        nu, nd, nb, nbd, nt = self.counts.tolist()
        ids = _exact(self.ids, nu)
        bases = None
        if nb and bool(np.any(ids >= 0)):
            bases = URLBuffer(_exact(self.bdata, nbd),
                              _exact(self.boffsets, nb + 1))
        return URLBuffer(_exact(self.data, nd), _exact(self.offsets, nu + 1),
                         bases, None if bases is None else ids, None,
                         _exact(self.too_long, nt) if nt else None)


def _room(a: np.ndarray, need: int, used: int, guess: int = 0) -> np.ndarray:
    """``a`` if it holds ``need`` items, else a larger array (max of need, guess and
    twice its size) holding a copy of the first ``used`` items only: np.empty, so no
    page beyond them is written (copying the unused capacity too cost ~75 ns per
    line of fresh pages on the 2-core VM, measured on real links)."""
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
