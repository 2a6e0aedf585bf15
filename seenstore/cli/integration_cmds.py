"""Integration and inspection commands: ``links`` (WARC outlinks), ``check`` (seen?
without admitting), ``export`` (stored keys as raw or Parquet), ``dump-run`` (a run
file's header and first keys). ``seenstore add --warc/--parquet`` is url_cmds.py's
(its input: pipeline.input_batches). docs/integrations.md.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator

import click
import numpy as np

from seenstore.errors import InvalidInputError
from seenstore.layout import Layout
from seenstore.cli import USAGE_EXIT, default_store_dir, fail, main, report_warc, store_option

_KEY_CHUNK = 1 << 20  # keys per write when streaming keys out


def _fail_usage(message: str):
    fail(message, USAGE_EXIT)  # a one-line usage error, exit 2


# ------------------------------------------------------------------------- links
@main.command("links")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--no-flag", is_flag=True,
              help="Print exactly two columns (nofollow links too, unmarked): the "
                   "'BASE<TAB>HREF' input of 'seenstore add --pairs'.")
@click.option("--follow-only", is_flag=True, help="Leave out nofollow links.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per link ({base, href, nofollow}), then none on stdout "
                   "for the summary (it goes to stderr as JSON).")
def links_cmd(files, no_flag, follow_only, as_json):
    """Print the outlinks of every HTML response record of FILES (WARC, plain or
    gzipped) as 'BASE<TAB>HREF' lines, with a third column 'nofollow' for links
    marked rel=nofollow (or on a page with meta robots nofollow).

    BASE is the record's target URI resolved with the page's <base href>; links
    come from a/area/link href and iframe src. Non-HTML records are skipped;
    truncated and damaged records are counted, reading goes on, and the counts
    are printed on stderr.
    """
    from seenstore.integrations.warc import WarcReport, iter_links

    report = WarcReport()
    out = sys.stdout
    buf: list[str] = []
    for link in iter_links(files, report):
        if follow_only and link.nofollow:
            continue
        if as_json:
            buf.append(json.dumps(link._asdict()))
        elif link.nofollow and not no_flag:
            buf.append(f"{link.base}\t{link.href}\tnofollow")
        else:
            buf.append(f"{link.base}\t{link.href}")
        if len(buf) >= 65536:
            out.write("\n".join(buf) + "\n")
            buf = []
    if buf:
        out.write("\n".join(buf) + "\n")
    out.flush()
    report_warc(report, as_json)


# ------------------------------------------------------------------------- check
@main.command("check")
@click.argument("urls", nargs=-1)
@store_option
@click.option("--keys", "keys_file", type=click.Path(dir_okay=False, allow_dash=True),
              default=None, metavar="FILE",
              help="Check raw fingerprints instead: FILE of little-endian uint64 keys "
                   "(the format of 'seenstore merge'), '-' for stdin.")
@click.option("--base", default=None, metavar="URL", help="Resolve relative URLs against URL.")
@click.option("--policy", "policy_file", type=click.Path(dir_okay=False), default=None,
              metavar="FILE", help="The store's policy TOML (default: the policy the store holds).")
@click.option("--seen-only", is_flag=True, help="Print only the items already seen.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per item ({input, canonical, key, seen} or {input, "
                   "rejected}); the summary on stderr as JSON.")
def check_cmd(urls, store_dir, keys_file, base, policy_file, seen_only, as_json):
    """Say which URLS (arguments, or stdin lines with none or '-') are already in
    the store, without changing it.

    Prints 'seen<TAB>CANONICAL' or 'new<TAB>CANONICAL' per input ('rejected<TAB>INPUT
    <TAB>REASON' for a URL without a canonical form) and a count on stderr. Opens
    the store read-only, so it runs beside a writer. Exit code 0 either way.
    """
    from seenstore.store import SeenStore

    counts = {"seen": 0, "new": 0, "rejected": 0}
    if keys_file is not None:
        if urls:
            _fail_usage("give URLS or --keys FILE, not both")
        with SeenStore.open(store_dir or default_store_dir(), readonly=True) as store:
            for keys in _key_chunks(keys_file):
                seen = store.contains(keys)
                _emit_keys(keys, seen, counts, seen_only, as_json)
    else:
        _check_urls(urls, store_dir, base, policy_file, counts, seen_only, as_json)
    if as_json:
        click.echo(json.dumps(counts), err=True)
    else:
        click.echo(f"seenstore check: {counts['seen']} seen, {counts['new']} new, "
                   f"{counts['rejected']} rejected", err=True)


def _key_chunks(path: str) -> Iterator[np.ndarray]:
    """The keys of a raw uint64 file (or stdin), a chunk at a time."""
    f = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    try:
        while data := f.read(8 * _KEY_CHUNK):
            while len(data) % 8:
                more = f.read(8 - len(data) % 8)
                if not more:
                    raise InvalidInputError(
                        f"{path}: length is not a multiple of 8 (raw uint64 keys)")
                data += more
            yield np.frombuffer(data, dtype="<u8").astype(np.uint64)
    finally:
        if f is not sys.stdin.buffer:
            f.close()


def _emit_keys(keys, seen, counts, seen_only, as_json) -> None:
    lines = []
    for k, s in zip(keys.tolist(), seen.tolist()):
        counts["seen" if s else "new"] += 1
        if seen_only and not s:
            continue
        lines.append(json.dumps({"key": f"{k:016x}", "seen": s}) if as_json
                     else f"{'seen' if s else 'new'}\t{k:016x}")
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")


def _check_urls(urls, store_dir, base, policy_file, counts, seen_only, as_json) -> None:
    from seenstore.url.fastpath import normalise_urls
    from seenstore.url.normalise import DEFAULT_MAX_LENGTH, check_base
    from seenstore.url.policy import load_policy
    from seenstore.store import SeenStore
    from seenstore.pipeline import chunks, input_lines

    from seenstore.store.urls import store_policy

    check_base(base)
    given = load_policy(policy_file) if policy_file else None
    with SeenStore.open(store_dir or default_store_dir(), readonly=True,
                        policy=given) as store:
        policy = store_policy(store)
        for chunk in chunks(input_lines(urls, DEFAULT_MAX_LENGTH), 65536):
            fb = normalise_urls(chunk, base, policy, store.layout)
            seen = store.contains(fb.keys).tolist()
            out: list[str] = [""] * len(chunk)
            for i, reason in fb.rejected:
                counts["rejected"] += 1
                raw = chunk[i] if isinstance(chunk[i], str) else chunk[i].decode(
                    "utf-8", "backslashreplace")
                out[i] = (json.dumps({"input": raw, "rejected": reason.value}) if as_json
                          else f"rejected\t{raw}\t{reason.value}")
            for i, url, key, s in zip(fb.positions.tolist(), fb.urls, fb.keys.tolist(), seen):
                counts["seen" if s else "new"] += 1
                raw = chunk[i] if isinstance(chunk[i], str) else chunk[i].decode(
                    "utf-8", "backslashreplace")
                out[i] = (json.dumps({"input": raw, "canonical": url, "key": f"{key:016x}",
                                      "seen": s}) if as_json
                          else f"{'seen' if s else 'new'}\t{url}")
            if seen_only:
                seen_at = set(np.asarray(fb.positions)[np.asarray(seen, dtype=bool)].tolist())
                out = [line for i, line in enumerate(out) if i in seen_at]
            if out:
                sys.stdout.write("\n".join(out) + "\n")


# ------------------------------------------------------------------------ export
def host_range(host: str, layout: Layout) -> tuple[int, int]:
    """[lo, hi) of the keys whose top ``layout.host_bits`` bits are ``host``'s hash
    (hosts whose hashes share those bits share the range)."""
    from seenstore.url.fingerprint import fingerprint
    from seenstore.url.normalise import normalise

    if layout.host_bits == 0:
        raise InvalidInputError("this store's layout has no host bits (H = 0): "
                                "--host cannot select a range")
    try:
        canonical = normalise(f"http://{host}/")
    except InvalidInputError:
        raise InvalidInputError(f"--host {host!r} is not a host name") from None
    if canonical.split("/", 3)[3] or "@" in host:
        raise InvalidInputError(f"--host {host!r} is not a host name")
    lo = fingerprint(canonical, layout) >> layout.url_bits << layout.url_bits
    return lo, lo + (1 << layout.url_bits)


@main.command("export")
@store_option
@click.option("--format", "fmt", type=click.Choice(["raw", "parquet"]), default="raw",
              show_default=True,
              help="raw: little-endian uint64 keys (the 'merge' batch format); parquet: "
                   "one uint64 column 'key'.")
@click.option("--host", default=None, metavar="HOST",
              help="Only the keys of HOST's range (its host-hash bits; hosts sharing "
                   "them share the range).")
@click.option("-o", "--output", default="-", type=click.Path(dir_okay=False, allow_dash=True),
              help="Output file ('-': stdout).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary on stderr as JSON.")
def export_cmd(store_dir, fmt, host, output, as_json):
    """Stream the stored keys, ascending (all, or one host's range), without
    loading them into memory. Opens the store read-only.

    Every key comes from checked bytes (a run's page checksums, a compressed
    block's, a format 1.0 run checked whole first): damage stops the export
    with a one-line error naming the file and page (exit 4). -o FILE then
    leaves no file (it is written beside and renamed when complete); on
    stdout the keys before the damaged page have been written.
    """
    from seenstore.store import SeenStore

    if output == "-" and sys.stdout.isatty():
        _fail_usage("refusing to write binary keys to a terminal; use -o FILE or a pipe")
    n = 0
    # a file appears complete or not at all: written beside, renamed when every key
    # read has passed its checks (a damaged run: exit 4, no file)
    target = output if output == "-" else os.path.join(
        os.path.dirname(os.path.abspath(output)), f".{os.path.basename(output)}.{os.getpid()}.tmp")
    try:
        with SeenStore.open(store_dir or default_store_dir(), readonly=True) as store:
            lo, hi = host_range(host, store.layout) if host else (0, 1 << 64)
            chunks = store.iter_keys(lo, hi)  # every page checked before its keys are used
            if fmt == "raw":
                f = sys.stdout.buffer if target == "-" else open(target, "wb")  # noqa: SIM115
                try:
                    for c in chunks:
                        f.write(np.ascontiguousarray(c, dtype="<u8").tobytes())
                        n += len(c)
                    f.flush()
                finally:
                    if f is not sys.stdout.buffer:
                        f.close()
            else:
                n = _write_parquet(chunks, target)
        if target != "-":
            os.replace(target, output)
    finally:
        if target != "-" and os.path.exists(target):
            os.unlink(target)
    summary = {"keys": n, "format": fmt, "host": host,
               "range": [f"{lo:016x}", f"{hi - 1:016x}"]}
    if as_json:
        click.echo(json.dumps(summary), err=True)
    else:
        click.echo(f"seenstore export: {n} keys ({fmt})" + (f", host range "
                   f"{summary['range'][0]}..{summary['range'][1]}" if host else ""), err=True)


def _write_parquet(chunks, output: str) -> int:
    from seenstore.integrations.arrow import require_pyarrow

    pa = require_pyarrow()
    import pyarrow.parquet as pq

    schema = pa.schema([pa.field("key", pa.uint64())])
    sink = pa.output_stream(sys.stdout.buffer) if output == "-" else output
    n = 0
    with pq.ParquetWriter(sink, schema) as w:
        for c in chunks:
            w.write_table(pa.table({"key": pa.array(np.asarray(c, dtype=np.uint64))}))
            n += len(c)
        if not n:
            w.write_table(schema.empty_table())
    return n


# ---------------------------------------------------------------------- dump-run
@main.command("dump-run")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-n", "--keys", "n_keys", type=click.IntRange(min=0), default=10,
              show_default=True, help="How many keys to show from the start.")
@click.option("--verify", is_flag=True, help="Also check the body checksum and order.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def dump_run_cmd(file, n_keys, verify, as_json):
    """Show a run file's header (format version, key count, layout, shard, policy
    digest, body checksum; for a raw 1.1 run its pages, for a compressed 2.x run
    its codec, block size and blocks) and its first keys. The header is checked,
    and the pages or blocks the keys shown come from (a raw 1.0 run, which has no
    page checksums, is checked whole before its keys are shown); a foreign or
    damaged file is refused (exit 4)."""
    from seenstore.errors import StoreNotFoundError
    from seenstore.store.runs.codec import open_run
    from seenstore.store.runs import live as runs_live

    if not os.path.isfile(file):
        raise StoreNotFoundError(f"no such file: {file}")
    reader = open_run(file)
    try:
        h = reader.header
        compressed = runs_live.compressed(reader)
        if verify or (n_keys and h.count and not compressed and not reader.paged):
            reader.verify()
            verify = True
        first = [f"{k:016x}" for k in _first_keys(reader, n_keys).tolist()]
    finally:
        reader.close()
    doc = {"file": file, "format": f"{h.major}.{h.minor}", "count": h.count,
           "host_bits": h.host_bits, "shard_bits": h.shard_bits, "shard": h.shard,
           "policy_digest": h.policy_digest.hex(), "body_checksum": f"{h.body_checksum:016x}"}
    if not compressed and h.paged:
        doc.update(page_keys=h.page_keys, pages=h.pages)
    if compressed:
        size = os.path.getsize(file)
        doc.update(codec="rice", block_keys=h.block_keys, blocks=h.n_blocks, file_bytes=size,
                   bytes_per_key=round(size / h.count, 3) if h.count else None)
    doc.update(verified=verify, first_keys=first)
    if as_json:
        click.echo(json.dumps(doc))
        return
    for k, v in doc.items():
        if k != "first_keys":
            click.echo(f"{k:>14}: {v}")
    for k in first:
        click.echo(k)


def _first_keys(reader, n: int) -> np.ndarray:
    """The first ``n`` keys of a run: a view of a raw run's memory map (a 1.1 run's
    pages checked first), or the first decoded chunks of a compressed one (each
    block checked; never the whole run inflated)."""
    from seenstore.store.runs import live as runs_live

    if not runs_live.compressed(reader):
        n = min(n, reader.count)
        if reader.paged and n:
            reader.check_pages(np.arange(0, (n - 1) // reader.header.page_keys + 1))
        return np.asarray(reader.keys[:n])
    out = np.empty(min(n, reader.count), dtype=np.uint64)
    buf = np.empty(runs_live.min_buffer_keys(reader), dtype=np.uint64)
    at = 0
    if len(out):
        for got in reader.chunks(buf):
            take = min(got, len(out) - at)
            out[at:at + take] = buf[:take]
            at += take
            if at == len(out):
                break
    return out


__all__ = ["links_cmd", "check_cmd", "export_cmd", "dump_run_cmd", "host_range"]
