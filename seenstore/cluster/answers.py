"""The answer log: exactly-once batches for one shard (docs/cluster.md, "Exactly once").

A shard directory holds ``store/`` (a SeenStore) and ``answers/``. Before a batch
is admitted, the log takes a snapshot of the store's state, hard links to its
MANIFEST and the runs and forgotten keys' file it names in
``answers/NNNNNNNNNNNN.pre/`` (runs and that file are immutable
and the manifest is replaced by rename, so the links keep the pre-batch state
readable whatever the store does next), and durably records an entry ``pending``
with the store's count of committed batches before it (``batches_before``: the
snapshot MANIFEST's ``counters.batches``) and a digest of its keys. Nothing is written after the
store's commit: the answer is recomputable from the snapshot until the client
acknowledges it (``forget``), which drops the entry and its snapshot.

A pending entry is resolved by that count, which a batch's commit moves by exactly
one (a batch that admits nothing still commits its counters, so it moves too) and
which no other commit moves (compaction, upgrade), before anything else may commit
(on the actor's start, and first thing in every new batch):
- count == batches_before: nothing was committed: ``void``,
  a retry is a fresh batch against the same state, so it gets the same answer;
- count == batches_before + 1: the batch committed: ``committed``; a retry's
  answer is its keys absent from the snapshot (exactly the keys the batch found
  new: they were absent before it and all present after).
Any other count means another writer committed: refused as corruption.
"""

from __future__ import annotations

import os
import re
import shutil

import numpy as np

from seenstore.store import manifest, tombstones
from seenstore.runtime.worker import Worker
from seenstore.errors import CorruptionError, SeenStoreError, StoreIOError
from seenstore.store.manifest import fsync_dir
from seenstore.store import SeenStore
from seenstore.cluster.files import read_sealed, write_sealed

DIR_NAME = "answers"
ENTRY_FORMAT = "seenstore-answer"
KEEP = 16  # entries kept at most; the client acknowledges answers as it reads them
_ENTRY_RE = re.compile(r"^(\d{12})\.ans$")
_SNAP_RE = re.compile(r"^(\d{12})\.pre$")
SNAPSHOT_RETRIES = 20  # attempts at linking one committed state (compaction may commit)


def committed_batches(store: SeenStore) -> int:
    """Batches the store committed (MANIFEST counters.batches: +1 per commit of a batch;
    maintenance commits do not count). Read from the MANIFEST itself: ``stats()`` would
    also take a pass over the Bloom filter after every batch (~0.1 s per 1e7 keys)."""
    return int(manifest.read(store.path)["counters"].get("batches", 0))


class Entry:
    __slots__ = ("seq", "meta")

    def __init__(self, seq: int, meta: dict):
        self.seq, self.meta = seq, meta

    @property
    def state(self) -> str:
        return self.meta["state"]


class AnswerLog:
    """The entries of one shard directory. Requires: one user at a time (the actor's lock)."""

    def __init__(self, shard_dir: str, sync: bool = True):
        self.dir = os.path.join(shard_dir, DIR_NAME)
        self.sync = sync
        os.makedirs(self.dir, exist_ok=True)
        self.entries: dict[int, Entry] = {}
        self._dropping: list[Worker] = []  # snapshot removals under way
        names = sorted(os.listdir(self.dir))
        for name in names:
            m = _ENTRY_RE.match(name)
            if m:
                meta = read_sealed(os.path.join(self.dir, name), ENTRY_FORMAT)
                self.entries[int(m.group(1))] = Entry(int(m.group(1)), meta)
            elif name.endswith(".tmp"):
                os.unlink(os.path.join(self.dir, name))  # an interrupted entry write
        for name in names:  # snapshots no entry needs any more (or never recorded)
            m = _SNAP_RE.match(name)
            if m and self._needs_snapshot(int(m.group(1))) is False:
                shutil.rmtree(os.path.join(self.dir, name), ignore_errors=True)
        self.next_seq = max(self.entries, default=0) + 1

    def _needs_snapshot(self, seq: int) -> bool:
        e = self.entries.get(seq)
        return e is not None and e.state in ("pending", "committed")

    def _path(self, seq: int, snap: bool = False) -> str:
        return os.path.join(self.dir, f"{seq:012d}" + (".pre" if snap else ".ans"))

    def find(self, batch_id: str) -> Entry | None:
        for e in self.entries.values():
            if e.meta["batch_id"] == batch_id:
                return e
        return None

    def _write(self, e: Entry) -> None:
        write_sealed(self._path(e.seq), ENTRY_FORMAT, e.meta, self.sync)

    # --------------------------------------------------------------- protocol
    def begin(self, batch_id: str, digest: str, store: SeenStore) -> Entry:
        """Resolve pending entries, snapshot the store's current state and record the
        batch as pending (durable: the snapshot's links, then the entry)."""
        self.resolve_all(store)
        seq = self.next_seq
        self.next_seq += 1
        snap = self._path(seq, snap=True)
        before = self._snapshot(store.path, snap)
        if self.sync:
            fsync_dir(snap)  # the links; the entry's write syncs answers/ (snap's name)
        e = Entry(seq, {"batch_id": batch_id, "digest": digest, "state": "pending",
                        "batches_before": before})
        self._write(e)
        self.entries[seq] = e
        self._trim()
        return e

    @staticmethod
    def _snapshot(store_path: str, snap: str) -> int:
        """Hard-link the store's committed state into ``snap``: its MANIFEST, then the
        runs and the forgotten keys' file that MANIFEST names (what ``contains``
        reads: a key forgotten before the batch was new to it); return its count of
        committed batches. A background compaction (between batches) may commit
        meanwhile and retire runs and that file: one gone means a newer MANIFEST, so
        the snapshot is taken again from it."""
        for _ in range(SNAPSHOT_RETRIES):
            shutil.rmtree(snap, ignore_errors=True)
            os.mkdir(snap)
            os.link(os.path.join(store_path, manifest.NAME), os.path.join(snap, manifest.NAME))
            doc = manifest.read(snap)
            names = [r["file"] for r in doc["runs"]]
            if doc.get(tombstones.FIELD):
                names.append(doc[tombstones.FIELD]["file"])
            try:
                for name in names:
                    os.link(os.path.join(store_path, name), os.path.join(snap, name))
            except FileNotFoundError:
                continue
            return int(doc["counters"].get("batches", 0))
        raise StoreIOError(f"{store_path}: no consistent snapshot after {SNAPSHOT_RETRIES} "
                           "tries (the store kept committing)")

    def resolve(self, e: Entry, store: SeenStore) -> None:
        """Turn a pending entry into ``void`` or ``committed`` by the store's count of
        committed batches."""
        if e.state != "pending":
            return
        n = committed_batches(store)
        if n == e.meta["batches_before"]:
            e.meta = dict(e.meta, state="void")
            self._write(e)
            self._drop_snapshot(e.seq)
        elif n == e.meta["batches_before"] + 1:
            e.meta = dict(e.meta, state="committed")
            self._write(e)
        else:
            raise CorruptionError(
                f"{self.dir}: batch {e.meta['batch_id']} was pending after "
                f"{e.meta['batches_before']} committed batches but the store has {n}: "
                "another writer committed to this shard")

    def resolve_all(self, store: SeenStore) -> None:
        for e in list(self.entries.values()):
            self.resolve(e, store)

    def recompute(self, e: Entry, uniq: np.ndarray) -> np.ndarray:
        """The new keys of a committed batch: its sorted unique keys ``uniq`` absent
        from the snapshot of the state before it."""
        try:
            snap = SeenStore.open(self._path(e.seq, snap=True), readonly=True)
        except SeenStoreError as err:
            raise CorruptionError(f"{self.dir}: snapshot of batch {e.meta['batch_id']} "
                                  f"unreadable ({err})") from err
        try:
            return uniq[~snap.contains(uniq)]
        finally:
            snap.close()

    def forget(self, batch_ids) -> None:
        """Drop the entries of ``batch_ids``: answers the client has read (a pending one
        included: a reply means its commit is done), or void batches about to rerun."""
        ids = set(batch_ids)
        for seq, e in list(self.entries.items()):
            if e.meta["batch_id"] in ids:
                self._remove(seq, background=True)

    def _trim(self) -> None:
        for seq in sorted(self.entries)[:-KEEP]:
            self._remove(seq)

    def _remove(self, seq: int, background: bool = False) -> None:
        self.entries.pop(seq, None)
        try:
            os.unlink(self._path(seq))
        except FileNotFoundError:
            pass
        if background:
            self._drop_snapshot(seq)
        else:
            shutil.rmtree(self._path(seq, snap=True), ignore_errors=True)

    def _drop_snapshot(self, seq: int) -> None:
        """Remove a snapshot on a thread: its links may be the last to replaced runs,
        and freeing their extents takes a while (as the store's own retirement); no
        batch waits for it."""
        self._dropping = [t for t in self._dropping if t.is_alive()]
        path = self._path(seq, snap=True)
        self._dropping.append(Worker(lambda: shutil.rmtree(path, True), "seenstore-drop-snapshot"))

    def _join(self) -> None:
        for t in self._dropping:
            t.join(raise_error=False)
        self._dropping = []

    def close(self) -> None:
        self._join()
