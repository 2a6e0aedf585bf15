"""The add pipeline: URLs in; normalised, fingerprinted and admitted in batches; new URLs out.

``add_fast`` (the batch fast path) and ``add_scalar`` (the reference path: the same
output, slower) read URL lines from a binary stream; ``add_batches`` admits
FastBatches made elsewhere (``input_batches``: the links of WARC files or the URLs
of a Parquet column). Every batch is one ``store.add`` (one durable commit).
The promise to ``out``: ``out.check()`` is called before each commit and may raise
to stop (nothing more is committed); after the commit the batch's new canonical
URLs (first occurrences, in input order, one per line) go to ``out.send(bytes)``,
so a URL is handed on only once it is committed (cli/deliver.py's Output meets this
contract). Rejections are counted by reason into ``counts``. ``input_lines`` and
``chunks`` give URLs from arguments or stdin lines in bounded chunks. ``add_live``
runs ``add_fast`` over a pipe that stays open (``tail -f | seenstore add -``): a
``LiveInput`` ends a segment, so its batch is committed and its new URLs sent,
once its first line has waited ``interval`` seconds and no more input is at hand.
Failures are seenstore.errors' typed errors; this module prints nothing.
docs/fastpath.md.
"""

from __future__ import annotations

import itertools
import os
import select
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import BinaryIO

import numpy as np

from seenstore.errors import InvalidInputError
from seenstore.runtime.parallel import check_threads, ordered_map
from seenstore.url.buffer import URLBuffer
from seenstore.url.fastpath import (finish_buffer, line_cap, normalise_buffer, normalise_many,
                                    run_kernel, scalar_one)
from seenstore.url.fingerprint import fingerprint_many
from seenstore.url.normalise import NormalisedBatch
from seenstore.url.reading import iter_lines

SUB_LINES = 1 << 17  # URLs per pass of the line and URL kernels (see add_fast)


# ------------------------------------------------------------------------ inputs
def input_lines(urls: Sequence[str], max_length: int,
                stdin: BinaryIO | None = None) -> Iterator[str | bytes]:
    """The URLs ``urls`` (str) or, when there are none or just ``'-'``, the lines of
    ``stdin`` (default: sys.stdin's bytes): bytes without their terminator, blank
    lines kept, a leading UTF-8 BOM skipped, read in bounded blocks (a line longer
    than a block is cut to ``line_cap(max_length)`` bytes, enough to reject it as
    too long, so memory stays bounded: url/reading.py ``iter_lines``)."""
    if not urls or tuple(urls) == ("-",):
        return iter_lines(sys.stdin.buffer if stdin is None else stdin, line_cap(max_length))
    return iter(urls)


def chunks(items: Iterable, size: int) -> Iterator[list]:
    """The items of ``items`` in lists of ``size`` (the last may be shorter, none empty)."""
    items = iter(items)
    while chunk := list(itertools.islice(items, size)):
        yield chunk


def check_input_options(sources: Sequence[str], *, warc: bool, parquet: bool,
                        base: str | None = None) -> None:
    """Raise InvalidInputError unless ``sources`` and the options suit ``input_batches``:
    WARC files or one Parquet file (not both), no ``base`` for WARC (each link has
    its page's), files, not stdin ('-')."""
    if not (warc or parquet):
        raise InvalidInputError("input_batches reads --warc or --parquet files")
    if warc and parquet:
        raise InvalidInputError("--warc and --parquet do not go together")
    if warc and base is not None:
        raise InvalidInputError("--base does not go with --warc (each link has its page's base)")
    if parquet and len(sources) != 1:
        raise InvalidInputError("--parquet takes one FILE")
    if "-" in sources:
        raise InvalidInputError("--warc/--parquet read files, not stdin ('-')")


def input_batches(sources: Sequence[str], *, warc: bool, parquet: bool, column: str,
                  base_column: str | None, batch_lines: int, policy, layout, max_length: int,
                  base: str | None = None, report=None) -> Iterator:
    """FastBatches (for ``add_batches``) of up to ``batch_lines`` URLs: the outlinks of
    the HTML responses of WARC files ``sources`` (``warc``; counted into ``report``,
    an integrations.warc.WarcReport, when given), or the URLs of ``column`` of one
    Parquet file (``parquet``; each against its row's ``base_column``, else ``base``).
    Raises InvalidInputError at the call when the options do not go together
    (``check_input_options``); while reading, StoreNotFoundError for a missing file
    and InvalidInputError for one that is not WARC or Parquet, or a column that is
    missing or not strings."""
    check_input_options(sources, warc=warc, parquet=parquet, base=base)
    if warc:
        from seenstore.integrations.warc import iter_link_buffers

        buffers = iter_link_buffers(sources, report, chunk_urls=batch_lines)
    else:
        from seenstore.integrations.arrow import iter_parquet_buffers

        buffers = iter_parquet_buffers(sources[0], column, base_column, batch_rows=batch_lines,
                                       base=base)
    return _normalised(buffers, policy, layout, max_length)


def _normalised(buffers, policy, layout, max_length: int) -> Iterator:
    """A FastBatch of each URL buffer, each knowing how many URLs came before it."""
    read = 0
    for ub in buffers:
        yield normalise_buffer(ub, policy, layout, max_length, stream_urls=read)
        read += len(ub)  # the kernel, not its twin, once the input is not small


# ------------------------------------------------------------------ scalar path
def add_scalar(stream: BinaryIO, store, out, counts: dict[str, int], *, base, policy,
               max_length: int, batch_lines: int, pairs: bool) -> tuple[int, int]:
    """``add_fast``'s results by the scalar reference path (ada-url and xxhash per URL;
    docs/fastpath.md): admit the URL lines of ``stream`` into ``store`` in batches of
    ``batch_lines`` non-blank lines, send the new canonical URLs to ``out`` (the
    module's contract), add rejection counts to ``counts``; return (URLs read, new).
    ``pairs``: a line may be 'BASE<TAB>HREF' (HREF against its own BASE)."""
    read = new = 0
    lines = (ln for ln in iter_lines(stream, line_cap(max_length, pairs)) if ln)
    for chunk in chunks(lines, batch_lines):
        read += len(chunk)
        if pairs:
            batch = _normalise_pairs(chunk, base, policy, max_length)
        else:
            batch = normalise_many(chunk, base, policy, max_length, fast=False)
        for reason, n in batch.reason_counts().items():
            counts[reason] = counts.get(reason, 0) + n
        if not batch.urls:
            continue
        out.check()
        urls = batch.urls
        mask, text = admit_lines(
            store, fingerprint_many(urls, store.layout),
            lambda sel, urls=urls: "".join(u + "\n" for u, m in zip(urls, sel.tolist()) if m)
            .encode("utf-8", "surrogateescape"))
        new += int(mask.sum())
        out.send(text)
    return read, new


def _normalise_pairs(lines, base, policy, max_length) -> NormalisedBatch:
    """The scalar path for 'BASE<TAB>HREF' lines: each href against its own base
    (a base that is not a valid URL rejects its relative hrefs, as the fast path does)."""
    usable: dict[str, bool] = {}

    def one(line: bytes):
        href, own = line, base
        if b"\t" in line:
            raw_base, href = line.split(b"\t", 1)
            own = raw_base.decode("utf-8", "surrogateescape")
        return scalar_one(href, own, policy, max_length, usable)

    return NormalisedBatch.of(one(line) for line in lines)


# -------------------------------------------------------------------- fast path
def add_fast(stream, store, out, counts: dict[str, int], *, base, policy, max_length: int,
             batch_lines: int, pairs: bool, threads: int | None,
             seconds: dict[str, float] | None = None) -> tuple[int, int]:
    """``seenstore add``'s fast path: admit the URLs of ``stream`` into ``store`` and
    send the new canonical URLs to ``out`` (``out.check()`` before each commit,
    ``out.send(bytes)`` after it: deliver.Output), one batch of ``batch_lines`` at a
    time; add rejection counts to ``counts``; return (URLs read, new).

    The line and URL kernels run over pieces of at most SUB_LINES URLs, so their
    buffers stay small and are reused piece after piece (on a VM touching fresh pages
    can cost as much as the kernels: docs/fastpath.md); a batch
    keeps only its pieces' canonical output and keys until its commit. With more
    than one thread, ``threads`` helpers each read a piece in turn (the line kernel)
    and run the URL kernel over it, with no barrier between pieces
    (``parallel.ordered_map``), while this thread finishes the pieces in input order
    (scalar path, merge). A batch's commit (store, then write) runs on a helper
    thread while the next batch is read and normalised, with any thread count: most
    of a commit's wall time is waiting for the disk (fsync), which one core overlaps
    as well as two; commits stay in input order, one at a time. With ``seconds``,
    add the time of each stage to it: read, kernel (with more than one thread,
    the helpers' wall times, which overlap), scalar, merge (finish_buffer's), wait
    (this thread waiting for the helpers), store, write (the commit thread's)."""
    t = seconds if seconds is not None else {}
    threads = check_threads(threads)
    pieces = URLBuffer.iter_file(stream, pairs=pairs, base=base,
                                 chunk_urls=min(batch_lines, SUB_LINES),
                                 max_line=line_cap(max_length, pairs))
    host_bits = store.layout.host_bits

    def kernel(piece):
        """(piece, run_kernel's arrays, seconds it took) for one piece of _cut."""
        ub, read_before, _ = piece
        t0 = time.perf_counter()
        ran = run_kernel(ub, max_length, host_bits, 1, stream_urls=read_before)
        return piece, ran, time.perf_counter() - t0

    cut = _cut(pieces, batch_lines, t)
    ran = map(kernel, cut) if threads == 1 else ordered_map(cut, kernel, threads)
    try:
        return _add_pieces(ran, store, out, counts, t, policy, max_length, threads > 1)
    finally:
        # closed here, not left to the garbage collector: a suspended generator
        # finalized at an arbitrary point (once inside threading's own lock, while a
        # new thread started) joined its pool there and deadlocked; the helpers
        # first, then the reader they draw from
        for generator in (ran, cut, pieces):
            close = getattr(generator, "close", None)
            if close is not None:
                close()


def _cut(pieces, batch_lines: int, seconds: dict[str, float]):
    """(URL buffer, URLs read before it, whether it ends a batch) for the buffers of
    ``pieces`` cut at every ``batch_lines`` URLs; adds the reading time to
    ``seconds["read"]``."""
    read = 0
    while True:
        t0 = time.perf_counter()
        ub = next(pieces, None)
        seconds["read"] = seconds.get("read", 0.0) + time.perf_counter() - t0
        if ub is None:
            return
        while ub is not None:  # a piece may end this batch and start the next
            take = batch_lines - read % batch_lines
            head, ub = (ub, None) if len(ub) <= take else \
                (ub.slice(0, take), ub.slice(take, len(ub)))
            yield head, read, len(head) == take
            read += len(head)


def _add_pieces(ran, store, out, counts, t, policy, max_length, helpers: bool):
    """add_fast's loop over the kernel's results ``ran`` (see add_fast's ``kernel``;
    ``helpers``: computed on helper threads, the time waiting for them is counted
    as ``wait``); returns (URLs read, new)."""
    read = 0
    commits = _Commits(store, out, counts, t)
    batch: list = []
    with commits:
        while True:
            t0 = time.perf_counter()
            item = next(ran, None)
            if helpers:
                t["wait"] = t.get("wait", 0.0) + time.perf_counter() - t0
            if item is None:
                break
            (ub, _, ends), kernel_out, kernel_seconds = item
            fb = finish_buffer(ub, kernel_out, policy, store.layout, max_length,
                               kernel_seconds=kernel_seconds)
            for k, v in fb.seconds.items():
                t[k] = t.get(k, 0.0) + v
            read += fb.n
            batch.append(fb)
            if ends:
                commits.submit(batch)
                batch = []
        if batch:
            commits.submit(batch)
    return read, commits.new


class _Commits:
    """Commits of add_fast's batches in order, one at a time, on a helper thread,
    ``submit`` returning at once after the previous commit has finished (its error,
    if any, raised here). Leaving the ``with`` block waits for the last commit, also
    on an error or interrupt (the store is never closed under a running commit)."""

    def __init__(self, store, out, counts, seconds) -> None:
        self.args = store, out, counts, seconds
        self.new = 0
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="seenstore-commit")
        self.running = None

    def submit(self, fbs: list) -> None:
        self._finish()
        self.running = self.pool.submit(admit_batch, fbs, *self.args)

    def _finish(self) -> None:
        running, self.running = self.running, None
        if running is not None:
            self.new += running.result()

    def __enter__(self) -> "_Commits":
        return self

    def __exit__(self, kind, *_) -> None:
        try:
            if kind is None:
                self._finish()
            elif self.running is not None:
                wait([self.running])  # the first error is the one to report
        finally:
            self.pool.shutdown(wait=True)


# ------------------------------------------------- a policy with rules, URLs kept
def add_kept(stream, store, out, counts: dict[str, int], *, base, max_length: int,
             batch_lines: int) -> tuple[int, int]:
    """``seenstore add`` for a store that keeps URLs under a policy with rules: each
    batch through the store's URL call (safe-rule forms kept, keys under the
    policy); the new canonical URLs go to ``out`` as in ``add_fast``. Returns (URLs
    read, new)."""
    from seenstore.store.urls import add_normalised, normalised

    read = new = 0
    policy = store.policy
    lines = (ln for ln in iter_lines(stream, line_cap(max_length)) if ln)
    for chunk in chunks(lines, batch_lines):
        nz = normalised(chunk, base, policy, store.layout, store.threads)
        for _, reason in nz.rejected:
            counts[reason.value] = counts.get(reason.value, 0) + 1
        read += len(chunk)
        if not len(nz.keys):
            continue
        out.check()
        mask = add_normalised(store, nz)
        lines = [u for u, m in zip(nz.canonical, mask.tolist()) if m]
        out.send("".join(u + "\n" for u in lines).encode("utf-8"))
        new += len(lines)
    return read, new


# -------------------------------------------------------------------- live input
_BOM = b"\xef\xbb\xbf"
_READ = 1 << 20  # bytes per read of a live input
_HOLD = 16 << 20  # an unfinished line longer than this is handed on unfinished


class LiveInput:
    """A binary stream (``readinto1``, ``readinto``, ``read``) over the file descriptor
    ``fd`` of a pipe, socket or terminal, in segments: a segment ends (a read returns
    0, as at the end of a file) once its first line was handed out ``interval``
    seconds ago and no complete line is at hand, or at the real end of the input.
    ``next_segment()`` starts the next; ``more`` says whether one may follow. Only
    whole lines end a segment (an unfinished last line waits for its newline, or is
    handed on once longer than _HOLD bytes, and then the segment runs on to the end
    of that line). While waiting for input, ``out.gone()`` (deliver.Output) is
    watched: when the reader of the output has gone, ``out.check()`` raises."""

    def __init__(self, fd: int, interval: float, out=None) -> None:
        self.fd, self.interval, self.out = fd, interval, out
        self.pending = bytearray()  # read from fd, not handed out yet
        self.eof = False
        self.first: float | None = None  # when this segment's first bytes were handed out
        self.mid_line = False  # the bytes handed out end inside a line
        self.segment = 0
        self.poll = select.poll()
        self.poll.register(fd, select.POLLIN)
        self.out_fd = getattr(out, "fd", None) if getattr(out, "pipe", 0) else None
        if self.out_fd is not None:
            self.poll.register(self.out_fd, 0)  # errors only: the reader has gone

    @property
    def more(self) -> bool:
        return not self.eof or bool(self.pending)

    def next_segment(self) -> None:
        self.segment += 1
        self.first = None

    def readinto1(self, buffer) -> int:
        with memoryview(buffer) as mv:
            while True:
                n = self._hand_out(mv)
                if n or self.eof:
                    return n
                wait = None
                if self.first is not None and not self.mid_line:
                    wait = self.first + self.interval - time.monotonic()
                    if wait <= 0:
                        return 0  # the segment ends here
                self._fill(wait)

    readinto = readinto1

    def read(self, size: int = -1) -> bytes:
        buf = bytearray(size if size > 0 else _READ)
        return bytes(buf[:self.readinto1(buf)])

    def _hand_out(self, mv) -> int:
        """Copy the whole lines at hand (all of it at the end, or a long unfinished
        line) into ``mv``; return how many bytes."""
        p = self.pending
        if self.first is None and self.segment and p.startswith(_BOM):
            p[:0] = b"\n"  # a later segment's first line is no byte order mark
        end = len(p) if self.eof or len(p) > _HOLD else p.rfind(b"\n") + 1
        n = min(end, len(mv))
        if n:
            mv[:n] = p[:n]
            del p[:n]
            self.mid_line = mv[n - 1] != 10
            if self.first is None:
                self.first = time.monotonic()
        return n

    def _fill(self, wait: float | None) -> None:
        """Wait up to ``wait`` seconds (None: as long as it takes) for input, and read
        what is at hand."""
        timeout = -1 if wait is None else max(1, int(wait * 1000 + 0.999))
        for fd, ev in self.poll.poll(timeout):
            if fd == self.out_fd:
                self.out.check()  # raises: the reader of the output has gone
                continue
            while True:
                chunk = os.read(self.fd, _READ)
                if not chunk:
                    self.eof = True
                    return
                self.pending += chunk
                if len(chunk) < _READ or len(self.pending) >= _HOLD \
                        or not self.poll.poll(0):
                    return


def add_live(fd: int, store, out, counts: dict[str, int], *, interval: float,
             scalar: bool = False, **kw) -> tuple[int, int]:
    """``add_fast`` (``scalar``: ``add_scalar``) over a pipe that may stay open: the
    lines of ``fd`` in LiveInput segments, each run to its end, so what arrived is
    committed and its new URLs sent within about ``interval`` seconds of arriving
    (plus the commit); ``kw`` as add_fast's (add_scalar's). Returns (URLs read, new)."""
    src = LiveInput(fd, interval, out)
    read = new = 0
    while True:
        if scalar:
            r, n = add_scalar(src, store, out, counts, **kw)
        else:
            r, n = add_fast(src, store, out, counts, **kw)
        read, new = read + r, new + n
        if not src.more:
            return read, new
        src.next_segment()


# ------------------------------------------------------------------ one commit
def add_batches(batches: Iterable, store, out, counts: dict[str, int],
                seconds: dict[str, float] | None = None) -> tuple[int, int]:
    """Admit each FastBatch of ``batches`` in a commit of its own (``admit_batch``), in
    order; return (URLs read, new). ``seconds``: as admit_batch's."""
    seconds = {} if seconds is None else seconds
    read = new = 0
    for fb in batches:
        read += fb.n
        new += admit_batch(fb, store, out, counts, seconds)
    return read, new


def admit_lines(store, keys: np.ndarray, lines_of) -> tuple[np.ndarray, bytes]:
    """``store.add(keys)`` for a batch of canonical URLs (``lines_of(mask)``: the URLs
    a mask over ``keys`` picks, newline-terminated, in input order); returns (the
    mask of new first occurrences, their lines). A store that keeps URLs keeps
    those lines (the policy has no rules for them here, or they are kept in their
    canonical form: docs/policy.md)."""
    hook = None
    if getattr(store, "keep_urls", False) is not False:
        from seenstore.store.urls import KeptLinesHook
        hook = store._on_new = KeptLinesHook(store, keys, lines_of)
    try:
        mask = store.add(keys)
    finally:
        if hook is not None:
            store._on_new = None
    got = getattr(hook, "lines", None)
    if got is not None and np.array_equal(got[0], mask):
        return mask, got[1]  # the hook gathered them for the kept-URL file
    return mask, lines_of(mask)


def admit_batch(fbs, store, out, counts: dict[str, int], seconds: dict[str, float]) -> int:
    """Admit the keys of a FastBatch, or of a list of them, in one commit
    (``out.check()`` before it, the new canonical URLs sent after it, in input
    order), count their rejections into ``counts`` and the store and write times
    into ``seconds``; return how many were new. A batch with no keys commits
    nothing and sends nothing."""
    fbs = fbs if isinstance(fbs, list) else [fbs]
    for fb in fbs:
        for reason, n in fb.reason_counts().items():
            counts[reason] = counts.get(reason, 0) + n
    keys = fbs[0].keys if len(fbs) == 1 else np.concatenate([fb.keys for fb in fbs])
    if not len(keys):
        return 0
    out.check()
    t2 = time.perf_counter()
    cuts = np.cumsum([len(fb.keys) for fb in fbs])[:-1]

    def lines_of(select: np.ndarray) -> bytes:
        return b"".join(fb.lines(m) for fb, m in zip(fbs, np.split(select, cuts)))

    mask, text = admit_lines(store, keys, lines_of)
    t3 = time.perf_counter()
    out.send(text)
    seconds["store"] = seconds.get("store", 0.0) + t3 - t2
    seconds["write"] = seconds.get("write", 0.0) + time.perf_counter() - t3
    return int(mask.sum())


__all__ = ["SUB_LINES", "add_batches", "add_fast", "add_kept", "add_scalar", "admit_batch",
           "check_input_options", "chunks", "input_batches", "input_lines"]


__all__ = ["SUB_LINES", "LiveInput", "add_batches", "add_fast", "add_live", "add_scalar",
           "admit_batch", "check_input_options", "chunks", "input_batches", "input_lines"]
