"""URL commands: ``normalise``, ``fingerprint`` and ``add`` (the crawl-pipeline filter).

Each reads URLs from its arguments or, with none or ``-``, one per line from stdin
(bytes; a trailing CR is dropped). ``normalise``/``fingerprint`` print one line per
input (``# rejected: REASON`` for a URL without a canonical form); ``add`` prints only
the new canonical URLs and counts rejections on stderr: it runs the library's add
pipeline (seenstore/pipeline.py) with stdout as its output (deliver.py); from a
pipe or terminal (``add -``) as a live filter (``--flush-interval``,
pipeline.add_live), from a file at the fast path's full speed. docs/normalise.md.
"""

from __future__ import annotations

import os
import stat
import sys
from contextlib import nullcontext

import click

from seenstore.errors import InvalidInputError
from seenstore.kernels import dispatch
from seenstore.url.fingerprint import fingerprint_many
from seenstore.layout import DEFAULT_LAYOUT, Layout
from seenstore.url.normalise import DEFAULT_MAX_LENGTH, check_base
from seenstore.url.fastpath import normalise_many
from seenstore.runtime.parallel import keep_freed_memory
from seenstore.url.policy import load_policy
from seenstore.pipeline import (add_batches, add_fast, add_kept, add_live, add_scalar,
                                check_input_options, chunks, input_batches, input_lines)
from seenstore.cli import (USAGE_EXIT, default_store_dir, fail, main, report_warc, store_option,
                           threads_option)
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


def _write(lines: list[str]) -> None:
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")


def _summary(command: str, counts: dict[str, int], extra: str = "") -> None:
    total = sum(counts.values())
    if total or extra:
        detail = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        rej = f"rejected {total}" + (f" ({detail})" if detail else "")
        click.echo(f"seenstore {command}: {extra}{rej}", err=True)


def _per_line(command: str, urls, base, policy_file, max_length, threads, render,
              store_dir=None) -> None:
    check_base(base)
    policy = load_policy(policy_file)
    if store_dir is not None:  # the policy the store holds (a --policy must be it)
        from seenstore.store import SeenStore
        from seenstore.store.urls import store_policy

        with SeenStore.open(store_dir, readonly=True,
                            policy=policy if policy_file else None) as store:
            policy = store_policy(store)
    counts: dict[str, int] = {}
    # a chunk of dispatch.SMALL lines or more takes the kernels (and loads them for the
    # chunks after it); smaller chunks of a long stream each took the scalar path
    # (~13 us per URL: 1e6 lines in 13 s)
    for chunk in chunks(input_lines(urls, max_length), max(_CHUNK, dispatch.SMALL)):
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
@click.option("--store", "store_dir", type=click.Path(file_okay=False), default=None,
              help="Normalise under the policy this store holds (learned rules included).")
@max_length_option
@threads_option
def normalise_cmd(urls, base, policy_file, store_dir, max_length, threads):
    """Print the canonical form of each URL (arguments, or stdin lines with none or '-').

    One output line per input line: the canonical URL, or '# rejected: REASON'
    (encoding, too-long, control-char, unparsable, scheme). Rejection counts go
    to stderr. The canonical form is the one the store fingerprints.
    """
    _per_line("normalise", urls, base, policy_file, max_length, threads, lambda u: u,
              store_dir)


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


def _live(stream) -> bool:
    """Whether stdin may pause (a pipe, socket or terminal), not a file read to its end."""
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (AttributeError, OSError, ValueError):
        return False  # no descriptor (a test's captured stdin)
    return not (stat.S_ISREG(mode) or stat.S_ISBLK(mode))


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
@click.option("--flush-interval", type=click.FloatRange(min=0), default=1.0, show_default=True,
              metavar="SECONDS",
              help="Reading '-' from a pipe or terminal: commit and print what has arrived "
                   "once its first line has waited this long and no more input is at hand, "
                   "so each URL comes out within about SECONDS (plus the commit) of going "
                   "in ('tail -f links | seenstore add - | fetcher'). 0: batches of "
                   "--batch-lines only.")
@click.argument("more", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--warc", is_flag=True,
              help="SOURCE and MORE are WARC files (plain or gzipped): admit the outlinks of "
                   "their HTML responses (see 'seenstore links'; docs/integrations.md).")
@click.option("--parquet", is_flag=True,
              help="SOURCE is a Parquet file: admit the URLs of its --column.")
@click.option("--column", default="url", show_default=True, help="--parquet: the URL column.")
@click.option("--base-column", default=None, metavar="NAME",
              help="--parquet: a column holding each URL's base (null: none).")
@click.option("--keep-urls/--no-keep-urls", "keep_urls", default=None,
              help="A new store keeps the URLs it admits (safe-rule form, about 15 bytes "
                   "each) so a policy change can rebuild its hosts (default: keep).")
@threads_option
def add_cmd(source, store_dir, base, policy_file, max_length, batch_lines, pairs, scalar, wait,
            flush_interval, more, warc, parquet, column, base_column, keep_urls, threads):
    """Admit the URLs of SOURCE (a file, or '-' for stdin) and print the new ones.

    Each URL is normalised and fingerprinted, and the store admits the keys; only
    canonical URLs never seen before (first occurrence) are printed, so the
    command drops into a crawl pipeline as a filter. Blank lines are skipped;
    rejected lines are counted on stderr. Input is processed in batches of
    --batch-lines, each committed durably before its new URLs are printed, so
    memory stays bounded; from a pipe, a batch also ends --flush-interval
    seconds after its first line when no more input is at hand. The store holds
    its policy (given with --policy when it is created; learned or set with
    'seenstore policy'): a --policy other than the store's is refused. A store
    fed URLs keeps them (safe-rule form) so a policy change can rebuild its
    hosts (docs/policy.md).

    Every committed new URL is printed or, if the reader of stdout goes away
    (also with lines still unread in the pipe), saved in an undelivered file in
    the store (exit 6); 'seenstore replay' prints those.
    """
    from seenstore.store import SeenStore
    from seenstore.store.urls import store_policy

    sources = (source, *more)
    if more and not warc:
        fail("more than one SOURCE needs --warc", USAGE_EXIT)
    if (warc or parquet) and (scalar or pairs):
        fail("--scalar/--pairs do not go with --warc/--parquet", USAGE_EXIT)
    check_base(base)
    given = load_policy(policy_file) if policy_file else None
    if warc or parquet:
        try:
            check_input_options(sources, warc=warc, parquet=parquet, base=base)
        except InvalidInputError as e:
            fail(str(e), USAGE_EXIT)
    counts: dict[str, int] = {}
    with (nullcontext(sys.stdin.buffer) if source == "-" else open(source, "rb")) as stream, \
            SeenStore.open(store_dir or default_store_dir(), create=True,
                           policy=given, wait=None if wait < 0 else wait,
                           threads=threads, keep_urls=keep_urls) as store:
        policy = store_policy(store)
        # stdout is checked before every commit (a reader gone: stop, commit nothing
        # more); new URLs of a committed batch that cannot be written are saved in a
        # recovery file and reported (deliver.py): none is lost.
        out = Output("-", store.path, 0, "URLs").open()
        kw = {"base": base, "policy": policy, "max_length": max_length,
              "batch_lines": batch_lines}
        live = source == "-" and flush_interval > 0 and _live(stream)
        # the batch fast path prints what --scalar prints (tests/system/cli/test_fastpath_cli.py)
        if live:  # a pipe that may pause: segments, each committed when it ends
            keep_freed_memory()
            read, new = add_live(stream.fileno(), store, out, counts, interval=flush_interval,
                                 scalar=scalar, pairs=pairs,
                                 **(kw if scalar else {**kw, "threads": threads}))
        elif scalar:
            read, new = add_scalar(stream, store, out, counts, pairs=pairs, **kw)
        elif warc or parquet:
            report = None
            if warc:
                from seenstore.integrations.warc import WarcReport

                report = WarcReport()
            batches = input_batches(sources, warc=warc, parquet=parquet, column=column,
                                    base_column=base_column, layout=store.layout,
                                    report=report, **kw)
            read, new = add_batches(batches, store, out, counts)
            if report is not None:
                report_warc(report, False)
        elif policy.rules and store.keep_urls is not False and not pairs:
            read, new = add_kept(stream, store, out, counts, base=base, max_length=max_length,
                                 batch_lines=batch_lines)
        else:
            keep_freed_memory()
            read, new = add_fast(stream, store, out, counts, pairs=pairs, threads=threads, **kw)
    # what is still in the pipe: waited for while the reader reads, saved if it leaves
    out.finish()
    rejected = sum(counts.values())
    _summary("add", counts, f"read {read}, new {new}, seen {read - new - rejected}, ")
