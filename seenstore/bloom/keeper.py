"""The store's Bloom filter over its life: loaded or rebuilt at open, made room for
and fed per batch, dropped when an insert fails, saved at checkpoint (docs/bloom.md,
"The store's filter"; docs/architecture.md step 1b). It owns the two threads that
run beside the batches: the last batch's insert deferred past its return
(``behind``, bloom/deferred.py) and a new filter's prefault; ``settle`` and
``ready`` wait for them before anything reads or writes the filter.

The filter is derived data: every answer it cannot give is asked of the runs, so
any failure here drops it (with a warning) rather than failing a committed batch,
and the next open rebuilds it. ``BloomKeeper`` knows nothing of runs: the store
hands it the stored keys as chunks (rebuild) and samples (is a file theirs?).
"""

from __future__ import annotations

import functools
import time
import warnings
from types import SimpleNamespace
from typing import Callable, Iterable

import numpy as np

from seenstore.errors import SeenStoreError, StoreNotFoundError
from seenstore.bloom.deferred import DeferredInsert
from seenstore.bloom.file import Binding
from seenstore.bloom.layers import LayeredBloom
from seenstore.bloom.sizing import prefault
from seenstore.runtime.worker import Worker

DEFAULT_BLOOM_FPR = 1e-3
MIN_BLOOM_CAPACITY = 1 << 20
REBUILD_CHUNK_KEYS = 1 << 24  # 128 MiB read buffer when a Bloom filter is rebuilt
BLOOM_SAMPLE_KEYS = 4096  # stored keys a loaded Bloom filter must answer present


def misses_a_key(bf, samples: Iterable[np.ndarray]) -> bool:
    """True if ``bf`` answers absent for one of the stored keys ``samples``: a filter
    of those keys has no false negatives, so one miss proves it is not theirs
    (zeroed, forged, or built from other keys)."""
    return any(not bf.query(s).all() for s in samples)


class BloomKeeper:
    """``bf``: the filter (a LayeredBloom) or None; ``dirty``: changed since saved;
    ``state``: how it came to be, for ``stats``."""

    def __init__(self) -> None:
        self.bf: LayeredBloom | None = None
        self.dirty = False
        self.state = "off"
        self._last_batch = 0  # keys of the last batch that set a bit: the next one's guess
        self.behind: DeferredInsert | None = None  # the last batch's insert, past its return
        self._prefault: Worker | None = None  # a new filter's pages faulting in

    # ------------------------------------------------- the threads beside the batches
    def start_prefault(self, min_bytes: int) -> None:
        """A new, empty filter of ``min_bytes`` or more has its pages made resident on a
        thread (writing zeros over zeros, ``sizing.prefault``) while the caller prepares
        its first batch, instead of batch 0's inserts taking the page faults. Every
        insert waits for it first (``ready``, and a DeferredInsert's ``after``); reads
        meanwhile see the zeros they would anyway."""
        bf = self.bf
        if bf is None or bf.n_added or len(bf.layers) != 1 or bf.nbytes < min_bytes:
            return
        words = bf.layers[0].words
        self._prefault = Worker(functools.partial(prefault, words), "seenstore-bloom-prefault")

    @property
    def prefaulting(self) -> bool:
        """True while a new filter's prefault has not been waited for or handed on."""
        return self._prefault is not None

    def settle(self) -> float:
        """Wait for the deferred insert (``behind``), if one runs; return the seconds
        waited. Called before anything reads or writes the filter."""
        behind = self.behind
        if behind is None:
            return 0.0
        t = time.perf_counter()
        behind.wait()  # another thread may wait too: it returns once the insert is done
        if self.behind is behind:
            self.behind = None
        return time.perf_counter() - t

    def ready(self) -> float:
        """``settle``, and wait for the prefault, if any: before the filter is written on
        the calling thread. Returns the seconds the deferred insert was waited for."""
        waited = self.settle()
        if self._prefault is not None:
            self._prefault.join()
            self._prefault = None
        return waited

    def book_finished(self) -> tuple[float, float] | None:
        """If the deferred insert has finished, settle it (a failure drops the filter
        now) and return its ``(elapsed_s, cpu_s)`` for the caller's figures; None when
        none ran or it still runs."""
        behind = self.behind
        if behind is None or behind.thread.is_alive():
            return None
        self.settle()
        return behind.book()

    def defer(self, buffer: Callable[[], np.ndarray], parts: list, gate, report: dict) -> None:
        """Insert a committed batch's new keys past the call's return: copied from
        ``parts`` (the caller's scratch) into ``buffer()`` (an array the insert owns, as
        long as ``parts`` in all) on the insert's thread, after the previous insert, the
        prefault and ``gate``. An insert that cannot start (no memory for its buffer, no
        thread) drops the filter with a warning: the batch is committed, and the next
        open rebuilds the filter from the runs."""
        try:
            own = buffer()
            self.behind = DeferredInsert(self, keys=own, parts=parts, prev=self.behind,
                                         after=(self._prefault, gate), report=report)
            self._prefault = None
        except Exception as e:  # e.g. MemoryError, no thread
            warnings.warn(f"Bloom filter insert could not start ({e!r}); filter dropped, "
                          "the next open rebuilds it from the runs")
            self.drop(SimpleNamespace(dropped=False))

    def start_fed(self, chunks_of) -> DeferredInsert | None:
        """An insert fed a batch's new runs as they are finished (``feed``), running
        beside the batch after the prefault and the previous insert; None without a
        filter. The caller hands it over once the batch commits (``adopt``) or
        ``abandon``s it (which drops the filter: it holds uncommitted keys)."""
        if self.bf is None:
            return None
        behind = self.behind
        prefaulting, self._prefault = self._prefault, None
        return DeferredInsert(self, chunks_of=chunks_of,
                              after=(prefaulting, behind.thread if behind is not None else None))

    def adopt(self, early: DeferredInsert | None) -> None:
        """After the commit: ``early`` (``start_fed``) closed and made the deferred
        insert the next reader settles."""
        if early is not None:
            early.close()
            self.behind = early

    def open(self, path: str, generation: int, binding: Binding, n_keys: int,
             fpr: float | None, capacity: int | None,
             samples: Callable[[int], Iterable[np.ndarray]],
             chunks: Callable[[int], Iterable[np.ndarray]]) -> None:
        """Use the filter saved at ``path`` if it is bound to these runs (store id,
        ``generation``, ``binding``), answers ``samples(BLOOM_SAMPLE_KEYS)`` (stored
        keys) present and fits; else rebuild it from ``chunks(REBUILD_CHUNK_KEYS)``
        (every stored key). Capacity: ``capacity`` or twice the store, at least
        MIN_BLOOM_CAPACITY. ``fpr``: the target; None takes the saved file's (a store
        created with another rate keeps it, also through a rebuild of a stale file),
        DEFAULT_BLOOM_FPR without a readable file. In exact mode a Bloom negative
        skips the disk, so a filter of other keys would hand stored keys out again
        (docs/bloom.md)."""
        want = max(capacity, n_keys) if capacity else max(2 * n_keys, MIN_BLOOM_CAPACITY)
        try:
            bf, gen = LayeredBloom.load(path)
            if fpr is None:
                fpr = bf.target_fpr
            fits = (capacity is None or bf.capacity >= capacity) and bf.capacity >= n_keys
            if gen != generation:
                self.state = "rebuilt (stale file)"
            elif bf.binding != binding:
                self.state = "rebuilt (file not bound to this store's runs)"
            elif misses_a_key(bf, samples(BLOOM_SAMPLE_KEYS)):
                self.state = "rebuilt (file answered a stored key absent)"
            elif bf.target_fpr == fpr and fits:
                self.bf, self.state = bf, "loaded"
                return
            else:
                self.state = "rebuilt (other size or target)"
        except StoreNotFoundError:
            self.state = "rebuilt (no file)"
        except SeenStoreError:
            self.state = "rebuilt (unreadable file)"  # derived data: rebuild it
        self.rebuild(want, DEFAULT_BLOOM_FPR if fpr is None else fpr,
                     chunks(REBUILD_CHUNK_KEYS))

    def rebuild(self, capacity: int, fpr: float, chunks: Iterable[np.ndarray]) -> None:
        """A new filter for ``capacity`` keys at ``fpr`` holding every key of ``chunks``
        (large chunks: each insert call sweeps the whole filter region by region)."""
        bf = LayeredBloom.for_capacity(int(capacity), fpr)
        for keys in chunks:
            bf.add(keys)
        self.bf = bf
        self.dirty = True

    def start_insert(self, keys: np.ndarray):
        """Insert ``keys`` on a background thread (``LayeredBloom.fill``: a new layer only
        once they could overfill the newest: the FPR target holds at every moment; no
        rebuild, layers.py); return the handle for ``finish_insert``."""
        self.dirty = True
        return self.bf.add_in_background(keys)

    def add(self, keys: np.ndarray) -> None:
        """Insert ``keys`` now (``fill``: room is made as they go in)."""
        self.dirty = True
        self.bf.add(keys)
        self._last_batch = len(keys)

    def add_query(self, keys: np.ndarray) -> np.ndarray:
        """Make room for ``keys``; answer whether each was maybe present, inserting it."""
        self._reserve(len(keys))
        return self.bf.add_query(keys)

    def _reserve(self, n: int) -> None:
        self.bf.reserve(n)
        self.dirty = True
        self._last_batch = n

    def batch_done(self, fresh: int) -> None:
        """A batch's insert (bloom/deferred.py; a spilled batch's in several calls) set
        a bit with ``fresh`` keys in all: that is the next batch's guess."""
        self._last_batch = fresh

    def prepare_next(self) -> None:
        """Between batches: if a batch like the last (as many keys setting a bit: its
        re-offered and repeated keys need no room) would need a new layer, build it
        ahead on a thread (layers.py ``prepare``), off the next batch's path."""
        if self.bf is not None and self._last_batch:
            self.bf.prepare(self._last_batch)

    def finish_insert(self, behind) -> int:
        """Wait for a background insert; return its count of certainly-new keys.

        If its insert failed, a batch that committed must not fail for it, so the
        filter is dropped (``contains`` then asks the runs; the next open rebuilds it
        from them) with a warning. If the wait itself is interrupted
        (KeyboardInterrupt), the insert may still be running: the filter is dropped
        too, since a later insert beside it could lose bits."""
        if self.bf is None or behind.dropped:
            return 0
        try:
            fresh = behind.wait()
            self._last_batch = fresh  # the next batch's guess (prepare_next)
            return fresh
        except Exception as e:
            warnings.warn(f"Bloom filter insert failed ({e!r}); filter dropped, the next "
                          "open rebuilds it from the runs")
            self.drop(behind)
            return 0
        except BaseException:
            self.drop(behind)
            raise

    def drop(self, behind) -> None:
        behind.dropped = True
        self.bf = None
        self.dirty = False
        self.state = "dropped (insert failed or interrupted)"

    def checkpoint(self, path: str, generation: int, binding: Binding) -> None:
        """Save the filter at ``path`` (BLOOM, and BLOOM.Li per layer) if it changed."""
        if self.bf is not None and self.dirty:
            self.bf.save(path, generation, binding)
            self.dirty = False

    def stats(self, keys: int, path: str, generation: int, binding: Binding) -> dict | None:
        """Figures of the filter for a store of ``keys`` keys; without one in memory
        (read-only), of the one saved at ``path``, if any, and whether it is current."""
        bf, state = self.bf, self.state
        if bf is None:
            try:
                bf, gen = LayeredBloom.load(path)
            except SeenStoreError:
                return None
            current = gen == generation and bf.binding == binding
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
