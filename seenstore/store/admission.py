"""The write path of one batch: ``add``, ``add_new``, ``add_sorted``, ``add_new_file``.

A batch's keys go one way: partitioned by shard (or, approximate mode and
``add_sorted``, sorted whole and asked of the Bloom filter), then sorted, checked
against the live runs and written by the shard threads (scheduling.py), committed
once for all shards (commit.py); then the compaction the batch paid for starts
(compaction.py). In exact mode the batch's new keys then go to the Bloom filter on a
thread that runs on past the return (bloom/deferred.py), waited for by the next
insert and by every reader of the filter.

``SeenStore`` (facade.py) holds one ``Admission`` and hands it its batch calls;
the facade keeps opening, reading, the commit seam and the lifecycle.
"""

from __future__ import annotations

import time

import numpy as np

from seenstore.kernels import dispatch as _dispatch
from seenstore.store import spill
from seenstore.bloom.deferred import Gate
from seenstore.keys.batch import as_keys, first_new_mask, first_new_mask_of_distinct, prepare
from seenstore.kernels.dispatch import batch as _kernels  # numpy twins below dispatch.SMALL keys
from seenstore.errors import InvalidInputError, NotSupportedError
from seenstore.store.runs.format import policy_digest
from seenstore.store.files import fault, io_error
from seenstore.store import compaction, tombstones
from seenstore.store.scheduling import Target, write_shards

compact_inplace = _kernels.compact_inplace


# a batch of at least this many keys (and dispatch.SMALL) drops its repeats before
# the partition when at most half of its first REPEATS_PROBE_KEYS keys, and of all
# its keys, are distinct
REPEATS_MIN_KEYS = 1 << 16
REPEATS_PROBE_KEYS = 1 << 14


class Admission:
    """The write path of one store (see the module docstring): the batch calls of
    ``SeenStore``, which owns it and whose parts it drives (its committed runs, the
    Bloom keeper, the compactor, the batch scratch and settings)."""

    def __init__(self, store) -> None:
        self._store = store
        self._distinct: tuple | None = None  # the last batch's distinct keys (_drop_repeats)
        self._adding: np.ndarray | None = None  # the keys of the add() under way
        self._mask_made: tuple | None = None  # (new keys, mask) mask_of made for them
        # (T's file before, after) while a batch that offers forgotten keys is under way
        self._revived: tuple | None = None

    def add(self, keys, progress=None) -> np.ndarray:
        """The body of ``SeenStore.add`` (its docstring)."""
        keys = as_keys(keys)
        gate = Gate()  # the batch's Bloom insert waits for the mask: its two threads
        self._adding, self._mask_made = keys, None
        try:           # get both cores (the insert then runs past the return)
            new = self._admit(keys, progress, scratch_answer=True, gate=gate)
            t1 = time.perf_counter()
            made = self._mask_made
            if made is not None and np.array_equal(made[0], new):  # a hook asked for it
                mask = made[1]
            else:
                mask = self._mask(keys, new)
        finally:
            gate.open()
            self._adding = self._mask_made = None
        self._store.last_timings["align_s"] = time.perf_counter() - t1
        return mask

    def mask_of(self, keys: np.ndarray, new_keys: np.ndarray) -> np.ndarray:
        """``first_new_mask(keys, new_keys)`` (``new_keys`` sorted, unique). Called by
        the ``_on_new`` hook of ``add(keys)`` (the same array) with the batch's new
        keys, it is the mask that add() returns, made as add() makes it (over the
        distinct keys when the batch dropped its repeats), and add() returns it
        rather than joining again."""
        if keys is not self._adding:
            return first_new_mask(keys, new_keys, self._store.threads)
        mask = self._mask(keys, new_keys)
        self._mask_made = new_keys, mask
        return mask

    def _mask(self, keys: np.ndarray, new: np.ndarray) -> np.ndarray:
        if self._distinct is not None:  # the batch's repeats were dropped: mask those
            return first_new_mask_of_distinct(len(keys), *self._distinct, new)
        return first_new_mask(keys, new, self._store.threads)

    def add_new(self, keys, progress=None) -> np.ndarray:
        """The body of ``SeenStore.add_new`` (its docstring)."""
        keys = as_keys(keys)
        new = self._admit(keys, progress)
        if self._store.mode == "approximate" and 4 * len(new) < len(keys):
            return new.copy()
        return new

    def add_new_file(self, path: str, memory: int, new_out: str | None = None) -> dict:
        """The body of ``SeenStore.add_new_file`` (its docstring)."""
        self._store._check_writable()
        with self._store._mutex:
            # neither the last batch's deferred insert nor a new filter's prefault is
            # waited for: the spill and check never touch the filter, and the next
            # deferred insert waits for both on its own thread (spill._start_insert)
            self._store.cache_bytes = 0
            if tombstones.count(self._store._doc):
                self._drop_forgotten()
            # the compaction between batches runs on while the batch is spilled (that
            # reads no run): admit_file joins it before the check and the commit
            figures = spill.admit_file(self._store, path, memory, fault, new_out,
                                       join=self._store._join_compactor)
            timings = self._new_timings(figures["offered"])
            timings.update({k: v for k, v in figures.items() if k in timings or k.endswith("_s")})
            timings["spill_stages"] = figures.get("stages", {})
            self._record_compaction(figures["compact_wait_s"])
            # like add(): the credit this batch earned pays for size-tiered jobs between
            # batches (without them every spilled batch would leave one more run per
            # shard, read by every later batch)
            self._start_compaction()
            return figures

    def add_sorted(self, uniq: np.ndarray, progress=None, *,
                   approx_answered: int = 0) -> np.ndarray:
        """The body of ``SeenStore.add_sorted`` (its docstring)."""
        self._store._check_writable()
        if not (isinstance(uniq, np.ndarray) and uniq.dtype == np.uint64 and uniq.ndim == 1):
            raise InvalidInputError("add_sorted needs a 1-D uint64 array (use add for any keys)")
        if len(uniq) > 1 and not bool(np.all(uniq[1:] > uniq[:-1])):
            raise InvalidInputError(
                "add_sorted needs keys sorted ascending and unique (use add for any keys)")
        with self._store._mutex:
            waited = self._store._join_compactor(stop=True)
            self._store._keeper.ready()
            rest, revived, at = self._revive(uniq, is_sorted=True)
            try:
                is_new = self._add_sorted(rest, progress, approx_answered)
                if revived is not None:  # forgotten keys offered: new, and stored already
                    hit = np.zeros(len(uniq), dtype=np.bool_)
                    hit[at] = True
                    out = hit.copy()
                    out[~hit] = is_new
                    is_new = out
            except BaseException:
                self._settle_revived(failed=True)
                raise
            self._settle_revived(failed=False)
            self._record_compaction(waited)
            return is_new

    # ------------------------------------------------------------ the batch path
    def _admit(self, keys: np.ndarray, progress, scratch_answer: bool = False,
               gate: Gate | None = None) -> np.ndarray:
        """Sort, check, write and commit ``keys``; return the new keys, sorted, each once
        (exact mode: in an answer buffer, ``BatchArena.answer``, or with
        ``scratch_answer`` in the store's batch scratch, valid until the next batch).
        ``gate``: the batch's deferred Bloom insert starts once it is opened (the
        caller opens it, also on an error).

        Exact mode: the keys are only partitioned by shard here (one counting pass),
        into the store's batch scratch (scheduling.BatchArena, reused by every batch);
        one thread then sorts and deduplicates the shards in order while the shards
        already sorted are checked against their runs, so the sorting overlaps their
        disk I/O. Once committed, the batch's new keys go to the Bloom filter on a
        thread that runs on past the return (``_defer_bloom``: the filter holds every
        stored key, so only new keys change it, and exact answers never ask it), so
        the call's two cores go to the sort and check. Approximate mode sorts the
        whole batch first: the Bloom answers decide what is written at all."""
        self._store._check_writable()
        with self._store._mutex:
            waited = self._store._join_compactor(stop=True)
            defer = self._store.mode == "exact" and self._store._keeper.bf is not None
            if not defer:
                self._store._keeper.ready()  # approximate mode asks the filter
            behind = self._store._keeper.behind
            if behind is not None:  # its keys are still read from the scratch: wait
                behind.wait_copied()
            t0 = time.perf_counter()
            work, revived, _ = self._revive(self._drop_repeats(keys))
            try:
                new = self._admit_work(work, progress, defer, scratch_answer, gate, t0)
                if revived is not None:  # forgotten keys offered: new, and stored already
                    new = tombstones.joined(new, revived)
            except BaseException:
                self._settle_revived(failed=True)
                raise
            self._settle_revived(failed=False)
        self._store.last_timings["offered"] = len(keys)
        self._store.last_timings["revived"] = 0 if revived is None else len(revived)
        self._record_compaction(waited)
        return new

    def _admit_work(self, work: np.ndarray, progress, defer: bool, scratch_answer: bool,
                    gate: Gate | None, t0: float) -> np.ndarray:
        """``_admit``'s batch (its repeats and forgotten keys taken out) partitioned or
        sorted, checked, written and committed; returns its new keys."""
        if self._store.mode == "exact":
            part, bounds, fine = self._store._sorter.partition(  # by finer groups: see there
                work, self._store.shard_bits, self._store.threads,
                out=self._store._arena.get("part", len(work), np.uint64))
            t_sort = time.perf_counter() - t0
            new = self._add_partitioned(part, bounds, fine, progress, defer,
                                        scratch_answer, gate)
        else:
            uniq = prepare(work, self._store.threads)
            t_sort = time.perf_counter() - t0
            is_new = self._add_sorted(uniq, progress)
            new = uniq[:compact_inplace(uniq, is_new)]
        self._store.last_timings["sort_s"] = t_sort
        return new

    def _revive(self, keys: np.ndarray, is_sorted: bool = False
                ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """``(keys without the forgotten ones, the forgotten ones sorted unique or
        None, with ``is_sorted`` their positions in keys, else None)``. With forgotten
        keys offered, T without them is written and staged for the batch's commit
        (``_settle_revived`` after the batch, always). Costs nothing while T is empty;
        else a look-up per key (``tombstones.member``), or with ``is_sorted`` keys
        (sorted unique) a search of T's keys in them, once: ``add_sorted`` builds its
        mask from the positions."""
        store = self._store
        if not tombstones.count(store._doc):
            return keys, None, None
        t = store._tomb.keys(store._doc)
        pos = None
        if is_sorted:
            pos = tombstones.in_sorted(t, keys)
            if not len(pos):
                return keys, None, None
            revived, rest = keys[pos], np.delete(keys, pos)
        else:
            hit = tombstones.member(t, keys)
            if not hit.any():
                return keys, None, None
            revived, rest = prepare(keys[hit]), keys[~hit]
        try:
            entry = store._tomb.write(tombstones.less(t, revived),
                                      store.generation + 1, store.sync)
        except OSError as e:
            raise io_error(e, f"{store.path}: writing tombstones") from e
        store._batch_fields = {**(store._batch_fields or {}), tombstones.FIELD: entry}
        self._revived = (store._doc.get(tombstones.FIELD), entry)
        try:
            tombstones.on_readmitted(store, revived, store.generation + 1)
        except BaseException:
            self._settle_revived(failed=True)
            raise
        return rest, revived, pos

    def _settle_revived(self, failed: bool) -> None:
        """After a batch ``_revive`` staged T for: a batch that committed nothing of
        its own (every key offered was forgotten, or stored) commits T alone; a batch
        that failed before its commit deletes T's new file. A committed T's old file
        is deleted."""
        staged, self._revived = self._revived, None
        if staged is None:
            return
        old, entry = staged
        store = self._store
        fields = store._batch_fields or {}
        if tombstones.FIELD in fields:  # not taken by a commit
            if failed:  # the batch failed before its commit: T stays as it was
                fields.pop(tombstones.FIELD)
                store._tomb.discard(entry)
                return
            try:
                store._commit_counters(0)
            except BaseException:
                store._batch_fields = {k: v for k, v in (store._batch_fields or {}).items()
                                       if k != tombstones.FIELD} or None
                store._tomb.discard(entry)
                raise
        store._tomb.retire(old, entry)

    def _drop_forgotten(self) -> None:
        """Before a spilled batch (``add_new_file``, which checks runs straight from
        disk): merge the runs of every shard holding forgotten keys, which drops them
        (compaction.py), so the batch finds them absent and stores them anew."""
        store = self._store
        if store._compactor.tomb is None:
            raise NotSupportedError(
                f"{store.path}: add_new_file on an approximate-mode store with forgotten "
                "keys: offer them with add, or open the store in exact mode")
        store._join_compactor(stop=True)
        held = tombstones.shards(store._tomb.keys(store._doc), store.shard_bits)
        store._compactor.run([j for j in compaction.plan(store._doc["runs"], True, held)
                              if j[0] in held])

    def _drop_repeats(self, keys: np.ndarray) -> np.ndarray:
        """``keys`` without their repeats (first occurrences, in order: a view of the
        store's scratch) when the batch is large and its first REPEATS_PROBE_KEYS
        keys are mostly repeats, else ``keys`` itself. A crawl's links repeat within
        a batch (navigation, shared assets): batches of 1e6 real link keys hold 5-9 %
        distinct keys, and the partition and shard sorts of every
        copy cost ~31 ns per offered key where dropping them in one hash pass
        (``first_unique``, a table that stays in the L2/L3 cache) and sorting the rest
        costs ~8. A batch with few repeats pays only the probe of its first keys (and
        one whose repeats end there, the pass up to its ``len(keys) // 2``-th
        distinct key).
        Sets ``_distinct``: (the distinct keys, the index in ``keys`` of each), views
        of the scratch valid until the next batch, or None; ``add`` builds its mask
        from them (``first_new_mask_of_distinct``)."""
        self._distinct = None
        if len(keys) < max(REPEATS_MIN_KEYS, _dispatch.SMALL) or not keys.flags.c_contiguous:
            return keys  # small: its twin would run; strided: one more specialisation
        room = len(keys) // 2  # more distinct keys than that: the pass gives up
        out = self._store._arena.get("distinct", room, np.uint64)
        pos = self._store._arena.get("distinct_pos", room, np.int64)
        m = _kernels.first_unique(keys, out, pos, REPEATS_PROBE_KEYS, REPEATS_PROBE_KEYS // 2)
        if m < 0:
            return keys
        self._distinct = out[:m], pos[:m]
        return out[:m]

    def _defer_bloom(self, parts: list, n_new: int, timings: dict,
                     gate: Gate | None = None) -> None:
        """After the commit: hand the batch's new keys (``parts``: views of the store's
        scratch, ``n_new`` keys in all) to the Bloom filter on a thread that runs on
        past the return (bloom/deferred.py), after the previous batch's insert and a
        new filter's prefault. That thread first copies them into a buffer it owns
        (the arena's "bloom" pool, reused once an insert let go of one) and says so
        (``copied``): the next batch waits for that before it writes its partition
        over the scratch (``_admit``). Copying there keeps the copy off the call's
        path (0.5-0.7 ns per offered key, 8 in a first batch whose buffer faults in).
        The previous insert, if done, is settled here and its figures booked in this
        batch's timings (``bloom_background_s``, ``bloom_cpu_s``); else the new one
        carries them."""
        t1 = time.perf_counter()
        booked = self._store._keeper.book_finished()  # a failed insert drops the filter now
        if booked is not None:
            timings["bloom_background_s"], timings["bloom_cpu_s"] = booked
        if self._store._keeper.bf is not None and n_new:
            self._store._keeper.defer(  # a buffer the insert owns, not written here
                lambda: self._store._arena.answer(n_new, pool="bloom"), parts, gate, timings)
        timings["bloom_s"] = time.perf_counter() - t1

    def _record_compaction(self, waited: float) -> None:
        """Book the compaction this call waited for in ``last_timings``: seconds, and
        the bytes it read and wrote (between batches, paid for by earlier ones)."""
        c = self._store.joined_compaction
        self._store.last_timings["compact_wait_s"] = waited
        self._store.last_timings["compact_bytes_read"] = c.get("bytes_read", 0)
        self._store.last_timings["compact_bytes_written"] = c.get("bytes_written", 0)

    def _new_timings(self, n: int) -> dict:
        """The figures of one call (``last_timings``), zeroed; ``n`` keys offered."""
        self._store.last_timings = {
            "sort_s": 0.0, "align_s": 0.0, "answer_s": 0.0, "bloom_s": 0.0,
            "bloom_rebuild_s": 0.0, "bloom_background_s": 0.0, "merge_s": 0.0,
            "shard_sort_s": 0.0, "commit_s": 0.0,
            "compact_wait_s": 0.0,
            "bytes_read": 0, "bytes_cached": 0, "bytes_written": 0,
            "offered": n, "unique": n, "new": 0,
            "bloom_negative": 0, "approx_answered": 0}
        return self._store.last_timings

    def _add_partitioned(self, part: np.ndarray, bounds: np.ndarray, fine, progress,
                         defer: bool, scratch_answer: bool = False,
                         gate: Gate | None = None) -> np.ndarray:
        """Merge and commit keys grouped by shard (``part``, the store's scratch, shard
        s at ``part[bounds[s]:bounds[s+1]]``, unsorted, repeats allowed; ``fine``: the
        finer groups' starts of ``ShardSorter.partition``, or None); return the new
        keys, sorted, each once: in an answer buffer, or with ``scratch_answer`` in the
        store's scratch. ``defer``: the new keys go to the Bloom filter past the
        return (``_defer_bloom``)."""
        timings = self._new_timings(len(part))
        segs = self._write_batch(part, bounds, timings, progress, sort_parts=True,
                                 fine=fine)
        t1 = time.perf_counter()
        timings["unique"] = sum(m for _, m, _, _ in segs)
        n_new = sum(k for _, _, _, k in segs)
        new = (self._store._arena.get("answer", n_new, np.uint64) if scratch_answer
               else self._store._arena.answer(n_new))
        n = 0
        for lo, _, _, k in segs:  # each shard's new keys are at the front of its slice
            new[n:n + k] = part[lo:lo + k]
            n += k
        timings["answer_s"] = time.perf_counter() - t1
        if defer:
            self._defer_bloom([part[lo:lo + k] for lo, _, _, k in segs if k], n_new, timings,
                              gate)
        self._after_merge(timings, None)
        return new

    def _add_sorted(self, uniq: np.ndarray, progress, approx_answered: int = 0) -> np.ndarray:
        """Merge and commit sorted unique ``uniq``; return the mask of new keys. The
        Bloom filter is asked (and in exact mode filled) before the merge."""
        timings = self._new_timings(len(uniq))
        is_new = np.zeros(len(uniq), dtype=np.bool_)
        if len(uniq) == 0:
            if approx_answered:
                self._store._commit_counters(approx_answered, batches=0)
            return is_new
        t0 = time.perf_counter()
        maybe = None
        if self._store.bloom is not None and self._store.mode == "exact":
            # Insert now, in the same pass as the query: every key of the batch is
            # in the store once it commits, and if it does not, extra bits only
            # make a positive that the disk check answers.
            maybe = self._store._keeper.add_query(uniq)
        elif self._store.bloom is not None:
            maybe = self._store.bloom.query(uniq)
        if self._store.bloom is not None:
            timings["bloom_s"] = time.perf_counter() - t0
        cand, n_approx = uniq, 0
        if maybe is not None:
            timings["bloom_negative"] = int(len(uniq) - maybe.sum())
            if self._store.mode == "approximate":  # a Bloom positive counts as seen
                cand = uniq[~maybe]
                n_approx = len(uniq) - len(cand)
        n_approx += approx_answered
        timings["approx_answered"] = n_approx
        cand_new = np.zeros(len(cand), dtype=np.bool_)
        for lo, m, mask, _ in self._write_batch(cand, self._store._shard_bounds(cand), timings,
                                                progress):
            cand_new[lo:lo + m] = mask
        if cand is uniq:
            is_new = cand_new
        else:
            is_new[~maybe] = cand_new
        self._after_merge(timings, uniq[is_new] if self._store.mode == "approximate" else None)
        return is_new

    def _after_merge(self, timings: dict, stored_new) -> None:
        """Bloom upkeep once a batch committed: insert ``stored_new`` (approximate mode:
        only what was stored; exact mode defers its insert, ``_defer_bloom``); then
        start the compaction this batch paid for."""
        # not ``self._store.bloom``: that would wait for a deferred insert
        bf = self._store._keeper.bf
        if bf is not None and timings["new"] and stored_new is not None:
            t1 = time.perf_counter()
            self._store._keeper.add(stored_new)
            timings["bloom_s"] += time.perf_counter() - t1
        if bf is not None:
            timings["bloom_layers"] = len(bf.layers)
            if self._store._keeper.behind is None:  # else the deferred insert makes its own room
                self._store._keeper.prepare_next()
        self._start_compaction()

    def _start_compaction(self) -> None:
        """After a committed batch: start the size-tiered jobs its credit pays for, on
        the background thread (when compacting between batches, and writable)."""
        if self._store.compact_between_batches and self._store._lock is not None:
            self._store._compactor.start()

    def _write_batch(self, keys: np.ndarray, bounds: np.ndarray, timings: dict,
                     progress=None, sort_parts: bool = False, fine=None) -> list:
        """Check every shard's keys against its live runs, write the new ones as one new
        run per shard (scheduling.write_shards, whose docstring says how ``keys``,
        ``bounds`` and ``sort_parts`` (the store's shard sorter) are read) and commit;
        return its ``(lo, m, mask, k)`` per shard that got keys (masks: views of the
        store's scratch, valid until the next batch)."""
        jobs = [s for s in range(1 << self._store.shard_bits) if bounds[s] < bounds[s + 1]]
        if not jobs:  # no key, or all answered by the Bloom filter alone (approximate)
            if timings["offered"]:
                self._store._commit_counters(timings["approx_answered"])
            return []
        gen = self._store.generation + 1
        target = Target(self._store.path, gen, self._store.layout.host_bits,
                        self._store.shard_bits, policy_digest(self._store.runs_policy_id),
                        self._store.run_format, self._store.sync)
        try:
            out = write_shards(keys, bounds, jobs, self._store._runs, target, self._store._buffers,
                               self._store.chunk_keys, threads=self._store.threads,
                               merge_threads=self._store.merge_threads, progress=progress,
                               sorter=self._store._sorter if sort_parts else None, fine=fine,
                               masks=self._store._arena.get("masks", len(keys), np.bool_),
                               cache=self._store._live.cache)
        except OSError as e:
            raise io_error(e, f"{self._store.path}: writing runs") from e
        t1 = time.perf_counter()
        timings.update(merge_s=out.merge_s, shard_sort_s=out.shard_sort_s,
                       bytes_read=out.bytes_read, bytes_written=out.bytes_written,
                       bytes_cached=out.bytes_cached)
        timings["merge_parts"] = out.parts
        n_new = out.n_new
        try:
            hooks = [h for h in (self._store._on_new, self._store._on_values) if h is not None]
            if hooks:  # a URL batch keeps its new URLs, check_update writes their values
                new_keys = np.concatenate(  # a sorter moved the new keys first
                    [keys[lo:lo + k] if sort_parts else keys[lo:lo + m][mask]
                     for lo, m, mask, k in out.segs] or [keys[:0]])
                for hook in hooks:
                    hook(new_keys, gen)
            self._store._publish(gen, out.added, n_new, out.bytes_written,
                                 timings["approx_answered"])
        except BaseException:
            out.abort()
            self._store._drop_kept()  # the hook's kept-URL file: its batch did not commit
            raise
        timings["commit_s"] = time.perf_counter() - t1
        timings["new"] = n_new
        return out.segs
