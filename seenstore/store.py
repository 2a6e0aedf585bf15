"""SeenStore: the set of every key ever admitted, in a crash-safe directory.

A store is a directory: MANIFEST (the commit point), run files (keys sorted,
unique; shard = top ``shard_bits`` bits of the key; a shard has any number of
live runs, pairwise disjoint) and LOCK. ``add`` partitions a batch by shard,
sorts the shards on ``threads`` threads of their own (``sorting.py``: np.sort or
our radix sort), checks each against its shard's live runs as soon as it is
sorted (a sequential sweep per run, or point lookups for few keys; four shards at
a time, the kernels, the sort and the I/O release the GIL), writes only the new
keys as one new run per shard, then commits all shards or none. Compaction merges
runs later, between batches (tiers.py). See docs/architecture.md for the protocol
and cost model.
"""

from __future__ import annotations

import errno
import os
import re
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import manifest, wal as walmod
from .batch import as_keys, prepare
from .bloom import Binding
from .bloomlayers import LayeredBloom
from .errors import (ClosedError, CorruptionError, DiskFullError, InvalidInputError,
                     MismatchError, NotAStoreError, SeenStoreError, StoreIOError,
                     StoreNotFoundError)
from .layout import DEFAULT_LAYOUT, Layout
from .lock import NAME as LOCK_NAME, WriterLock
from .dispatch import batch as _kernels  # numpy twins below dispatch.SMALL keys
from . import spill, tiers
from .merge import DEFAULT_CHUNK_KEYS, MergeBuffers
from .runformat import (HEADER_SIZE, MAJOR as RUN_MAJOR, MINOR as RUN_MINOR, aligned_empty,
                        policy_digest, whole_blocks)
from .runreader import RunReader
from .runwriter import RunWriter
from .sorting import default_threads, describe as sort_description, sort_shards

compact_inplace, mark_first_new, mark_members, partition_top_bits, unique_inplace = (
    _kernels.compact_inplace, _kernels.mark_first_new, _kernels.mark_members,
    _kernels.partition_top_bits, _kernels.unique_inplace)

DEFAULT_POLICY_ID = "safe-v1"
BLOOM_NAME = "BLOOM"
DEFAULT_BLOOM_FPR = 1e-3
MIN_BLOOM_CAPACITY = 1 << 20
MODES = ("exact", "approximate")
DEFAULT_SHARD_BITS = 4
# Compaction credit: each batch earns compaction the right to read (and write)
# COMPACT_CREDIT times the bytes of the new run(s) it wrote; unspent credit carries
# over. After one batch, jobs run while they fit both the credit and COMPACT_CREDIT x
# that batch's bytes (the first job only needs the credit): the compaction charged
# to one batch stays a small multiple of its own writes, spread over the next batches.
# Size-tiered at FANOUT 4 rewrites a key about log4(N / batch) times.
COMPACT_CREDIT = 3
MAX_SHARD_BITS = 12
REBUILD_CHUNK_KEYS = 1 << 24  # 128 MiB read buffer when a Bloom filter is rebuilt
BLOOM_SAMPLE_KEYS = 4096  # stored keys a loaded Bloom filter must answer present
SNAPSHOT_RETRIES = 20  # a reader's attempts at opening the runs of one committed generation
_RUN_RE = re.compile(r"^s(\d{4})-g(\d{10})\.run$")
_TMP_RE = re.compile(r"^(MANIFEST\.tmp|BLOOM(\.L\d+)?\.tmp\.\d+)$")
_BLOOM_RE = re.compile(r"^BLOOM(\.L\d+)?$")
# test seam: "point" or "point@n" -> SIGKILL self at the (n-th) pass through there
_FAULT, _, _FAULT_AT = os.environ.get("SEENSTORE_FAULT", "").partition("@")
_fault_hits: dict = {}


def _fault(point: str) -> None:
    """Crash on purpose at a named step (tests only; see tests/test_crash.py)."""
    if _FAULT == point:
        _fault_hits[point] = _fault_hits.get(point, 0) + 1
        if _fault_hits[point] >= int(_FAULT_AT or 1):
            import signal
            os.kill(os.getpid(), signal.SIGKILL)


def run_name(shard: int, generation: int) -> str:
    return f"s{shard:04d}-g{generation:010d}.run"


def _io_error(e: OSError, what: str) -> SeenStoreError:
    if e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return DiskFullError(f"{what}: {e.strerror}; nothing was committed")
    return StoreIOError(f"{what}: {e.strerror or e}; nothing was committed")


class SeenStore:
    """Open with ``SeenStore.open``. Not for use by two threads at once for writes
    (an internal lock serialises ``add``); ``contains`` may run beside ``add``."""

    def __init__(self, path: str, doc: dict, lock: WriterLock | None, mode: str = "exact",
                 run_format: int = tiers.DEFAULT_RUN_FORMAT):
        if mode not in MODES:
            raise InvalidInputError(f"mode must be one of {MODES}, got {mode!r}")
        if run_format not in tiers.RUN_FORMATS:
            raise InvalidInputError(f"run_format must be one of {tiers.RUN_FORMATS}, "
                                    f"got {run_format!r}")
        self.run_format = run_format  # what new runs (batches, compaction) are written as
        self.path = path
        self.mode = mode
        self.bloom: LayeredBloom | None = None
        self._bloom_dirty = False
        self._bloom_state = "off"
        self._doc = doc
        self._lock = lock
        self._mutex = threading.Lock()
        self._runs: dict[int, list[RunReader]] = {}  # shard -> live runs, oldest first
        self._compactor: threading.Thread | None = None
        self._compact_error: BaseException | None = None
        self._credit = 0  # bytes compaction may still read (earned by batches)
        self._credit_step = 0  # what the last batch earned: one round's spending limit
        self.compact_between_batches = True
        self.last_compaction: dict = {}  # figures of the last background compaction
        self.joined_compaction: dict = {}  # ... of the one the last write waited for
        self.chunk_keys = DEFAULT_CHUNK_KEYS
        # Shards checked at once: reads and writes are O_DIRECT and block, so more
        # than the 2 cores keeps the disk busy (4: 18 % less merge time than 2 at
        # 2.25e8 stored keys, 8 no better; scratch measurement in the issue 6 note)
        self.merge_threads = 4
        # threads doing CPU work at once (shard sorts); open(threads=) sets it
        self.threads = default_threads()
        self._retiring: threading.Thread | None = None
        self._buffer_pool: list[MergeBuffers] = []
        self.last_timings: dict = {}
        self.sync = True  # fsync on commit (see open)
        self._closed = False
        self._view_lock = threading.Lock()  # (self._doc, self._runs) change together
        self._pending = walmod.PendingKeys(path)  # keys a stage logged, not merged yet
        self.wal_replay: dict | None = None  # what the writer's open replayed

    # ----------------------------------------------------------------- opening
    @classmethod
    def open(cls, path: str, create: bool = False, *, readonly: bool = False,
             layout: Layout | None = None, policy_id: str | None = None,
             shard_bits: int | None = None, wait: float | None = 0.0,
             mode: str = "exact", bloom: bool = True, bloom_fpr: float = DEFAULT_BLOOM_FPR,
             bloom_capacity: int | None = None, sync: bool = True,
             run_format: int = tiers.DEFAULT_RUN_FORMAT,
             threads: int | None = None) -> "SeenStore":
        """Open (or with ``create=True`` create) the store at ``path``.

        ``layout``/``policy_id``: when given, must match the store's (MismatchError
        otherwise); used for a new store, defaults DEFAULT_LAYOUT and "safe-v1".
        ``readonly``: no lock, no cleanup, ``add`` refused. ``wait``: seconds to
        wait for another writer's lock (None = forever). ``mode``: "exact" (Bloom
        positives are confirmed on disk) or "approximate" (a Bloom positive counts
        as seen). ``bloom``: keep a Bloom filter in memory (writers only), sized for
        ``bloom_capacity`` keys (default: twice the store, at least 2^20; grown
        2x whenever the keys in it pass the capacity) at
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
        depend on it."""
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise InvalidInputError(f"threads must be a whole number >= 1, got {threads!r}")
        path = os.path.abspath(path)
        if os.path.exists(path) and not os.path.isdir(path):
            raise NotAStoreError(f"{path}: is a file, not a store directory")
        has_manifest = os.path.exists(os.path.join(path, manifest.NAME))
        if not has_manifest:
            if not create:
                if os.path.isdir(path):
                    raise NotAStoreError(f"{path}: not a seenstore store (no {manifest.NAME})")
                raise StoreNotFoundError(f"{path}: no store here (create one with create=True)")
            if readonly:
                raise StoreNotFoundError(f"{path}: no store here to open read-only")
            stray = [n for n in (os.listdir(path) if os.path.isdir(path) else [])
                     if not (_RUN_RE.match(n) or _TMP_RE.match(n) or n == LOCK_NAME
                             or spill.SPILL_RE.match(n))]
            if stray:
                raise NotAStoreError(
                    f"{path}: directory is not empty and holds no store ({stray[0]!r} ...)")
        if mode not in MODES:
            raise InvalidInputError(f"mode must be one of {MODES}, got {mode!r}")
        if readonly:
            store = cls._open_readonly(path, layout, policy_id)
            store.threads = threads or store.threads
            return store
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise _io_error(e, f"{path}: cannot create store directory") from e
        lock = WriterLock(path, wait)
        try:
            if not os.path.exists(os.path.join(path, manifest.NAME)):
                cls._create(path, layout or DEFAULT_LAYOUT, policy_id or DEFAULT_POLICY_ID,
                            DEFAULT_SHARD_BITS if shard_bits is None else shard_bits, sync)
            doc = manifest.read(path)
            store = cls(path, doc, lock, mode, run_format)
            store.sync = sync
            store.threads = threads or store.threads
            store._check_identity(layout, policy_id, shard_bits)
            store._remove_leftovers()
            store._runs = store._readers_for(doc)
            if bloom or mode == "approximate":
                store._load_or_build_bloom(bloom_fpr, bloom_capacity)
            store.wal_replay = walmod.replay_wal(store)
            return store
        except BaseException:
            lock.release()
            raise

    @classmethod
    def _open_readonly(cls, path, layout, policy_id) -> "SeenStore":
        store = cls(path, manifest.read(path), None)
        store._check_identity(layout, policy_id, None)
        store._refresh(force=True)
        return store

    def _refresh(self, force: bool = False) -> None:
        """Read-only stores: move to the newest committed generation, opening all its
        runs (one consistent snapshot: an open run stays readable after a writer
        retires it). A writer may commit and delete runs between our manifest read
        and our opens: then the next manifest names other runs, and we retry with it.
        The writer's own store is always current (no-op)."""
        if self._lock is not None:
            return
        for attempt in range(SNAPSHOT_RETRIES):
            doc = manifest.read(self.path)
            if not force and doc["generation"] == self.generation:
                with self._view_lock:
                    self._doc = doc  # counters may have changed, runs have not
                return
            try:
                runs = self._readers_for(doc, {})
            except SeenStoreError:
                if (attempt == SNAPSHOT_RETRIES - 1
                        or manifest.read(self.path)["generation"] == doc["generation"]):
                    raise  # the runs of the current generation are damaged
                continue
            with self._view_lock:
                self._doc, self._runs = doc, runs
            return

    def _snapshot(self) -> tuple[dict, dict]:
        """(manifest, live runs by shard) of one generation, taken together."""
        with self._view_lock:
            return self._doc, self._runs

    @staticmethod
    def _create(path: str, layout: Layout, policy_id: str, shard_bits: int, sync: bool) -> None:
        if not 0 <= shard_bits <= MAX_SHARD_BITS:
            raise InvalidInputError(f"shard_bits must be in 0..{MAX_SHARD_BITS}")
        try:
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            manifest.write(path, {  # no run at all: a shard's runs appear with its keys
                "store_id": manifest.new_store_id(), "generation": 0,
                "layout": layout.to_dict(), "policy_id": policy_id,
                "shard_bits": shard_bits, "runs": [], "created": now, "updated": now,
                "counters": dict(manifest.NEW_COUNTERS),
            }, sync=sync)
        except OSError as e:
            raise _io_error(e, f"{path}: cannot create store") from e

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

    def _remove_leftovers(self) -> None:
        """Delete files of an interrupted merge, compaction or upgrade: runs the
        manifest does not name, temporary manifests and Bloom files, the spill
        folders of a batch bigger than memory (``add_new_file``)."""
        spill.remove_leftovers(self.path)
        live = {r["file"] for r in self._doc["runs"]}
        for name in os.listdir(self.path):
            if (_RUN_RE.match(name) and name not in live) or _TMP_RE.match(name):
                try:
                    os.unlink(os.path.join(self.path, name))
                except OSError as e:
                    raise _io_error(e, f"{name}: cannot remove leftover") from e

    def _readers_for(self, doc: dict, have: dict | None = None) -> dict:
        """Readers of the live runs ``doc`` names, by shard (oldest first), each checked
        against it; ``have``: readers already open by file name (kept: their sparse
        index is built)."""
        runs: dict[int, list[RunReader]] = {}
        pd = policy_digest(doc["policy_id"])
        for r in doc["runs"]:
            reader = (have or {}).get(r["file"])
            if reader is None:
                reader = tiers.open_reader(os.path.join(self.path, r["file"]))
            h = reader.header
            if (h.count != r["count"] or f"{h.body_checksum:016x}" != r["checksum"]
                    or h.shard != r["shard"] or h.policy_digest != pd
                    or h.host_bits != Layout.from_dict(doc["layout"]).host_bits
                    or h.shard_bits != doc["shard_bits"]):
                raise CorruptionError(f"{r['file']}: header does not match the manifest")
            runs.setdefault(r["shard"], []).append(reader)
        return runs

    def _all_readers(self, runs: dict | None = None) -> list:
        """Every live run (of ``runs``, default the store's), shard by shard, oldest first."""
        runs = self._runs if runs is None else runs
        return [r for shard in sorted(runs) for r in runs[shard]]

    def _binding(self) -> Binding:
        """What a Bloom filter of this store's current runs records (docs/bloom.md)."""
        return Binding(self._doc.get("store_id", ""), len(self), manifest.runs_digest(self._doc))

    def _bloom_misses_a_stored_key(self, bf: LayeredBloom) -> bool:
        """True if ``bf`` answers absent for one of up to BLOOM_SAMPLE_KEYS stored keys
        spread over every run (first, last and evenly between): a filter of these
        runs has no false negatives, so one miss proves it is not theirs (zeroed,
        forged, or built from other keys). A few page reads per run."""
        total = max(len(self), 1)
        for reader in self._all_readers():
            n = reader.count
            if not n:
                continue
            sample = tiers.sample_keys(reader, max(2, BLOOM_SAMPLE_KEYS * n // total))
            if not bf.query(sample).all():
                return True
        return False

    def _load_or_build_bloom(self, fpr: float, capacity: int | None) -> None:
        """Use BLOOM if it is bound to this store's current runs (store id, generation,
        key count, runs digest), answers a sample of stored keys present and fits;
        else rebuild it from the runs. In exact mode a Bloom negative skips the disk,
        so a filter of other keys would hand stored keys out again (docs/bloom.md)."""
        want = max(capacity, len(self)) if capacity else max(2 * len(self), MIN_BLOOM_CAPACITY)
        path = os.path.join(self.path, BLOOM_NAME)
        try:
            bf, gen = LayeredBloom.load(path)
            fits = (capacity is None or bf.capacity >= capacity) and bf.capacity >= len(self)
            if gen != self.generation:
                self._bloom_state = "rebuilt (stale file)"
            elif bf.binding != self._binding():
                self._bloom_state = "rebuilt (file not bound to this store's runs)"
            elif self._bloom_misses_a_stored_key(bf):
                self._bloom_state = "rebuilt (file answered a stored key absent)"
            elif bf.target_fpr == fpr and fits:
                self.bloom, self._bloom_state = bf, "loaded"
                return
            else:
                self._bloom_state = "rebuilt (other size or target)"
        except StoreNotFoundError:
            self._bloom_state = "rebuilt (no file)"
        except SeenStoreError:
            self._bloom_state = "rebuilt (unreadable file)"  # derived data: rebuild it
        self._rebuild_bloom(want, fpr)

    def _rebuild_bloom(self, capacity: int, fpr: float) -> None:
        bf = LayeredBloom.for_capacity(int(capacity), fpr)
        # Large reads: each insert call sweeps the whole filter region by region.
        buf = aligned_empty(max([min(REBUILD_CHUNK_KEYS, whole_blocks(8 * max(1, len(self))) // 8)]
                                + [tiers.min_buffer_keys(r) for r in self._all_readers()]))
        for reader in self._all_readers():  # every live run
            for n in reader.chunks(buf):
                bf.add(buf[:n])
        self.bloom = bf
        self._bloom_dirty = True

    def checkpoint(self) -> None:
        """Save the Bloom filter (BLOOM) for the current generation, so the next
        open need not rebuild it. Done by ``close``; call it to bound rebuild work
        after a crash. Safe beside ``add`` from another thread: it waits for the
        batch in progress (the filter, its generation and its binding are taken
        under the same lock as a batch's insert and commit)."""
        self._check_open()
        with self._mutex:
            self._join_compactor()  # its commits change the generation and the runs digest
            if self.bloom is not None and self._bloom_dirty and self._lock is not None:
                self.bloom.save(os.path.join(self.path, BLOOM_NAME), self.generation,
                                self._binding())
                self._bloom_dirty = False

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self.path}: the store is closed")

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

    def __len__(self) -> int:
        self._check_open()
        return sum(r.count for r in self._all_readers())

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
        for shard, shard_runs in runs.items():  # one snapshot of the live runs
            lo, hi = bounds[shard], bounds[shard + 1]
            for reader in shard_runs:
                todo = lo + np.flatnonzero(~found[lo:hi])
                if len(todo) == 0:
                    break
                sub = np.zeros(len(todo), dtype=np.bool_)
                tiers.lookup(reader, uniq[todo], sub)  # sparse index, or the memory map
                found[todo[sub]] = True
        mask = mark_members(keys, uniq[found])  # every occurrence, not just the first
        if len(pending):
            mask |= _member(pending, keys)
        return mask

    # ----------------------------------------------------------------- writing
    def add(self, keys, progress=None) -> np.ndarray:
        """Admit ``keys``; return a mask aligned with them: True exactly where the
        key was never admitted before this call and this is its first occurrence
        in the call. Durable on return (fsynced, committed). ``progress``: called
        as ``progress(shards_done, shards_total)`` as shard merges finish.

        The mask costs one more pass over the keys than ``add_new``."""
        keys = as_keys(keys)
        new = self._admit(keys, progress)
        t1 = time.perf_counter()
        mask = mark_first_new(keys, new)
        self.last_timings["align_s"] = time.perf_counter() - t1
        return mask

    def add_new(self, keys, progress=None) -> np.ndarray:
        """Admit ``keys`` as ``add`` does; return the keys never admitted before
        this call, sorted ascending, each once (no per-occurrence mask, so no
        alignment pass: the cheaper call when the caller needs only the new keys).

        The answer lives in the call's own sorted copy of the batch when the new
        keys fill at least a quarter of it; otherwise it is copied out, so the
        caller does not keep a batch-sized array alive for a few keys."""
        keys = as_keys(keys)
        new = self._admit(keys, progress)
        return new.copy() if 4 * len(new) < len(keys) else new

    def add_new_file(self, path: str, memory: int, new_out: str | None = None) -> dict:
        """Admit the keys of batch file ``path`` (raw little-endian uint64, any order,
        repeats allowed, any size the disk holds) using about ``memory`` bytes at most,
        as one atomic batch (DRUM-style, spill.py): the keys are spilled by shard to
        bucket files in a ``spill.tmp.<pid>`` folder of the store, then each shard's
        bucket is sorted slice by slice, checked against that shard's live runs and its
        new keys written as its one new run; one manifest commit covers all shards.
        The disk needs about the batch's size for the buckets, plus the new runs.

        ``new_out``: a file path that gets the new keys (raw uint64), sorted within
        each shard, shards in order (so: sorted ascending); written before the
        commit in the spill folder and moved there after it. Returns figures:
        offered, unique, new, slices, bytes_spilled, bytes_read, bytes_written, and
        seconds by stage. The Bloom filter, when the store keeps one, is fed the new
        keys (its own memory is not part of ``memory``: open with ``bloom=False``
        to stay within it; the saved filter is then rebuilt by a later open)."""
        self._check_writable()
        with self._mutex:
            waited = self._join_compactor()
            figures = spill.admit_file(self, path, memory, _fault, new_out)
            timings = self._new_timings(figures["offered"])
            timings.update({k: v for k, v in figures.items() if k in timings or k.endswith("_s")})
            self._record_compaction(waited)
            return figures

    def _admit(self, keys: np.ndarray, progress) -> np.ndarray:
        """Sort, check, write and commit ``keys``; return the new keys, sorted, each once.

        Exact mode: the keys are only partitioned by shard here (one counting pass);
        one thread then sorts and deduplicates the shards in order while the shards
        already sorted are checked against their runs, so the sorting overlaps their
        disk I/O. The Bloom insert of the raw keys runs on another thread meanwhile:
        exact answers never wait for the filter (the runs decide), so the insert only
        has to finish before
        return. Extra bits from a batch that then fails to commit only cost a
        positive the disk answers. Approximate mode sorts the whole batch first: the
        Bloom answers decide what is written at all."""
        self._check_writable()
        with self._mutex:
            waited = self._join_compactor()
            behind = None
            if self.bloom is not None and self.mode == "exact" and len(keys):
                self._reserve_bloom(len(keys))
                behind = self.bloom.add_in_background(keys)
            try:
                t0 = time.perf_counter()
                if self.mode == "exact":
                    part = np.empty(len(keys), dtype=np.uint64)
                    bounds = np.empty((1 << self.shard_bits) + 1, dtype=np.int64)
                    partition_top_bits(keys, self.shard_bits, part, bounds)
                    t_sort = time.perf_counter() - t0
                    new = self._add_partitioned(part, bounds, progress, behind)
                else:
                    uniq = prepare(keys, self.threads)
                    t_sort = time.perf_counter() - t0
                    is_new = self._add_sorted(uniq, progress)
                    new = uniq[:compact_inplace(uniq, is_new)]
            finally:
                if behind is not None:
                    self._finish_bloom(behind)  # no-op when already waited for
        self.last_timings["sort_s"] = t_sort
        self.last_timings["offered"] = len(keys)
        self._record_compaction(waited)
        return new

    def _finish_bloom(self, behind) -> int:
        """Wait for a background Bloom insert; return its count of certainly-new keys.

        The filter is derived data: if its insert failed, a batch that committed must
        not fail for it, so the filter is dropped (``contains`` then asks the runs; the
        next open rebuilds it from them) with a warning. If the wait itself is
        interrupted (KeyboardInterrupt), the insert may still be running: the filter
        is dropped too, since a later insert beside it could lose bits."""
        if self.bloom is None or behind.dropped:
            return 0
        try:
            return behind.wait()
        except Exception as e:
            warnings.warn(f"Bloom filter insert failed ({e!r}); filter dropped, the next "
                          "open rebuilds it from the runs")
            self._drop_bloom(behind)
            return 0
        except BaseException:
            self._drop_bloom(behind)
            raise

    def _drop_bloom(self, behind) -> None:
        behind.dropped = True
        self.bloom = None
        self._bloom_dirty = False
        self._bloom_state = "dropped (insert failed or interrupted)"

    def _check_writable(self) -> None:
        self._check_open()
        if self._lock is None:
            raise InvalidInputError(f"{self.path}: store was opened read-only")

    def add_sorted(self, uniq: np.ndarray, progress=None, *, approx_answered: int = 0) -> np.ndarray:
        """Admit sorted unique keys; return the mask of those that were new.

        Requires: ``uniq`` sorted ascending, unique, uint64 (InvalidInputError
        otherwise). All shards the batch touches are committed together, or none.
        ``approx_answered``: keys a caller (the streaming stage) answered as seen
        from a Bloom positive alone; added to the durable counter with this commit.
        Every key is looked for in the runs, Bloom negatives too: the filter never
        decides what is written, so a damaged one cannot put a key in two runs, and
        the stage learns of a handed-out key that was stored (its anomaly check)."""
        self._check_writable()
        if not (isinstance(uniq, np.ndarray) and uniq.dtype == np.uint64 and uniq.ndim == 1):
            raise InvalidInputError("add_sorted needs a 1-D uint64 array (use add for any keys)")
        if len(uniq) > 1 and not bool(np.all(uniq[1:] > uniq[:-1])):
            raise InvalidInputError(
                "add_sorted needs keys sorted ascending and unique (use add for any keys)")
        with self._mutex:
            waited = self._join_compactor()
            is_new = self._add_sorted(uniq, progress, approx_answered)
            self._record_compaction(waited)
            return is_new

    def _record_compaction(self, waited: float) -> None:
        """Book the compaction this call waited for in ``last_timings``: seconds, and
        the bytes it read and wrote (between batches, paid for by earlier ones)."""
        c = self.joined_compaction
        self.last_timings["compact_wait_s"] = waited
        self.last_timings["compact_bytes_read"] = c.get("bytes_read", 0)
        self.last_timings["compact_bytes_written"] = c.get("bytes_written", 0)

    def _new_timings(self, n: int) -> dict:
        """The figures of one call (``last_timings``), zeroed; ``n`` keys offered."""
        self.last_timings = {
            "sort_s": 0.0, "align_s": 0.0, "bloom_s": 0.0, "bloom_rebuild_s": 0.0,
            "bloom_background_s": 0.0, "merge_s": 0.0, "shard_sort_s": 0.0, "commit_s": 0.0,
            "compact_wait_s": 0.0,
            "bytes_read": 0, "bytes_written": 0, "offered": n, "unique": n, "new": 0,
            "bloom_negative": 0, "approx_answered": 0}
        return self.last_timings

    def _add_partitioned(self, part: np.ndarray, bounds: np.ndarray, progress,
                         behind) -> np.ndarray:
        """Merge and commit keys grouped by shard (``part``, shard s at
        ``part[bounds[s]:bounds[s+1]]``, unsorted, repeats allowed); return the new keys,
        sorted, each once, as a view of the front of ``part``. ``behind``: the
        PendingAdd inserting these keys into the Bloom filter, or None (no filter)."""
        timings = self._new_timings(len(part))
        if behind is not None:
            self._bloom_dirty = True
        segs = self._write_batch(part, bounds, timings, progress, sort_parts=True)
        timings["unique"] = sum(m for _, m, _ in segs)
        n = 0
        for lo, m, mask in segs:  # the new keys of every shard, in shard order, to the front
            k = compact_inplace(part[lo:lo + m], mask)
            part[n:n + k] = part[lo:lo + k]
            n += k
        self._after_merge(timings, behind, None)
        return part[:n]

    def _add_sorted(self, uniq: np.ndarray, progress, approx_answered: int = 0) -> np.ndarray:
        """Merge and commit sorted unique ``uniq``; return the mask of new keys. The
        Bloom filter is asked (and in exact mode filled) before the merge."""
        timings = self._new_timings(len(uniq))
        is_new = np.zeros(len(uniq), dtype=np.bool_)
        if len(uniq) == 0:
            if approx_answered:
                self._commit_counters(approx_answered, batches=0)
            return is_new
        t0 = time.perf_counter()
        maybe = None
        if self.bloom is not None and self.mode == "exact":
            # Insert now, in the same pass as the query: every key of the batch is
            # in the store once it commits, and if it does not, extra bits only
            # make a positive that the disk check answers.
            self._reserve_bloom(len(uniq))
            maybe = self.bloom.add_query(uniq)
            self._bloom_dirty = True
        elif self.bloom is not None:
            maybe = self.bloom.query(uniq)
        if self.bloom is not None:
            timings["bloom_s"] = time.perf_counter() - t0
        cand, n_approx = uniq, 0
        if maybe is not None:
            timings["bloom_negative"] = int(len(uniq) - maybe.sum())
            if self.mode == "approximate":  # a Bloom positive counts as seen
                cand = uniq[~maybe]
                n_approx = len(uniq) - len(cand)
        n_approx += approx_answered
        timings["approx_answered"] = n_approx
        cand_new = np.zeros(len(cand), dtype=np.bool_)
        for lo, m, mask in self._write_batch(cand, self._shard_bounds(cand), timings,
                                             progress):
            cand_new[lo:lo + m] = mask
        if cand is uniq:
            is_new = cand_new
        else:
            is_new[~maybe] = cand_new
        self._after_merge(timings, None, uniq[is_new] if self.mode == "approximate" else None)
        return is_new

    def _reserve_bloom(self, n: int) -> None:
        """Before ``n`` keys go into the filter: a new layer if they would overfill
        the newest (the FPR target holds at every moment; no rebuild, bloomlayers.py)."""
        self.bloom.reserve(n)

    def _after_merge(self, timings: dict, behind, stored_new) -> None:
        """Bloom upkeep once a batch committed: wait for the background insert
        (``behind``), or insert ``stored_new`` (approximate mode: only what was stored);
        then start the compaction this batch paid for."""
        if behind is not None:  # the wait is the Bloom's share of this call's time
            t1 = time.perf_counter()
            timings["bloom_negative"] = self._finish_bloom(behind)
            timings["bloom_s"] += time.perf_counter() - t1
            timings["bloom_background_s"] = behind.elapsed_s
        if self.bloom is not None and timings["new"]:
            if stored_new is not None:
                t1 = time.perf_counter()
                self._reserve_bloom(len(stored_new))
                self.bloom.add(stored_new)
                self._bloom_dirty = True
                timings["bloom_s"] += time.perf_counter() - t1
        if self.bloom is not None:
            timings["bloom_layers"] = len(self.bloom.layers)
        self._start_compactor()

    def _write_batch(self, keys: np.ndarray, bounds: np.ndarray, timings: dict,
                     progress=None, sort_parts: bool = False) -> list:
        """Check every shard's keys against its live runs, write the new ones as one new
        run per shard and commit; return ``(lo, m, mask)`` per shard that got keys: its
        keys are ``keys[lo:lo + m]``, sorted and unique, ``mask`` True where new.

        ``keys[bounds[s]:bounds[s+1]]`` are shard s's keys: sorted and unique, or with
        ``sort_parts`` in any order with repeats (``self.threads`` threads then sort and
        deduplicate them in place, shards side by side, with ``sorting.sort_shards``,
        while the shards already sorted are checked: the sorting overlaps their disk
        I/O). Every key is looked for in the runs, whatever a Bloom filter said of it:
        only keys no live run holds are written, so the runs of a shard stay disjoint
        even under a damaged filter."""
        gen = self.generation + 1
        jobs = [s for s in range(1 << self.shard_bits) if bounds[s] < bounds[s + 1]]
        if not jobs:  # no key, or all answered by the Bloom filter alone (approximate)
            if timings["offered"]:
                self._commit_counters(timings["approx_answered"])
            return []
        pd = policy_digest(self.policy_id)
        writers: dict = {}
        runs = self._runs  # the live runs this batch is checked against
        t0 = time.perf_counter()
        finished = [0]
        finished_lock = threading.Lock()

        def job(shard: int):
            try:
                return check_shard(shard)
            finally:
                with finished_lock:
                    finished[0] += 1
                    if progress is not None:
                        progress(finished[0], len(jobs))

        def check_shard(shard: int):
            lo, hi = int(bounds[shard]), int(bounds[shard + 1])
            sort_s = 0.0
            if sort_parts:
                hi, sort_s = sorted_parts[shard].result()
            part = keys[lo:hi]
            found = np.zeros(hi - lo, dtype=np.bool_)
            bufs = self._take_buffers()
            try:
                read = tiers.check_runs(runs.get(shard, []), part, found, bufs.old)
                header = sparse = None
                nbytes = 0
                if not found.all():
                    w = tiers.new_writer(os.path.join(self.path, run_name(shard, gen)),
                                         self.layout.host_bits, self.shard_bits, shard, pd,
                                         self.run_format, buf=bufs.write)
                    writers[shard] = w
                    w.write(part[~found])  # only the new keys
                    # fsync here, in the shard's thread: the fsyncs of several shards
                    # overlap each other and the checks still running
                    header, sparse, nbytes = tiers.finish(w, self.sync)
            finally:
                self._buffer_pool.append(bufs)  # list.append/pop are atomic
            return shard, header, sparse, (lo, hi - lo, ~found), sort_s, read, nbytes

        sorter, sorted_parts = None, {}
        try:
            try:
                # self.threads threads sort the shards in order while the checks of
                # those already sorted read and write: the sorting overlaps their disk I/O
                if sort_parts:
                    sorter, sorted_parts = sort_shards(keys, bounds, jobs, self.threads)
                with ThreadPoolExecutor(max_workers=max(self.merge_threads,
                                                        self.threads)) as pool:
                    done = list(pool.map(job, jobs))
            except OSError as e:
                raise _io_error(e, f"{self.path}: writing runs") from e
            t1 = time.perf_counter()
            timings["merge_s"] = t1 - t0
            timings["shard_sort_s"] = sum(d[4] for d in done)
            added = [(s, h, sp) for s, h, sp, _, _, _, _ in done if h is not None]
            timings["bytes_read"] = sum(d[5] for d in done)
            timings["bytes_written"] = sum(d[6] for d in done)
            segs = [d[3] for d in done]
            n_new = sum(int(mask.sum()) for _, _, mask in segs)
            if added:
                c = {"batches": 1, "new": n_new, "bytes_written": timings["bytes_written"],
                     "approx_answered": timings["approx_answered"]}
                self._commit(gen, added, [], c)
                self._credit_step = COMPACT_CREDIT * timings["bytes_written"]
                self._credit += self._credit_step
            else:  # nothing new: no run changes, but the batch and its counts are recorded
                self._commit_counters(timings["approx_answered"])
            timings["commit_s"] = time.perf_counter() - t1
            timings["new"] = n_new
            return segs
        except BaseException:
            for w in writers.values():
                w.abort()
            raise
        finally:
            if sorter is not None:
                sorter.shutdown(cancel_futures=True)

    def _take_buffers(self) -> MergeBuffers:
        """A shard check's buffers from the pool (one set per checking thread, reused
        across batches), or new ones when none fits ``chunk_keys``."""
        while self._buffer_pool:
            try:
                bufs = self._buffer_pool.pop()
            except IndexError:
                break
            if bufs.chunk_keys == self.chunk_keys:
                return bufs
        return MergeBuffers(self.chunk_keys)

    def _commit_counters(self, n_approx: int, batches: int = 1) -> None:
        """Record a batch that changed no run (every key was stored already) and the
        keys answered by the Bloom filter alone: a manifest with the same runs and
        generation, new counters (upgraded to the current format, as every commit)."""
        doc = manifest.upgraded(self._doc, len(self))
        c = dict(doc["counters"])
        c["batches"] += batches
        if n_approx:
            c["approx_answered"] = c.get("approx_answered", 0) + n_approx
        doc["counters"] = c
        doc["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        try:
            manifest.write(self.path, doc, sync=self.sync)
        except OSError as e:
            raise _io_error(e, f"{self.path}: committing counters") from e
        with self._view_lock:
            self._doc = doc

    def _commit(self, gen: int, added: list, removed: list, counters: dict,
                step: str = "") -> None:
        """Make generation ``gen`` the store: the runs ``added`` (``(shard, header,
        sparse index)``, files already written and fsynced) join the live runs, the
        files ``removed`` leave them, ``counters`` are added to the manifest's. A
        format 1 manifest is upgraded in the same commit (manifest.upgraded: its
        empty runs leave too). ``step``: prefix of the fault points ("" for a batch,
        "compact-", "upgrade-")."""
        self._join_retire()
        try:
            if self.sync:
                manifest.fsync_dir(self.path)  # the new run names are durable
            _fault(step + "before-manifest")
            doc = manifest.upgraded(self._doc, len(self))
            gone = set(removed) | {r["file"] for r in self._doc["runs"]} - {
                r["file"] for r in doc["runs"]}
            runs = [r for r in doc["runs"] if r["file"] not in gone]
            runs += [{"shard": shard, "file": run_name(shard, gen), "count": h.count,
                      "checksum": f"{h.body_checksum:016x}"} for shard, h, _ in added]
            doc["runs"] = sorted(runs, key=lambda r: (r["shard"], r["file"]))
            doc["generation"] = gen
            doc["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            c = dict(doc["counters"])
            for k, v in counters.items():
                if v:
                    c[k] = c.get(k, 0) + v
            doc["counters"] = c
            manifest.write(self.path, doc, sync=self.sync)
        except OSError as e:
            raise _io_error(e, f"{self.path}: committing") from e
        # Committed. From here on a failure must not undo the batch.
        _fault(step + "after-manifest")
        have = {r.name: r for r in self._all_readers()}
        for shard, _, sparse in added:
            name = run_name(shard, gen)
            have[name] = tiers.open_reader(os.path.join(self.path, name), sparse)
        runs = self._readers_for(doc, have)
        with self._view_lock:  # readers on other threads see the old pair or the new one
            self._doc, self._runs = doc, runs
        self._retire([os.path.join(self.path, name) for name in sorted(gone)], step)

    def _retire(self, paths: list, step: str = "") -> None:
        """Delete replaced runs on a background thread (freeing GBs of extents took
        0.2-0.3 s per 1e8-key batch, 8 % of its time); joined before the next commit
        (so at most one generation of replaced runs exists) and by ``close``. A crash
        before it ends leaves files the next open removes as leftovers. Requires: the
        previous retirement joined (``_commit`` does it first). Nothing may still
        stream these files: a batch's checks end before its commit, and compaction
        runs only between batches."""

        def unlink_all():
            for p in paths:
                _fault(step + "retire")
                try:
                    os.unlink(p)
                except OSError:
                    pass  # removed as a leftover on the next open

        if paths:
            self._retiring = threading.Thread(target=unlink_all, name="retire-runs",
                                              daemon=True)
            self._retiring.start()

    def _join_retire(self) -> None:
        if self._retiring is not None:
            self._retiring.join()
            self._retiring = None

    # ------------------------------------------------------------- compaction
    def compact(self, full: bool = True) -> dict:
        """Merge runs now: ``full`` every shard into one run, else the jobs the
        size-tiered policy has pending (tiers.plan). One commit per shard, so the
        temporary disk space is at most one shard's runs. Returns figures."""
        self._check_writable()
        with self._mutex:
            self._join_compactor()
            return self._compact(tiers.plan(self._doc["runs"], full=full))

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

    def _compact(self, jobs: list, paid: bool = False) -> dict:
        """Run compaction ``jobs`` (tiers.plan) in order. ``paid``: spend the batches'
        credit — stop before a job that does not fit what is left of it, or that
        would take this round past ``_credit_step`` (a first job may)."""
        t0 = time.perf_counter()
        done = {"jobs": 0, "runs_merged": 0, "bytes_read": 0, "bytes_written": 0}
        for shard, entries in jobs:
            cost = tiers.job_bytes(entries)
            if paid:
                if cost > self._credit or (done["jobs"] and done["bytes_read"] + cost
                                           > self._credit_step):
                    break
                self._credit -= cost
            written = self._compact_shard(shard, entries)
            done["jobs"] += 1
            done["runs_merged"] += len(entries)
            done["bytes_read"] += cost
            done["bytes_written"] += written
        done["seconds"] = time.perf_counter() - t0
        return done

    def _compact_shard(self, shard: int, entries: list) -> int:
        """Merge the runs ``entries`` of ``shard`` into one new run and commit.
        Returns the bytes written."""
        gen = self.generation + 1
        files = [e["file"] for e in entries]
        readers = [r for r in self._runs.get(shard, []) if r.name in files]
        count = sum(r.count for r in readers)
        added, w, written = [], None, 0
        try:
            if count:
                w = tiers.new_writer(os.path.join(self.path, run_name(shard, gen)),
                                     self.layout.host_bits, self.shard_bits, shard,
                                     policy_digest(self.policy_id), self.run_format)
                for chunk in tiers.merged_chunks(readers):
                    w.write(chunk)
                    _fault("compact-write")
                header, sparse, written = tiers.finish(w, self.sync)
                _fault("compact-written")
                added = [(shard, header, sparse)]
            self._commit(gen, added, files,
                         {"compactions": 1, "bytes_compacted": written}, step="compact-")
            return written
        except OSError as e:
            if w is not None:
                w.abort()
            raise _io_error(e, f"{self.path}: compacting shard {shard}") from e
        except BaseException:
            if w is not None:
                w.abort()
            raise

    def _start_compactor(self) -> None:
        """After a batch: run the pending size-tiered jobs its credit pays for on a
        background thread (joined by the next write, ``close``), so compaction
        overlaps the caller's own work between batches."""
        if not self.compact_between_batches or self._lock is None:
            return
        jobs = tiers.plan(self._doc["runs"])
        if not jobs or tiers.job_bytes(jobs[0][1]) > self._credit:
            return

        def run():
            try:
                self.last_compaction = self._compact(jobs, paid=True)
            except BaseException as e:  # reported by the join; the store stays consistent
                self._compact_error = e

        self._compactor = threading.Thread(target=run, name="compact", daemon=True)
        self._compactor.start()

    def _join_compactor(self) -> float:
        """Wait for the background compaction; return the seconds waited. A failed
        compaction warns (nothing was lost: its runs are leftovers of an uncommitted
        generation, removed by the next open). ``joined_compaction``: the figures of
        the compaction joined (empty if none)."""
        t0 = time.perf_counter()
        self.joined_compaction: dict = {}
        if self._compactor is not None:
            self._compactor.join()
            self._compactor = None
            self.joined_compaction = self.last_compaction
        if self._compact_error is not None:
            e, self._compact_error = self._compact_error, None
            warnings.warn(f"background compaction failed ({e}); the store is unchanged "
                          "by it and the next write retries")
        return time.perf_counter() - t0

    def pending_compaction(self, doc: dict | None = None) -> dict:
        """What the size-tiered policy would merge now (in ``doc``, default the
        current manifest): jobs, runs, bytes."""
        jobs = tiers.plan((doc or self._doc)["runs"])
        return {"jobs": len(jobs), "runs": sum(len(e) for _, e in jobs),
                "bytes": sum(tiers.job_bytes(e) for _, e in jobs)}

    # ------------------------------------------------------------ maintenance
    def stats(self) -> dict:
        """Figures about the store (keys, files, live runs per shard, write
        amplification, pending compaction, bytes on disk with and without the Bloom
        files, layout, versions, WAL segments a stage left), all of one generation (a
        read-only store moves to the newest first)."""
        self._check_open()
        self._refresh()
        doc, runs = self._snapshot()
        files = [r["file"] for r in doc["runs"]] + [manifest.NAME]
        disk = sum(_size(os.path.join(self.path, name)) for name in files)
        bloom_file = sum(_size(os.path.join(self.path, n)) for n in os.listdir(self.path)
                         if _BLOOM_RE.match(n))  # BLOOM and its layers' BLOOM.Li
        keys = sum(r.count for rs in runs.values() for r in rs)
        per_shard = {shard: len(rs) for shard, rs in runs.items()}
        c = {"approx_answered": 0, **doc["counters"]}
        wal = [p for _, p in walmod.list_segments(self.path)]
        wal_sizes = [_size(p, None) for p in wal]  # a merge may delete one meanwhile
        return {
            "path": self.path,
            "store_id": doc.get("store_id"),
            "keys": keys,
            "files": len(files),
            "bytes_on_disk": disk,  # runs + manifest
            "bytes_per_key": (disk / keys) if keys else None,
            "bloom_file_bytes": bloom_file,
            "bytes_on_disk_with_bloom": disk + bloom_file,
            "bytes_per_key_with_bloom": ((disk + bloom_file) / keys) if keys else None,
            "layout": Layout.from_dict(doc["layout"]).describe(),
            "host_bits": Layout.from_dict(doc["layout"]).host_bits,
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
            "pending_compaction": self.pending_compaction(doc),
            "policy_id": doc["policy_id"],
            "generation": doc["generation"],
            # what this writer writes new runs as, and the formats of the live runs
            "run_format": "2.0" if self.run_format == 2 else f"{RUN_MAJOR}.{RUN_MINOR}",
            "run_formats": _count_formats(self._all_readers(runs)),
            "manifest_format": f"{doc.get('major', manifest.MAJOR)}.{doc.get('minor', 0)}",
            "upgrade_pending": doc.get("major", manifest.MAJOR) < manifest.MAJOR,
            # batches: every add/merge call of at least one key that committed
            "counters": c,
            # keys a DedupStage handed out but has not merged yet (replayed by the next
            # writer's open, counted present by contains)
            "wal_segments": sum(1 for n in wal_sizes if n is not None),
            "wal_bytes": sum(n for n in wal_sizes if n is not None),
            "mode": self.mode,
            "threads": self.threads,
            "sort": sort_description(measure=False),
            "bloom": self._bloom_stats(keys),
            "created": doc.get("created"),
            "updated": doc.get("updated"),
        }

    def _bloom_stats(self, keys: int) -> dict | None:
        bf, state = self.bloom, self._bloom_state
        if bf is None:  # read-only: report the saved filter, if any
            try:
                bf, gen = LayeredBloom.load(os.path.join(self.path, BLOOM_NAME))
            except SeenStoreError:
                return None
            current = gen == self.generation and bf.binding == self._binding()
            state = "saved, current" if current else "saved, stale (rebuilt on next open)"
        return {
            "state": state, "bytes": bf.nbytes, "n_hashes": bf.n_hashes,
            "capacity": bf.capacity, "target_fpr": bf.target_fpr,
            "bits_per_key_at_capacity": bf.n_bits / max(bf.capacity, 1),
            "bits_per_key": bf.n_bits / keys if keys else None,
            "bytes_per_key": bf.nbytes / keys if keys else None,
            "fill_ratio": bf.fill_ratio, "expected_fpr": bf.expected_fpr,
            "layers": len(bf.layers),
        }

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
        sb = doc["shard_bits"]
        for shard, readers in sorted(runs.items()):
            if len(readers) == 1:
                readers[0].verify()
            else:  # the k-way merge checks order, disjointness and checksums
                for _ in tiers.merged_chunks(readers):
                    pass
            for reader in readers:
                if reader.count and sb:
                    first, last = _first_last(reader)
                    lo, hi = first >> (64 - sb), last >> (64 - sb)
                    if lo != shard or hi != shard:
                        raise CorruptionError(f"{reader.name}: keys outside shard {shard}")
        segments = 0
        for _, path in walmod.list_segments(self.path):
            try:
                walmod.read_segment(path)
            except StoreIOError as e:
                if isinstance(e.__cause__, FileNotFoundError):
                    continue  # merged and removed meanwhile
                raise
            segments += 1
        return {"keys": sum(r.count for rs in runs.values() for r in rs),
                "runs": sum(len(rs) for rs in runs.values()),
                "generation": doc["generation"], "wal_segments": segments}

    def close(self, save_bloom: bool = True) -> None:
        """Save the Bloom filter (if changed and ``save_bloom``), release the lock.
        Never loses data: a Bloom filter not saved is rebuilt by the next open.
        Closing again does nothing; any other call afterwards raises ClosedError."""
        if self._closed:
            return
        self._join_compactor()
        self._join_retire()
        try:
            if save_bloom:
                self.checkpoint()
        except SeenStoreError as e:
            warnings.warn(f"Bloom filter not saved ({e}); the next open rebuilds it")
        self._closed = True
        for r in self._all_readers():
            r.close()
        self._runs = {}
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> "SeenStore":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(save_bloom=exc_type is None)


def _size(path: str, missing=0):
    """Size of ``path`` in bytes, or ``missing`` when it does not exist (any more)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return missing


def _count_formats(readers: list) -> dict:
    out: dict = {}
    for r in readers:
        v = f"{r.header.major}.{r.header.minor}" if tiers.compressed(r) else \
            f"{RUN_MAJOR}.{RUN_MINOR}"
        out[v] = out.get(v, 0) + 1
    return out


def _first_last(reader) -> tuple[int, int]:
    """The first and last key of a non-empty run (of a compressed run: its last
    block decoded, through its checked lookup path)."""
    if not tiers.compressed(reader):
        return int(reader.keys[0]), int(reader.keys[-1])
    return int(reader._first[0]), int(reader.last_key())


def _member(haystack: np.ndarray, needles: np.ndarray) -> np.ndarray:
    """Mask over ``needles``: True where the key is in sorted unique ``haystack``."""
    if len(haystack) == 0:
        return np.zeros(len(needles), dtype=np.bool_)
    pos = np.searchsorted(haystack, needles)
    pos[pos == len(haystack)] = len(haystack) - 1
    return haystack[pos] == needles
