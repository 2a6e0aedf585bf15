"""The commit point: one generation's manifest and live runs, and how a new one
replaces it (docs/architecture.md, "One batch" step 3; docs/format.md).

``Live`` holds the store's current ``(manifest, runs by shard)`` pair, swapped
under one small lock so a thread sees the old pair or the new one. ``commit``
makes a new generation: the new runs (written and fsynced by their writers) join
the live ones, replaced runs leave, the counters grow; the directory is fsynced,
MANIFEST replaced atomically (manifest.write: temp, fsync, rename, fsync dir).
Replaced runs are deleted on a background thread. A read-only ``Live`` moves to
the newest committed generation on ``refresh``.
"""

from __future__ import annotations

import os
import threading
import time

from seenstore.store import manifest
from seenstore.errors import InvalidInputError, SeenStoreError
from seenstore.layout import Layout
from seenstore.store.runs import live as runsmod
from seenstore.store.files import fault, io_error, run_name
from seenstore.store.runcache import RunCache
from seenstore.runtime.worker import Worker

MAX_SHARD_BITS = 12
SNAPSHOT_RETRIES = 20  # a reader's attempts at opening the runs of one committed generation


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def create(path: str, layout: Layout, policy_id: str, shard_bits: int, sync: bool,
           fields: dict | None = None) -> None:
    """Write the first MANIFEST of an empty store (no run at all: a shard's runs
    appear with its keys); ``fields``: more manifest fields (the policy, keep_urls)."""
    if not 0 <= shard_bits <= MAX_SHARD_BITS:
        raise InvalidInputError(f"shard_bits must be in 0..{MAX_SHARD_BITS}")
    try:
        now = _now()
        manifest.write(path, {
            "store_id": manifest.new_store_id(), "generation": 0,
            "layout": layout.to_dict(), "policy_id": policy_id,
            "shard_bits": shard_bits, "runs": [], "created": now, "updated": now,
            "counters": dict(manifest.NEW_COUNTERS), **(fields or {}),
        }, sync=sync)
    except OSError as e:
        raise io_error(e, f"{path}: cannot create store") from e


class Live:
    """The committed state of the store at ``path``: ``doc`` (the manifest) and
    ``runs`` (shard -> live readers, oldest first). ``sync=False`` skips fsyncs."""

    def __init__(self, path: str, doc: dict, sync: bool = True) -> None:
        self.path = path
        self.doc = doc
        self.runs: dict[int, list] = {}
        self.sync = sync
        self.lock = threading.Lock()  # (doc, runs) change together
        self.cache = RunCache(0)  # live runs' keys in memory (runcache.py); off until set
        self._retiring: Worker | None = None  # the replaced runs' deletion, until joined

    def snapshot(self) -> tuple[dict, dict]:
        """(manifest, live runs by shard) of one generation, taken together."""
        with self.lock:
            return self.doc, self.runs

    @property
    def generation(self) -> int:
        return self.doc["generation"]

    def open_runs(self) -> None:
        self.runs = runsmod.readers_for(self.path, self.doc)

    def all_readers(self, runs: dict | None = None) -> list:
        return runsmod.all_readers(self.runs if runs is None else runs)

    def n_keys(self) -> int:
        return sum(r.count for r in self.all_readers())

    def refresh(self, force: bool = False) -> None:
        """Read-only stores: move to the newest committed generation, opening all its
        runs (one consistent snapshot: an open run stays readable after a writer
        retires it). A writer may commit and delete runs between our manifest read
        and our opens: then the next manifest names other runs, and we retry with it."""
        for attempt in range(SNAPSHOT_RETRIES):
            doc = manifest.read(self.path)
            if not force and doc["generation"] == self.generation:
                with self.lock:
                    self.doc = doc  # counters may have changed, runs have not
                return
            try:
                runs = runsmod.readers_for(self.path, doc, {})
            except SeenStoreError:
                if (attempt == SNAPSHOT_RETRIES - 1
                        or manifest.read(self.path)["generation"] == doc["generation"]):
                    raise  # the runs of the current generation are damaged
                continue
            with self.lock:
                self.doc, self.runs = doc, runs
            return

    def commit_counters(self, n_approx: int, batches: int = 1, fields: dict | None = None) -> None:
        """Record a batch that changed no run (every key was stored already) and the
        keys answered by the Bloom filter alone: a manifest with the same runs and
        generation, new counters (upgraded to the current format, as every commit)."""
        self.join_retire()
        doc = manifest.upgraded(self.doc, self.n_keys())
        # the upgrade drops a format 1 manifest's empty runs: their files go too
        gone = {r["file"] for r in self.doc["runs"]} - {r["file"] for r in doc["runs"]}
        c = dict(doc["counters"])
        c["batches"] += batches
        if n_approx:
            c["approx_answered"] = c.get("approx_answered", 0) + n_approx
        doc["counters"] = c
        doc["updated"] = _now()
        doc.update(fields or {})
        try:
            manifest.write(self.path, doc, sync=self.sync)
        except OSError as e:
            raise io_error(e, f"{self.path}: committing counters") from e
        runs = (runsmod.readers_for(self.path, doc, {r.name: r for r in self.all_readers()})
                if gone else self.runs)
        with self.lock:
            self.doc, self.runs = doc, runs
        if gone:
            self._retire([os.path.join(self.path, name) for name in sorted(gone)])

    def commit(self, gen: int, added: list, removed: list, counters: dict,
               step: str = "", fields: dict | None = None) -> None:
        """Make generation ``gen`` the store: the runs ``added`` (``(shard, header,
        sparse index)``, files already written and fsynced) join the live runs, the
        files ``removed`` leave them, ``counters`` are added to the manifest's. A
        format 1 manifest is upgraded in the same commit (manifest.upgraded: its
        empty runs leave too). ``step``: prefix of the fault points ("" for a batch,
        "compact-", "upgrade-"). ``fields``: other manifest fields this commit sets
        (the kept-URL files, the policy: they change with the runs, atomically)."""
        self.join_retire()
        try:
            if self.sync:
                manifest.fsync_dir(self.path)  # the new run names are durable
            fault(step + "before-manifest")
            doc = manifest.upgraded(self.doc, self.n_keys())
            gone = set(removed) | {r["file"] for r in self.doc["runs"]} - {
                r["file"] for r in doc["runs"]}
            runs = [r for r in doc["runs"] if r["file"] not in gone]
            runs += [{"shard": shard, "file": run_name(shard, gen), "count": h.count,
                      "checksum": f"{h.body_checksum:016x}"} for shard, h, _ in added]
            doc["runs"] = sorted(runs, key=lambda r: (r["shard"], r["file"]))
            doc["generation"] = gen
            doc["updated"] = _now()
            c = dict(doc["counters"])
            for k, v in counters.items():
                if v:
                    c[k] = c.get(k, 0) + v
            doc["counters"] = c
            doc.update(fields or {})
            manifest.write(self.path, doc, sync=self.sync)
        except OSError as e:
            raise io_error(e, f"{self.path}: committing") from e
        # Committed. From here on a failure must not undo the batch.
        fault(step + "after-manifest")
        have = {r.name: r for r in self.all_readers()}
        for shard, _, sparse in added:
            name = run_name(shard, gen)
            have[name] = runsmod.open_reader(os.path.join(self.path, name), sparse)
        runs = runsmod.readers_for(self.path, doc, have)
        with self.lock:  # readers on other threads see the old pair or the new one
            self.doc, self.runs = doc, runs
        self.cache.forget(gone)
        self._retire([os.path.join(self.path, name) for name in sorted(gone)], step)

    def _retire(self, paths: list, step: str = "") -> None:
        """Delete replaced runs on a background thread (freeing GBs of extents took
        0.2-0.3 s per 1e8-key batch, 8 % of its time); joined before the next commit
        (so at most one generation of replaced runs exists) and by ``close``. A crash
        before it ends leaves files the next open removes as leftovers. Requires: the
        previous retirement joined (``commit`` does it first). Nothing may still
        stream these files: a batch's checks end before its commit, and compaction
        runs only between batches."""

        def unlink_all():
            for p in paths:
                fault(step + "retire")
                try:
                    os.unlink(p)
                except OSError:
                    pass  # removed as a leftover on the next open

        if paths:
            self._retiring = Worker(unlink_all, "retire-runs")

    def join_retire(self) -> None:
        """Wait for the deletion of the replaced runs, if one runs. It fails only on a
        bug (an OSError leaves the file for the next open): that is raised here."""
        retiring = self._retiring
        if retiring is not None:
            retiring.join(raise_error=False)
            self._retiring = None
            retiring.join()

    def close(self) -> None:
        self.cache.clear()
        for r in self.all_readers():
            r.close()
        self.runs = {}
