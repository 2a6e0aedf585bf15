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

import io
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from seenstore.errors import InvalidInputError, StoreNotFoundError
from seenstore.url.reading import DEFAULT_BLOCK_BYTES, DEFAULT_MAX_LINE, iter_line_arrays



def join_utf8(items: Sequence, errors: str = "strict", *, bytes_ok: bool = False
              ) -> tuple[bytes, np.ndarray]:
    """The UTF-8 encodings of ``items`` end to end, and their offsets (int64, one more
    than the items, from 0). A list of strings is joined and encoded at once, the
    offsets taken from the strings' lengths, corrected for the few that are not ASCII
    (``str.isascii`` is a flag: no scan); one encode per item costs about twice as
    much (docs/fastpath.md). With ``bytes_ok``
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
        once and sliced (decoding URL by URL would be most of ``normalise_many``'s
        time, docs/fastpath.md); else each URL is decoded on its own."""
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
                yield from map(cls._of_arrays, iter_line_arrays(f, pairs, base, block_bytes,
                                                                chunk_urls, max_line))
        else:
            yield from map(cls._of_arrays, iter_line_arrays(source, pairs, base, block_bytes,
                                                            chunk_urls, max_line))

    @classmethod
    def _of_arrays(cls, arrays: tuple) -> URLBuffer:
        """A buffer of ``reading``'s arrays (data, offsets, bases, base_ids, too_long)."""
        data, offsets, bases, ids, too_long = arrays
        return cls(data, offsets, None if bases is None else cls(*bases), ids, None, too_long)

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
