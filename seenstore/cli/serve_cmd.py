"""``seenstore serve``: one process owns a store and answers many clients over HTTP.

Opens the store as its one writer, binds ``--listen``, prints the URL it listens
on (one line on stdout) and serves until SIGTERM or SIGINT, which drain the
queued requests and exit 0. A store held by another writer, a port in use, a
missing token off loopback: one line on stderr and the documented exit code.
docs/serve.md.
"""

from __future__ import annotations

import asyncio
import errno
import os
import sys

import click

from seenstore.errors import InvalidInputError, StoreIOError
from seenstore.cli import SIZE, USAGE_EXIT, fail, main, store_option, default_store_dir

# The server's memory per URL is the product's figure (docs/serve.md, "Memory"): the
# run cache gets a fixed budget, not a share of the machine (the store's default); no
# Bloom filter unless --bloom (the admits never ask it); and glibc keeps fewer arenas
# of free memory.
SERVE_MALLOC_ARENAS = 2
# A group commit checks a few thousand keys per shard: its merge buffers (three per
# checking thread, streaming the runs in) need not be the store's 8 MiB each.
SERVE_CHUNK_KEYS = 1 << 18


@main.command("serve")
@store_option
@click.option("--listen", default="127.0.0.1:8765", show_default=True, metavar="HOST:PORT",
              help="Address to listen on (port 0: any free port; the URL is printed).")
@click.option("--token-file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="A file holding the bearer token clients must send (Authorization: "
                   "Bearer TOKEN). Required unless HOST is loopback.")
@click.option("--max-delay", type=click.FloatRange(min=0), default=5.0, show_default=True,
              metavar="MS", help="Milliseconds a request waits for others to share its "
                                 "group commit.")
@click.option("--create", is_flag=True, help="Create the store if it does not exist.")
@click.option("--policy", "policy_file", type=click.Path(dir_okay=False), default=None,
              metavar="FILE", help="URL policy file (its identity must be the store's; "
                                   "default: the policy the store holds).")
@click.option("--max-body", type=SIZE, default="64M", show_default=True,
              help="Largest request body.")
@click.option("--warm", is_flag=True,
              help="Compile or load every kernel before listening (seenstore warmup), so "
                   "small groups run compiled kernels from the first request.")
@click.option("--cache-bytes", default="64M", show_default=True, metavar="SIZE",
              help="Memory for live runs' keys (the run cache: 8 B per key cached; 0 off: "
                   "batches read the runs from disk).")
@click.option("--bloom/--no-bloom", default=False, show_default=True,
              help="Keep a Bloom filter in memory. The server admits URLs and keys by the "
                   "exact sweep, which never asks the filter; the filter only answers "
                   "/contains requests for absent keys without a sweep, at 2.4-12 B per "
                   "key of memory (docs/serve.md, \"Memory\").")
@click.option("--values", is_flag=True,
              help="The store keeps a record per URL (state, retries, status, fetched_at, "
                   "next_due, digest) for the value endpoints: with --create, a new store "
                   "is made with values; an existing store without them is refused. A "
                   "store created with values serves them without this flag "
                   "(docs/frontier.md, \"Values\").")
@click.option("--wait", type=float, default=0.0, show_default=True, metavar="SECONDS",
              help="Wait this long for another writer to release the store (-1: forever).")
def serve_cmd(store_dir, listen, token_file, max_delay, create, policy_file, max_body, warm,
              cache_bytes, bloom, values, wait):
    """Serve the store to many clients (HTTP/1.1): group commit, exactly-once answers.

    Endpoints: POST /v1/urls/add, /v1/urls/contains, /v1/keys/add, /v1/keys/contains;
    per-URL values (a store with values): POST /v1/{keys,urls}/check_update,
    /v1/{keys,urls}/get, /v1/{keys,urls}/update,
    GET /v1/values/counts, /v1/values/due, /v1/values/select; fetch evidence: POST
    /v1/evidence, /v1/learn; GET /v1/stats, /metrics, /healthz and / (a status page).
    docs/serve.md.
    """
    from seenstore.serve.server import Server, check_listen, parse_listen, serve
    from seenstore.store import SeenStore
    from seenstore.url.policy import load_policy

    try:
        host, port = parse_listen(listen)
    except InvalidInputError as e:
        fail(str(e), USAGE_EXIT, "UsageError")
    token = None
    if token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as e:
            fail(f"--token-file {token_file}: {e.strerror}", USAGE_EXIT, "UsageError")
        except UnicodeDecodeError:
            fail(f"--token-file {token_file}: not UTF-8 text", USAGE_EXIT, "UsageError")
        if not token:
            fail(f"--token-file {token_file} is empty", USAGE_EXIT, "UsageError")
    try:
        check_listen(host, token)
    except InvalidInputError as e:
        fail(str(e), USAGE_EXIT, "UsageError")
    from seenstore.runtime.parallel import limit_malloc_arenas

    limit_malloc_arenas(SERVE_MALLOC_ARENAS)  # before the store's and aiohttp's threads
    given = load_policy(policy_file) if policy_file else None
    path = store_dir or default_store_dir()
    if warm:
        from seenstore.warmup import warm_up

        warm_up(os.path.dirname(os.path.abspath(path)) or None, child=True)
    cache_bytes = 0 if cache_bytes.strip() == "0" else SIZE.convert(cache_bytes, None, None)
    store = SeenStore.open(path, create=create, policy=given,
                           wait=None if wait < 0 else wait, cache_bytes=cache_bytes,
                           bloom=bloom, values=values or None)
    store.chunk_keys = SERVE_CHUNK_KEYS
    try:
        from seenstore.store.urls import store_policy

        policy = store_policy(store)
        server = Server(store, policy, token=token, max_delay=max_delay / 1000,
                        max_body=max_body)

        def announce(url: str) -> None:
            click.echo(f"seenstore: serving {store.path} on {url}")
            sys.stdout.flush()

        try:
            asyncio.run(serve(server, host, port, announce))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                fail(f"cannot listen on {listen}: address already in use (another server "
                     f"there?)", StoreIOError.exit_code, "AddressInUse")
            if e.errno == errno.EADDRNOTAVAIL or isinstance(e, __import__("socket").gaierror):
                fail(f"cannot listen on {listen}: {e.strerror or e}", USAGE_EXIT, "UsageError")
            raise
        finally:
            server.log.close()
            server.committer.pool.shutdown(wait=True)
    finally:
        store.close()
    click.echo("seenstore: stopped; every queued request was committed and answered", err=True)
