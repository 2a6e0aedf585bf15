"""SeenStore: the set of every key ever admitted, in a crash-safe directory.

The public face of the store package: opening, ``add``/``add_new``/``add_sorted``/
``add_new_file``, ``contains``, ``forget``/``drop_host``, ``compact``, ``upgrade``,
``stats``, ``verify``, ``checkpoint``, ``close``. A batch passes each stage once:
partitioned by shard here, sorted, checked and written by the shard threads
(scheduling.py, runs/live.py), committed (commit.py), then compaction paid for by it
runs between batches (compaction.py). The Bloom filter beside it lives in
seenstore/bloom/ (keeper.py).
See docs/architecture.md for the protocol and cost model.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterator

import numpy as np

from seenstore.store import manifest, wal as walmod
from seenstore.keys.batch import as_keys
from seenstore.bloom import Binding, LayeredBloom
from seenstore.bloom.keeper import BloomKeeper
from seenstore.errors import (ClosedError, InvalidInputError, MismatchError, SeenStoreError)
from seenstore.layout import Layout
from seenstore.store.lock import WriterLock
from seenstore.store.runs.buffers import DEFAULT_CHUNK_KEYS
from seenstore.runtime.parallel import default_threads
from seenstore.store import commit as commitmod, compaction as compactionmod, report
from seenstore.store.runs import live as runsmod
from seenstore.store import check, forgetting, opening, tombstones
from seenstore.store.admission import Admission
from seenstore.store.policyheld import held_policy, policy_fields, policy_version
from seenstore.store import rebuild as rebuildmod, urls as urlcalls
from seenstore.url.policy import Policy
from seenstore.store.opening import MODES
from seenstore.store.compaction import Compactor, plan
from seenstore.store.files import BLOOM_NAME
from seenstore.store.scheduling import BatchArena, BufferPool, ShardSorter





class SeenStore:
    """Open with ``SeenStore.open``. Not for use by two threads at once for writes
    (an internal lock serialises ``add``); ``contains`` may run beside ``add``."""

    def __init__(self, path: str, doc: dict, lock: WriterLock | None, mode: str = "exact",
                 run_format: int | None = runsmod.DEFAULT_RUN_FORMAT):
        if mode not in MODES:
            raise InvalidInputError(f"mode must be one of {MODES}, got {mode!r}")
        if run_format is not None and run_format not in runsmod.RUN_FORMATS:
            raise InvalidInputError(f"run_format must be None or one of "
                                    f"{runsmod.RUN_FORMATS}, got {run_format!r}")
        self.path = path
        self.mode = mode
        self._keeper = BloomKeeper()
        self._live = commitmod.Live(path, doc)
        self._lock = lock
        self._mutex = threading.Lock()
        self._compactor = Compactor(self._live, run_format)
        self._tomb = tombstones.Tombstones(path)  # the forgotten keys (tombstones.py)
        # exact mode only: approximate mode answers a Bloom positive as seen, and the
        # filter still holds a key a compaction dropped, so its forgotten keys stay
        # in their runs (and in T) until offered again
        self._compactor.tomb = self._tomb if mode == "exact" else None
        self.run_format = run_format  # what new runs (batches, compaction) are written as
        self.compact_between_batches = True
        self.chunk_keys = DEFAULT_CHUNK_KEYS
        # Shards checked at once: reads and writes are O_DIRECT and block, so more
        # than the 2 cores keeps the disk busy (4: ~18 % less merge time than 2 at
        # 2.25e8 stored keys, 8 no better)
        self.merge_threads = 4
        # threads doing CPU work at once (shard sorts); open(threads=) sets it
        self.threads = default_threads()
        self._buffers = BufferPool()
        self._arena = BatchArena()  # a batch's partition, masks and answer, reused
        self._sorter = ShardSorter()  # its threads keep their sort scratch across batches
        # the phase of a spilled batch under way (spill, check, commit; None between
        # batches), which a memory sampler reads (``spill_phase``)
        self._spill_phase: str | None = None
        self.last_timings: dict = {}
        self._closed = False
        self._pending = walmod.PendingKeys(path)  # keys a stage logged, not merged yet
        self.wal_replay: dict | None = None  # what the writer's open replayed
        self._admission = Admission(self)  # the write path: add, add_new, ...
        # set by a URL batch (store/urls.py): called with a batch's new keys before
        # its commit, it writes their kept URLs and stages the manifest fields
        self._on_new = None
        self._batch_fields: dict | None = None
        # set by check_update (store/values.py): called beside ``_on_new``, it writes
        # the batch's new keys' records and stages the manifest fields naming them
        self._on_values = None
        self._kept_written: list[str] = []  # kept-URL and value files the staged fields name
        self._given_policy: Policy | None = None  # open(policy=) of an identity-only store
        self._policy_cache: tuple | None = None
        self._evidence = None  # fetch evidence (store/learning.py), read on first use
        self.last_learn: dict | None = None

    # ----------------------------------------------------------------- opening
    @classmethod
    def open(cls, path: str, create: bool = False, *, readonly: bool = False,
             layout: Layout | None = None, policy_id: str | None = None,
             shard_bits: int | None = None, wait: float | None = 0.0,
             mode: str = "exact", bloom: bool = True, bloom_fpr: float | None = None,
             bloom_capacity: int | None = None, sync: bool = True,
             run_format: int | None = runsmod.DEFAULT_RUN_FORMAT,
             threads: int | None = None, cache_bytes: int | None = None,
             policy: Policy | None = None, keep_urls: bool | None = None,
             values: bool | None = None) -> "SeenStore":
        """Open (or with ``create=True`` create) the store at ``path``.

        ``layout``/``policy_id``: when given, must match the store's (MismatchError
        otherwise); used for a new store, defaults DEFAULT_LAYOUT and "safe-v1".
        ``readonly``: no lock, no cleanup, ``add`` refused. ``wait``: seconds to
        wait for another writer's lock (None = forever). ``mode``: "exact" (Bloom
        positives are confirmed on disk) or "approximate" (a Bloom positive counts
        as seen). ``bloom``: keep a Bloom filter in memory (writers only), sized for
        ``bloom_capacity`` keys (default: twice the store, at least 2^20; grown
        by layers whenever the keys in it pass the capacity) at
        ``bloom_fpr`` (None: the store's own, the last one a writer gave, recorded in
        its manifest; else the saved filter's; else DEFAULT_BLOOM_FPR, 0.001. A rate
        given is recorded with the writer's next commit, and a saved filter of
        another rate is rebuilt at it); loaded from BLOOM, or
        rebuilt from the runs when missing or
        stale (or bound to another store, or answering a stored key absent). A
        writer then replays and deletes the WAL segments a DedupStage left
        (``stage-*.wal``: keys it handed out but did not merge) before it admits
        anything (figures in ``wal_replay``); a damaged segment makes the open fail
        naming it. Raises StoreNotFoundError, NotAStoreError, LockedError,
        CorruptionError, NotSupportedError. ``sync=False`` skips every fsync: the
        commit is still atomic against a process crash, but not durable against
        power loss (for tests and throwaway stores). ``run_format``: how this writer
        writes new runs: None (the default) by size, runs of
        ``runs.live.COMPRESS_MIN_KEYS`` (2^22) keys or more compressed (about 4-5
        B/key: compaction's larger outputs, and a batch's run only when it brings
        that many new keys to one shard), smaller ones raw (8 B/key: most batches'
        runs); 1 every run raw; 2 every run compressed. Runs of both formats are
        always read, and compaction rewrites the runs it merges in the format this
        gives. ``threads``: shards sorted at once and threads of a
        whole-batch sort (default: the cores this process may use); answers never
        depend on it. ``cache_bytes``: memory a writer may keep live runs' keys in,
        so a batch checks them without reading the disk (store/runcache.py; default
        a quarter of the memory available at open, 0 turns it off; the
        ``cache_bytes`` attribute changes it later); answers never depend on it.
        ``policy``: the URL policy (a Policy; its identity is ``policy_id``); a new
        store holds it whole (``policy``), an existing one must hold the same
        (MismatchError; change it with ``set_policy``), and one that recorded only
        its identity learns the whole policy from it. ``keep_urls``: keep the URLs
        admitted by ``add_urls`` (safe-rule form, for ``rebuild``); None: decided by
        a new store's first batch (kept when it is a URL batch). ``values``: True
        creates a store that keeps a record per key beside it (``check_update``,
        ``update``, ``get``, ``counts``, ``due``, ``select``: store/values.py);
        decided at creation: True on a store created without values raises
        MismatchError, None/False on a values store leave it its values."""
        return opening.open_store(cls, path, create, readonly=readonly, layout=layout,
                                  policy_id=policy_id, shard_bits=shard_bits, wait=wait,
                                  mode=mode, bloom=bloom, bloom_fpr=bloom_fpr,
                                  bloom_capacity=bloom_capacity, sync=sync,
                                  run_format=run_format, threads=threads,
                                  cache_bytes=cache_bytes, policy=policy,
                                  keep_urls=keep_urls, values=values)

    def _adopt_settings(self, policy: Policy | None, keep_urls: bool | None) -> None:
        """At open, after the identity check: a store that records only its policy's
        identity takes the whole ``policy`` (held from its next commit; a read-only
        one uses it); ``keep_urls`` given for a store that has not decided yet."""
        doc = self._doc
        if policy is not None and doc.get("policy") is None and held_policy(doc) is None:
            self._given_policy = policy
            if self._lock is not None:
                self._batch_fields = {**(self._batch_fields or {}),
                                      **policy_fields(doc, policy, bump=False)}
        have = doc.get("keep_urls")
        if keep_urls is not None and have is None and self._lock is not None:
            if self._live.n_keys() and keep_urls:
                raise InvalidInputError(f"{self.path}: keep_urls=True needs an empty store "
                                        "(its keys' URLs were not kept)")
            self._batch_fields = {**(self._batch_fields or {}), "keep_urls": keep_urls}
        elif keep_urls is not None and have is not None and have != keep_urls:
            raise MismatchError(f"{self.path}: store was created with keep_urls={have}, "
                                f"not {keep_urls}")

    def _check_identity(self, layout, policy_id, shard_bits, values=None) -> None:
        d = self._doc
        if values and not d.get("values"):
            raise MismatchError(f"{self.path}: store was created without values; "
                                "values=True needs a store created with it "
                                "(values are decided at creation)")
        if layout is not None and Layout.from_dict(d["layout"]) != layout:
            raise MismatchError(
                f"{self.path}: store uses fingerprint layout "
                f"{Layout.from_dict(d['layout']).describe()}, not {layout.describe()}")
        if policy_id is not None and d["policy_id"] != policy_id:
            raise MismatchError(
                f"{self.path}: store was built with policy {d['policy_id']!r}, not "
                f"{policy_id!r}; open it with its own policy ('seenstore policy --store DIR' "
                "prints it), or change it with 'seenstore policy --set' / set_policy")
        if shard_bits is not None and d["shard_bits"] != shard_bits:
            raise MismatchError(
                f"{self.path}: store has shard_bits={d['shard_bits']}, not {shard_bits}")

    def _binding(self) -> Binding:
        """What a Bloom filter of this store's current runs records (docs/bloom.md)."""
        # the keys in the runs, forgotten ones too: the filter holds every one of them
        return Binding(self._doc.get("store_id", ""), self._live.n_keys(),
                       manifest.runs_digest(self._doc))

    def checkpoint(self) -> None:
        """Save the Bloom filter (BLOOM) for the current generation, so the next
        open need not rebuild it. Done by ``close``; call it to bound rebuild work
        after a crash. Safe beside ``add`` from another thread: it waits for the
        batch in progress (the filter, its generation and its binding are taken
        under the same lock as a batch's insert and commit)."""
        self._check_open()
        with self._mutex:
            self._join_compactor()  # its commits change the generation and the runs digest
            self._keeper.ready()  # a deferred insert's keys are in the generation saved
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
        """The identity of the policy the store's keys are made under."""
        return self._doc["policy_id"]

    @property
    def policy(self) -> Policy | None:
        """The policy the store holds (None: it records only its identity and was
        opened without the policy)."""
        doc = self._doc
        cached = self._policy_cache
        if cached is not None and cached[0] == doc["policy_id"]:
            return cached[1]
        policy = held_policy(doc) or self._given_policy
        if policy is not None and policy.identity == doc["policy_id"]:
            self._policy_cache = (doc["policy_id"], policy)
            return policy
        return None

    @property
    def policy_version(self) -> int:
        """0 for the policy the store was created with, one more at every change."""
        return policy_version(self._doc)

    @property
    def keep_urls(self) -> bool | None:
        """Whether ``add_urls`` keeps the URLs it admits (None: not decided yet)."""
        fields = self._batch_fields or {}
        return fields.get("keep_urls", self._doc.get("keep_urls"))

    @property
    def runs_policy_id(self) -> str:
        """The identity its run headers carry (the one it was created with)."""
        return manifest.runs_policy_id(self._doc)

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
    def run_format(self) -> int | None:
        """What new runs (batches and compaction) are written as: 1 raw, 2 compressed,
        None by size (runs of 2^22 keys or more compressed; see ``open``)."""
        return self._compactor.run_format

    @run_format.setter
    def run_format(self, value: int | None) -> None:
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
        self._keeper.settle()
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
        behind = self._keeper.behind
        waited = self._keeper.settle()
        elapsed, cpu = behind.book() if behind is not None else (0.0, 0.0)
        return waited, elapsed, cpu

    def iter_keys(self, lo: int = 0, hi: int = 1 << 64) -> Iterator[np.ndarray]:
        """Every stored key in [lo, hi), ascending, in chunks of at most 2^20 keys (of a
        read-only store: its newest committed generation, when the iteration starts);
        forgotten keys are not stored. Use each chunk before asking for the next.
        Raises CorruptionError when a run fails its checks on the way."""
        self._check_open()
        _, runs, forgotten = tombstones.snapshot(self)
        chunks = runsmod.iter_range(runs, lo, hi)
        if not len(forgotten):
            return chunks
        return tombstones.without(forgotten, chunks)

    def wait_for_compaction(self) -> float:
        """Wait until the compaction running between batches is done (a benchmark's
        timing boundary); return the seconds waited."""
        self._check_open()
        return self._join_compactor()

    def bounds(self) -> tuple[int, int] | None:
        """The smallest and largest stored key (None for an empty store), from each live
        run's first and last key: no run body is read beyond that."""
        self._check_open()
        _, runs, forgotten = tombstones.snapshot(self)
        ends = [runsmod.first_last(r) for rs in runs.values() for r in rs if r.count]
        if not ends:
            return None
        lo, hi = min(a for a, _ in ends), max(b for _, b in ends)
        if len(forgotten):  # a forgotten end: the nearest stored key inside
            return tombstones.live_bounds(runs, forgotten, lo, hi)
        return lo, hi

    def forgotten(self, keys) -> np.ndarray:
        """Mask over ``keys``: True where the key is forgotten (``forget``) and still in
        its run: absent, new when offered. All False while nothing is forgotten."""
        self._check_open()
        keys = as_keys(keys)
        _, _, t = tombstones.snapshot(self)
        return tombstones.member(t, keys)

    def __len__(self) -> int:
        """The stored keys: the keys in the runs less the forgotten ones."""
        self._check_open()
        return self._live.n_keys() - tombstones.count(self._doc)

    # ------------------------------------------------------------- forgetting
    def forget(self, keys) -> int:
        """Forget ``keys``: each stored key among them becomes absent (``contains``
        False, left out of ``len``, ``iter_keys``, ``bounds``, ``stats``, ``export``) and
        new again when offered (answered new by every add call; stored again by that
        batch's commit); keys not stored (or already forgotten) are ignored. One
        commit; the keys leave the run files when compaction next merges their runs
        (exact mode; docs/frontier.md "Forgetting"). Keys a DedupStage logged and has
        not merged are not stored yet: flush the stage first. Returns the number of
        keys forgotten."""
        return forgetting.forget(self, keys)

    def drop_host(self, host: str) -> int:
        """Forget every stored key of ``host`` (a host name): the kept URLs whose host
        is ``host`` are normalised under the store's policy and their keys forgotten
        (``forget``), so the answer is exact for the URLs the store admitted through
        ``add_urls``. Only kept-URL blocks of the host's hash range are read. Raises
        NotSupportedError for a store that keeps no URLs. Their kept URLs stay (a
        URL offered again is new, and keeps its first spelling). Returns the number of
        keys forgotten."""
        return forgetting.drop_host(self, host)

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
                step: str = "", fields: dict | None = None) -> None:
        self._live.commit(gen, added, removed, counters, step, fields)

    def _commit_counters(self, n_approx: int, batches: int = 1) -> None:
        self._live.commit_counters(n_approx, batches, self._take_fields())

    def _keys_without_urls(self) -> None:
        """A batch of keys with no URLs beside them (not a URL batch's hook): a store
        that has not decided whether it keeps URLs does not (its first batch)."""
        if self._on_new is None and self.keep_urls is None and self._lock is not None:
            self._batch_fields = {**(self._batch_fields or {}), "keep_urls": False}

    def _take_fields(self) -> dict | None:
        """The manifest fields a batch's URL hook staged (its kept-URL file): taken
        by the batch's commit, whichever it is."""
        fields, self._batch_fields = self._batch_fields, None
        self._kept_written = []
        return fields

    def _drop_kept(self) -> None:
        """A batch failed before its commit: delete the kept-URL and value files its
        hooks wrote and unstage the fields naming them (the fields staged at open stay)."""
        for path in self._kept_written:
            try:
                os.unlink(path)
            except OSError:
                pass  # a leftover the next open removes
        self._kept_written = []
        if self._batch_fields:
            for name in ("url_files", "value_files", "value_seq", "value_counts"):
                self._batch_fields.pop(name, None)

    def _join_retire(self) -> None:
        self._live.join_retire()

    def _join_compactor(self, stop: bool = False) -> float:
        """Wait for the background compaction (``stop``: a batch starts, so only for
        the job under way: Compactor.join)."""
        return self._compactor.join(stop)

    # ------------------------------------------------------------------ writing
    def add(self, keys, progress=None) -> np.ndarray:
        """Admit ``keys``; return a mask aligned with them: True exactly where the
        key was never admitted before this call and this is its first occurrence
        in the call. Durable on return (fsynced, committed). ``progress``: called
        as ``progress(shards_done, shards_total)`` as shard merges finish.

        The mask costs one more pass over the keys than ``add_new`` (a hash join of
        the keys with the new ones, on the store's ``threads``; of the distinct keys
        alone when the batch dropped its repeats first, ``_drop_repeats``)."""
        self._keys_without_urls()
        return self._admission.add(keys, progress)

    def add_new(self, keys, progress=None) -> np.ndarray:
        """Admit ``keys`` as ``add`` does; return the keys never admitted before
        this call, sorted ascending, each once (no per-occurrence mask, so no
        alignment pass: the cheaper call when the caller needs only the new keys).

        In exact mode the answer is a view of a buffer of its own, at most 4x as
        long, which the store reuses for a later answer once the caller has dropped
        every view of it (scheduling.BatchArena.answer); in approximate mode it lives
        in the call's own sorted copy of the batch when the new keys fill at least a
        quarter of it, else it is copied out, so the caller does not keep a
        batch-sized array alive for a few keys."""
        self._keys_without_urls()
        return self._admission.add_new(keys, progress)

    def add_new_file(self, path, memory: int, new_out: str | None = None) -> dict:
        """Admit the keys of batch file ``path`` (raw little-endian uint64, any order,
        repeats allowed, any size the disk holds; or an iterable of uint64 arrays, a
        batch generated as it is spilled) using about ``memory`` bytes at most,
        as one atomic batch (DRUM-style, spill.py): the keys are spilled by shard to
        bucket files in a ``spill.tmp.<pid>`` folder of the store, then each shard's
        bucket is sorted slice by slice, checked against that shard's live runs and its
        new keys written as its one new run; one manifest commit covers all shards.
        The disk needs about the batch's size for the buckets, plus the new runs.

        ``new_out``: a file path that gets the new keys (raw uint64), sorted within
        each shard, shards in order (so: sorted ascending); written before the
        commit in the spill folder and moved there after it. Returns figures:
        offered, unique, new, slices, ranged_shards (shards whose bucket was cut into
        key ranges as it was spilled), bytes_spilled, bytes_read, bytes_written, and
        seconds by stage. The Bloom filter, when the store keeps one, is fed the new
        keys after the commit, on a thread that runs on past the return (reads of
        the filter wait for it: bloom/deferred.py); its own memory is not part of
        ``memory``: open with ``bloom=False`` to stay within it (the saved filter is
        then rebuilt by a later open). Nor is the run cache's, which this call turns
        off (``cache_bytes`` = 0: the spilled check reads the runs from disk anyway,
        and the compactions after it would fill the cache beyond ``memory``); set
        ``cache_bytes`` again afterwards to spend memory on it."""
        return self._admission.add_new_file(path, memory, new_out)

    def add_sorted(self, uniq: np.ndarray, progress=None, *,
                   approx_answered: int = 0) -> np.ndarray:
        """Admit sorted unique keys; return the mask of those that were new.

        Requires: ``uniq`` sorted ascending, unique, uint64 (InvalidInputError
        otherwise). All shards the batch touches are committed together, or none.
        ``approx_answered``: keys a caller (the streaming stage) answered as seen
        from a Bloom positive alone; added to the durable counter with this commit.
        Every key is looked for in the runs, Bloom negatives too: the filter never
        decides what is written, so a damaged one cannot put a key in two runs, and
        the stage learns of a handed-out key that was stored (its anomaly check)."""
        self._keys_without_urls()
        return self._admission.add_sorted(uniq, progress, approx_answered=approx_answered)

    def _publish(self, gen: int, added: list, n_new: int, bytes_written: int,
                 approx_answered: int) -> None:
        """The one commit of a batch, whichever path wrote it: generation ``gen`` names
        the new runs ``added`` (written and durable already: ``(shard, header, sparse)``)
        beside the live ones, with the batch's counts, and their bytes earn compaction
        credit; a batch with no new run records its counts only. Raises what the
        commit raises (the caller then removes the runs it wrote)."""
        if added:
            self._commit(gen, added, [], {"batches": 1, "new": n_new,
                                          "bytes_written": bytes_written,
                                          "approx_answered": approx_answered},
                         fields=self._take_fields())
            self._compactor.earn(bytes_written)
        else:  # nothing new: no run changes, but the batch and its counts are recorded
            self._commit_counters(approx_answered)

    # ------------------------------------------------------------------- URLs
    def add_urls(self, urls, base: str | None = None) -> np.ndarray:
        """Admit URLs (str/bytes; relative ones resolved against ``base``) under the
        store's policy; return a bool mask aligned with ``urls``: True for the first
        occurrence of each URL whose key was new (rejected URLs: False). A store that
        keeps URLs writes the new ones (safe-rule form) with the batch."""
        return urlcalls.add_urls(self, urls, base)

    def contains_urls(self, urls, base: str | None = None) -> np.ndarray:
        """Mask aligned with ``urls``: True where the URL's key (under the store's
        policy) is stored; rejected URLs: False."""
        return urlcalls.contains_urls(self, urls, base)

    def set_policy(self, policy: Policy, hosts=None, notes=None) -> dict:
        """Make ``policy`` the store's (one version up) and rebuild the hosts whose
        rules changed (``hosts``: these host_keys instead; store/rebuild.py), in one
        commit. ``notes``: host -> a comment kept with its rules. Raises
        NotSupportedError for a store that keeps no URLs. Returns the figures."""
        return rebuildmod.apply(self, policy, hosts, notes)

    def rebuild(self, hosts=None) -> dict:
        """Remake the keys of ``hosts`` (host_keys; None: every host) from the kept
        URLs under the store's policy (store/rebuild.py). Returns the figures."""
        if self.policy is None:
            urlcalls.store_policy(self)
        return rebuildmod.apply(self, self.policy, hosts, bump=False)

    # ------------------------------------------------------------------ values
    @property
    def values(self) -> bool:
        """Whether the store keeps a record per key (created with ``values=True``)."""
        return bool(self._doc.get("values"))

    def check_update(self, keys, **initial) -> np.ndarray:
        """Admit ``keys`` as ``add`` does and give each new key a full record: the
        fields named in ``initial`` (scalars, or arrays aligned with ``keys``: a new
        key takes its first occurrence's), the others 0 (``state`` QUEUED). Returns
        the mask of ``add``. One batch, one commit: the records are written before
        it and named by it. NotSupportedError on a store without values."""
        from seenstore.store import values
        return values.check_update(self, keys, initial)

    def update(self, keys, **fields) -> np.ndarray:
        """Set the named ``fields`` (scalars or arrays aligned with ``keys``) of the
        stored ``keys``; absent keys are ignored, a repeated key takes its last
        occurrence's values. Returns the mask of keys updated (stored). Its own
        commit; per field the newest commit wins."""
        from seenstore.store import values
        return values.update(self, keys, fields)

    def get(self, keys) -> np.ndarray:
        """A structured array aligned with ``keys`` (``values.GET_DTYPE``): ``present``
        and the record's fields (absent keys: all zero). One sweep of the value
        files, decoding only the blocks that hold one of the keys."""
        from seenstore.store import values
        return values.get(self, keys)

    def counts(self) -> dict:
        """{State: number of stored keys in it}, summing to ``len(store)`` (from the
        manifest's counters: no file is read)."""
        from seenstore.store import values
        return values.counts(self)

    def due(self, now: int, limit: int | None = None, *, times: bool = False):
        """Stored keys whose ``next_due`` is set (not 0) and <= ``now`` (whole seconds),
        by ``next_due`` then key, at most ``limit`` (None or >= 0): uint64. One sweep of
        the value files. ``times``: return ``(keys, next_due)``, their ``next_due``
        (int64) aligned, which the sweep read anyway (a merge of several stores' answers
        by time needs them). InvalidInputError for a ``now`` that is not a finite
        64-bit number of seconds, or a bad ``limit``."""
        from seenstore.store import values
        return values.due(self, now, limit, times=bool(times))

    def select(self, state, limit: int | None = None) -> np.ndarray:
        """Stored keys whose state is ``state`` (a State, its number or its name),
        ascending, at most ``limit`` (None or >= 0). QUEUED includes keys with no
        record (a pass over the keys too)."""
        from seenstore.store import values
        return values.select(self, state, limit)

    def _forget_values(self, keys: np.ndarray) -> None:
        """For ``forget`` (tombstones.on_forgotten), on a store with values: ``keys``
        leave the state counters and get all-zero records, staged for its commit."""
        from seenstore.store import values
        values.on_forget(self, keys)  # reads the old states: before the reset
        values.reset_records(self, keys)

    def check_update_urls(self, urls, base: str | None = None, **initial) -> np.ndarray:
        """``check_update`` of URLs under the store's policy (kept like ``add_urls``);
        ``initial`` arrays align with ``urls``. Returns the mask of ``add_urls``."""
        from seenstore.store import valueurls
        return valueurls.check_update_urls(self, urls, base, initial)

    def update_urls(self, urls, base: str | None = None, **fields) -> np.ndarray:
        """``update`` of URLs under the store's policy; mask aligned with ``urls``."""
        from seenstore.store import valueurls
        return valueurls.update_urls(self, urls, base, fields)

    def get_urls(self, urls, base: str | None = None) -> np.ndarray:
        """``get`` of URLs under the store's policy, aligned with ``urls`` (rejected
        URLs: not present)."""
        from seenstore.store import valueurls
        return valueurls.get_urls(self, urls, base)

    def due_urls(self, now: int, limit: int | None = None) -> list:
        """The kept URLs (safe-rule form) of ``due(now, limit)``, in its order (a key
        with no kept URL is left out). NotSupportedError when the store keeps none."""
        from seenstore.store import valueurls
        return valueurls.urls_of(self, self.due(now, limit))

    def select_urls(self, state, limit: int | None = None) -> list:
        """The kept URLs of ``select(state, limit)``, as ``due_urls``."""
        from seenstore.store import valueurls
        return valueurls.urls_of(self, self.select(state, limit))

    # --------------------------------------------------------------- evidence
    def record_fetch(self, url, status, *, location=None, canonical=None, digest=None,
                     body=None, simhash=None, link_header=None):
        """Keep what fetching ``url`` revealed: its HTTP ``status``, the redirect target
        (``location``), the declared canonical (``canonical``; else taken from
        ``body``'s HTML or ``link_header``), the content digest (``digest``; else
        computed from ``body``, with its SimHash). Bounded per host (docs/evidence.md).
        Returns the ``Fetch`` kept; InvalidInputError for a URL with no canonical form."""
        from seenstore.store import learning
        return learning.record_fetch(self, url, status, location=location,
                                     canonical=canonical, digest=digest, body=body,
                                     simhash=simhash, link_header=link_header)

    def record_fetches(self, records) -> dict:
        """``record_fetch`` for many: an iterable of dicts with those argument names, or
        an Arrow table with those columns. A bad record is rejected, not raised:
        returns ``{"recorded": n, "rejected": [(index, reason), ...]}``."""
        from seenstore.store import learning
        return learning.record_fetches(self, records)

    def learn(self, apply: bool = True, config=None) -> list:
        """Propose per-host rules from the evidence (seenstore/evidence/learn.py); with
        ``apply``, make the adopted ones (and the withdrawal of contradicted ones)
        the store's policy, rebuilding the hosts they change (``set_policy``).
        Returns the findings: host, rule, support, counter-evidence, status."""
        from seenstore.store import learning
        return learning.learn(self, apply, learning.check_config(config))

    # ----------------------------------------------------------------- queries
    def _shard_bounds(self, sorted_keys: np.ndarray) -> np.ndarray:
        """Start index in ``sorted_keys`` of every shard, plus the end."""
        return check.shard_bounds(sorted_keys, self.shard_bits)

    def contains(self, keys) -> np.ndarray:
        """Mask over ``keys``: True where the key has been admitted (and not forgotten
        since: ``forget``), including keys a DedupStage handed out that sit in its
        write-ahead log, not merged yet.
        Reads only; a read-only store answers from the newest committed generation."""
        self._check_open()
        return check.contains(self, as_keys(keys))

    # ------------------------------------------------------------- compaction
    def compact(self, full: bool = True) -> dict:
        """Merge runs now: ``full`` every shard into one run, else the jobs the
        size-tiered policy has pending (compaction.plan). One commit per shard, so the
        temporary disk space is at most one shard's runs. Forgotten keys in the runs
        merged leave them (exact mode): ``full`` also rewrites every shard holding
        one, so T is empty afterwards. Returns figures."""
        self._check_writable()
        with self._mutex:
            self._join_compactor()
            held = frozenset()
            if full and self._compactor.tomb is not None and tombstones.count(self._doc):
                held = tombstones.shards(self._tomb.keys(self._doc), self.shard_bits)
            return self._compactor.run(plan(self._doc["runs"], full=full, rewrite=held))

    def upgrade(self) -> dict:
        """Bring the store to the current formats: a format 1 manifest is rewritten
        as the current format (one manifest rename; its empty runs are dropped), and
        every raw run of format 1.0 is rewritten as 1.1, which checks each 4 KiB page
        a lookup reads (docs/format.md; per shard its 1.0 runs merged into one run,
        checked as they are read, one commit per shard as a compaction: crash-safe,
        the extra disk space one shard's old runs). A no-op on a current store. Any
        write upgrades the manifest too (not the runs). Returns ``from`` / ``to``
        (manifest formats), ``runs_rewritten`` and ``upgraded`` (anything changed)."""
        self._check_writable()
        with self._mutex:
            self._join_compactor()
            was = self.manifest_format
            if self._doc.get("major", manifest.MAJOR) < manifest.MAJOR:
                self._commit(self.generation + 1, [], [], {}, step="upgrade-")
            old = {r.name for r in self._all_readers() if runsmod.old_minor(r)}
            jobs = compactionmod.upgrade_jobs(self._doc["runs"], old)
            if jobs:
                self._compactor.run(jobs, run_format=1)
            return {"from": was, "to": self.manifest_format, "runs_rewritten": len(old),
                    "upgraded": was != self.manifest_format or bool(old)}

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
        self._keeper.settle()  # a deferred Bloom insert (bloom/deferred.py): its keys counted
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
        self._keeper.ready()
        # a round started by the last batch ends after its job under way (each job
        # is its own commit): what is left waits for the next writer's batches
        self._join_compactor(stop=True)
        self._join_retire()
        if self._batch_fields and self._lock is not None:  # settings staged at open
            try:
                self._live.commit_counters(0, batches=0, fields=self._take_fields())
            except SeenStoreError as e:
                warnings.warn(f"store settings not recorded ({e}); give them again on open")
        if self._evidence is not None:
            self._evidence.close()  # its log is replayed by the next open
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
