"""What the store says about itself: ``stats`` figures and the ``verify`` check of one
committed generation (its manifest and live runs), both read-only.
"""

from __future__ import annotations

import os

import numpy as np

from seenstore.store import manifest, tombstones, wal as walmod
from seenstore.errors import CorruptionError, StoreIOError
from seenstore.layout import Layout
from seenstore.store.runs.format import (COMPRESSED_MAJOR as CODEC_MAJOR,
                                        COMPRESSED_MINOR as CODEC_MINOR, MAJOR as RUN_MAJOR,
                                        MINOR as RUN_MINOR)
from seenstore.keys.sort import describe as sort_description
from seenstore.store.runs import live as runsmod
from seenstore.store.compaction import pending
from seenstore.store.runs.live import merged_chunks
from seenstore.store.files import BLOOM_RE, size


def _format_name(run_format: int) -> str:
    """The version a new run of ``run_format`` (1 raw, 2 compressed) is written as."""
    return f"{CODEC_MAJOR}.{CODEC_MINOR}" if run_format == 2 else f"{RUN_MAJOR}.{RUN_MINOR}"


def stats(store, doc: dict, runs: dict, bloom: dict | None) -> dict:
    """The figures of ``SeenStore.stats`` (its docstring) for generation ``doc`` and
    its live ``runs``; ``bloom``: the Bloom filter's (bloom/keeper.py)."""
    path = store.path
    files = [r["file"] for r in doc["runs"]] + [manifest.NAME] + (
        [doc[tombstones.FIELD]["file"]] if doc.get(tombstones.FIELD) else [])
    disk = sum(size(os.path.join(path, name)) for name in files)
    bloom_file = sum(size(os.path.join(path, n)) for n in os.listdir(path)
                     if BLOOM_RE.match(n))  # BLOOM and its layers' BLOOM.Li
    forgotten = tombstones.count(doc)
    keys = sum(r.count for rs in runs.values() for r in rs) - forgotten
    per_shard = {shard: len(rs) for shard, rs in runs.items()}
    c = {"approx_answered": 0, **doc["counters"]}
    wal_sizes = [size(p, None) for _, p in walmod.list_segments(path)]  # a merge may delete one
    layout = Layout.from_dict(doc["layout"])
    return {
        "path": path,
        "store_id": doc.get("store_id"),
        "keys": keys,  # stored: the keys in the runs less the forgotten ones
        # forgotten keys still in their runs (tombstones), until compaction drops them
        "forgotten": forgotten,
        "files": len(files),
        "bytes_on_disk": disk,  # runs + manifest
        "bytes_per_key": (disk / keys) if keys else None,
        "bloom_file_bytes": bloom_file,
        "bytes_on_disk_with_bloom": disk + bloom_file,
        "bytes_per_key_with_bloom": ((disk + bloom_file) / keys) if keys else None,
        "layout": layout.describe(),
        "host_bits": layout.host_bits,
        "shard_bits": doc["shard_bits"],
        "shards": 1 << doc["shard_bits"],
        "largest_shard_keys": max((sum(r.count for r in rs) for rs in runs.values()),
                                  default=0),
        "runs": sum(per_shard.values()),
        "max_runs_per_shard": max(per_shard.values(), default=0),
        "runs_per_shard": {str(s): n for s, n in sorted(per_shard.items())},
        # run bytes written by batches and compactions over the bytes of the keys
        "write_amplification": ((c.get("bytes_written", 0) + c.get("bytes_compacted", 0))
                                / (8 * c["new"]) if c.get("new") else None),
        "pending_compaction": pending(doc),
        "policy_id": doc["policy_id"],
        "policy_version": (doc.get("policy") or {}).get("version", 0),
        # URLs kept for rebuilds (files, URLs, bytes; keep_urls None: not decided yet)
        "keep_urls": doc.get("keep_urls"),
        "kept_urls": sum(e["count"] for e in doc.get("url_files", ())),
        "kept_url_files": len(doc.get("url_files", ())),
        "kept_url_bytes": sum(size(os.path.join(path, e["file"]))
                              for e in doc.get("url_files", ())),
        "evidence_records": (doc.get("evidence") or {}).get("count", 0),  # in the snapshot
        # per-key values (store/values.py): files, entries, bytes (the manifest's figures)
        "values": bool(doc.get("values")),
        "value_files": len(doc.get("value_files", ())),
        "value_entries": sum(e["count"] for e in doc.get("value_files", ())),
        "value_bytes": sum(e["bytes"] for e in doc.get("value_files", ())),
        "generation": doc["generation"],
        # what this writer writes new runs below and from COMPRESS_MIN_KEYS keys as (by
        # size by default: runs.live.format_for), and the formats of the live runs
        "run_format": _format_name(runsmod.format_for(store.run_format, None)),
        "large_run_format": _format_name(
            runsmod.format_for(store.run_format, runsmod.COMPRESS_MIN_KEYS)),
        "run_formats": runsmod.count_formats(runsmod.all_readers(runs)),
        "manifest_format": f"{doc.get('major', manifest.MAJOR)}.{doc.get('minor', 0)}",
        # live runs of an older minor version of their format (raw 1.0: no page index,
        # so lookups in them are not checked page by page): `seenstore upgrade`
        "runs_to_upgrade": sum(1 for r in runsmod.all_readers(runs) if runsmod.old_minor(r)),
        "upgrade_pending": doc.get("major", manifest.MAJOR) < manifest.MAJOR or any(
            runsmod.old_minor(r) for r in runsmod.all_readers(runs)),
        # batches: every add/merge call of at least one key that committed
        "counters": c,
        # keys a DedupStage handed out but has not merged yet (replayed by the next
        # writer's open, counted present by contains)
        "wal_segments": sum(1 for n in wal_sizes if n is not None),
        "wal_bytes": sum(n for n in wal_sizes if n is not None),
        "mode": store.mode,
        "threads": store.threads,
        "sort": sort_description(measure=False),
        "bloom": bloom,
        "created": doc.get("created"),
        "updated": doc.get("updated"),
    }


def verify(path: str, doc: dict, runs: dict) -> dict:
    """The check of ``SeenStore.verify`` (its docstring) of generation ``doc`` and its
    live ``runs``, and of the WAL segments in ``path``."""
    sb = doc["shard_bits"]
    for shard, readers in sorted(runs.items()):
        if len(readers) == 1:
            readers[0].verify()
        else:  # the k-way merge checks order, disjointness, checksums and pages
            for _ in merged_chunks(readers, check_pages=True):
                pass
        for reader in readers:
            if reader.count and sb:
                first, last = runsmod.first_last(reader)
                lo, hi = first >> (64 - sb), last >> (64 - sb)
                if lo != shard or hi != shard:
                    raise CorruptionError(f"{reader.name}: keys outside shard {shard}")
    forgotten = _verify_tombstones(path, doc, runs)
    segments = 0
    for _, seg in walmod.list_segments(path):
        try:
            walmod.read_segment(seg)
        except StoreIOError as e:
            if isinstance(e.__cause__, FileNotFoundError):
                continue  # merged and removed meanwhile
            raise
        segments += 1
    return {"keys": sum(r.count for rs in runs.values() for r in rs) - forgotten,
            "forgotten": forgotten, "runs": sum(len(rs) for rs in runs.values()),
            "generation": doc["generation"], "wal_segments": segments}


def _verify_tombstones(path: str, doc: dict, runs: dict) -> int:
    """Check the tombstone file ``doc`` names (checksums, order) and that each of its
    keys is in a live run of its shard (T is a subset of the stored keys); return |T|."""
    entry = doc.get(tombstones.FIELD)
    if not entry:
        return 0
    t = tombstones.read_file(os.path.join(path, entry["file"]), entry)
    sb = doc["shard_bits"]
    shard_of = (t >> np.uint64(64 - sb)).astype(np.int64) if sb else np.zeros(len(t), np.int64)
    for shard in np.unique(shard_of).tolist():
        keys = t[shard_of == shard]
        found = np.zeros(len(keys), dtype=np.bool_)
        for reader in runs.get(shard, []):
            if not reader.count:
                continue
            sub = np.zeros(len(keys), dtype=np.bool_)
            runsmod.lookup(reader, keys, sub)
            found |= sub
        if not found.all():
            raise CorruptionError(f"{entry['file']}: forgotten key {int(keys[~found][0]):#x} "
                                  "is in no run (tombstones must name stored keys)")
    return len(t)


def member(haystack: np.ndarray, needles: np.ndarray) -> np.ndarray:
    """Mask over ``needles``: True where the key is in sorted unique ``haystack``."""
    if len(haystack) == 0:
        return np.zeros(len(needles), dtype=np.bool_)
    pos = np.searchsorted(haystack, needles)
    pos[pos == len(haystack)] = len(haystack) - 1
    return haystack[pos] == needles
