"""Batches bigger than memory (DRUM-style): spill by shard, then check shard by shard.

``admit_file`` reads a batch file in chunks and appends each chunk's keys, grouped
by shard, to one bucket file per shard in ``spill.tmp.<pid>/`` inside the store,
a busy shard's cut into key ranges as it is spilled (buckets.py ``Buckets``).
Each shard's bucket is then loaded one key range (a slice) at a time,
sorted, deduplicated, checked against the shard's live runs (check.py), and its new
keys are appended to that shard's one new run (runsink.py, on a thread behind the
check). One manifest commit at the end covers every shard: the batch is atomic (a
crash leaves the store as before, plus a spill folder and unnamed runs the next open
removes). Memory: the read chunk and its partition copy (a fifth of the budget
each), or one slice with its masks, 2 MiB-scale I/O buffers and the run sink's four
buffers; never the whole batch (docs/architecture.md, "Batches bigger than memory").
"""

from __future__ import annotations

import os

import shutil
import time

from concurrent.futures import wait

import numpy as np

from seenstore.kernels.dispatch import batch as _kernels
from seenstore.store.files import run_name, spill_dir
from seenstore.store.runs.format import policy_digest
from seenstore.runtime.aligned import aligned_empty
from seenstore.store.runs import live as runs_live
from seenstore.store import buckets, check
from seenstore.store.runsink import RunSink
from seenstore.runtime.clock import Clock
from seenstore.runtime.pool import shared_pool

NEW_NAME = "new.bin"  # the batch's new keys, shard by shard (sorted within each)


def _start_insert(store):
    """At the start of a spilled batch's check: the keeper's insert fed each shard's new
    run as it is finished (``BloomKeeper.start_fed``), so the batch's keys go into the
    filter beside its own check instead of being read back after the commit. The
    filter holds keys of uncommitted runs meanwhile, which nobody reads (the spilled
    check never asks it; readers settle after the commit), and a failed batch drops
    it (``abandon``). None without a filter."""
    from seenstore.store.runs.live import iter_keys

    return store._keeper.start_fed(lambda r, n: iter_keys([r], n))


def _defer_insert(store, early, clock: Clock, figures: dict) -> None:
    """After the commit: the previous batch's deferred insert waited for ("bloom" in
    ``clock``: it ran beside this batch's spill and check; its thread's wall and CPU
    seconds in ``figures``; the filter dropped if it failed), then this batch's
    insert ``early`` (``_start_insert``), which runs on past the return, handed to
    the keeper (``settle`` waits for it)."""
    behind = store._keeper.behind
    t = clock.start()
    store._keeper.settle()
    clock.stop("bloom", t)
    if behind is not None:
        figures["bloom_background_s"], figures["bloom_cpu_s"] = behind.book()
    store._keeper.adopt(early)


def admit_file(store, path, memory: int, fault, new_out: str | None = None,
               join=None) -> dict:
    """The body of ``SeenStore.add_new_file`` (its docstring); ``store``'s mutex held.
    ``fault``: the store's crash-test seam. ``path``: a batch file, or an iterable of
    uint64 arrays (``source_chunks``: a batch generated as it is spilled, never whole
    in memory or on disk but for the spill buckets). ``join``: called (returning the
    seconds it waited: ``compact_wait_s``) after the spill phase, before anything
    reads the store's runs or generation: the store's background compaction, which
    commits on its own, runs on beside the spilling (on the other core; the spill
    reads no run); None when it is joined already."""
    from seenstore.store.scheduling import Syncer

    budget = buckets.Budget(int(memory))
    t0 = time.perf_counter()
    work = spill_dir(store.path)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    sb = store.shard_bits
    pd = policy_digest(store.runs_policy_id)
    writers: dict = {}
    early = None  # this batch's Bloom insert (_start_insert), until the commit
    syncer = None  # the new runs' fsyncs (Syncer), until they are waited for
    sink = None  # the new runs' writer thread (RunSink), until it is closed
    appending = None  # the last chunk's bucket appends (a future), until done
    halves = None  # the check's second thread
    remover = buckets.Remover()  # the read buckets' removal, on a thread
    # the next bucket's read ahead (stepped WILLNEED calls: their page allocations,
    # 1.6 ns per key, off the checking thread)
    ahead = shared_pool(1, "seenstore-bucket-ahead")
    reading_ahead = None  # the last read ahead asked (one thread: the others are done)
    figures = {"offered": 0, "unique": 0, "new": 0, "slices": 0, "bytes_spilled": 0,
               "bytes_read": 0, "bytes_written": 0, "compact_wait_s": 0.0}
    clock = Clock()
    store._spill_phase = "spill"  # SeenStore.spill_phase, read by a memory sampler
    try:
        # 1. spill: every chunk's keys appended to their shard's bucket
        # a chunk's appends run on a thread while the next chunk is read (or
        # generated); its partition waits for them (one partition buffer)
        out = np.empty(budget.chunk_keys, dtype=np.uint64)
        bounds = np.empty((1 << sb) + 1, dtype=np.int64)
        filled = set()  # shards whose bucket got keys
        appender = shared_pool(1, "seenstore-spill-append")
        spilled = buckets.Buckets(work, budget, lambda sh: check.shard_range(sh, sb), fault)
        for chunk in buckets.source_chunks(path, budget.chunk_keys):
            t = clock.start()
            if appending is not None:
                appending.result()  # ``out`` is free again
            figures["offered"] += len(chunk)
            _kernels.partition_top_bits(chunk, sb, out, bounds)
            shards = np.flatnonzero(np.diff(bounds))
            filled.update(shards.tolist())
            appending = appender.submit(spilled.append, out, bounds.copy(), shards)
            clock.stop("spill", t)
            fault("spill-write")
        t = clock.start()
        if appending is not None:
            appending, done = None, appending
            done.result()
        clock.stop("spill", t)
        figures["bytes_spilled"] = 8 * figures["offered"]
        del out
        t_spill = time.perf_counter()
        if join is not None:  # the compaction's commits change the runs and generation
            figures["compact_wait_s"] = join()
        gen = store.generation + 1
        t_joined = time.perf_counter()
        store._spill_phase = "check"
        # 2. shard by shard, slice by slice: sort, check, append the new keys
        early = _start_insert(store)
        buf = aligned_empty(budget.io_keys)
        wbuf = aligned_empty(budget.io_keys)
        slab = np.empty(budget.slice_keys, dtype=np.uint64)
        found_slab = np.empty(budget.slice_keys, dtype=np.bool_)
        new_path = os.path.join(work, NEW_NAME) if new_out is not None else None
        added = []
        # each shard's new run is fsynced on a thread of its own while the next
        # shard is checked (waited for before the commit); the next bucket is read
        # ahead by the OS while this one is checked
        syncer = Syncer(1) if store.sync else None

        def open_writer(s: int):  # on the sink's thread
            w = writers[s] = runs_live.new_writer(
                os.path.join(store.path, run_name(s, gen)),
                store.layout.host_bits, sb, s, pd, store.run_format, buf=wbuf)
            return w

        def write(s: int, w, keys: np.ndarray) -> None:  # on the sink's thread
            w.write(keys)
            if new_path is not None:
                buckets.append(new_path, keys)

        def finished(s: int, w) -> None:  # on the sink's thread, shard by shard
            h, sparse, nbytes = runs_live.finish(w, False)
            run_path = os.path.join(store.path, run_name(s, gen))
            if syncer is not None:
                syncer.submit(run_path)
            added.append((s, h, sparse))
            if early is not None:
                early.feed(runs_live.open_reader(run_path, sparse))
            figures["bytes_written"] += nbytes

        # the new keys' encode and write run behind the check, on the other core
        sink = RunSink(open_writer, write, finished, budget.io_keys)
        # the check of a slice in two key halves, one on a thread of its own
        halves = shared_pool(1, "seenstore-check") if store.threads >= 2 else None
        order = sorted(filled)
        figures["ranged_shards"] = len(spilled.ranges)
        plan = [spilled.of(s) for s in order]  # each shard's buckets, key ranges in order
        # every bucket in the order read; the next one is read ahead while one is checked
        queue = [bucket for parts in plan for bucket, _, _ in parts]
        reading_ahead = ahead.submit(buckets.read_ahead, queue[:1])
        at = 0
        for i, s in enumerate(order):
            parts = plan[i]
            readers = store._runs.get(s, [])
            whole = len(parts) == 1 and os.path.getsize(parts[0][0]) // 8 <= budget.slice_keys
            for bucket, lo, hi in parts:  # key ranges, lowest first
                at += 1
                reading_ahead = ahead.submit(buckets.read_ahead, queue[at:at + 1])
                for keys in buckets.slices(bucket, lo, hi, budget, slab, fault, store.threads,
                                           clock, remover):
                    figures["unique"] += len(keys)
                    figures["slices"] += 1
                    found = found_slab[: len(keys)]
                    found[:] = False
                    t = clock.start()
                    figures["bytes_read"] += check.check_slice(readers, keys, found, buf, whole,
                                                               halves)
                    clock.stop("check", t)
                    t = clock.start()
                    np.logical_not(found, out=found)
                    k = _kernels.compact_inplace(keys, found)
                    if k:
                        sink.put(s, keys[:k])
                        figures["new"] += k
                    clock.stop("write", t)
                    fault("spill-sorted")
            sink.end(s)
        t = clock.start()
        remover.wait()
        clock.stop("remove", t)
        t = clock.start()
        sink, closing = None, sink
        closing.close()  # every new run written and finished
        clock.stop("write", t)
        clock.wall["write_behind"] = closing.busy_s
        clock.cpu["write_behind"] = closing.cpu_s
        if syncer is not None:
            t = clock.start()
            syncer, waiting = None, syncer
            waiting.wait()  # every new run durable before the manifest names it
            clock.stop("sync", t)
        t_check = time.perf_counter()
        store._spill_phase = "commit"
        # 3. one commit for every shard
        t = clock.start()
        if added or figures["offered"]:
            store._publish(gen, added, figures["new"], figures["bytes_written"], 0)
            writers.clear()  # committed: the runs are the store's now
        if new_out is not None:
            if new_path is None or not os.path.exists(new_path):
                open(new_out, "wb").close()
            else:
                shutil.move(new_path, new_out)
        clock.stop("commit", t)
        _defer_insert(store, early, clock, figures)
        early = None
        # merge_s: the check against the runs and the new run's writing (the slices'
        # sorts, inside that phase, are reported on their own; bloom_s: the wait for
        # the previous batch's deferred insert, after the commit);
        # stages: wall and process CPU seconds of every stage (Clock)
        sort_s, bloom_s = clock.wall.get("sort", 0.0), clock.wall.get("bloom", 0.0)
        figures.update(spill_s=t_spill - t0, merge_s=t_check - t_joined - sort_s,
                       commit_s=clock.wall["commit"], sort_s=sort_s, bloom_s=bloom_s,
                       stages={k: {"wall_s": v, "cpu_s": clock.cpu.get(k, 0.0)}
                               for k, v in clock.wall.items()})
        return figures
    except BaseException:
        if appending is not None:  # the chunk's appends: cancelled or waited for
            appending.cancel()
            wait([appending])
        if sink is not None:
            sink.abort()
        if syncer is not None:
            syncer.abandon()
        if early is not None:
            early.abandon()
        for w in writers.values():
            w.abort()
        raise
    finally:
        store._spill_phase = None
        if reading_ahead is not None:  # a hint: its errors are its own (none raised)
            wait([reading_ahead])
        try:
            remover.wait()  # before the folder goes: no removal outlives the batch
        except OSError:
            pass  # the folder is removed whole next
        shutil.rmtree(work, ignore_errors=True)

