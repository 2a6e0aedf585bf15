"""URLBuffer: building batches from bytes, files, streams, str lists and Arrow.

Oracle: a plain Python line splitter (split on ``\\n``, drop one trailing ``\\r``,
skip blank lines, split ``base<TAB>href`` at the first TAB). Small block sizes
force lines across block boundaries.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seenstore.errors import InvalidInputError, StoreNotFoundError
from seenstore.url.buffer import URLBuffer, concat, join_utf8


def _oracle(text: bytes, pairs: bool, base: str | None) -> tuple[list[str], list[str | None]]:
    urls, bases = [], []
    for line in text.split(b"\n"):
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            continue
        b = base
        if pairs and b"\t" in line:
            raw_base, line = line.split(b"\t", 1)
            b = raw_base.decode("utf-8", "surrogateescape")
        urls.append(line.decode("utf-8", "surrogateescape"))
        bases.append(b)
    return urls, bases


def _listing(ub: URLBuffer) -> tuple[list[str], list[str | None]]:
    return ub.tolist(), [ub.base(i) for i in range(len(ub))]


class _ReadOnly:
    """A stream with ``read`` but no ``readinto`` (like some wrappers)."""

    def __init__(self, b: bytes):
        self._f = io.BytesIO(b)

    def read(self, n: int) -> bytes:
        return self._f.read(n)


line_bytes = st.lists(st.sampled_from([b"a", b"Z", b"\n", b"\r", b"\t", b"/", b"\xc3\xa9", b"\xff"]),
                      max_size=60).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(line_bytes, st.booleans(), st.sampled_from([None, "http://g/"]), st.integers(1, 12),
       st.booleans())
def test_from_stream_matches_line_oracle(text, pairs, base, block, readinto):
    stream = io.BytesIO(text) if readinto else _ReadOnly(text)
    ub = URLBuffer.from_file(stream, pairs=pairs, base=base, block_bytes=block)
    assert _listing(ub) == _oracle(text, pairs, base)
    assert [ub.raw(i) for i in range(len(ub))] == [u.encode("utf-8", "surrogateescape")
                                                   for u in ub.tolist()]


@settings(max_examples=100, deadline=None)
@given(line_bytes, st.booleans(), st.integers(1, 9), st.integers(1, 5))
def test_iter_file_chunks_concatenate_to_whole(text, pairs, block, chunk_urls):
    parts = list(URLBuffer.iter_file(io.BytesIO(text), pairs=pairs, block_bytes=block,
                                     chunk_urls=chunk_urls))
    assert all(len(p) == chunk_urls for p in parts[:-1])
    assert not parts or 0 < len(parts[-1]) <= chunk_urls
    whole = URLBuffer.from_bytes(text, pairs=pairs)
    assert _listing(concat(parts)) == _listing(whole)


def test_from_path_and_missing_path(tmp_path):
    p = tmp_path / "u.txt"
    p.write_bytes(b"http://a/\r\nhttp://b/\n\nhttp://c/")
    ub = URLBuffer.from_file(p, block_bytes=4)
    assert ub.tolist() == ["http://a/", "http://b/", "http://c/"]
    assert ub.offsets.dtype == np.int64 and ub.data.dtype == np.uint8
    with pytest.raises(StoreNotFoundError):
        URLBuffer.from_file(tmp_path / "missing.txt")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=20), max_size=20), st.sampled_from([None, "http://b/"]))
def test_from_strs_keeps_originals_and_bytes(urls, base):
    ub = URLBuffer.from_strs(urls, base=base)
    assert len(ub) == len(urls)
    assert ub.tolist() == urls
    assert [ub.raw(i) for i in range(len(ub))] == [u.encode("utf-8", "surrogatepass") for u in urls]
    assert [ub.base(i) for i in range(len(ub))] == [base] * len(urls)


def test_arrow_round_trip_slices_nulls_chunks():
    import pyarrow as pa  # optional for the package, required by this test (test extra)
    arr = pa.array(["http://x/", None, "é", "", "http://y/?q"])
    for a in (arr, arr.slice(1), pa.chunked_array([arr.slice(0, 2), arr.slice(2)]),
              arr.cast(pa.large_string())):
        ub = URLBuffer.from_arrow(a)
        expect = [("" if v is None else v) for v in a.to_pylist()]
        assert ub.tolist() == expect
        assert ub.to_arrow().to_pylist() == expect
    ub = URLBuffer.from_arrow(arr, base="http://b/")
    assert ub.base(4) == "http://b/"
    with pytest.raises(InvalidInputError):
        URLBuffer.from_arrow(pa.array([1, 2]))


def test_invalid_layouts_are_refused():
    d = np.frombuffer(b"abc", np.uint8)
    with pytest.raises(InvalidInputError):
        URLBuffer(d, np.array([0, 2, 1], np.int64))
    with pytest.raises(InvalidInputError):
        URLBuffer(d, np.array([0, 4], np.int64))
    with pytest.raises(InvalidInputError):
        URLBuffer(d.astype(np.int16), np.array([0, 3], np.int64))
    with pytest.raises(InvalidInputError):
        URLBuffer(d, np.array([0, 3], np.int32))
    with pytest.raises(InvalidInputError):
        URLBuffer(d, np.array([0, 3], np.int64), base_ids=np.zeros(1, np.int64))
    with pytest.raises(InvalidInputError):
        URLBuffer.from_file(io.BytesIO(b"a"), block_bytes=0)


def test_slice_shares_bytes_and_keeps_bases():
    ub = URLBuffer.from_bytes(b"http://p/\tz\nw\nhttp://q/\ty\n", pairs=True, base="http://g/")
    part = ub.slice(1, 3)
    assert _listing(part) == (["w", "y"], ["http://g/", "http://q/"])
    assert part.data is ub.data
    assert len(ub.slice(2, 2)) == 0


def test_concat_mixes_based_and_unbased_parts():
    a = URLBuffer.from_strs(["x", "y"])
    b = URLBuffer.from_bytes(b"http://p/\tz\nw\n", pairs=True)
    c = URLBuffer.from_strs(["v"], base="http://q/")
    ub = concat([a, b, c])
    assert _listing(ub) == (["x", "y", "z", "w", "v"], [None, None, "http://p/", None, "http://q/"])
    assert ub.strs is None and concat([a, a]).strs == ["x", "y", "x", "y"]
    assert len(concat([])) == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(alphabet=st.characters(max_codepoint=127), max_size=12),
                          st.text(max_size=12), st.binary(max_size=12),
                          st.sampled_from(["\udcff", "x\ud800y", "é\udc80", "ß"])), max_size=20),
       st.booleans())
def test_join_utf8_equals_encoding_each_item(items, ascii_only):
    """join_utf8 against its oracle, an encode per item: all-ASCII lists (encoded at
    once), other characters and lone surrogates (surrogatepass), bytes items."""
    if ascii_only:
        items = [i for i in items if isinstance(i, str) and i.isascii()]
    enc = [i.encode("utf-8", "surrogatepass") if isinstance(i, str) else bytes(i) for i in items]
    raw, offsets = join_utf8(items, "surrogatepass", bytes_ok=True)
    assert raw == b"".join(enc)
    assert offsets.tolist() == [0] + np.cumsum([len(e) for e in enc], dtype=np.int64).tolist()
    strs = [i for i in items if isinstance(i, str)]
    if all(not any(0xD800 <= ord(c) < 0xE000 for c in s) for s in strs):
        raw, offsets = join_utf8(strs)  # strict
        assert raw == "".join(strs).encode() and offsets[-1] == len(raw)
    if any(isinstance(i, bytes) for i in items):
        with pytest.raises((AttributeError, UnicodeEncodeError)):  # whichever item comes first
            join_utf8(items)  # bytes are refused unless bytes_ok
    blobs = [i for i in items if isinstance(i, bytes)] + [bytearray(b"x\xff"), memoryview(b"yz")]
    raw, offsets = join_utf8(blobs, bytes_ok=True)  # all bytes-like: joined as they are
    assert raw == b"".join(blobs)
    assert offsets.tolist() == [0] + np.cumsum([len(b) for b in blobs], dtype=np.int64).tolist()
    wide = memoryview(np.arange(3, dtype=np.uint32))  # len() counts items, not bytes
    raw, offsets = join_utf8([b"ab", wide], bytes_ok=True)
    assert raw == b"ab" + bytes(wide) and offsets.tolist() == [0, 2, 14]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=10).filter(lambda b: b"\n" not in b and b"\r" not in b),
                          st.text(alphabet=st.characters(max_codepoint=127, exclude_characters="\r\n"),
                                  min_size=1, max_size=10).map(str.encode)), min_size=1, max_size=20),
       st.data())
def test_tolist_equals_item_by_item(lines, data):
    """tolist (one decode of the whole buffer when it is ASCII, else one per URL)
    against its definition, ``self[i]`` for each i: ASCII, non-ASCII and invalid
    UTF-8 bytes (surrogateescape), on a buffer and on a slice of it."""
    ub = URLBuffer.from_bytes(b"\n".join(lines))
    assert ub.strs is None
    assert ub.tolist() == [ub[i] for i in range(len(ub))]
    a = data.draw(st.integers(0, len(ub)))
    b = data.draw(st.integers(a, len(ub)))
    part = ub.slice(a, b)
    assert part.tolist() == [ub[i] for i in range(a, b)]
