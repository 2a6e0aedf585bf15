"""The answer log: exactly-once batches for one shard (docs/cluster.md, "Exactly once").

A shard directory holds ``store/`` (a SeenStore) and ``answers/``. Before a batch
is admitted, the log takes a snapshot of the store's state, hard links to its files
in ``answers/NNNNNNNNNNNN.pre/`` (runs are immutable and the manifest is replaced by
rename, so the links keep the pre-batch state readable whatever the store does
next), and durably records an entry ``pending`` with the store's count of committed
batches before it (``batches_before``: ``stats()["counters"]["batches"]``) and a
digest of its keys. Nothing is written after the
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
import threading

import numpy as np

from ..errors import CorruptionError, SeenStoreError
from ..manifest import fsync_dir
from ..store import SeenStore
from .files import read_sealed, write_sealed

DIR_NAME = "answers"
ENTRY_FORMAT = "seenstore-answer"
KEEP = 16  # entries kept at most; the client acknowledges answers as it reads them
_ENTRY_RE = re.compile(r"^(\d{12})\.ans$")
_SNAP_RE = re.compile(r"^(\d{12})\.pre$")
_SKIP = re.compile(r"^(LOCK|BLOOM.*|.*\.tmp(\.\d+)?)$")  # not part of a committed state


def committed_batches(store: SeenStore) -> int:
    """Batches the store committed (MANIFEST counters.batches: +1 per commit of a batch
    that admitted a key; maintenance commits, if any, do not count)."""
    return int(store.stats()["counters"]["batches"])


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
        self._dropping: threading.Thread | None = None
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
        batch as pending (durable)."""
        self.resolve_all(store)
        self._join()
        seq = self.next_seq
        self.next_seq += 1
        snap = self._path(seq, snap=True)
        shutil.rmtree(snap, ignore_errors=True)
        os.mkdir(snap)
        for name in os.listdir(store.path):
            if _SKIP.match(name) or not os.path.isfile(os.path.join(store.path, name)):
                continue
            try:
                os.link(os.path.join(store.path, name), os.path.join(snap, name))
            except FileNotFoundError:
                pass  # a replaced run the store is deleting: not in the current state
        if self.sync:
            fsync_dir(snap)
            fsync_dir(self.dir)
        e = Entry(seq, {"batch_id": batch_id, "digest": digest, "state": "pending",
                        "batches_before": committed_batches(store)})
        self._write(e)
        self.entries[seq] = e
        self._trim()
        return e

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
        and freeing their extents takes a while (as the store's own retirement)."""
        self._join()
        path = self._path(seq, snap=True)
        self._dropping = threading.Thread(target=shutil.rmtree, args=(path, True), daemon=True)
        self._dropping.start()

    def _join(self) -> None:
        if self._dropping is not None:
            self._dropping.join()
            self._dropping = None

    def close(self) -> None:
        self._join()
