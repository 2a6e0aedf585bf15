"""A batch's Bloom insert deferred past its commit: the keys go into the store's
filter on a thread of their own that runs on after the call returned, beside the
caller's next work (docs/architecture.md step 1b, docs/bloom.md "The store's filter").

Why: the filter is derived data the exact answer never asks (the runs decide), so
the insert only has to be done before the filter is next read or written. Inside
the call it competed with the batch's own sort and check for the two cores: 13-15
ns of CPU per offered key of `seenstore bench --keys 1e8 --batch 1e7`, 36-46 in the
first batch (9 M new keys into layers just added), the slowest batch of the peers'
run. Deferred, it overlaps what a crawler does between batches (fetching, parsing;
in the benchmarks, generating the next batch).

Two sources of keys: an in-memory batch hands its new keys (a copy the insert owns:
``keys``); a spilled batch (spill.py) feeds its new runs one by one as its check
finishes them (``feed``, read back in lots of DEFERRED_CHUNK_KEYS). The keeper
(keeper.py) starts them and holds the one running.

Who waits (``BloomKeeper.settle``): everything that reads or writes the filter — the next
insert (on its own thread: ``prev``), ``SeenStore.bloom``, ``contains``, the stage,
approximate mode, ``checkpoint``/``close``. Crash safety is the filter's own: a
crash before the insert ends leaves a BLOOM file of an older generation (a
checkpoint settles first), which the next open rebuilds from the runs (docs/bloom.md,
"Binding"). A failed insert drops the filter with a warning; a committed batch
never fails for it. Nothing here imports the store.
"""

from __future__ import annotations

import queue
import threading
import time
import warnings

import numpy as np

from seenstore.runtime.worker import Worker

DEFERRED_CHUNK_KEYS = 1 << 20  # keys per filter insert call when fed runs (8 MiB)


class Gate:
    """Holds a DeferredInsert back (one of its ``after``) until ``open``: ``add`` opens
    it once its mask is computed, so the mask's join has both cores and the insert
    runs past the return. Opening twice is harmless; the opener must open it also on
    an error (the insert, and every later batch's, waits for it)."""

    def __init__(self) -> None:
        self._open = threading.Event()

    def open(self) -> None:
        self._open.set()

    def join(self) -> None:
        self._open.wait()


class DeferredInsert:
    """One batch's insert into ``keeper``'s filter, on a thread of its own (``thread``,
    a Worker).

    ``keys``: the batch's new keys, an array this object owns (the in-memory path:
    inserted in one call, ``keeper.start_insert`` and its wait, the region insert
    on two threads); with ``parts`` (arrays of the caller's scratch, as long as
    ``keys`` in all) it is first filled from them on this thread, and ``copied`` is
    set once they are no longer read. ``report``: the batch's timings, given
    ``bloom_negative`` (keys that set a clear bit) when the insert is done.
    Without ``keys``: fed runs (``feed``, until ``close``); ``chunks_of(reader, n)``
    yields a reader's keys in arrays of up to n (store/runs.py ``iter_keys``),
    gathered in lots of DEFERRED_CHUNK_KEYS: a filter call below dispatch.SMALL keys
    takes the numpy twin, ~25x slower (1,670 against 74 ns/key).

    ``after``: Workers (or anything with ``join()``: a Gate) to join before the
    first insert (a new filter's prefault: an insert beside it would be zeroed by
    it); one that failed fails this insert too (the filter is dropped). ``prev``:
    the previous batch's DeferredInsert, waited for (and its failure reported)
    first: one insert at a time. Figures: ``elapsed_s``/``cpu_s`` of this insert,
    plus ``carried_*`` of the inserts it waited for that nobody booked (``book``)."""

    def __init__(self, keeper, after=(), *, keys: np.ndarray | None = None,
                 parts: list | None = None, prev=None, chunks_of=None,
                 report: dict | None = None):
        self.keeper = keeper
        self.after = [t for t in after if t is not None]
        self.prev = prev
        self.wait_before_s = 0.0
        self._keys_array = keys
        # keys mode: arrays to copy into ``keys`` first (on this thread); ``copied`` is
        # set once they are no longer read (the caller may then reuse their memory)
        self._parts = parts
        self.copied = threading.Event()
        if parts is None:
            self.copied.set()
        self._chunks_of = chunks_of
        self._feed = queue.SimpleQueue() if keys is None else None  # fed runs
        self._abort = False
        self.idle_s = 0.0  # waiting to be fed: not part of elapsed_s
        self.chunk_keys = DEFERRED_CHUNK_KEYS
        self.error: BaseException | None = None
        self.elapsed_s = self.cpu_s = 0.0
        self.carried_elapsed_s = self.carried_cpu_s = 0.0
        self.booked = False
        self.inserted = 0
        self.fresh: int | None = None  # keys that set a clear bit (keys mode)
        self._report_to = report  # keys mode: gets "bloom_negative" = fresh when done
        self._done = threading.Lock()  # wait() may be called by two threads at once
        self._settled = False
        self.dropped = False  # set by keeper.drop
        keeper.dirty = True  # the saved file lacks these keys from now on
        # its own figures, not the Worker's: the waits before the insert are left out,
        # a fed insert's idle time too, and the copy counted in
        self.thread = Worker(self._run, "seenstore-bloom-deferred")

    def _run(self) -> None:
        t = time.perf_counter()
        c0 = time.thread_time()
        try:
            self._copy_parts()
        except BaseException as e:  # reported by wait(); nothing inserted
            self.error = e
        finally:
            self.copied.set()
        self.cpu_s = time.thread_time() - c0
        copy_s = time.perf_counter() - t
        for other in self.after:  # an insert beside the prefault would be zeroed by it
            other.join()
        prev, self.prev = self.prev, None
        if prev is not None:
            prev.wait()  # reports its failure (drops the filter) before we insert
            self.carried_elapsed_s, self.carried_cpu_s = prev.book()  # (0, 0) if booked
        self.wait_before_s = time.perf_counter() - t - copy_s
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            if self.error is not None:  # the copy failed: nothing to insert
                return
            if self._feed is None:
                self._insert_all()
            else:
                self._insert_fed()
        except BaseException as e:  # reported by wait(), on the caller's thread
            self.error = e
        finally:
            self.elapsed_s = time.perf_counter() - t0 - self.idle_s + copy_s
            self.cpu_s += time.thread_time() - c0

    def _copy_parts(self) -> None:
        parts, self._parts = self._parts, None
        if parts is None:
            return
        at = 0
        for p in parts:
            self._keys_array[at:at + len(p)] = p
            at += len(p)

    def wait_copied(self) -> None:
        """Until the ``parts`` given are copied (no longer read)."""
        self.copied.wait()

    def _insert_all(self) -> None:
        keys, self._keys_array = self._keys_array, None  # its buffer is free once done
        if self.keeper.bf is None or self._abort or not len(keys):
            self.fresh = 0
            return
        pending = self.keeper.start_insert(keys)
        try:
            # a failure is reported (the filter dropped, a warning) on the thread that
            # waits for this insert (``wait``): nobody reads the filter before that
            self.fresh = pending.wait()
        finally:
            self.cpu_s += getattr(pending, "cpu_s", 0.0)
        self.keeper.batch_done(self.fresh)
        self.inserted = len(keys)
        if self._report_to is not None:
            self._report_to["bloom_negative"] = self.fresh
        # if a batch like this one would need a new layer, allocate it and fault it in
        # on a thread now, not inside the next insert (layers.py ``prepare``)
        self.keeper.prepare_next()

    def _insert_fed(self) -> None:
        lot = np.empty(self.chunk_keys, dtype=np.uint64)
        fill = 0
        for keys in self._keys():
            at = 0
            while at < len(keys):
                take = min(len(keys) - at, len(lot) - fill)
                lot[fill:fill + take] = keys[at:at + take]
                fill, at = fill + take, at + take
                if fill == len(lot) and not self._insert(lot):
                    return
                fill %= len(lot)
        self._insert(lot[:fill])

    def _keys(self):
        while True:
            t = time.perf_counter()
            reader = self._feed.get()
            self.idle_s += time.perf_counter() - t
            if reader is None:
                return
            try:
                if not self._abort:
                    yield from self._chunks_of(reader, self.chunk_keys)
            finally:
                reader.close()

    def feed(self, reader) -> None:
        """One more finished new run of the batch to insert (a reader of its own)."""
        self._feed.put(reader)

    def close(self) -> None:
        """No more runs: the insert ends once the fed runs are in."""
        if self._feed is not None:
            self._feed.put(None)

    def abandon(self) -> None:
        """The batch failed before its commit: stop, and drop the filter if any key of
        the uncommitted runs may be in it (a filter must not hold a key the store
        lacks: approximate mode would call it seen); the next open rebuilds it."""
        self._abort = True
        self.close()
        self._join()
        with self._done:
            self._settled = True
        if self.keeper.bf is not None and (self.inserted or self.error is not None):
            warnings.warn("a spilled batch failed after its Bloom insert began; "
                          "filter dropped, the next open rebuilds it from the runs")
            self.keeper.drop(self)

    def _insert(self, keys: np.ndarray) -> bool:
        """Insert ``keys``; False once the filter is gone (dropped) or the batch failed."""
        bf = self.keeper.bf
        if bf is None or self._abort:
            return False
        if len(keys):
            bf.add(keys)
            self.inserted += len(keys)
        return True

    def wait(self) -> None:
        """Wait for the insert; if it failed, drop the filter (the next open rebuilds
        it from the runs) with a warning, so a committed batch never fails for it."""
        self._join()
        with self._done:
            if self._settled:
                return
            self._settled = True
            self._report()

    def _join(self) -> None:
        """Wait for the thread. An error outside the copy and the insert (waiting for
        ``after`` or ``prev``) counts as the insert's: it may not have run."""
        self.thread.join(raise_error=False)
        if self.error is None:
            self.error = self.thread.error

    def _report(self) -> None:
        if self.error is not None and self.keeper.bf is not None:
            warnings.warn(f"Bloom filter insert failed ({self.error!r}); "
                          "filter dropped, the next open rebuilds it from the runs")
            self.keeper.drop(self)
        elif self._feed is not None:  # fed runs (keys mode told the keeper itself)
            self.keeper.batch_done(self.inserted)

    def book(self) -> tuple:
        """``(elapsed_s, cpu_s)`` of this insert and those it carried, for the figures
        of whoever reports it; (0, 0) when already booked. Call once it is done."""
        if self.booked:
            return 0.0, 0.0
        self.booked = True
        return (self.elapsed_s + self.carried_elapsed_s, self.cpu_s + self.carried_cpu_s)
