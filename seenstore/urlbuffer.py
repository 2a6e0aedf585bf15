"""URLBuffer: a batch of URLs with no Python object per URL (Arrow string layout).

URL i is ``data[offsets[i]:offsets[i+1]]`` (UTF-8 bytes); ``offsets`` is int64
of length n+1, non-decreasing. A URL may carry a base for resolving relative
references: ``bases`` (another URLBuffer) and ``base_ids`` (int64, -1 = none).
Built from a file or stream (newline scan over large blocks), a list of str,
a pyarrow string array (pyarrow optional, imported lazily) or ``base<TAB>href``
lines. Lines end at ``\\n``; one trailing ``\\r`` is dropped; blank lines skipped.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from .errors import InvalidInputError, StoreNotFoundError

DEFAULT_BLOCK_BYTES = 8 << 20
_NL, _CR, _TAB = 10, 13, 9


@dataclass
class URLBuffer:
    """A batch of URLs. Requires: data uint8 1-D, offsets int64 non-decreasing within data."""

    data: np.ndarray
    offsets: np.ndarray
    bases: URLBuffer | None = None
    base_ids: np.ndarray | None = None
    strs: Sequence[str | bytes] | None = None  # the original objects, when built from them

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
        return URLBuffer(self.data, self.offsets[a : b + 1], bases, ids, strs)

    def tolist(self) -> list[str]:
        return [self[i] for i in range(len(self))]

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
        enc = [u.encode("utf-8", "surrogatepass") if isinstance(u, str) else bytes(u) for u in urls]
        offsets = np.zeros(len(enc) + 1, dtype=np.int64)
        if enc:
            np.cumsum(np.fromiter(map(len, enc), dtype=np.int64, count=len(enc)), out=offsets[1:])
        data = np.frombuffer(bytearray(b"".join(enc)), dtype=np.uint8)  # writable, like files
        bases, ids = _single_base(base, len(enc))
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
    ) -> URLBuffer:
        """All lines of a path or binary stream in one buffer.

        ``pairs``: a line ``base<TAB>href`` is href relative to base (split at the
        first TAB); lines without TAB use ``base``. Peak memory is about the
        file's size plus one block (a regular file's size is known up front).
        """
        size = 0
        if isinstance(source, (str, os.PathLike)) and os.path.isfile(source):
            size = os.path.getsize(source)
        b = _Builder(size, size // 48)
        for part in cls.iter_file(source, pairs=pairs, base=base, block_bytes=block_bytes):
            b.append(part)
        return b.result()

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
        or of up to ``chunk_urls`` URLs if given (several blocks merged). A leading
        UTF-8 BOM is skipped; ``max_line``: a longer line is cut to that many bytes
        (and so rejected as too long downstream) instead of growing the buffer.
        """
        if block_bytes < 1:
            raise InvalidInputError("block_bytes must be positive")
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

    def append(self, p: URLBuffer) -> None:
        lo, hi = int(p.offsets[0]), int(p.offsets[-1])
        n_before = self.offsets.n - 1
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
        return URLBuffer(self.data.result(), self.offsets.result(), bases, ids, self.strs)


def concat(parts: Sequence[URLBuffer]) -> URLBuffer:
    """One URLBuffer holding the URLs of ``parts`` in order (copies the bytes once)."""
    size = sum(int(p.offsets[-1] - p.offsets[0]) for p in parts)
    b = _Builder(size, sum(len(p) for p in parts))
    for p in parts:
        b.append(p)
    return b.result()


def _iter_stream(f: BinaryIO, pairs: bool, base: str | None, block_bytes: int,
                 chunk_urls: int | None, max_line: int | None = None) -> Iterator[URLBuffer]:
    pending: list[URLBuffer] = []
    npending = 0
    for block in _blocks(f, block_bytes, max_line):
        ub = _split_block(block, pairs, base)
        if chunk_urls is None:
            if len(ub):
                yield ub
            continue
        pending.append(ub)
        npending += len(ub)
        while npending >= chunk_urls:  # exactly chunk_urls URLs per yielded buffer
            whole = concat(pending) if len(pending) > 1 else pending[0]
            yield whole.slice(0, chunk_urls)
            rest = whole.slice(chunk_urls, len(whole))
            pending, npending = ([rest], len(rest)) if len(rest) else ([], 0)
    if npending:
        yield concat(pending) if len(pending) > 1 else pending[0]


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


def _gather(block: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Copy the non-overlapping, increasing segments [starts[i], ends[i]) of block
    into one contiguous array; return (data, int64 offsets of length n+1)."""
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(ends - starts, out=offsets[1:])
    delta = np.zeros(len(block) + 1, dtype=np.int8)
    delta[starts] += 1
    delta[ends] -= 1
    keep = np.cumsum(delta[:-1], dtype=np.int8).view(np.bool_)
    return block[keep], offsets


def _split_block(block: np.ndarray, pairs: bool, base: str | None) -> URLBuffer:
    """Lines of one block of whole lines (the last may lack its newline)."""
    is_nl = block == _NL
    nl = np.flatnonzero(is_nl)
    n = len(block)
    ends = nl if (len(nl) and nl[-1] == n - 1) else np.append(nl, n)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    cr = np.flatnonzero((ends > starts) & (block[np.maximum(ends - 1, 0)] == _CR))
    ends[cr] -= 1
    tab_at = None
    if pairs:
        tabs = np.flatnonzero(block == _TAB)
        if len(tabs):
            j = np.searchsorted(tabs, starts)
            cand = tabs[np.minimum(j, len(tabs) - 1)]
            tab_at = np.where((j < len(tabs)) & (cand < ends), cand, -1)
    nonblank = ends > starts
    if tab_at is None or not (tab_at >= 0).any():
        # Common case: drop the line terminators; line i moves left by the
        # terminator bytes of the lines before it.
        keep = ~is_nl
        keep[ends[cr]] = False
        data = block[keep]
        removed = np.zeros(len(starts), dtype=np.int64)
        np.cumsum((starts[1:] - ends[:-1]), out=removed[1:])
        offsets = np.empty(int(nonblank.sum()) + 1, dtype=np.int64)
        offsets[:-1] = (starts - removed)[nonblank]
        offsets[-1] = len(data)
        bases, ids = _single_base(base, len(offsets) - 1)
        return URLBuffer(data, offsets, bases, ids)
    starts, ends, tab_at = starts[nonblank], ends[nonblank], tab_at[nonblank]
    is_pair = tab_at >= 0
    data, offsets = _gather(block, np.where(is_pair, tab_at + 1, starts), ends)
    ids = np.full(len(starts), -1 if base is None else 0, dtype=np.int64)
    nglobal = 0 if base is None else 1
    ids[is_pair] = np.arange(nglobal, nglobal + int(is_pair.sum()), dtype=np.int64)
    bdata, boffs = _gather(block, starts[is_pair], tab_at[is_pair])
    if base is not None:
        gb = np.frombuffer(base.encode("utf-8", "surrogatepass"), dtype=np.uint8)
        bdata = np.concatenate([gb, bdata])
        boffs = np.concatenate([[0], boffs + len(gb)]).astype(np.int64)
    return URLBuffer(data, offsets, URLBuffer(bdata, boffs), ids)
