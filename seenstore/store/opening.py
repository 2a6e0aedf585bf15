"""Opening a store: the directory checked (a store, an empty folder to create one
in, or refused), the writer's lock taken, a new store's first manifest written,
leftovers of an interrupted batch removed, the live runs opened, the Bloom filter
loaded or rebuilt, and the WAL a DedupStage left replayed. ``SeenStore.open``'s
body (its docstring has the contract); nothing here outlives the call but the
store it returns (a failure releases the lock).
"""

from __future__ import annotations

import os

from seenstore.bloom.sizing import check_fpr
from seenstore.errors import InvalidInputError, NotAStoreError, StoreNotFoundError
from seenstore.layout import DEFAULT_LAYOUT
from seenstore.store import commit as commitmod, manifest, wal as walmod
from seenstore.store.files import BLOOM_NAME, io_error, remove_leftovers, stray_files
from seenstore.store.lock import WriterLock
from seenstore.store.runcache import check_budget, default_budget
from seenstore.store.runs import live as runsmod

DEFAULT_POLICY_ID = "safe-v1"
MODES = ("exact", "approximate")
DEFAULT_SHARD_BITS = 4
PREFAULT_MIN_BYTES = 4 << 20  # smaller new filters fault in within the first insert
BLOOM_FPR_FIELD = "bloom_fpr"  # the manifest's record of the store's Bloom target


def open_store(cls, path: str, create: bool, *, readonly: bool, layout, policy_id,
               shard_bits, wait, mode: str, bloom: bool, bloom_fpr: float | None, bloom_capacity,
               sync: bool, run_format: int | None, threads, cache_bytes, policy=None,
               keep_urls=None, values=None):
    """``cls.open``'s body (facade.py ``SeenStore.open``: its docstring)."""
    if policy is not None:
        if policy_id is not None and policy_id != policy.identity:
            raise InvalidInputError(f"policy_id {policy_id!r} is not policy's identity "
                                    f"{policy.identity!r}")
        policy_id = policy.identity
    if keep_urls not in (None, True, False):
        raise InvalidInputError(f"keep_urls must be True, False or None, got {keep_urls!r}")
    if values not in (None, True, False):
        raise InvalidInputError(f"values must be True, False or None, got {values!r}")
    if bloom_fpr is not None:
        bloom_fpr = check_fpr(bloom_fpr, "bloom_fpr")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise InvalidInputError(f"threads must be a whole number >= 1, got {threads!r}")
    check_budget(cache_bytes)
    path = os.path.abspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotAStoreError(f"{path}: is a file, not a store directory")
    if not os.path.exists(os.path.join(path, manifest.NAME)):
        if not create:
            if os.path.isdir(path):
                raise NotAStoreError(f"{path}: not a seenstore store (no {manifest.NAME})")
            raise StoreNotFoundError(f"{path}: no store here (create one with create=True)")
        if readonly:
            raise StoreNotFoundError(f"{path}: no store here to open read-only")
        stray = stray_files(path)
        if stray:
            raise NotAStoreError(
                f"{path}: directory is not empty and holds no store ({stray[0]!r} ...)")
    if mode not in MODES:
        raise InvalidInputError(f"mode must be one of {MODES}, got {mode!r}")
    if readonly:
        store = cls(path, manifest.read(path), None)
        store._check_identity(layout, policy_id, None, values)
        store._adopt_settings(policy, keep_urls)
        store._live.refresh(force=True)
        store.threads = threads or store.threads
        return store
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise io_error(e, f"{path}: cannot create store directory") from e
    lock = WriterLock(path, wait)
    try:
        if not os.path.exists(os.path.join(path, manifest.NAME)):
            fields = {} if keep_urls is None else {"keep_urls": keep_urls}
            if values:
                fields["values"] = True
            if bloom_fpr is not None:  # the store's Bloom target from now on
                fields[BLOOM_FPR_FIELD] = bloom_fpr
            if policy is not None and policy.identity != DEFAULT_POLICY_ID:
                fields["policy"] = {"version": 0, "toml": policy.to_toml(), "hosts": {}}
            commitmod.create(path, layout or DEFAULT_LAYOUT, policy_id or DEFAULT_POLICY_ID,
                             DEFAULT_SHARD_BITS if shard_bits is None else shard_bits, sync,
                             fields)
        store = cls(path, manifest.read(path), lock, mode, run_format)
        store._live.sync = sync
        store.threads = threads or store.threads
        store.cache_bytes = default_budget() if cache_bytes is None else cache_bytes
        store._check_identity(layout, policy_id, shard_bits, values)
        store._adopt_settings(policy, keep_urls)
        # the Bloom target: the one given (recorded with the next commit when it is
        # another), else the store's recorded one, else the saved filter's (keeper)
        have = store._doc.get(BLOOM_FPR_FIELD)
        if bloom_fpr is not None and bloom_fpr != have:
            store._batch_fields = {**(store._batch_fields or {}), BLOOM_FPR_FIELD: bloom_fpr}
        bloom_fpr = have if bloom_fpr is None else bloom_fpr
        remove_leftovers(path, manifest.named_files(store._doc))
        store._live.open_runs()
        if bloom or mode == "approximate":
            readers = store._all_readers()
            store._keeper.open(os.path.join(path, BLOOM_NAME), store.generation,
                               store._binding(), store._live.n_keys(), bloom_fpr, bloom_capacity,
                               lambda m: runsmod.spread_samples(readers, m),
                               lambda m: runsmod.iter_keys(readers, m))
            store._keeper.start_prefault(PREFAULT_MIN_BYTES)
        store.wal_replay = walmod.replay_wal(store)
        return store
    except BaseException:
        lock.release()
        raise
