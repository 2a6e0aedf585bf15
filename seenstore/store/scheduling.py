"""The threads of one batch: keys partitioned by shard, shards sorted, checked against
their live runs and their new keys written as one new run each, side by side
(docs/architecture.md, "One batch through add_new" steps 5-6).

``ShardSorter.partition`` groups a batch by shard (keys/partition.py) by the finer
bits the shard sorts start from. ``write_shards`` takes
a batch grouped by shard and returns, per shard, which of its keys are new and the
run written for them (fsynced, not yet committed: the caller commits, commit.py).
``threads`` threads sort the shards in order (``ShardSorter``) while up to
``merge_threads`` check the shards already sorted: the kernels, the sort and the
O_DIRECT I/O release the GIL, so sorting overlaps the disk. The batch's new keys go
to the Bloom filter after the commit (bloom/deferred.py). Buffers come from a
``BufferPool`` reused across batches; the shard threads and the fsyncs are the
process's shared pools (runtime/pool.py), the sorts the ``ShardSorter``'s own.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import numpy as np

# numpy twins below dispatch.SMALL keys
from seenstore.kernels.dispatch import batch as _batch_kernels
from seenstore.store.runs.buffers import MergeBuffers
from seenstore.keys import sort as _sorting
from seenstore.store.runs import live as runsmod
from seenstore.store.files import run_name
from seenstore.runtime.clock import Clock
from seenstore.runtime.pool import shared_pool
from seenstore.keys.partition import partition

compact_inplace = _batch_kernels.compact_inplace


# A shard's new run is fsynced on a thread of its own (``Syncer``) while its shard
# thread goes on to the next shard, not by the shard thread itself ("inline", the
# old way, kept for A/B runs: FSYNC = "inline")
FSYNC = "beside"
ANSWER_BUFFERS = 2  # answer buffers a store keeps for reuse (BatchArena.answer)


class BufferPool:
    """A shard check's buffers (one set per checking thread), reused across batches."""

    def __init__(self) -> None:
        self._free: list[MergeBuffers] = []

    def take(self, chunk_keys: int) -> MergeBuffers:
        """A free set of ``chunk_keys`` buffers, or a new one."""
        while self._free:
            try:
                bufs = self._free.pop()  # list.append/pop are atomic
            except IndexError:
                break
            if bufs.chunk_keys == chunk_keys:
                return bufs
        return MergeBuffers(chunk_keys)

    def give(self, bufs: MergeBuffers) -> None:
        self._free.append(bufs)


class BatchArena:
    """The batch-sized arrays of the write path (the batch grouped by shard, its
    found/new masks), kept by the store and reused by every batch.

    Why: on a VM, memory a process frees is handed back to the host within seconds,
    and touching it again costs ~0.2-1 GB/s of page faults: a fresh 8 B/key array per
    batch would cost up to 8-40 ns per offered key in ``sys`` time. Holds, until
    ``release``, up to 9 B per key of the largest batch seen (the partition 8, the
    masks 1) and, for ``add``, its answer; ``answer`` buffers also
    hold the copy of a batch's new keys its deferred Bloom insert owns."""

    def __init__(self) -> None:
        self._arrays: dict = {}
        self._pools: dict = {}  # ``answer``'s buffers by pool, each list newest first

    def get(self, name: str, n: int, dtype) -> np.ndarray:
        """A ``n``-long array of ``dtype`` (contents unspecified), named ``name``:
        the same memory as the last call with that name when it was as large."""
        a = self._arrays.get(name)
        if a is None or len(a) < n or a.dtype != np.dtype(dtype):
            self._arrays.pop(name, None)  # freed before the larger one is touched
            a = self._arrays[name] = np.empty(max(n, 1), dtype)
        return a[:n]

    def answer(self, n: int, pool: str = "answer") -> np.ndarray:
        """A ``n``-long uint64 array for a batch's answer, which the caller keeps: a
        view of a buffer of the store's that no earlier answer still uses (the
        caller dropped it: nothing but this arena refers to the buffer), else of a
        new one. A buffer is reused only while at most 4x the answer (a small answer
        never keeps a batch-sized buffer alive); at most ANSWER_BUFFERS are kept, the
        oldest let go (its memory then lives as long as the caller's answer).
        Why: the answer is the one batch-sized array the caller owns; a crawler drops
        it before the next batch, and a fresh one faulted in costs up to 35 ns per
        offered key here (the pages come back from the host). ``pool``: buffers of
        another owner, kept apart ("bloom": the copy of a batch's new keys its
        deferred Bloom insert holds until done, bloom/deferred.py)."""
        kept = self._pools.setdefault(pool, [])
        for buf in kept:
            # 3: the list's reference, ``buf`` and getrefcount's argument
            if sys.getrefcount(buf) <= 3 and n <= len(buf) <= 4 * max(n, 1 << 16):
                return buf[:n]
        buf = np.empty(max(n, 1), np.uint64)
        kept.insert(0, buf)
        del kept[ANSWER_BUFFERS:]
        return buf[:n]

    def release(self) -> None:
        self._arrays.clear()
        self._pools.clear()


class ShardSorter:
    """Threads that sort and deduplicate a batch's shards in place, kept for the
    store's life (``sorting.sort_shards`` on them): a thread keeps its radix scratch
    array from one batch to the next (sorting.py ``_scratch``), where a pool made per
    batch faulted a fresh one in every batch."""

    def __init__(self) -> None:
        self._ex: ThreadPoolExecutor | None = None
        self._threads = 0

    @staticmethod
    def partition(keys: np.ndarray, bits: int, threads: int, out: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``partition(keys, bits, threads, out)`` by ``sorting.fine_bits`` top bits
        (more than the shard's ``bits``): ``(out, bounds, fine)``, ``fine`` the starts
        of the finer groups (None when there are no more groups than shards). Handed
        to ``submit``, it sorts each shard from those groups, its first radix pass
        done by the partition's scatter (one pass over the batch fewer)."""
        fine_bits = _sorting.fine_bits(len(keys), bits)
        out, fine = partition(keys, fine_bits, threads, out)
        bounds = np.ascontiguousarray(fine[::1 << (fine_bits - bits)])
        return out, bounds, (fine if fine_bits > bits else None)

    def submit(self, keys: np.ndarray, bounds: np.ndarray, shards, threads: int,
               fine: np.ndarray | None = None) -> dict:
        """Sort each shard ``keys[bounds[s]:bounds[s+1]]`` (in the order given) on
        ``threads`` threads; return ``{shard: future}``, each giving ``(end of the
        shard's unique keys, CPU seconds of its sort)``. ``fine``: the finer groups'
        starts ``partition`` returned with ``keys`` and ``bounds`` (None: each shard
        sorted the plain way)."""
        threads = max(1, threads)
        if self._ex is None or self._threads != threads:
            self.close()
            # an executor of its own, not a shared pool: its threads keep their scratch
            self._ex = ThreadPoolExecutor(threads, thread_name_prefix="seenstore-shard-sort")
            self._threads = threads
        return _sorting.sort_shards(keys, bounds, shards, threads, executor=self._ex,
                                    fine=fine)[1]

    def close(self) -> None:
        if self._ex is not None:
            self._ex.shutdown(wait=True, cancel_futures=True)
            self._ex = None


@dataclass
class Written:
    """What ``write_shards`` did: ``segs`` ``(lo, m, mask, k)`` per shard that got keys
    (write_shards says where its keys are; ``mask`` True where new, ``k`` new);
    ``added`` ``(shard, header, sparse)`` per new run; figures."""

    segs: list = field(default_factory=list)
    added: list = field(default_factory=list)
    writers: dict = field(default_factory=dict)
    merge_s: float = 0.0
    shard_sort_s: float = 0.0
    bytes_read: int = 0
    bytes_cached: int = 0  # run bytes checked from the run cache (not read from disk)
    bytes_written: int = 0
    # summed over the shard threads: seconds waiting for a shard's sort, checking it
    # against its runs (wall, and thread CPU), writing its new keys, its run's fsync
    parts: dict = field(default_factory=dict)

    @property
    def n_new(self) -> int:
        return sum(k for _, _, _, k in self.segs)

    def abort(self) -> None:
        """Delete the new runs (the batch did not commit)."""
        for w in self.writers.values():
            w.abort()


@dataclass
class Target:
    """Where and how a batch's new runs are written: store directory, generation,
    identity fields of the run headers, run format, fsync or not."""

    path: str
    generation: int
    host_bits: int
    shard_bits: int
    policy_digest: bytes
    run_format: int | None  # runs.live.format_for
    sync: bool


def fsync_path(path: str) -> None:
    """fsync the file ``path`` (Linux fsyncs a file whatever descriptor names it)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Syncer:
    """fsyncs of a batch's new runs (written and closed) on threads of their own, as
    each shard's run is done, so a shard thread goes on checking the next shard
    instead of waiting ~20 ms for the journal (32 ns per offered key summed over the
    shard threads at 1e8 keys in batches of 1e7); ``wait`` before the commit. The
    threads are the process's ``seenstore-fsync`` pool of that size (runtime/pool.py:
    an fsync waits for nothing, so syncers may share it); a Syncer waits for its own
    fsyncs only."""

    def __init__(self, threads: int) -> None:
        self._ex = shared_pool(threads, "seenstore-fsync")
        self._futures: list = []

    def submit(self, path: str) -> None:
        self._futures.append(self._ex.submit(fsync_path, path))  # list.append is atomic

    def wait(self) -> None:
        """Until every fsync is done; raises the first one's OSError."""
        try:
            for f in self._futures:
                f.result()
        finally:
            wait(self._futures)

    def abandon(self) -> None:
        """The batch failed: wait for the fsyncs under way (their files are about to
        be removed), ignoring their errors; those not started yet never run."""
        for f in self._futures:
            f.cancel()
        wait(self._futures)


def write_shards(keys: np.ndarray, bounds: np.ndarray, jobs: list, runs: dict,
                 target: Target, pool: BufferPool, chunk_keys: int, *, threads: int,
                 merge_threads: int, progress=None, sorter: ShardSorter | None = None,
                 fine: np.ndarray | None = None, masks: np.ndarray | None = None,
                 cache=None) -> Written:
    """Check the keys of every shard in ``jobs`` against its live runs (``runs``,
    shard -> readers) and write the new ones as one new run per shard.

    ``keys[bounds[s]:bounds[s+1]]`` are shard s's keys: sorted and unique; or, given
    a ``sorter``, in any order with repeats: it then sorts and deduplicates them in
    place (``threads`` threads, shards side by side) while the shards already sorted
    are checked, and each shard's new keys are moved to the front of its slice
    (``keys`` is the caller's scratch; ``fine``: the finer groups' starts of
    ``ShardSorter.partition``, which the sorts start from). Every key is looked for
    in the runs, whatever a Bloom filter said of it: only keys no live run holds are
    written, so the runs of a shard stay disjoint even under a damaged filter.
    ``masks``: a bool array as long as ``keys`` the shards' masks are views of
    (None: one array per shard).
    ``cache``: the store's run cache (runcache.py): runs it holds are checked from
    memory, and the new runs join it. Returns ``segs`` ``(lo,
    m, mask, k)`` per shard: its sorted unique keys were ``keys[lo:lo + m]``,
    ``mask`` True where new, ``k`` new ones (with a sorter: now at ``keys[lo:lo +
    k]``). On any failure the new runs are deleted and the error raised (OSError as
    is: the caller names it)."""
    out = Written()
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
        clock = Clock(thread_cpu=True)
        if sorter is not None:
            hi, sort_s = sorted_parts[shard].result()
        clock.lap("sort_wait")
        part = keys[lo:hi]
        if masks is None:
            found = np.zeros(hi - lo, dtype=np.bool_)
        else:
            found = masks[lo:hi]
            found[:] = False
        bufs = pool.take(chunk_keys)
        try:
            tally: dict = {}
            read = runsmod.check_runs(runs.get(shard, []), part, found, bufs.old,
                                      cache=cache, tally=tally)
            is_new = np.logical_not(found, out=found)
            k = int(np.count_nonzero(is_new))
            clock.lap("check")
            header = sparse = None
            nbytes = 0
            if k:
                w = runsmod.new_writer(
                    os.path.join(target.path, run_name(shard, target.generation)),
                    target.host_bits, target.shard_bits, shard, target.policy_digest,
                    target.run_format, buf=bufs.write, cache=cache, keys=k)
                out.writers[shard] = w
                if sorter is not None:  # the caller's scratch: the new keys to its front
                    new = part[:compact_inplace(part, is_new)]
                else:
                    new = part[is_new]
                w.write(new)  # only the new keys
                clock.lap("write")
                # fsynced beside (Syncer), else here in the shard's thread
                header, sparse, nbytes = runsmod.finish(w, target.sync and syncer is None)
                if syncer is not None:
                    syncer.submit(w.path)
                clock.lap("fsync")
        finally:
            pool.give(bufs)
        with finished_lock:
            clock.add_to(out.parts)
        return (shard, header, sparse, (lo, hi - lo, is_new, k), sort_s, read, nbytes,
                tally.get("cached", 0))

    sorted_parts = {}
    syncer = Syncer(max(merge_threads, threads)) if target.sync and FSYNC == "beside" else None
    try:
        if sorter is not None:
            sorted_parts = sorter.submit(keys, bounds, jobs, threads, fine)
        merging = [shared_pool(max(merge_threads, threads), "seenstore-shard").submit(job, s)
                   for s in jobs]
        try:
            done = [f.result() for f in merging]
        finally:
            wait(merging)  # no shard thread may go on writing into ``keys`` or a run
        if syncer is not None:
            clock = Clock(thread_cpu=True)
            syncer.wait()
            clock.lap("fsync_wait")  # what the fsyncs beside added to the batch's wall
            clock.add_to(out.parts)
    except BaseException:
        if syncer is not None:
            try:
                syncer.wait()  # no fsync may run on a file abort deletes
            except BaseException:
                pass
        for f in sorted_parts.values():
            f.cancel()
        for f in sorted_parts.values():  # no sort may go on writing into ``keys``
            if not f.cancelled():
                try:
                    f.result()
                except BaseException:
                    pass
        out.abort()
        raise
    out.merge_s = time.perf_counter() - t0
    out.shard_sort_s = sum(d[4] for d in done)
    out.added = [(d[0], d[1], d[2]) for d in done if d[1] is not None]
    out.bytes_read = sum(d[5] for d in done)
    out.bytes_cached = sum(d[7] for d in done)
    out.bytes_written = sum(d[6] for d in done)
    out.segs = [d[3] for d in done]
    return out
