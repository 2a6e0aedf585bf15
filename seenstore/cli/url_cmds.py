"""URL commands: ``normalise``, ``fingerprint`` and ``add`` (the crawl-pipeline filter).

Each reads URLs from its arguments or, with none or ``-``, one per line from stdin
(bytes; a trailing CR is dropped). ``normalise``/``fingerprint`` print one line per
input (``# rejected: REASON`` for a URL without a canonical form); ``add`` prints only
the new canonical URLs and counts rejections on stderr. docs/normalise.md.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import nullcontext

import click
import numpy as np

from seenstore.kernels import dispatch
from seenstore.url.fastpath import finish_buffer, line_cap, run_kernel, scalar_one
from seenstore.url.fingerprint import fingerprint_many
from seenstore.layout import DEFAULT_LAYOUT, Layout
from seenstore.url.normalise import DEFAULT_MAX_LENGTH, NormalisedBatch, check_base
from seenstore.url.fastpath import normalise_many
from seenstore.runtime.parallel import check_threads, keep_freed_memory, ordered_map
from seenstore.url.policy import load_policy
from seenstore.url.buffer import URLBuffer
from seenstore.url.reading import iter_lines
from seenstore.cli import default_store_dir, fail, main, store_option, threads_option
from seenstore.cli.deliver import Output

DEFAULT_BATCH_LINES = 1_000_000
_CHUNK = 65536  # lines per output write for normalise/fingerprint (at least dispatch.SMALL)

base_option = click.option(
    "--base", default=None, metavar="URL", help="Resolve relative references against URL.")
policy_option = click.option(
    "--policy", "policy_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
    help="Policy TOML with the per-host risky rules (default: safe rules only, 'safe-v1').")
max_length_option = click.option(
    "--max-length", type=click.IntRange(min=16), default=DEFAULT_MAX_LENGTH, show_default=True,
    metavar="BYTES", help="Reject URLs longer than this (input or canonical form).")


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


SUB_LINES = 1 << 17  # URLs per pass of the line and URL kernels (see add_fast)


def add_fast(stream, store, out, counts: dict[str, int], *, base, policy, max_length: int,
             batch_lines: int, pairs: bool, threads: int | None,
             seconds: dict[str, float] | None = None) -> tuple[int, int]:
    """``seenstore add``'s fast path: admit the URLs of ``stream`` into ``store`` and
    send the new canonical URLs to ``out`` (``out.check()`` before each commit,
    ``out.send(bytes)`` after it: deliver.Output), one batch of ``batch_lines`` at a
    time; add rejection counts to ``counts``; return (URLs read, new).

    The line and URL kernels run over pieces of at most SUB_LINES URLs, so their
    buffers stay small and are reused piece after piece (on the VMs measured here
    touching fresh pages costs as much as the kernels: docs/fastpath.md); a batch
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


def admit_batch(fbs, store, out, counts: dict[str, int], seconds: dict[str, float]) -> int:
    """Admit the keys of a FastBatch, or of a list of them, in one commit
    (``out.check()`` before it, the new canonical URLs sent after it, in input
    order), count their rejections into ``counts`` and the store and write times
    into ``seconds``; return how many were new."""
    fbs = fbs if isinstance(fbs, list) else [fbs]
    for fb in fbs:
        for reason, n in fb.reason_counts().items():
            counts[reason] = counts.get(reason, 0) + n
    keys = fbs[0].keys if len(fbs) == 1 else np.concatenate([fb.keys for fb in fbs])
    if not len(keys):
        return 0
    out.check()
    t2 = time.perf_counter()
    mask = store.add(keys)
    t3 = time.perf_counter()
    cuts = np.cumsum([len(fb.keys) for fb in fbs])[:-1]
    out.send(b"".join(fb.lines(m) for fb, m in zip(fbs, np.split(mask, cuts))))
    seconds["store"] = seconds.get("store", 0.0) + t3 - t2
    seconds["write"] = seconds.get("write", 0.0) + time.perf_counter() - t3
    return int(mask.sum())


def _lines(stream, cap: int) -> Iterator[bytes]:
    """Lines of a binary stream without their terminator, read in bounded blocks; a
    leading UTF-8 BOM is skipped and a line longer than ``cap`` is cut to ``cap``
    bytes (it is then rejected as too long), so memory stays bounded."""
    return iter_lines(stream, cap)


def _inputs(urls: tuple[str, ...], max_length: int) -> Iterator[object]:
    if not urls or urls == ("-",):
        return _lines(sys.stdin.buffer, line_cap(max_length))
    return iter(urls)


def _chunks(items: Iterator[object], size: int) -> Iterator[list]:
    while True:
        chunk = list(itertools.islice(items, size))
        if not chunk:
            return
        yield chunk


def _write(lines: list[str]) -> None:
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")


def _summary(command: str, counts: dict[str, int], extra: str = "") -> None:
    total = sum(counts.values())
    if total or extra:
        detail = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        rej = f"rejected {total}" + (f" ({detail})" if detail else "")
        click.echo(f"seenstore {command}: {extra}{rej}", err=True)


def _per_line(command: str, urls, base, policy_file, max_length, threads, render) -> None:
    check_base(base)
    policy = load_policy(policy_file)
    counts: dict[str, int] = {}
    # a chunk of dispatch.SMALL lines or more takes the kernels (and loads them for the
    # chunks after it); smaller chunks of a long stream each took the scalar path
    # (~13 us per URL: 1e6 lines in 13 s)
    for chunk in _chunks(_inputs(urls, max_length), max(_CHUNK, dispatch.SMALL)):
        batch = normalise_many(chunk, base, policy, max_length, threads=threads)
        out = [""] * len(chunk)
        for i, reason in batch.rejected:
            out[i] = f"# rejected: {reason.value}"
            counts[reason.value] = counts.get(reason.value, 0) + 1
        for i, text in zip(batch.positions, render(batch.urls)):
            out[i] = text
        _write(out)
    _summary(command, counts)


@main.command("normalise")
@click.argument("urls", nargs=-1)
@base_option
@policy_option
@max_length_option
@threads_option
def normalise_cmd(urls, base, policy_file, max_length, threads):
    """Print the canonical form of each URL (arguments, or stdin lines with none or '-').

    One output line per input line: the canonical URL, or '# rejected: REASON'
    (encoding, too-long, control-char, unparsable, scheme). Rejection counts go
    to stderr. The canonical form is the one the store fingerprints.
    """
    _per_line("normalise", urls, base, policy_file, max_length, threads, lambda u: u)


@main.command("fingerprint")
@click.argument("urls", nargs=-1)
@base_option
@policy_option
@max_length_option
@click.option("--host-bits", type=click.IntRange(0, 32), default=DEFAULT_LAYOUT.host_bits,
              show_default=True, help="H: key bits taken from the host hash.")
@click.option("--with-url", is_flag=True, help="Print 'KEY<TAB>CANONICAL-URL'.")
@threads_option
def fingerprint_cmd(urls, base, policy_file, max_length, host_bits, with_url, threads):
    """Print the 64-bit key (16 hex digits) of each URL after normalising it.

    One output line per input line, or '# rejected: REASON'. The key is
    host_hash[top H bits] | url_hash[low 64-H bits] (docs/fingerprint.md).
    """
    layout = Layout(host_bits=host_bits)

    def render(canonical: list[str]) -> list[str]:
        keys = fingerprint_many(canonical, layout, threads).tolist()
        if with_url:
            return [f"{k:016x}\t{u}" for k, u in zip(keys, canonical)]
        return [f"{k:016x}" for k in keys]

    _per_line("fingerprint", urls, base, policy_file, max_length, threads, render)


@main.command("add")
@click.argument("source", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@store_option
@base_option
@policy_option
@max_length_option
@click.option("--batch-lines", type=click.IntRange(min=1), default=DEFAULT_BATCH_LINES,
              show_default=True, help="Lines per batch (one durable store commit each).")
@click.option("--pairs", is_flag=True,
              help="Lines may be 'BASE<TAB>HREF': HREF is resolved against its own BASE "
                   "(links grouped by the page they came from); lines without a tab use --base.")
@click.option("--scalar", is_flag=True,
              help="Use the scalar reference path (ada-url + xxhash per URL) instead of the "
                   "batch fast path (docs/fastpath.md); same output, slower.")
@click.option("--wait", type=float, default=0.0, show_default=True, metavar="SECONDS",
              help="Wait this long for another writer to release the store (-1: forever).")
@click.argument("more", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--warc", is_flag=True,
              help="SOURCE and MORE are WARC files (plain or gzipped): admit the outlinks of "
                   "their HTML responses (see 'seenstore links'; docs/integrations.md).")
@click.option("--parquet", is_flag=True,
              help="SOURCE is a Parquet file: admit the URLs of its --column.")
@click.option("--column", default="url", show_default=True, help="--parquet: the URL column.")
@click.option("--base-column", default=None, metavar="NAME",
              help="--parquet: a column holding each URL's base (null: none).")
@threads_option
def add_cmd(source, store_dir, base, policy_file, max_length, batch_lines, pairs, scalar, wait,
            more, warc, parquet, column, base_column, threads):
    """Admit the URLs of SOURCE (a file, or '-' for stdin) and print the new ones.

    Each URL is normalised and fingerprinted, and the store admits the keys; only
    canonical URLs never seen before (first occurrence) are printed, so the
    command drops into a crawl pipeline as a filter. Blank lines are skipped;
    rejected lines are counted on stderr. Input is processed in batches of
    --batch-lines, each committed durably before its new URLs are printed, so
    memory stays bounded. The store records the policy identity: opening it with
    another policy is refused.
    """
    from seenstore.store import SeenStore
    from seenstore.cli.integration_cmds import input_batches

    if more and not warc:
        fail("more than one SOURCE needs --warc", 2)
    if (warc or parquet) and (scalar or pairs):
        fail("--scalar/--pairs do not go with --warc/--parquet", 2)
    check_base(base)
    policy = load_policy(policy_file)
    counts: dict[str, int] = {}
    read = new = 0
    with (nullcontext(sys.stdin.buffer) if source == "-" else open(source, "rb")) as stream, \
            SeenStore.open(store_dir or default_store_dir(), create=True,
                           policy_id=policy.identity, wait=None if wait < 0 else wait,
                           threads=threads) as store:
        layout = store.layout
        # stdout is checked before every commit (a reader gone: stop, commit nothing
        # more); new URLs of a committed batch that cannot be written are saved in a
        # recovery file and reported (deliver.py): none is lost.
        out = Output("-", store.path, 0, "URLs").open()
        if scalar:
            lines = (ln for ln in _lines(stream, line_cap(max_length, pairs)) if ln)
            for chunk in _chunks(lines, batch_lines):
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
                mask = store.add(fingerprint_many(batch.urls, layout))
                fresh = [u for u, m in zip(batch.urls, mask.tolist()) if m]
                new += len(fresh)
                out.send("".join(u + "\n" for u in fresh).encode("utf-8", "surrogateescape"))
        else:  # the batch fast path: same results (tests/test_fastpath_agreement.py)
            if warc or parquet:
                seconds: dict[str, float] = {}
                for fb in input_batches((source, *more), warc=warc, parquet=parquet,
                                        column=column, base_column=base_column,
                                        batch_lines=batch_lines, policy=policy, layout=layout,
                                        max_length=max_length, base=base):
                    read += fb.n
                    new += admit_batch(fb, store, out, counts, seconds)
            else:
                keep_freed_memory()
                read, new = add_fast(stream, store, out, counts, base=base, policy=policy,
                                     max_length=max_length, batch_lines=batch_lines,
                                     pairs=pairs, threads=threads)
    rejected = sum(counts.values())
    _summary("add", counts, f"read {read}, new {new}, seen {read - new - rejected}, ")
