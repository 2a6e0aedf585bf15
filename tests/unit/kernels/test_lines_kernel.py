"""The line-splitting kernel (kernels/lines.py) against its twin (naive.split_lines_naive).

Random bytes rich in \\n, \\r\\n, \\t, blank lines, a BOM (at the start and elsewhere)
and long lines, streamed through URLBuffer.from_file / iter_file with small blocks
(lines cross block boundaries; over-long lines outgrow the buffer) and small
max_line limits; plus the kernel called directly on one block.
"""

from __future__ import annotations

import contextlib
import io
import os

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from naive import split_lines_naive
from seenstore.kernels import dispatch
from seenstore.kernels.twins.lines import split_lines as _split_lines
from seenstore.errors import InvalidInputError
from seenstore.url.fastpath import normalise_buffer
from seenstore.kernels.lines import split_lines
from seenstore.url.normalise import Rejection
from seenstore.url.buffer import URLBuffer, concat

BOM = b"\xef\xbb\xbf"
piece = st.sampled_from([b"a", b"Z", b"\n", b"\r\n", b"\r", b"\t", b"/", b"\xc3\xa9", b"\xff",
                         BOM, b"\xef", b"\n\n", b"x" * 30, b"\t\t", b"http://e.example/p"])
stream = st.tuples(st.sampled_from([b"", BOM, b"\xef\xbb", BOM + BOM]),
                   st.lists(piece, max_size=40).map(b"".join)).map(b"".join)


def _reader(text: bytes):
    """A ``read`` without ``readinto`` (like some wrappers), over a fresh copy of text."""
    return io.BytesIO(text).read


def listing(ub: URLBuffer):
    tl = set() if ub.too_long is None else set(ub.too_long.tolist())
    out = []
    for i in range(len(ub)):
        b = None if ub.base_ids is None or ub.base_ids[i] < 0 else ub.bases.raw(int(ub.base_ids[i]))
        out.append((ub.raw(i), b, i in tl))
    return out


@settings(max_examples=400, deadline=None)
@given(stream, st.booleans(), st.sampled_from([None, "http://g.example/"]), st.integers(1, 13),
       st.integers(0, 40), st.booleans())
@example(BOM + b"a\n", False, None, 1, 5, True)  # the BOM arrives a byte at a time
@example(b"x" * 50 + b"\r\nb\n", True, None, 3, 10, True)  # over-long across many blocks
@example(b"x" * 11 + b"\r", False, None, 4, 11, True)  # the '\r' makes it fit only at EOF
# a line that starts with the last base (its TAB found without a scan), or almost
@example(b"pp\tx\npp\ty\npp\t\tz\npp\npp\r\tw\npq\tw\npp\tv\np\tu\n\tt\n\ts\npp", True, None, 5,
         40, True)
@example(b"http://g.example/\tq\tz\nhttp://g.example/\tq\tz\n", True, "http://g.example/\tq", 7,
         40, True)  # a line that starts with the global base (which may hold a TAB)
def test_stream_matches_twin(text, pairs, base, block, max_line, readinto):
    src = io.BytesIO(text)
    if not readinto:
        src = type("R", (), {})()
    gb = None if base is None else base.encode()
    want = split_lines_naive(text, pairs, gb, max_line)
    for small in (0, 10**9):  # the kernel, then dispatch's twin (small inputs)
        saved, dispatch.SMALL = dispatch.SMALL, small
        try:
            src.seek(0) if readinto else setattr(src, "read", _reader(text))
            with dispatch.twins_only() if small else contextlib.nullcontext():
                ub = URLBuffer.from_file(src, pairs=pairs, base=base, block_bytes=block,
                                         max_line=max_line)
        finally:
            dispatch.SMALL = saved
        assert listing(ub) == want


@settings(max_examples=150, deadline=None)
@given(stream, st.booleans(), st.integers(1, 9), st.integers(1, 5), st.integers(0, 40))
def test_chunks_carry_too_long(text, pairs, block, chunk_urls, max_line):
    parts = list(URLBuffer.iter_file(io.BytesIO(text), pairs=pairs, block_bytes=block,
                                     chunk_urls=chunk_urls, max_line=max_line))
    assert all(len(p) == chunk_urls for p in parts[:-1])
    whole = concat(parts) if parts else URLBuffer.from_bytes(b"")
    assert listing(whole) == split_lines_naive(text, pairs, None, max_line)


@pytest.mark.parametrize("split", [split_lines, _split_lines], ids=["kernel", "twin"])
@settings(max_examples=200, deadline=None)
@given(text=stream, pairs=st.booleans(), max_line=st.integers(0, 40))
def test_kernel_one_final_block(split, text, pairs, max_line):
    """One call over the whole input: every array is filled as the contract says (the
    kernel, and dispatch's Python twin that small inputs use)."""
    buf = np.frombuffer(text, dtype=np.uint8)
    n = len(buf)
    cap = n // 2 + 2
    data, offsets = np.empty(n, np.uint8), np.zeros(cap + 1, np.int64)
    bdata, boffsets = np.empty(n, np.uint8), np.zeros(cap + 2, np.int64)
    ids, too_long = np.empty(cap, np.int64), np.empty(cap, np.int64)
    counts = np.zeros(5, np.int64)
    consumed, skip = split(buf, n, True, pairs, max_line, 0, True, -1, cap,
                                 data, offsets, bdata, boffsets, ids, too_long, counts)
    assert (consumed, skip) == (n, 0)
    nu, nd, nb, nbd, nt = counts.tolist()
    got = []
    tl = set(too_long[:nt].tolist())
    for i in range(nu):
        b = ids[i]
        got.append((data[offsets[i]:offsets[i + 1]].tobytes(),
                    None if b < 0 else bdata[boffsets[b]:boffsets[b + 1]].tobytes(), i in tl))
    assert got == split_lines_naive(text, pairs, None, max_line)
    assert offsets[nu] == nd and boffsets[nb] == nbd
    bases = [bdata[boffsets[k]:boffsets[k + 1]].tobytes() for k in range(nb)]
    assert all(a != b for a, b in zip(bases, bases[1:]))  # consecutive equal bases stored once


def test_bom_only_at_start_and_long_line_not_held():
    ub = URLBuffer.from_bytes(BOM + b"http://a/\n" + BOM + b"http://b/\n")
    assert ub.raw(0) == b"http://a/" and ub.raw(1) == BOM + b"http://b/"
    big = b"http://a/" + b"x" * (1 << 16) + b"\nhttp://c/\n"
    ub = URLBuffer.from_file(io.BytesIO(big), block_bytes=4096, max_line=1000)
    assert listing(ub) == [(b"", None, True), (b"http://c/", None, False)]
    assert ub.data.nbytes < 100  # the long line was never copied
    fb = normalise_buffer(ub)
    assert fb.rejected == [(0, Rejection.TOO_LONG)] and fb.urls == ["http://c/"]


def test_bad_reader_arguments_refused():
    with pytest.raises(InvalidInputError):
        URLBuffer.from_file(io.BytesIO(b"a"), max_line=-1)
    with pytest.raises(InvalidInputError):
        URLBuffer(np.zeros(2, np.uint8), np.array([0, 1, 2], np.int64),
                  too_long=np.array([1, 1], np.int64))


def test_a_large_regular_file_takes_the_kernel_from_its_first_read(tmp_path, monkeypatch):
    from seenstore.url import reading

    p = tmp_path / "u.txt"
    p.write_bytes(b"http://a/\n" * 1000)
    with open(p, "rb") as f:
        assert reading._size_hint(f) == 10_000
    assert reading._size_hint(io.BytesIO(b"x")) == 0
    monkeypatch.setattr(dispatch, "SMALL", 10_000 // dispatch.LINE_BYTES)  # the file is "large"
    used = []
    real = dispatch.split_lines_for
    monkeypatch.setattr(dispatch, "split_lines_for", lambda n: used.append(real(n)) or used[-1])
    assert len(URLBuffer.from_file(p)) == 1000
    assert used and all(fn is split_lines for fn in used)
    used.clear()
    monkeypatch.setattr(dispatch, "jit_live", lambda: False)  # a fresh process
    assert len(URLBuffer.from_file(io.BytesIO(b"http://a/\n" * 10))) == 10
    assert used and all(fn is _split_lines for fn in used)
    used.clear()
    monkeypatch.undo()
    monkeypatch.setattr(dispatch, "SMALL", 10_000 // dispatch.LINE_BYTES)
    monkeypatch.setattr(dispatch, "split_lines_for", lambda n: used.append(real(n)) or used[-1])
    dispatch.announce(split_lines)  # a process that runs kernels: the kernel is live
    assert len(URLBuffer.from_file(io.BytesIO(b"http://a/\n" * 10))) == 10
    assert used and all(fn is split_lines for fn in used)


@settings(max_examples=200, deadline=None)
@given(stream, st.booleans(), st.integers(1, 13), st.sampled_from([None, 1, 3]), st.integers(0, 40),
       st.sampled_from([b"", b"skipped\n", b"xx"]))
def test_a_mapped_regular_file_gives_the_buffers_a_read_one_does(text, pairs, block, chunk_urls,
                                                                 max_line, head):
    """A regular file of at least MAP_MIN_BYTES is read through a mapping
    (reading._mapped): the same buffers as reading it into the block buffer, from
    the stream's position on (``head`` read before), the naive twin's lines, and the
    stream left at its end."""
    import tempfile

    from seenstore.url import reading

    fd, path = tempfile.mkstemp()
    try:
        with os.fdopen(fd, "wb") as w:
            w.write(head + text)
        got = {}
        saved = reading.MAP_MIN_BYTES
        for name, limit in (("mapped", 1), ("read", 1 << 62)):
            reading.MAP_MIN_BYTES = limit
            try:
                with open(path, "rb") as f:
                    f.read(len(head))
                    if name == "mapped" and text:
                        assert reading._mapped(f, len(head) + len(text)) is not None
                    parts = list(URLBuffer.iter_file(f, pairs=pairs, block_bytes=block,
                                                     chunk_urls=chunk_urls, max_line=max_line))
                    assert f.tell() == len(head) + len(text)
            finally:
                reading.MAP_MIN_BYTES = saved
            got[name] = [listing(p) for p in parts]
        assert got["mapped"] == got["read"]
        flat = [x for p in got["mapped"] for x in p]
        assert flat == split_lines_naive(text, pairs, None, max_line)
    finally:
        os.unlink(path)


@settings(max_examples=100, deadline=None)
@given(stream, stream, st.booleans(), st.integers(1, 13), st.sampled_from([None, 1, 3]),
       st.integers(0, 40))
def test_lines_appended_while_a_mapped_file_is_read_are_read_as_reading_would(
        text, more, pairs, block, chunk_urls, max_line):
    """A file appended to after its mapping (``more`` written once the first buffer is
    out) gives the same buffers as reading it does, whatever the appended bytes
    continue (an unfinished last line); the stream ends where reading it leaves it."""
    import tempfile

    from seenstore.url import reading

    fd, path = tempfile.mkstemp()
    os.close(fd)
    got, ends = {}, {}
    saved = reading.MAP_MIN_BYTES
    try:
        for name, limit in (("mapped", 1), ("read", 1 << 62)):
            with open(path, "wb") as w:
                w.write(text)
            reading.MAP_MIN_BYTES = limit
            try:
                with open(path, "rb") as f:
                    parts = URLBuffer.iter_file(f, pairs=pairs, block_bytes=block,
                                                chunk_urls=chunk_urls, max_line=max_line)
                    first = next(parts, None)
                    with open(path, "ab") as w:
                        w.write(more)
                    got[name] = [listing(p) for p in ([first] if first else []) + list(parts)]
                    ends[name] = f.tell()
            finally:
                reading.MAP_MIN_BYTES = saved
        assert got["mapped"] == got["read"] and ends["mapped"] == ends["read"]
    finally:
        os.unlink(path)


def test_a_mapped_file_appended_to_before_its_end_is_read_whole(tmp_path, monkeypatch):
    from seenstore.url import reading

    monkeypatch.setattr(reading, "MAP_MIN_BYTES", 1)
    p = tmp_path / "u.txt"
    p.write_bytes(b"".join(b"http://a.example/%d\n" % i for i in range(100)) + b"http://b.exa")
    with open(p, "rb") as f:
        parts = URLBuffer.iter_file(f, block_bytes=64, chunk_urls=1)
        first = next(parts)
        with open(p, "ab") as w:
            w.write(b"mple/\nhttp://c.example/\n")
        urls = first.tolist()
        for ub in parts:
            urls += ub.tolist()
            if urls[-1] == "http://b.example/" and os.path.exists("/proc/self/maps"):
                with open("/proc/self/maps") as maps:  # read on: the mapping is gone
                    assert str(p) not in maps.read()
        assert f.tell() == p.stat().st_size
    assert urls == [f"http://a.example/{i}" for i in range(100)] + [
        "http://b.example/", "http://c.example/"]


def _rss_file() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("RssFile:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="Linux /proc only")
def test_a_mapped_read_keeps_only_a_window_of_the_file_in_memory(tmp_path, monkeypatch):
    """The pages of the lines already split are dropped from the process (they stay
    in the page cache): its RSS grows by about a window (block_bytes), not the file."""
    from seenstore.url import reading

    monkeypatch.setattr(reading, "MAP_MIN_BYTES", 1)
    p = tmp_path / "u.txt"
    line = b"http://a.example/" + b"x" * 82 + b"\n"
    p.write_bytes(line * (32 * 2**20 // len(line)))
    with open(p, "rb") as f:  # the kernel (and what it maps) loaded before measuring
        next(URLBuffer.iter_file(f, block_bytes=2**20, chunk_urls=10))
    base, grew, n = _rss_file(), 0, 0
    with open(p, "rb") as f:
        for ub in URLBuffer.iter_file(f, block_bytes=2**20, chunk_urls=4096):
            grew, n = max(grew, _rss_file() - base), n + len(ub)
    assert n == 32 * 2**20 // len(line)
    assert grew < 6 * 2**20, grew  # the file is 32 MiB


def test_streams_and_small_files_are_not_mapped(tmp_path):
    from seenstore.url import reading

    p = tmp_path / "u.txt"
    p.write_bytes(b"http://a/\n" * 10)
    with open(p, "rb") as f:
        assert reading._mapped(f, reading._size_hint(f)) is None  # below MAP_MIN_BYTES
    assert reading._mapped(io.BytesIO(b"x" * 100), 100) is None  # no file behind it
    r, w = os.pipe()
    with os.fdopen(r, "rb") as f, os.fdopen(w, "wb"):
        assert reading._size_hint(f) == 0
