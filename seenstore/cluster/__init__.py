"""seenstore on a Ray cluster (optional extra ``[cluster]``): shards as actors.

``ShardedStore`` has a SeenStore's calls over N shard actors, each the single
writer of one directory on its node; batches are exactly-once by id; ``split``
grows N to 2N; ``dedup_stage`` runs a DedupStage on top; ``dedup`` filters a Ray
Dataset to its new URLs. Ray is imported only when a cluster is opened.
See docs/cluster.md.
"""

from seenstore.cluster.sharded import ShardedStore

__all__ = ["ShardedStore", "dedup", "dedup_stage", "split"]


def __getattr__(name):  # the Ray Data entry point and the stage load on first use
    if name in ("dedup", "dedup_stage"):
        from seenstore.cluster import data

        return getattr(data, name)
    if name == "split":
        from seenstore.cluster.grow import split

        return split
    raise AttributeError(name)
