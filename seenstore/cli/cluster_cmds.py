"""``seenstore cluster ...``: create, inspect, verify and split a sharded store on Ray
(docs/cluster.md). Needs the ``[cluster]`` extra."""

from __future__ import annotations

import json

import click

from seenstore.cli import main

ray_address_option = click.option(
    "--ray-address", default=None,
    help="Ray cluster to join (default: the running local one, else start one).")


@main.group()
def cluster() -> None:
    """A store sharded over Ray actors (seenstore.cluster.ShardedStore)."""


@cluster.command("create")
@click.argument("root", type=click.Path(file_okay=False))
@click.option("--shards", type=int, required=True, help="Number of shards (a power of 2).")
@ray_address_option
def create(root, shards, ray_address):
    """Create a sharded store at ROOT (its CLUSTER file and shard directories)."""
    from seenstore.cluster import ShardedStore

    with ShardedStore.open(root, shards=shards, create=True, ray_address=ray_address) as st:
        click.echo(f"created {root}: {len(st.actors)} shards")


@cluster.command("stats")
@click.argument("root", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@ray_address_option
def stats(root, as_json, ray_address):
    """Keys per shard and in total, where each shard lives."""
    from seenstore.cluster import ShardedStore

    with ShardedStore.open(root, ray_address=ray_address) as st:
        s = st.stats()
    if as_json:
        click.echo(json.dumps(s))
        return
    click.echo(f"{root}: {s['shards']} shards, {s['keys']:,} keys, "
               f"{s['bytes_on_disk']:,} bytes on disk")
    for i, p in enumerate(s["per_shard"]):
        click.echo(f"  shard {i}: {p['keys']:,} keys  {p['path']}  (node {p['node_ip']})")


@cluster.command("verify")
@click.argument("root", type=click.Path(file_okay=False))
@ray_address_option
def verify(root, ray_address):
    """Full check of every shard (exit 4 on any fault)."""
    from seenstore.cluster import ShardedStore

    with ShardedStore.open(root, ray_address=ray_address) as st:
        v = st.verify()
    click.echo(f"OK: {v['keys']:,} keys in {v['shards']} shards")


@cluster.command("split")
@click.argument("root", type=click.Path(file_okay=False))
@ray_address_option
def split_cmd(root, ray_address):
    """Grow the store at ROOT from N to 2N shards (each key range cut in two).

    Crash-safe: the old shards are not modified, and CLUSTER is replaced atomically
    once every new shard is written and counted. No client may have it open."""
    from seenstore.cluster import split

    res = split(root, ray_address=ray_address)
    click.echo(f"split {root}: {res['shards_before']} -> {res['shards_after']} shards, "
               f"{res['keys']:,} keys")
