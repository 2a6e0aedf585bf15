"""Grow a cluster from N to 2N shards by splitting every shard's key range in two.

Shards are ranges of the top key bits, so shard i of N (range [lo, hi) of the top
8 bits; equal ranges: top b bits = i) becomes shards 2i and 2i+1 of 2N, its
range's halves [lo, mid) and [mid, hi), mid = (lo + hi) // 2. The procedure (docs/cluster.md,
"Splitting") never modifies a live shard, and has one commit point:
1. each shard actor (on its own node, holding its store's lock) writes its two
   children beside its directory (``shard-JJJJ-of-2N``; leftovers of an earlier
   attempt are removed first) from its store's keys in ascending order
   (``ShardActor.split_into``), and checks that the children's key counts add up
   to its own;
2. the client replaces ``CLUSTER`` atomically with the children (commit point);
3. the parents' directories are removed.
A crash before step 2 leaves the old cluster intact (the next split starts over);
after it, the new one is live and the old directories are only disk space (removed
by step 3 when the split is run again, or by hand).
"""

from __future__ import annotations

import os
import shutil

from seenstore.cluster.ranges import split_range
from seenstore.cluster.sharded import (ShardedStore, cluster_bits, ensure_ray, node_id,
                                       read_cluster, shard_dir_name, write_cluster)

DEFAULT_CHUNK_KEYS = 1 << 25  # 256 MiB of keys per child commit


def child_dirs(parent_dir: str, index: int, n: int) -> list[str]:
    """The two directories shard ``index`` of ``n`` splits into, beside it."""
    up = os.path.dirname(os.path.abspath(parent_dir))
    return [os.path.join(up, shard_dir_name(2 * index + j, 2 * n)) for j in (0, 1)]


def _remove_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def split(root: str, ray_address: str | None = None, chunk_keys: int = DEFAULT_CHUNK_KEYS,
          sync: bool = True) -> dict:
    """Split every shard of the cluster at ``root`` in two (N -> 2N); see the module
    docstring for the crash-safe procedure. ``chunk_keys``: keys per commit of a
    child (each an ``add_sorted``). Requires: no client has the cluster open (each
    shard's lock is taken). Returns figures: shards before and after, keys."""
    ray = ensure_ray(ray_address)
    doc = read_cluster(root)
    n = len(doc["shards"])
    cluster_bits(2 * n)
    for s in doc["shards"]:  # every range can be halved: refused before anything is written
        split_range(s["range"])
    children = [child_dirs(s["dir"], i, n) for i, s in enumerate(doc["shards"])]
    with ShardedStore.open(root, bloom=False, sync=sync) as st:
        counts = st._call(range(n), lambda i: st.actors[i].split_into.remote(
            children[i], chunk_keys))
        total = sum(int(c["parent"]) for c in counts.values())
    new_doc = dict(doc, epoch=doc.get("epoch", 0) + 1, shards=[
        {"dir": children[i][j], "node_ip": doc["shards"][i].get("node_ip"),
         "range": counts[i]["ranges"][j]} for i in range(n) for j in (0, 1)])
    write_cluster(root, new_doc, sync)  # the commit point
    remove = ray.remote(num_cpus=0)(_remove_tree)
    ray.get([_on_node(ray, remove, s.get("node_ip")).remote(s["dir"]) for s in doc["shards"]])
    return {"shards_before": n, "shards_after": 2 * n, "keys": total,
            "per_shard_keys": [int(k) for i in range(n) for k in counts[i]["children"]]}


def _on_node(ray, fn, node_ip: str | None):
    """``fn`` (a Ray remote function) to run on the node at ``node_ip`` if it is live."""
    node = node_id(ray, node_ip) if node_ip else None
    if node is None:
        return fn
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return fn.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))


__all__ = ["split", "child_dirs"]
