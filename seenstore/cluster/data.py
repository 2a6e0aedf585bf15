"""A DedupStage over a ShardedStore, and a Ray Data entry point.

``dedup_stage(store)`` is ``DedupStage.open`` for a ShardedStore: the stage keeps its
write-ahead log in the client's directory (``store.path``) and asks the shards for
Bloom answers and merges. ``dedup(dataset, column="url", store=...)`` returns the
dataset of rows whose URL was never seen: each block is normalised and fingerprinted
by the fast path inside ``map_batches`` and admitted by the shard actors straight
from the worker that holds it (one batch id per block; docs/cluster.md).
"""

from __future__ import annotations

import numpy as np

from seenstore.errors import InvalidInputError, MismatchError
from seenstore.url.fastpath import normalise_urls
from seenstore.url.policy import DEFAULT_POLICY, Policy
from seenstore.stage import DEFAULT_BUDGET_BYTES, DEFAULT_CACHE_KEYS, DedupStage
from seenstore.store.wal import replay_wal
from seenstore.store.wal import SYNC_ALWAYS
from seenstore.cluster.sharded import ShardedStore


def dedup_stage(store: ShardedStore, *, mode: str = "exact",
                budget_bytes: int = DEFAULT_BUDGET_BYTES, cache_keys: int = DEFAULT_CACHE_KEYS,
                host_cap: int | None = None, wal_sync: str | float = SYNC_ALWAYS,
                policy: Policy | None = None) -> DedupStage:
    """A DedupStage (offer/poll/flush, asyncio) on top of an open ShardedStore; the
    stage owns it from here (``stage.close()`` closes it). Arguments as
    ``DedupStage.open``; the WAL lives in ``store.path`` (the cluster root, or the
    ``wal_dir`` the store was opened with)."""
    if store.path is None:
        raise InvalidInputError("a DedupStage needs a local directory for its write-ahead "
                                "log: open the ShardedStore from a cluster root or with wal_dir=")
    if policy is not None and policy.identity != store.policy_id:
        raise MismatchError(f"cluster was built with policy {store.policy_id!r}, not "
                            f"{policy.identity!r}")
    if not isinstance(budget_bytes, (int, np.integer)) or budget_bytes < 8:
        raise InvalidInputError(f"budget_bytes must be an int >= 8, got {budget_bytes!r}")
    replay = replay_wal(store)
    return DedupStage(store, mode=mode, budget_bytes=int(budget_bytes),
                      cache_keys=int(cache_keys), host_cap=host_cap, wal_sync=wal_sync,
                      policy=policy, replay=replay)


def dedup(dataset, column: str = "url", store: ShardedStore | None = None, *,
          base: str | None = None, policy: Policy | None = None,
          batch_size: int | None = 65536):
    """The rows of ``dataset`` (a ``ray.data.Dataset``) whose ``column`` URL was never
    admitted to ``store`` before, each URL once (first occurrence wins); rows whose URL
    has no canonical form are dropped. Lazy, as Ray Data is: the URLs are admitted
    when the result is consumed, and each row is returned by exactly one consumption
    (a second pass over the result finds nothing new)."""
    if store is None:
        raise InvalidInputError("dedup needs store=ShardedStore")
    policy = policy or DEFAULT_POLICY
    if policy.identity != store.policy_id:
        raise MismatchError(f"cluster was built with policy {store.policy_id!r}, not "
                            f"{policy.identity!r}")
    layout = store.layout

    def admit(batch: dict) -> dict:
        urls = batch[column]
        fb = normalise_urls([u.decode() if isinstance(u, bytes) else str(u) for u in urls],
                            base, policy, layout)
        keep = np.asarray(fb.positions)[store.add(fb.keys)] if len(fb.keys) else \
            np.empty(0, dtype=np.int64)
        return {name: np.asarray(col)[keep] for name, col in batch.items()}

    return dataset.map_batches(admit, batch_format="numpy", batch_size=batch_size)


__all__ = ["dedup", "dedup_stage"]
