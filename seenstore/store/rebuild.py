"""Rebuild: a new policy applied to the keys of the hosts it changes, from the URLs
the store kept (docs/policy.md, "Rebuild"; store/kepturls.py).

For the hosts named (or every host), the keys whose host part is the hash of one of
the host's spellings (``h``, ``www.h``, with and without a trailing dot) are
removed, and every kept URL whose safe-rule key has such a host part is normalised
under the new policy and admitted. Only the shards those keys live in are
rewritten (each into one run), and the new runs, the new policy and the counters
are one commit: after a crash the store holds the old policy with the old keys or
the new policy with the new keys. Afterwards the store answers as a fresh store fed
the kept URLs under the new policy would, for those hosts. Keys admitted without a
URL (``add``) whose host part is rebuilt are forgotten: offered again, they are new.

Requires (the facade holds them): the writer's mutex, the compaction joined, the
Bloom filter's deferred insert settled. Cost: the touched shards' keys are read
and written once, and held in memory one shard at a time.
"""

from __future__ import annotations

import os
import time

import numpy as np
import xxhash

from seenstore.errors import PolicyError
from seenstore.store import kepturls
from seenstore.store.urls import normalised
from seenstore.store.files import fault, io_error, run_name
from seenstore.store import check, manifest, tombstones
from seenstore.store.runs import live as runsmod
from seenstore.store.runs.format import policy_digest
from seenstore.url.fingerprint import fingerprint_many
from seenstore.url.policy import Policy


def spellings(host: str) -> set[str]:
    """The hosts whose keys a rule for ``host`` (a ``host_key``) can move."""
    return {host, "www." + host, host + ".", "www." + host + "."}


def host_prefixes(hosts, url_bits: int) -> np.ndarray:
    """Sorted unique key host parts (key >> url_bits) of every spelling of ``hosts``."""
    vals = {xxhash.xxh3_64_intdigest(s.encode("utf-8")) >> url_bits
            for h in hosts for s in spellings(h)}
    return np.array(sorted(vals), dtype=np.uint64)


def check_can_rebuild(store) -> None:
    """Refuse a policy change the store could not apply (it keeps no URLs)."""
    if store.keep_urls is not True and len(store):
        raise PolicyError(
            f"{store.path}: this store keeps no URLs (created with keep_urls=False, or "
            "first fed keys), so its keys cannot be remade under another policy; build a "
            "new store with the new policy (or one that keeps URLs)")


def rebuild(store, policy: Policy, hosts, fields: dict, progress=None) -> dict:
    """Apply ``policy`` to ``hosts`` (host_keys; None: every host) and commit it with
    manifest ``fields`` (the new policy). Returns figures."""
    t0 = time.perf_counter()
    layout = store.layout
    ub = np.uint64(layout.url_bits)
    prefixes = None if hosts is None else host_prefixes(hosts, layout.url_bits)
    urls = _kept_urls(store, prefixes, layout)
    under_new = normalised(urls, None, policy, layout, store.threads)
    new_keys = np.unique(under_new.keys)
    sb = store.shard_bits
    shard_of = (lambda k: (k >> np.uint64(64 - sb)).astype(np.int64)) if sb else (
        lambda k: np.zeros(len(k), dtype=np.int64))
    if prefixes is None:
        shards = set(range(1 << sb))
    else:
        shards = set(shard_of(prefixes << ub).tolist()) | set(shard_of(new_keys).tolist())
    doc, runs = store._snapshot()
    gen = store.generation + 1
    forgotten = store._tomb.keys(doc)  # T keys no longer stored leave T in this commit
    t_shard = shard_of(forgotten)
    t_gone: list = []
    values = store.values  # records move from the old keys to the new (values.on_rebuild)
    gone_keys: list = []  # the rebuilt hosts' stored keys (values only)
    kept_new: list = []  # new keys stored already under another host (values only)
    entry = None
    added, removed, writers = [], [], []
    n_removed = bytes_written = rewritten = 0
    pdigest = policy_digest(manifest.runs_policy_id(doc))
    try:
        for shard in sorted(shards):
            readers = runs.get(shard, [])
            lo, last = check.shard_range(shard, sb)
            hi = last + 1
            old = [c.copy() for c in runsmod.iter_range(runs, lo, hi)] if readers else []
            keys = np.concatenate(old) if old else np.empty(0, np.uint64)
            before = len(keys)
            theirs = None if prefixes is None else np.isin(keys >> ub, prefixes)
            if values:
                gone_keys.append(keys if theirs is None else keys[theirs])
            keys = keys[:0] if theirs is None else keys[~theirs]
            mine = new_keys[shard_of(new_keys) == shard]
            if values:
                kept_new.append(mine[np.isin(mine, keys)])
            if (prefixes is not None and before == len(keys)
                    and not len(np.setdiff1d(mine, keys, assume_unique=True))):
                continue  # none of these hosts' keys here, none to add
            n_removed += before - len(keys)
            keys = np.union1d(keys, mine)
            t_here = forgotten[t_shard == shard]
            t_gone.append(t_here[~np.isin(t_here, keys)])
            rewritten += 1
            removed += [r.name for r in readers]
            if len(keys):
                w = runsmod.new_writer(os.path.join(store.path, run_name(shard, gen)),
                                       layout.host_bits, sb, shard, pdigest, store.run_format,
                                       keys=len(keys))
                writers.append(w)
                for i in range(0, len(keys), 1 << 20):
                    w.write(keys[i:i + (1 << 20)])
                    fault("rebuild-write")
                header, sparse, nbytes = runsmod.finish(w, store.sync)
                bytes_written += nbytes
                added.append((shard, header, sparse))
            if progress:
                progress(shard)
        gone = np.concatenate(t_gone) if t_gone else forgotten[:0]
        if len(gone):
            entry = store._tomb.write(tombstones.less(forgotten, gone), gen,
                                      store.sync)
            fields = {**fields, tombstones.FIELD: entry}
        if values:
            fields = {**fields, **_carry_values(store, urls, under_new, new_keys, gone_keys,
                                                kept_new, forgotten)}
        fault("rebuild-written")
        counters = {"rebuilds": 1, "bytes_written": bytes_written}
        store._commit(gen, added, removed, counters, step="rebuild-", fields=fields)
        if values:
            store._take_fields()  # the staged fields went into the commit above
    except OSError as e:
        for w in writers:
            w.abort()
        store._tomb.discard(entry)
        if values:
            store._drop_kept()  # the value file written for the commit
        raise io_error(e, f"{store.path}: rebuilding") from e
    except BaseException:
        for w in writers:
            w.abort()
        store._tomb.discard(entry)
        if values:
            store._drop_kept()
        raise
    if entry is not None or len(gone):
        store._tomb.retire(doc.get(tombstones.FIELD), entry)
    return {"hosts": None if hosts is None else sorted(hosts), "kept_urls": len(urls),
            "keys_removed": int(n_removed), "keys_added": int(len(new_keys)),
            "shards_rewritten": rewritten,
            "bytes_written": bytes_written, "seconds": round(time.perf_counter() - t0, 3),
            "new_keys": new_keys}


def _carry_values(store, urls: list[str], under_new, new_keys: np.ndarray,
                  gone_keys: list, kept_new: list, forgotten: np.ndarray) -> dict:
    """The value records of a rebuild (values.on_rebuild): each kept URL pairs its key
    under the store's policy (the old one, when the store holds it) with its key under
    the new policy (``under_new``: ``urls`` normalised under it, as the rebuild made
    its new keys); the new keys that enter are those not stored already under another
    host and not forgotten. Returns the manifest fields staged for the commit (the
    value file, the counters, and what else the store had staged)."""
    from seenstore.store import values

    old_policy = store.policy
    pairs = None
    if old_policy is not None and urls:
        a = normalised(urls, None, old_policy, store.layout, store.threads)
        _, ia, ib = np.intersect1d(a.positions, under_new.positions, return_indices=True)
        pairs = (a.keys[ia], under_new.keys[ib])
    out_keys = np.concatenate(kept_new) if kept_new else new_keys[:0]
    entering = np.setdiff1d(new_keys, np.union1d(out_keys, forgotten), assume_unique=False)
    removed = np.concatenate(gone_keys) if gone_keys else new_keys[:0]
    values.on_rebuild(store, removed, pairs, entering)
    return dict(store._batch_fields or {})


def _kept_urls(store, prefixes, layout) -> list[str]:
    """The kept URLs whose safe-rule key's host part is in ``prefixes`` (None: all)."""
    out: list[bytes] = []
    ub = layout.url_bits
    for f in kepturls.open_all(store.path, store._doc):
        if prefixes is None:
            for lines in f.iter_all():
                out.extend(lines)
            continue
        for p in prefixes.tolist():
            out.extend(f.read_range(p << ub, ((p + 1) << ub) - 1))
    urls = list(dict.fromkeys(u.decode("utf-8") for u in out))
    if prefixes is None or not urls:
        return urls
    keys = fingerprint_many(urls, layout)
    keep = np.isin(keys >> np.uint64(ub), prefixes)
    return [u for u, k in zip(urls, keep.tolist()) if k]


def changed_hosts(old: Policy | None, new: Policy) -> set | None:
    """The hosts whose rules differ between ``old`` and ``new`` (None: every host, when
    the rules given for host patterns differ or the old policy is not known)."""
    if old is None:
        return None
    old_base, new_base = getattr(old, "base", old), getattr(new, "base", new)
    if old_base.content_hash != new_base.content_hash:  # the file's rules differ
        return None
    a, b = getattr(old, "learned", {}) or {}, getattr(new, "learned", {}) or {}
    return {h for h in set(a) | set(b) if a.get(h) != b.get(h)}


def apply(store, policy: Policy, hosts=None, notes=None, bump: bool = True) -> dict:
    """``SeenStore.set_policy`` / ``rebuild``'s body: make ``policy`` the store's and
    rebuild ``hosts`` (None with ``bump``: the hosts whose rules changed; None
    without: every host), in one commit. Returns figures (``rebuild`` above)."""
    from seenstore.store.policyheld import policy_fields

    store._check_writable()
    check_can_rebuild(store)
    with store._mutex:
        store._join_compactor(stop=True)
        store._keeper.ready()
        if hosts is None and bump:
            hosts = changed_hosts(store.policy, policy)
        hosts = None if hosts is None else set(hosts)
        fields = policy_fields(store._doc, policy, sorted(hosts or ()), notes, bump)
        # an empty store has nothing to remake, unless its keys are all forgotten
        # (a forgotten key the new policy changes comes back under its new key)
        if hosts is not None and not hosts or not (len(store) or tombstones.count(store._doc)):
            store._live.commit_counters(0, batches=0, fields=fields)
            store._policy_cache = None
            return {"hosts": sorted(hosts or ()), "kept_urls": 0, "keys_removed": 0,
                    "keys_added": 0, "shards_rewritten": 0, "bytes_written": 0,
                    "seconds": 0.0}
        fig = rebuild(store, policy, hosts, fields)
        store._policy_cache = None
        new_keys = fig.pop("new_keys")
        keeper = store._keeper
        if keeper.bf is not None:
            if store.mode == "approximate":  # a filter answers alone: drop removed keys
                # every key of the runs, forgotten ones too (contains trusts a negative)
                keeper.rebuild(max(2 * len(store), 1 << 20), keeper.bf.target_fpr,
                               runsmod.iter_range(store._runs))
            elif len(new_keys):  # exact: every stored key must be in it; extras are harmless
                keeper.add(new_keys)
        return fig
