"""The add pipeline's contract (seenstore/pipeline.py), without the CLI.

Oracle: a Python set of canonical URLs (``try_normalise`` per line, first occurrence
new). ``out`` is a fake with ``check()``/``send(bytes)``: a URL is sent only after
the commit holding it; a ``check()`` that raises stops the pipeline with nothing
more committed. Batches are exactly ``batch_lines`` URLs, on any thread count.
"""

from __future__ import annotations

import io
import os
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from seenstore import pipeline
from seenstore.errors import InvalidInputError, StoreIOError
from seenstore.kernels import dispatch
from seenstore.layout import DEFAULT_LAYOUT
from seenstore.runtime import parallel
from seenstore.url.buffer import URLBuffer
from seenstore.url.normalise import DEFAULT_MAX_LENGTH, try_normalise
from seenstore.url.policy import DEFAULT_POLICY

REAL = os.path.join(FIXTURES, "real_links.tsv")
PIECES = ["http://a.example/x", "HTTP://A.example:80/x#f", "/rel?q=1", "rel/../y", "?q", "#f",
          "mailto:x@y", "http://é.example/", "http://1.2.3.4/", "http://u@a.example/", "a b",
          "http://a.example/%7e%41", "\x01", "https://www.b.example/?b=2&a=1", "", "\x01x",
          "http://" + "a" * 3000 + ".example/"]
BASE = "http://base.example/d/"


class _Recorder:
    """A store and an output: records each commit's key count, each check and what
    was sent; ``fail_at``: the commit (1-based) whose store.add raises;
    ``check_fails_at``: the check (1-based) that raises."""

    def __init__(self, fail_at: int = 0, check_fails_at: int = 0) -> None:
        self.layout = DEFAULT_LAYOUT
        self.commits: list[int] = []
        self.sent: list[bytes] = []
        self.events: list[str] = []
        self.fail_at, self.check_fails_at = fail_at, check_fails_at
        self.checks = 0
        self.seen: set[int] = set()

    def add(self, keys):
        if len(self.commits) + 1 == self.fail_at:
            raise StoreIOError("injected")
        self.commits.append(len(keys))
        self.events.append("commit")
        mask = np.zeros(len(keys), dtype=bool)
        for i, k in enumerate(keys.tolist()):
            if k not in self.seen:
                self.seen.add(k)
                mask[i] = True
        return mask

    def check(self) -> None:
        self.checks += 1
        self.events.append("check")
        if self.checks == self.check_fails_at:
            raise StoreIOError("reader gone")

    def send(self, data) -> None:
        self.events.append("send")
        self.sent.append(bytes(data))


def _oracle(lines: list[str]) -> tuple[bytes, dict[str, int], int]:
    """(what is sent, rejection counts, URLs read) by a set of canonical URLs."""
    seen: set[str] = set()
    out, counts, read = [], {}, 0
    for line in lines:
        if not line:
            continue
        read += 1
        url = try_normalise(line, BASE, DEFAULT_POLICY, DEFAULT_MAX_LENGTH)
        if not isinstance(url, str):
            counts[url.value] = counts.get(url.value, 0) + 1
        elif url not in seen:
            seen.add(url)
            out.append(url + "\n")
    return "".join(out).encode("utf-8", "surrogateescape"), counts, read


def _run(path: str, rec, text: bytes, batch: int, threads: int = 1, pairs: bool = False,
         base: str | None = BASE, counts: dict | None = None) -> tuple[int, int]:
    counts = {} if counts is None else counts
    kw = {"base": base, "policy": DEFAULT_POLICY, "max_length": DEFAULT_MAX_LENGTH,
          "batch_lines": batch, "pairs": pairs}
    if path == "scalar":
        return pipeline.add_scalar(io.BytesIO(text), rec, rec, counts, **kw)
    return pipeline.add_fast(io.BytesIO(text), rec, rec, counts, threads=threads, **kw)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=30), st.sampled_from([1, 4, 1000]),
       st.sampled_from(["fast", "scalar"]), st.sampled_from([1, 2]))
def test_add_sends_the_new_canonical_urls_of_a_set(lines, batch, path, threads):
    """add_fast and add_scalar send what a set of canonical URLs says is new, in input
    order, count the rejections the scalar normaliser gives, and read every
    non-blank line; each batch is one check, then one commit, then one send."""
    want, want_counts, want_read = _oracle(lines)
    rec, counts = _Recorder(), {}
    read, new = _run(path, rec, "".join(ln + "\n" for ln in lines).encode(), batch, threads,
                     counts=counts)
    assert b"".join(rec.sent) == want and new == want.count(b"\n")
    assert counts == want_counts and read == want_read
    assert rec.events == ["check", "commit", "send"] * len(rec.commits)
    again = _Recorder()
    again.seen = set(rec.seen)  # a second run over the same store: nothing new
    assert _run(path, again, "".join(ln + "\n" for ln in lines).encode(), batch)[1] == 0


@pytest.mark.parametrize("path,threads", [("fast", 1), ("fast", 2), ("scalar", 1)])
def test_a_check_that_fails_commits_nothing_further(path, threads):
    """out.check() raising before the third commit: the error reaches the caller, two
    batches were committed and sent, nothing after them was committed."""
    with open(REAL, "rb") as f:
        text = b"".join(f.readlines()[:60])
    rec = _Recorder(check_fails_at=3)
    with pytest.raises(StoreIOError, match="reader gone"):
        _run(path, rec, text, 10, threads, pairs=True, base=None)
    assert len(rec.commits) == 2 and len(rec.sent) == 2 and rec.checks == 3


def test_add_batches_commits_each_batch_after_its_check():
    """add_batches: one admit_batch per FastBatch, in order; a failing check stops it."""
    from seenstore.url.fastpath import normalise_buffer

    with open(REAL, "rb") as f:
        lines = f.readlines()[:30]
    batches = [normalise_buffer(URLBuffer.from_bytes(b"".join(lines[i:i + 10]), pairs=True))
               for i in (0, 10, 20)]
    rec = _Recorder()
    read, new = pipeline.add_batches(iter(batches), rec, rec, {})
    assert read == 30 and rec.commits == [fb.n - len(fb.rejected) for fb in batches]
    assert new == len(rec.seen) and rec.events == ["check", "commit", "send"] * 3
    stopped = _Recorder(check_fails_at=2)
    with pytest.raises(StoreIOError):
        pipeline.add_batches(iter(batches), stopped, stopped, {})
    assert stopped.commits == rec.commits[:1]


def test_input_options_that_do_not_go_together_raise_at_the_call(tmp_path):
    """input_batches refuses bad options when called (nothing read yet) with
    InvalidInputError and the CLI's messages."""
    kw = {"column": "url", "base_column": None, "batch_lines": 10, "policy": DEFAULT_POLICY,
          "layout": DEFAULT_LAYOUT, "max_length": DEFAULT_MAX_LENGTH}
    for sources, opts, msg in [
            (["a"], {"warc": True, "parquet": True}, "do not go together"),
            (["a"], {"warc": True, "parquet": False, "base": BASE}, "--base does not go"),
            (["a", "b"], {"warc": False, "parquet": True}, "takes one FILE"),
            (["-"], {"warc": True, "parquet": False}, "not stdin"),
            (["a"], {"warc": False, "parquet": False}, "--warc or --parquet")]:
        with pytest.raises(InvalidInputError, match=msg):
            pipeline.input_batches(sources, **opts, **kw)
    garbage = tmp_path / "garbage.warc"
    garbage.write_bytes(b"no records here\n" * 100)
    batches = pipeline.input_batches([str(garbage)], warc=True, parquet=False, **kw)
    with pytest.raises(InvalidInputError, match="not a WARC file"):  # when read
        next(batches)


def test_input_lines_are_the_arguments_or_stdin_lines():
    assert list(pipeline.input_lines(("http://a/", "b"), 100)) == ["http://a/", "b"]
    stdin = io.BytesIO(b"\xef\xbb\xbfhttp://a/\r\n\nx" + b"y" * 5000 + b"\n")
    got = list(pipeline.input_lines(("-",), 100, stdin))
    assert got[:2] == [b"http://a/", b""] and len(got) == 3 and got[2].startswith(b"xyy")
    assert list(pipeline.input_lines((), 100, io.BytesIO(b"u\n"))) == [b"u"]
    assert list(pipeline.chunks(iter(range(5)), 2)) == [[0, 1], [2, 3], [4]]
    assert list(pipeline.chunks([], 2)) == []


def _add_fast(rec, text: bytes, batch: int, threads: int) -> tuple[int, int]:
    return _run("fast", rec, text, batch, threads, pairs=True, base=None)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("sub,batch", [(3, 7), (7, 7), (10, 4), (1 << 17, 50)])
def test_add_fast_pieces_make_exact_batches(monkeypatch, threads, sub, batch):
    """add_fast reads and normalises pieces of SUB_LINES URLs but commits exactly
    batch_lines URLs at a time (a piece that crosses a batch end is split), in
    order, sending what one pass over the whole input sends; with two threads the
    commits run on a helper thread, still one at a time and in order."""
    monkeypatch.setattr(pipeline, "SUB_LINES", sub)
    monkeypatch.setattr(parallel, "MIN_CHUNK", 2)
    monkeypatch.setattr(dispatch, "SMALL", 0)  # the kernels, not their twins
    with open(REAL, "rb") as f:
        text = b"".join(f.readlines()[:103])
    n = text.count(b"\n")
    lines_per_commit = []
    admit = pipeline.admit_batch

    def counting(fbs, *args):
        lines_per_commit.append(sum(fb.n for fb in fbs))
        return admit(fbs, *args)

    monkeypatch.setattr(pipeline, "admit_batch", counting)
    rec = _Recorder()
    read, new = _add_fast(rec, text, batch, threads)
    assert read == n
    assert lines_per_commit == [batch] * (n // batch) + ([n % batch] if n % batch else [])
    whole = _Recorder()
    _add_fast(whole, text, 10**6, 1)
    assert b"".join(rec.sent) == b"".join(whole.sent) and new == len(whole.seen)
    assert len(rec.sent) == len(rec.commits)


@pytest.mark.parametrize("threads", [1, 2])
def test_add_fast_commit_error_stops_in_order(monkeypatch, threads):
    """A commit that fails (here the second) is raised by add_fast, on the helper
    thread too; the batches before it were delivered, none after it was committed."""
    monkeypatch.setattr(pipeline, "SUB_LINES", 5)
    with open(REAL, "rb") as f:
        text = b"".join(f.readlines()[:60])
    rec = _Recorder(fail_at=2)
    with pytest.raises(StoreIOError, match="injected"):
        _add_fast(rec, text, 10, threads)
    assert rec.commits == [10] and len(rec.sent) == 1


@pytest.mark.parametrize("threads", [1, 2])
def test_add_fast_small_pieces_of_a_large_stream_take_the_kernel(monkeypatch, threads):
    """Below dispatch.SMALL URLs the twin routes every URL to the scalar path (no JIT
    for a small input); but a piece of a large stream (here the tail of a batch, or
    any piece of batch_lines below SMALL) is not a small input: once SMALL URLs of
    the stream are read, every piece takes the kernel. Before, each batch's last
    piece (~13 % of a 1e6-line batch of real links) ran through the scalar path."""
    from seenstore.url import fastpath

    monkeypatch.setattr(pipeline, "SUB_LINES", 20)
    monkeypatch.setattr(dispatch, "SMALL", 50)
    monkeypatch.setattr(fastpath, "_kernel_loaded", lambda: False)  # as in a fresh process
    streamed: list[int] = []
    routed: list[int] = []
    kernel, finish = pipeline.run_kernel, pipeline.finish_buffer

    def kernel_recording(ub, *args, **kw):
        ran = kernel(ub, *args, **kw)
        streamed.append(kw["stream_urls"])  # in input order on any thread count
        return ran

    def finish_recording(*args, **kw):
        fb = finish(*args, **kw)
        routed.append(fb.routed)
        return fb

    monkeypatch.setattr(pipeline, "run_kernel", kernel_recording)
    monkeypatch.setattr(pipeline, "finish_buffer", finish_recording)
    with open(REAL, "rb") as f:
        lines = f.readlines()[:120]
    text = b"".join(lines)
    rec = _Recorder()
    _add_fast(rec, text, 30, threads)
    # pieces of 20 lines, cut at the batch ends (30, 60, 90): URLs read before each
    assert sorted(streamed) == [0, 20, 30, 40, 60, 80, 90, 100]
    routed = list(zip(sorted(streamed), routed))
    assert [r for _, r in routed][:3] == [20, 10, 10]  # the twin: all routed
    tail = URLBuffer.from_bytes(b"".join(lines[40:]), pairs=True)
    by_kernel = fastpath.normalise_buffer(tail, stream_urls=50).routed
    assert sum(r for _, r in routed[3:]) == by_kernel < 40  # the kernel ran on the rest
    whole = _Recorder()
    _add_fast(whole, text, 10**6, 1)
    assert b"".join(rec.sent) == b"".join(whole.sent)


def test_add_fast_closes_its_helper_threads_when_a_commit_fails():
    """With two threads the pieces are read and run through the URL kernel ahead on
    helper threads (parallel.ordered_map); a failed commit ends add_fast with those
    closed and joined at once, not left to the garbage collector (which once
    finalized the reader inside threading's own lock, while another thread started,
    and deadlocked: a CI run hung on it)."""
    text = b"".join(b"https://a.example/p%d\thttps://b.example/q%d\n" % (i, i)
                    for i in range(20_000))
    rec = _Recorder(fail_at=1)
    with pytest.raises(StoreIOError):
        _add_fast(rec, text, batch=1000, threads=2)
    alive = [t.name for t in threading.enumerate() if t.name.startswith("seenstore-ordered")]
    assert alive == []
