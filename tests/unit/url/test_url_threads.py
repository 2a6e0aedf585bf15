"""The URL kernels on several threads give exactly what one thread gives.

normalise_buffer / normalise_many / fingerprint_many / the stage's URL path with
threads = 2, 3 against threads = 1, on the agreement tests' URL mix, with the
per-thread minimum lowered so that small batches are really cut into chunks.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fastpath_agreement import BASES, any_url, common_url

from seenstore.runtime import parallel
from seenstore.errors import InvalidInputError
from seenstore.url.fastpath import normalise_buffer
from seenstore.url.fingerprint import fingerprint_many
from seenstore.url.fastpath import normalise_many
from seenstore.url.buffer import URLBuffer


@contextmanager
def tiny_chunks():
    old = parallel.MIN_CHUNK
    parallel.MIN_CHUNK = 1
    try:
        yield
    finally:
        parallel.MIN_CHUNK = old


def _view(fb):
    return fb.positions.tolist(), fb.keys.tolist(), fb.rejected, fb.urls, fb.lines(
        np.arange(len(fb.keys)) % 2 == 0)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.one_of(common_url(), any_url), st.sampled_from(BASES[:5])),
                max_size=40), st.integers(2, 3))
def test_normalise_buffer_threads_equal_one(pairs, threads):
    urls = [u for u, _ in pairs]
    bases = [b for _, b in pairs]
    ub = URLBuffer.from_pairs(urls, bases)
    with tiny_chunks():
        one = _view(normalise_buffer(ub, threads=1))
        many = _view(normalise_buffer(ub, threads=threads))
    assert many == one


@settings(max_examples=60, deadline=None)
@given(st.lists(common_url(), min_size=1, max_size=20), st.integers(2, 3))
def test_many_functions_threads_equal_one(urls, threads):
    urls = (urls * 300)[:300]  # fingerprint_many uses its kernel from 256 URLs
    with tiny_chunks():
        a = normalise_many(urls, fast=True, threads=1)
        b = normalise_many(urls, fast=True, threads=threads)
        assert (b.urls, b.positions, b.rejected) == (a.urls, a.positions, a.rejected)
        assert fingerprint_many(a.urls, threads=threads).tolist() == \
            fingerprint_many(a.urls, threads=1).tolist()


def test_ranges_cover_in_order():
    assert parallel.ranges(10, 3, 1) == [(0, 3), (3, 6), (6, 10)]
    assert parallel.ranges(10, 3, 8) == [(0, 10)]
    assert parallel.ranges(0, 2, 1) == [(0, 0)]
    assert parallel.default_threads() >= 1


def test_bad_threads_refused():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InvalidInputError):
            normalise_buffer(URLBuffer.from_strs(["http://a/"]), threads=bad)


def test_a_failing_chunk_raises_after_all_finish():
    done = []

    def ok():
        done.append(1)
        return 1

    def boom():
        raise ValueError("x")

    with pytest.raises(ValueError):
        parallel.run_all([boom, ok, ok])
    assert done == [1, 1]
    assert parallel.run_all([ok, ok]) == [1, 1]


def test_stage_url_path_threads_equal_one(tmp_path):
    from seenstore.stage import DedupStage

    urls = [f"http://h{i % 7}.example/a/../p{i}?q={i % 3}#f" for i in range(300)]
    urls += ["mailto:x@y", "http://xn--nxasmq6b.example/", "/rel"] * 5
    got = []
    with tiny_chunks():
        for threads in (1, 2):
            with DedupStage.open(str(tmp_path / f"s{threads}"), create=True,
                                 threads=threads) as st_:
                a = st_.offer(urls, payloads=list(range(len(urls))))
                got.append((a.keys.tolist(), a.payloads, a.rejected))
    assert got[0] == got[1] and len(got[0][0]) > 300 // 2
    with pytest.raises(InvalidInputError):
        DedupStage.open(str(tmp_path / "bad"), create=True, threads=0)


class _Drawn:
    """An iterator over 0..n-1 that records how many items were drawn, fails (if
    asked) when drawing item ``fail_at``, and checks it is never drawn from two
    threads at once or after ``closed`` is set."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n, self.fail_at, self.drawn = n, fail_at, 0
        self.busy = self.closed = False

    def __iter__(self):
        return self

    def __next__(self) -> int:
        assert not self.busy and not self.closed
        self.busy = True
        try:
            time.sleep(0.0003 * (self.drawn % 3))  # let another helper try to overtake
            if self.drawn == self.fail_at:
                raise OSError("disk")
            if self.drawn == self.n:
                raise StopIteration
            self.drawn += 1
            return self.drawn - 1
        finally:
            self.busy = False


def _work(x: int) -> int:
    time.sleep(0.0005 * ((x * 7) % 4))  # later items often finish first
    return x * x


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 40), threads=st.integers(1, 4), ahead=st.integers(1, 6))
def test_ordered_map_keeps_order_and_bounds_what_is_drawn_ahead(n, threads, ahead):
    items = _Drawn(n)
    got = []
    for i, r in enumerate(parallel.ordered_map(items, _work, threads, ahead)):
        assert items.drawn <= i + 1 + ahead  # never more than `ahead` past the caller
        got.append(r)
    assert got == [x * x for x in range(n)] and items.drawn == n


@pytest.mark.parametrize("threads,ahead", [(1, 1), (3, 3), (4, 2)])
def test_ordered_map_draws_up_to_ahead_items_past_a_slow_caller(threads, ahead):
    """While the caller holds item i, the helpers draw on until exactly ``ahead``
    items past it (waited for with a deadline, not a fixed sleep), and no further."""
    items = _Drawn(12)
    for i, r in enumerate(parallel.ordered_map(items, lambda x: x, threads, ahead)):
        want = min(12, i + 1 + ahead)
        deadline = time.monotonic() + 10
        while items.drawn < want and time.monotonic() < deadline:
            time.sleep(0.001)
        assert r == i and items.drawn == want
        time.sleep(0.002)  # room for a helper that would overstep the bound
        assert items.drawn == want


@pytest.mark.parametrize("where", ["draw", "work"])
def test_ordered_map_raises_at_the_failing_item(where):
    def work(x):
        if where == "work" and x == 5:
            raise ValueError("bad item")
        return _work(x)

    items = _Drawn(20, fail_at=5 if where == "draw" else None)
    it = parallel.ordered_map(items, work, 2, 3)
    assert [next(it) for _ in range(5)] == [x * x for x in range(5)]
    with pytest.raises(OSError if where == "draw" else ValueError):
        next(it)


def test_ordered_map_closed_early_stops_drawing_and_joins_its_helpers():
    items = _Drawn(10**6)
    it = parallel.ordered_map(items, _work, 2, 4)
    assert [next(it) for _ in range(3)] == [0, 1, 4]
    it.close()
    items.closed = True  # a draw from now on fails its assertion (and would show here)
    drawn = items.drawn
    time.sleep(0.05)
    assert items.drawn == drawn <= 3 + 4
    assert not [t for t in threading.enumerate() if t.name.startswith("seenstore-ordered")]
    with pytest.raises(InvalidInputError):
        next(parallel.ordered_map(iter([1]), _work, 0))


_KEPT = """
import os, sys
import numpy as np
from seenstore.runtime import parallel

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

kept = parallel.keep_freed_memory() if sys.argv[1] == "1" else None
a = np.ones(64 << 17, dtype=np.uint64)  # 64 MiB, every page touched
held = rss()
del a
print(kept, held - rss() >= 48 << 20)
"""


def test_keep_freed_memory_keeps_a_freed_array_s_pages_for_reuse():
    """With glibc's settings made, a freed 64 MiB array's pages stay with the process
    (the next batch's arrays reuse them without faulting fresh pages in); without
    them, freeing it returns them to the system at once (it was mapped on its own)."""
    def run(flag: str) -> list[str]:
        p = subprocess.run([sys.executable, "-c", _KEPT, flag], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        return p.stdout.split()

    assert run("1") == ["True", "False"]
    assert run("0") == ["None", "True"]
