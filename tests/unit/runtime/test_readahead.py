"""Reading ahead into the page cache (seenstore/runtime/readahead.py)."""

import os

import pytest
from hypothesis import given, strategies as st

from seenstore.runtime import readahead


def _recorded(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "posix_fadvise",
                        lambda fd, off, n, advice: calls.append((fd, off, n, advice)))
    return calls


@given(offset=st.integers(0, 1 << 40), length=st.integers(0, 40 << 20))
def test_will_need_asks_for_the_whole_range_in_steps(offset, length):
    """The calls cover [offset, offset + length) exactly, in order, none longer than
    STEP (Linux reads ahead at most that much of one call's range), all WILLNEED."""
    calls = []
    real = os.posix_fadvise
    os.posix_fadvise = lambda fd, off, n, advice: calls.append((fd, off, n, advice))
    try:
        readahead.will_need(7, offset, length)
    finally:
        os.posix_fadvise = real
    assert all(fd == 7 and advice == os.POSIX_FADV_WILLNEED and 0 < n <= readahead.STEP
               for fd, _, n, advice in calls)
    at = offset
    for _, off, n, _ in calls:
        assert off == at
        at += n
    assert at == offset + length


def test_will_need_file_covers_the_file_and_ignores_what_is_gone(tmp_path, monkeypatch):
    p = tmp_path / "b.bin"
    p.write_bytes(b"k" * (5 * readahead.STEP + 3))
    calls = _recorded(monkeypatch)
    readahead.will_need_file(str(p))
    assert sum(n for _, _, n, _ in calls) == p.stat().st_size and len(calls) == 6
    readahead.will_need_file(str(tmp_path / "gone.bin"))  # no error: a hint
    assert len(calls) == 6


def test_will_need_ignores_os_errors(tmp_path):
    fd = os.open(str(tmp_path), os.O_RDONLY)
    os.close(fd)
    readahead.will_need(fd, 0, 3 * readahead.STEP)  # a closed descriptor: EBADF, ignored
    with pytest.raises(OSError):  # what it ignores is an error indeed
        os.posix_fadvise(fd, 0, 1, os.POSIX_FADV_WILLNEED)
