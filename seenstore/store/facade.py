"""SeenStore: the set of every key ever admitted, in a crash-safe directory.

The public face of the store package: opening, ``add``/``add_new``/``add_sorted``/
``add_new_file``, ``contains``, ``compact``, ``upgrade``, ``stats``, ``verify``,
``checkpoint``, ``close``. A batch passes each stage once: partitioned by shard
here, sorted, checked and written by the shard threads (scheduling.py, runs.py),
committed (commit.py), then compaction paid for by it runs between batches
(compaction.py). The Bloom filter beside it lives in seenstore/bloom/ (keeper.py).
See docs/architecture.md for the protocol and cost model.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterator

import numpy as np

from seenstore.store import manifest, wal as walmod
from seenstore.keys.batch import as_keys, prepare
from seenstore.bloom import Binding, LayeredBloom
from seenstore.bloom.deferred import settle
from seenstore.bloom.keeper import DEFAULT_BLOOM_FPR, BloomKeeper
from seenstore.bloom.sizing import prefault
from seenstore.kernels.dispatch import batch as _kernels  # numpy twins below dispatch.SMALL keys
from seenstore.errors import (ClosedError, InvalidInputError, MismatchError, NotAStoreError,
                      SeenStoreError, StoreNotFoundError)
from seenstore.layout import DEFAULT_LAYOUT, Layout
from seenstore.store.lock import WriterLock
from seenstore.store.runs.buffers import DEFAULT_CHUNK_KEYS
from seenstore.keys.sort import default_threads
from seenstore.store import commit as commitmod, compaction as compactionmod, report
from seenstore.store.runs import live as runsmod
from seenstore.store.admission import Admission
from seenstore.store.compaction import Compactor, plan
from seenstore.store.files import BLOOM_NAME, io_error, remove_leftovers, stray_files
from seenstore.store.runcache import check_budget, default_budget
from seenstore.store.scheduling import BatchArena, BufferPool, ShardSorter

PREFAULT_MIN_BYTES = 4 << 20  # smaller new filters fault in within the first insert

mark_members = _kernels.mark_members

DEFAULT_POLICY_ID = "safe-v1"
MODES = ("exact", "approximate")
DEFAULT_SHARD_BITS = 4


class SeenStore(Admission):
    """Open with ``SeenStore.open``. Not for use by two threads at once for writes
    (an internal lock serialises ``add``); ``contains`` may run beside ``add``."""

    def __init__(self, path: str, doc: dict, lock: WriterLock | None, mode: str = "exact",
                 run_format: int = runsmod.DEFAULT_RUN_FORMAT):
        if mode not in MODES:
            raise InvalidInputError(f"mode must be one of {MODES}, got {mode!r}")
        if run_format not in runsmod.RUN_FORMATS:
            raise InvalidInputError(f"run_format must be one of {runsmod.RUN_FORMATS}, "
                                    f"got {run_format!r}")
        self.path = path
        self.mode = mode
        self._keeper = BloomKeeper()
        self._live = commitmod.Live(path, doc)
        self._lock = lock
        self._mutex = threading.Lock()
        self._compactor = Compactor(self._live, run_format)
        self.run_format = run_format  # what new runs (batches, compaction) are written as
        self.compact_between_batches = True
        self.chunk_keys = DEFAULT_CHUNK_KEYS
        # Shards checked at once: reads and writes are O_DIRECT and block, so more
        # than the 2 cores keeps the disk busy (4: 18 % less merge time than 2 at
        # 2.25e8 stored keys, 8 no better; scratch measurement in the issue 6 note)
        self.merge_threads = 4
        # threads doing CPU work at once (shard sorts); open(threads=) sets it
        self.threads = default_threads()
        self._buffers = BufferPool()
        self._arena = BatchArena()  # a batch's partition, masks and answer, reused
        self._sorter = ShardSorter()  # its threads keep their sort scratch across batches
        self._prefault: threading.Thread | None = None  # a new filter's pages faulting in
        # the last batch's Bloom insert still running past its return (a
        # bloom/deferred.py DeferredInsert; ``settle`` waits for it), and (spilled
        # batches, spill.py) the phase of the batch under way (spill, check, commit;
        # None between batches), which the benchmark's memory sampler reads
        self._bloom_behind = None
        self._spill_phase: str | None = None
        self.last_timings: dict = {}
        self._closed = False
        self._pending = walmod.PendingKeys(path)  # keys a stage logged, not merged yet
        self.wal_replay: dict | None = None  # what the writer's open replayed

    # ----------------------------------------------------------------- opening
    @classmethod
    def open(cls, path: str, create: bool = False, *, readonly: bool = False,
             layout: Layout | None = None, policy_id: str | None = None,
             shard_bits: int | None = None, wait: float | None = 0.0,
             mode: str = "exact", bloom: bool = True, bloom_fpr: float = DEFAULT_BLOOM_FPR,
             bloom_capacity: int | None = None, sync: bool = True,
             run_format: int = runsmod.DEFAULT_RUN_FORMAT,
             threads: int | None = None, cache_bytes: int | None = None) -> "SeenStore":
        """Open (or with ``create=True`` create) the store at ``path``.

        ``layout``/``policy_id``: when given, must match the store's (MismatchError
        otherwise); used for a new store, defaults DEFAULT_LAYOUT and "safe-v1".
        ``readonly``: no lock, no cleanup, ``add`` refused. ``wait``: seconds to
        wait for another writer's lock (None = forever). ``mode``: "exact" (Bloom
        positives are confirmed on disk) or "approximate" (a Bloom positive counts
        as seen). ``bloom``: keep a Bloom filter in memory (writers only), sized for
        ``bloom_capacity`` keys (default: twice the store, at least 2^20; grown
        by layers whenever the keys in it pass the capacity) at
        ``bloom_fpr``; loaded from BLOOM, or rebuilt from the runs when missing or
        stale (or bound to another store, or answering a stored key absent). A
        writer then replays and deletes the WAL segments a DedupStage left
        (``stage-*.wal``: keys it handed out but did not merge) before it admits
        anything (figures in ``wal_replay``); a damaged segment makes the open fail
        naming it. Raises StoreNotFoundError, NotAStoreError, LockedError,
        CorruptionError, NotSupportedError. ``sync=False`` skips every fsync: the
        commit is still atomic against a process crash, but not durable against
        power loss (for tests and throwaway stores). ``run_format``: how this writer
        writes new runs, 1 raw keys (8 B/key, the default) or 2 compressed; runs of
        both formats are always read, and compaction rewrites the runs it merges in
        ``run_format``. ``threads``: shards sorted at once and threads of a
        whole-batch sort (default: the cores this process may use); answers never
        depend on it. ``cache_bytes``: memory a writer may keep live runs' keys in,
        so a batch checks them without reading the disk (store/runcache.py; default
        a quarter of the memory available at open, 0 turns it off; the
        ``cache_bytes`` attribute changes it later); answers never depend on it."""
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
            store._check_identity(layout, policy_id, None)
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
                commitmod.create(path, layout or DEFAULT_LAYOUT, policy_id or DEFAULT_POLICY_ID,
                                 DEFAULT_SHARD_BITS if shard_bits is None else shard_bits, sync)
            store = cls(path, manifest.read(path), lock, mode, run_format)
            store._live.sync = sync
            store.threads = threads or store.threads
            store.cache_bytes = default_budget() if cache_bytes is None else cache_bytes
            store._check_identity(layout, policy_id, shard_bits)
            remove_leftovers(path, {r["file"] for r in store._doc["runs"]})
            store._live.open_runs()
            if bloom or mode == "approximate":
                readers = store._all_readers()
                store._keeper.open(os.path.join(path, BLOOM_NAME), store.generation,
                                   store._binding(), len(store), bloom_fpr, bloom_capacity,
                                   lambda m: runsmod.spread_samples(readers, m),
                                   lambda m: runsmod.iter_keys(readers, m))
                store._prefault_bloom()
            store.wal_replay = walmod.replay_wal(store)
            return store
        except BaseException:
            lock.release()
            raise

    def _prefault_bloom(self) -> None:
        """A new, empty filter of PREFAULT_MIN_BYTES or more has its pages made
        resident on a thread (writing zeros over zeros, ``bloom.sizing.prefault``) while
        the caller prepares its first batch; else batch 0's inserts took the page
        faults (issue 14: 0.5-4 s per 300 MB on this VM). Every insert waits for it
        first (``_bloom_ready``); reads meanwhile see the zeros they would anyway."""
        bf = self.bloom
        if bf is None or bf.n_added or len(bf.layers) != 1 or bf.nbytes < PREFAULT_MIN_BYTES:
            return
        self._prefault = threading.Thread(target=prefault, args=(bf.layers[0].words,),
                                          name="seenstore-bloom-prefault", daemon=True)
        self._prefault.start()

    def _bloom_ready(self) -> None:
        """Wait for a batch's deferred Bloom insert (bloom/deferred.py ``settle``) and
        for ``_prefault_bloom``'s thread, if any (before the filter is written)."""
        settle(self)
        if self._prefault is not None:
            self._prefault.join()
            self._prefault = None

    def _check_identity(self, layout, policy_id, shard_bits) -> None:
        d = self._doc
        if layout is not None and Layout.from_dict(d["layout"]) != layout:
            raise MismatchError(
                f"{self.path}: store uses fingerprint layout "
                f"{Layout.from_dict(d['layout']).describe()}, not {layout.describe()}")
        if policy_id is not None and d["policy_id"] != policy_id:
            raise MismatchError(
                f"{self.path}: store was built with policy {d['policy_id']!r}, not "
                f"{policy_id!r}; open it with the same policy (or rebuild into a new store)")
        if shard_bits is not None and d["shard_bits"] != shard_bits:
            raise MismatchError(
                f"{self.path}: store has shard_bits={d['shard_bits']}, not {shard_bits}")

    def _binding(self) -> Binding:
        """What a Bloom filter of this store's current runs records (docs/bloom.md)."""
        return Binding(self._doc.get("store_id", ""), len(self), manifest.runs_digest(self._doc))

    def checkpoint(self) -> None:
        """Save the Bloom filter (BLOOM) for the current generation, so the next
        open need not rebuild it. Done by ``close``; call it to bound rebuild work
        after a crash. Safe beside ``add`` from another thread: it waits for the
        batch in progress (the filter, its generation and its binding are taken
        under the same lock as a batch's insert and commit)."""
        self._check_open()
        with self._mutex:
            self._join_compactor()  # its commits change the generation and the runs digest
            self._bloom_ready()  # a deferred insert's keys are in the generation saved
            if self._lock is not None:
                self._keeper.checkpoint(os.path.join(self.path, BLOOM_NAME), self.generation,
                                        self._binding())

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self.path}: the store is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self._lock is None:
            raise InvalidInputError(f"{self.path}: store was opened read-only")

    # -------------------------------------------------------------- properties
    @property
    def layout(self) -> Layout:
        return Layout.from_dict(self._doc["layout"])

    @property
    def policy_id(self) -> str:
        return self._doc["policy_id"]

    @property
    def shard_bits(self) -> int:
        return self._doc["shard_bits"]

    @property
    def generation(self) -> int:
        return self._doc["generation"]

    @property
    def manifest_format(self) -> str:
        """``major.minor`` of the manifest as it is on disk (1.x until upgraded)."""
        return f"{self._doc.get('major', manifest.MAJOR)}.{self._doc.get('minor', 0)}"

    @property
    def sync(self) -> bool:
        """fsync on commit (see open)."""
        return self._live.sync

    @sync.setter
    def sync(self, value: bool) -> None:
        self._live.sync = value

    @property
    def run_format(self) -> int:
        """What new runs (batches and compaction) are written as: 1 raw, 2 compressed."""
        return self._compactor.run_format

    @run_format.setter
    def run_format(self, value: int) -> None:
        self._compactor.run_format = value

    @property
    def cache_bytes(self) -> int:
        """The run cache's budget in bytes (0: off; open's ``cache_bytes``). Lowering
        it drops cached runs until the cache fits, at once."""
        return self._live.cache.budget

    @cache_bytes.setter
    def cache_bytes(self, value: int) -> None:
        self._live.cache.set_budget(value)

    @property
    def bloom(self) -> LayeredBloom | None:
        """The Bloom filter in memory (None: none kept, or dropped after a failure),
        holding every committed key (a spilled batch's deferred insert waited for)."""
        settle(self)
        return self._keeper.bf

    @bloom.setter
    def bloom(self, bf: LayeredBloom | None) -> None:
        self._keeper.bf = bf

    @property
    def bloom_state(self) -> str:
        """How the Bloom filter came to be (loaded, rebuilt, new, off), or why it was
        dropped (a failed insert: the next open rebuilds it)."""
        return self._keeper.state

    @property
    def spill_phase(self) -> str | None:
        """The phase of the ``add_new_file`` batch under way ("spill", "check",
        "commit"); None between batches. For a memory sampler on another thread."""
        return self._spill_phase

    def settle_bloom(self) -> tuple[float, float, float]:
        """Wait for the last batch's deferred Bloom insert, if one runs; return (seconds
        waited, the insert's elapsed seconds, its thread's CPU seconds). An insert's
        own figures are returned once (zeros after), for whoever books them."""
        behind = self._bloom_behind
        waited = settle(self)
        elapsed, cpu = behind.book() if behind is not None else (0.0, 0.0)
        return waited, elapsed, cpu

    def iter_keys(self, lo: int = 0, hi: int = 1 << 64) -> Iterator[np.ndarray]:
        """Every stored key in [lo, hi), ascending, in chunks of at most 2^20 keys (of a
        read-only store: its newest committed generation, when the iteration starts).
        Use each chunk before asking for the next. Raises CorruptionError when a run
        fails its checks on the way."""
        self._check_open()
        self._refresh()
        return runsmod.iter_range(self._live.runs, lo, hi)

    def __len__(self) -> int:
        self._check_open()
        return self._live.n_keys()

    # The parts' state under the names the store's helpers (spill.py, wal.py, the
    # cluster, tools) and the tests use.
    _doc = property(lambda self: self._live.doc,
                    lambda self, v: setattr(self._live, "doc", v))
    _runs = property(lambda self: self._live.runs,
                     lambda self, v: setattr(self._live, "runs", v))
    _bloom_state = property(lambda self: self._keeper.state)
    _bloom_dirty = property(lambda self: self._keeper.dirty,
                            lambda self, v: setattr(self._keeper, "dirty", v))
    last_compaction = property(lambda self: self._compactor.last)
    joined_compaction = property(lambda self: self._compactor.joined)

    def _snapshot(self) -> tuple[dict, dict]:
        return self._live.snapshot()

    def _all_readers(self, runs: dict | None = None) -> list:
        return self._live.all_readers(runs)

    def _refresh(self) -> None:
        """A read-only store moves to the newest committed generation; a writer's own
        store is always current."""
        if self._lock is None:
            self._live.refresh()

    def _commit(self, gen: int, added: list, removed: list, counters: dict,
                step: str = "") -> None:
        self._live.commit(gen, added, removed, counters, step)

    def _commit_counters(self, n_approx: int, batches: int = 1) -> None:
        self._live.commit_counters(n_approx, batches)

    def _join_retire(self) -> None:
        self._live.join_retire()

    def _join_compactor(self, stop: bool = False) -> float:
        """Wait for the background compaction (``stop``: a batch starts, so only for
        the job under way: Compactor.join)."""
        return self._compactor.join(stop)

    # ----------------------------------------------------------------- queries
    def _shard_bounds(self, sorted_keys: np.ndarray) -> np.ndarray:
        """Start index in ``sorted_keys`` of every shard, plus the end."""
        nshards = 1 << self.shard_bits
        if self.shard_bits == 0:
            return np.array([0, len(sorted_keys)], dtype=np.int64)
        starts = np.arange(nshards, dtype=np.uint64) << np.uint64(64 - self.shard_bits)
        return np.append(np.searchsorted(sorted_keys, starts), len(sorted_keys))

    def contains(self, keys) -> np.ndarray:
        """Mask over ``keys``: True where the key has been admitted, including keys a
        DedupStage handed out that sit in its write-ahead log, not merged yet.
        Reads only; a read-only store answers from the newest committed generation."""
        self._check_open()
        keys = as_keys(keys)
        # WAL keys first, then the runs: a segment is deleted only after its merge
        # committed, so a key is in one or the other (wal.PendingKeys)
        pending = self._pending.keys()
        self._refresh()
        _, runs = self._snapshot()
        uniq = prepare(keys, self.threads)
        bf = self.bloom  # once: a failed insert on the writer's thread may drop it
        if bf is not None:
            uniq = uniq[bf.query(uniq)]  # Bloom negatives are certainly absent
        found = np.zeros(len(uniq), dtype=np.bool_)
        bounds = self._shard_bounds(uniq)
        cache = self._live.cache
        for shard, shard_runs in runs.items():  # one snapshot of the live runs
            lo, hi = bounds[shard], bounds[shard + 1]
            for reader in shard_runs:
                todo = lo + np.flatnonzero(~found[lo:hi])
                if len(todo) == 0:
                    break
                sub = np.zeros(len(todo), dtype=np.bool_)
                entry = cache.acquire(reader) if cache.budget else None
                if entry is None:
                    runsmod.lookup(reader, uniq[todo], sub)  # sparse index, or the memory map
                else:  # a writer's run cache holds it: no page of the run is read
                    try:
                        runsmod.lookup_cached(entry, uniq[todo], sub)
                    finally:
                        cache.release(entry)
                found[todo[sub]] = True
        mask = mark_members(keys, uniq[found])  # every occurrence, not just the first
        if len(pending):
            mask |= report.member(pending, keys)
        return mask

    # ------------------------------------------------------------- compaction
    def compact(self, full: bool = True) -> dict:
        """Merge runs now: ``full`` every shard into one run, else the jobs the
        size-tiered policy has pending (compaction.plan). One commit per shard, so the
        temporary disk space is at most one shard's runs. Returns figures."""
        self._check_writable()
        with self._mutex:
            self._join_compactor()
            return self._compactor.run(plan(self._doc["runs"], full=full))

    def upgrade(self) -> dict:
        """Rewrite a format 1 manifest as the current format (crash-safe: one
        manifest rename; its empty runs are dropped). A no-op on a current store.
        Any write upgrades too."""
        self._check_writable()
        with self._mutex:
            self._join_compactor()
            was = self.manifest_format
            if self._doc.get("major", manifest.MAJOR) < manifest.MAJOR:
                self._commit(self.generation + 1, [], [], {}, step="upgrade-")
            return {"from": was, "to": self.manifest_format, "upgraded": was != self.manifest_format}

    def pending_compaction(self, doc: dict | None = None) -> dict:
        """What the size-tiered policy would merge now (in ``doc``, default the
        current manifest): jobs, runs, bytes."""
        return compactionmod.pending(doc or self._doc)

    # ------------------------------------------------------------ maintenance
    def stats(self) -> dict:
        """Figures about the store (keys, files, live runs per shard, write
        amplification, pending compaction, bytes on disk with and without the Bloom
        files, layout, versions, WAL segments a stage left), all of one generation (a
        read-only store moves to the newest first)."""
        self._check_open()
        settle(self)  # a deferred Bloom insert (bloom/deferred.py): its keys counted
        self._refresh()
        doc, runs = self._snapshot()
        keys = sum(r.count for rs in runs.values() for r in rs)
        out = report.stats(self, doc, runs, self._keeper.stats(
            keys, os.path.join(self.path, BLOOM_NAME), self.generation, self._binding()))
        out["run_cache"] = self._live.cache.stats()
        return out

    def verify(self) -> dict:
        """Full integrity check of one generation's runs (checksums, order, shard
        ranges, no key in two runs of a shard) and of every WAL segment a stage left
        (a damaged one would stop the next writer's open). Raises CorruptionError /
        NotSupportedError on the first fault; returns a summary otherwise. A
        read-only store checks the newest generation; a writer's own store first
        waits for its background compaction."""
        self._check_open()
        with self._mutex:
            self._join_compactor()
            self._refresh()
            manifest.read(self.path)  # the commit point itself must be readable
            doc, runs = self._snapshot()
        return report.verify(self.path, doc, runs)

    def close(self, save_bloom: bool = True) -> None:
        """Save the Bloom filter (if changed and ``save_bloom``), release the lock.
        Never loses data: a Bloom filter not saved is rebuilt by the next open.
        Closing again does nothing; any other call afterwards raises ClosedError."""
        if self._closed:
            return
        self._bloom_ready()
        # a round started by the last batch ends after its job under way (each job
        # is its own commit): what is left waits for the next writer's batches
        self._join_compactor(stop=True)
        self._join_retire()
        try:
            if save_bloom:
                self.checkpoint()
        except SeenStoreError as e:
            warnings.warn(f"Bloom filter not saved ({e}); the next open rebuilds it")
        self._closed = True
        self._sorter.close()
        self._arena.release()
        self._live.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> "SeenStore":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(save_bloom=exc_type is None)
