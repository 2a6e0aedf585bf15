"""``seenstore select``, ``seenstore due`` and ``seenstore forget``: the per-URL state
of a store with values, what is due for a recrawl, and un-seeing URLs, keys or a
host (docs/frontier.md)."""

from __future__ import annotations

import json
import sys
import time

import click

from seenstore.cli import USAGE_EXIT, fail, main, store_option
from seenstore.errors import InvalidInputError

_FORMATS = ("auto", "urls", "keys", "raw")
_format_option = click.option(
    "--format", "fmt", type=click.Choice(_FORMATS), default="auto", show_default=True,
    help="urls: the kept URLs (safe-rule form); keys: one key per line, 16 hex digits; "
         "raw: little-endian uint64; auto: urls where the store keeps URLs, else keys.")
_limit_option = click.option("--limit", type=click.IntRange(min=1), default=None, metavar="N",
                             help="At most N results.")


def _open(store_dir, readonly: bool):
    from seenstore.cli.store_cmds import _open as open_store

    return open_store(store_dir, readonly=readonly, wait=0.0 if readonly else None)


def _print(store, keys, urls_of, fmt: str, as_json: bool, what: dict) -> None:
    """Print ``keys`` (or their kept URLs, ``urls_of()``) in ``fmt``; a summary on stderr."""
    if fmt == "auto":
        fmt = "urls" if store.keep_urls else "keys"
    if as_json:
        out = dict(what, count=len(keys))
        if fmt == "urls":
            out["urls"] = urls_of()
        else:
            out["keys"] = [f"{int(k):016x}" for k in keys]
        click.echo(json.dumps(out))
        return
    if fmt == "raw":
        sys.stdout.buffer.write(keys.astype("<u8").tobytes())
        sys.stdout.buffer.flush()
    elif fmt == "urls":
        for u in urls_of():
            click.echo(u)
    else:
        for k in keys.tolist():
            click.echo(f"{k:016x}")
    click.echo(f"seenstore: {len(keys):,} " + ", ".join(f"{k} {v}" for k, v in what.items()),
               err=True)


@main.command("select")
@store_option
@click.option("--state", required=True, metavar="STATE",
              help="QUEUED, IN_FLIGHT, DONE, FAILED or SKIPPED (or its number 0-4).")
@_limit_option
@_format_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def select_cmd(store_dir, state, limit, fmt, as_json):
    """Print the URLs (or keys) whose state is STATE, in key order.

    A store created with values (SeenStore.open(..., values=True)) keeps a state per
    key: a DedupStage marks what it hands out QUEUED and the crawler marks the rest
    (stage.mark). After a crash, `--state IN_FLIGHT` lists what was being fetched.
    Read-only: runs beside a writer.
    """
    from seenstore.frontier.state import parse_state

    st = parse_state(state)
    with _open(store_dir, readonly=True) as store:
        keys = store.select(st, limit=limit)
        _print(store, keys, lambda: store.select_urls(st, limit=limit), fmt, as_json,
               {"state": st.name})


@main.command("due")
@store_option
@click.option("--now", "now", type=float, default=None, metavar="UNIX_SECONDS",
              help="The time to compare next_due with (default: now).")
@_limit_option
@_format_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def due_cmd(store_dir, now, limit, fmt, as_json):
    """Print the URLs (or keys) due for a recrawl: next_due set and not after --now,
    oldest due first.

    A refresh policy sets next_due (store.update(keys, next_due=...)); rediscovering
    a link never does. Read-only: runs beside a writer.
    """
    from seenstore.store.values import check_now

    try:
        at = check_now(time.time() if now is None else now)
    except InvalidInputError as e:
        fail(str(e).replace("due: now", "--now"), USAGE_EXIT, "UsageError")
    with _open(store_dir, readonly=True) as store:
        keys = store.due(at, limit=limit)
        _print(store, keys, lambda: store.due_urls(at, limit=limit), fmt, as_json,
               {"due at": at})


@main.command("forget")
@store_option
@click.argument("urls", nargs=-1)
@click.option("--keys", "keys_file", type=click.Path(dir_okay=False, allow_dash=True),
              default=None, metavar="FILE",
              help="Forget the keys in FILE (little-endian uint64; - for stdin).")
@click.option("--host", "hosts", multiple=True, metavar="HOST",
              help="Forget every URL of HOST (needs kept URLs; repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def forget_cmd(store_dir, urls, keys_file, hosts, as_json):
    """Un-see URLs (arguments, or one per line on stdin with -), keys (--keys FILE)
    or whole hosts (--host): offered again, they are new.

    Normalised under the store's policy; a URL or key the store does not hold is
    ignored. The keys leave the store's count at once and its runs at the next
    compaction. One commit per call.
    """
    import numpy as np

    from seenstore.keys.batch import read_batch_file
    from seenstore.store.urls import store_normalised

    if not urls and keys_file is None and not hosts:
        raise click.UsageError("give URLs, - (URLs on stdin), --keys FILE or --host HOST")
    if urls == ("-",):
        urls = tuple(line.rstrip("\r\n") for line in sys.stdin if line.strip())
    keys = np.empty(0, np.uint64)
    if keys_file is not None:  # a batch file's checks: missing, a directory, length
        keys = read_batch_file("/dev/stdin" if keys_file == "-" else keys_file)
    out = {"forgotten": 0, "rejected": 0, "hosts": {}}
    with _open(store_dir, readonly=False) as store:
        if urls:
            nz = store_normalised(store, list(urls))
            out["rejected"] = len(nz.rejected)
            keys = np.concatenate([keys, nz.keys])
        if len(keys):
            out["forgotten"] += store.forget(keys)
        for h in hosts:
            n = store.drop_host(h)
            out["hosts"][h] = n
            out["forgotten"] += n
        out["keys"] = len(store)
    if as_json:
        click.echo(json.dumps(out))
    else:
        click.echo(f"forgot {out['forgotten']:,} keys ({out['rejected']} URLs rejected); "
                   f"the store holds {out['keys']:,}")
