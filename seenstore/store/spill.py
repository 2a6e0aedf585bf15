"""Batches bigger than memory (DRUM-style): spill by shard, then check shard by shard.

``admit_file`` reads a batch file in chunks and appends each chunk's keys, grouped
by shard, to one bucket file per shard in ``spill.tmp.<pid>/`` inside the store.
Each shard's bucket is then loaded slice by slice (a bucket larger than the slice
budget is first split again by the next key bits into sub-buckets, recursively,
so a slice is one key range), sorted, deduplicated, checked against the shard's
live runs, and its new keys are appended to that shard's one new run. One manifest
commit at the end covers every shard: the batch is atomic (a crash leaves the
store as before, plus a spill folder and unnamed runs the next open removes).

Memory: the read chunk and its partition copy (a fifth of the budget each), or
one slice with its masks, 2 MiB-scale I/O buffers and the run sink's four buffers
(``runsink.py``: the new keys are encoded and written on a thread behind the
check); never the whole batch. See
docs/architecture.md ("Batches bigger than memory").
"""

from __future__ import annotations

import os

import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from seenstore.kernels.dispatch import batch as _kernels, merge as _merge_kernels
from seenstore.errors import CorruptionError, InvalidInputError, StoreNotFoundError
from seenstore.store.files import run_name, spill_dir
from seenstore.store.runs.format import HEADER_SIZE, policy_digest
from seenstore.runtime.aligned import aligned_empty
from seenstore.keys import sort as sorting
from seenstore.store.runs import live as runs_live
from seenstore.store.runsink import RunSink
from seenstore.bloom.deferred import DEFERRED_CHUNK_KEYS, DeferredInsert, settle  # noqa: F401

MIN_MEMORY = 16 << 20  # below this the fixed buffers alone would not fit
MAX_PARTS = 256  # a too-large bucket splits into at most this many key ranges per level
NEW_NAME = "new.bin"  # the batch's new keys, shard by shard (sorted within each)
HALVES_MIN_KEYS = 1 << 16  # a smaller slice is checked on one thread (check_slice)


class Budget:
    """How a memory budget (bytes) is spent: read chunk keys, slice keys, I/O keys."""

    def __init__(self, memory: int):
        if memory < MIN_MEMORY:
            raise InvalidInputError(
                f"memory budget {memory} bytes is below the minimum {MIN_MEMORY >> 20} MiB")
        self.memory = memory
        self.io_keys = max(1 << 14, min(1 << 20, memory // 64 // 8))  # I/O buffers
        self.chunk_keys = memory // 5 // 8  # the read chunk; its partition copy as much
        # a slice: its keys (8 B) and found mask (1 B) per key, a bit over a quarter
        # of the budget, like the spill phase's two arrays: half of it is slack for
        # the interpreter's own allocations and the I/O buffers
        self.slice_keys = max(1, memory // 32)


class Clock:
    """Seconds by stage of one spilled batch: wall (``<stage>_s``) and CPU of the whole
    process (``cpu[<stage>]``: on a shared machine the wall time includes time waiting
    for a core, the CPU time does not; stages running beside each other on two cores
    each count their own thread's time only where noted)."""

    def __init__(self) -> None:
        self.wall: dict = {}
        self.cpu: dict = {}

    def start(self) -> tuple:
        return time.perf_counter(), time.process_time()

    def stop(self, stage: str, t: tuple) -> None:
        self.wall[stage] = self.wall.get(stage, 0.0) + time.perf_counter() - t[0]
        self.cpu[stage] = self.cpu.get(stage, 0.0) + time.process_time() - t[1]


def _read_chunks(path: str, chunk_keys: int):
    """Yield uint64 arrays of at most ``chunk_keys`` keys read from ``path`` (a
    regular file or a stream); raises InvalidInputError on a trailing partial key."""
    try:
        f = open(path, "rb", buffering=0)
    except FileNotFoundError:
        raise StoreNotFoundError(f"{path}: no such batch file") from None
    except IsADirectoryError:
        raise InvalidInputError(f"{path}: is a directory, expected a batch file") from None
    buf = np.empty(chunk_keys, dtype=np.uint64)
    raw = memoryview(buf).cast("B")
    with f:
        while True:
            got = 0
            while got < len(raw):
                r = f.readinto(raw[got:])
                if not r:
                    break
                got += r
            if got % 8:
                raise InvalidInputError(
                    f"{path}: length is not a multiple of 8 bytes (not a batch of uint64 keys)")
            if got:
                yield buf[: got // 8]
            if got < len(raw):
                return


def source_chunks(source, chunk_keys: int):
    """The keys of ``source`` as uint64 arrays of at most ``chunk_keys`` keys that the
    caller may overwrite: a batch file's path (``_read_chunks``), or an iterable of
    uint64 arrays of any sizes (a generated batch streamed in; each array is taken in
    ``chunk_keys`` pieces, copied into one reused buffer)."""
    if isinstance(source, (str, bytes, os.PathLike)):
        yield from _read_chunks(source, chunk_keys)
        return
    buf = np.empty(chunk_keys, dtype=np.uint64)
    for arr in source:
        arr = np.asarray(arr)
        if arr.dtype != np.uint64 or arr.ndim != 1:
            raise InvalidInputError(
                f"a streamed batch takes 1-d uint64 arrays, got {arr.dtype} with shape {arr.shape}")
        for lo in range(0, len(arr), chunk_keys):
            n = min(chunk_keys, len(arr) - lo)
            buf[:n] = arr[lo:lo + n]
            yield buf[:n]


def _append(path: str, keys: np.ndarray) -> None:
    with open(path, "ab", buffering=0) as f:
        f.write(memoryview(np.ascontiguousarray(keys)).cast("B"))


def _append_buckets(work: str, part: np.ndarray, bounds: np.ndarray, shards) -> None:
    """Append each of ``shards``' keys of the partitioned chunk ``part`` (shard s:
    ``part[bounds[s]:bounds[s + 1]]``) to its bucket file in ``work``."""
    for s in shards.tolist():
        _append(os.path.join(work, f"s{s:04d}.bin"), part[bounds[s]:bounds[s + 1]])


def _sample(path: str, n: int, pieces: int = 64, piece: int = 1024) -> np.ndarray:
    """About ``pieces * piece`` keys of the ``n``-key bucket ``path``, read in
    ``pieces`` runs spread evenly over it (positional reads), sorted."""
    take = min(piece, n)
    at = np.unique(np.linspace(0, n - take, min(pieces, max(1, n // take))).astype(np.int64))
    out = np.empty(len(at) * take, dtype=np.uint64)
    raw = memoryview(out).cast("B")
    with open(path, "rb", buffering=0) as f:
        for i, a in enumerate(at.tolist()):
            if os.preadv(f.fileno(), [raw[8 * i * take: 8 * (i + 1) * take]], 8 * a) != 8 * take:
                raise CorruptionError(f"{path}: spill bucket ends early")
    out.sort()
    return out


def splitters(sample: np.ndarray, parts: int, lo: int, hi: int) -> np.ndarray:
    """Ascending keys cutting the key range [lo, hi] of a bucket whose sorted
    ``sample`` is given into about ``parts`` ranges of equal share (range i: keys k
    with splitters[i - 1] <= k < splitters[i]). A key that fills a range's share of
    the sample alone (a hot key) gets a range of its own, [k, k + 1): the one key a
    range of width one can hold, so even a bucket of one key repeated terminates."""
    m = len(sample)
    cuts = sample[(np.arange(1, parts) * m) // parts]
    vals, counts = np.unique(sample, return_counts=True)
    hot = vals[counts >= max(2, m // (2 * parts))]
    cuts = np.concatenate([cuts, hot, hot[hot < np.uint64(2**64 - 1)] + np.uint64(1)])
    cuts = np.unique(cuts)
    return cuts[(cuts > np.uint64(lo)) & (cuts <= np.uint64(hi))]


def _split(src: str, dest_dir: str, cuts: np.ndarray, budget: Budget, fault) -> list:
    """Split the keys of ``src`` into the key ranges ``cuts`` makes (``splitters``),
    ``dest_dir/r<i>.bin``; returns ``(path, range lo, range hi)`` of each non-empty
    range, lowest keys first (hi inclusive). Reads and partitions pieces of a
    quarter slice (the piece, its ids, order and partitioned copy: less memory
    than a slice's sort and its buffer)."""
    os.makedirs(dest_dir, exist_ok=True)
    piece = max(1, min(budget.chunk_keys, budget.slice_keys // 4))
    seen = np.zeros(len(cuts) + 1, dtype=bool)
    ids = np.empty(piece, dtype=np.int32)
    part = np.empty(piece, dtype=np.uint64)
    starts = np.empty(len(cuts) + 2, dtype=np.int64)
    for chunk in _read_chunks(src, piece):
        _kernels.partition_by_cuts(chunk, cuts, ids, part, starts)
        for i in np.flatnonzero(np.diff(starts)).tolist():
            _append(os.path.join(dest_dir, f"r{i:04d}.bin"), part[starts[i]:starts[i + 1]])
            seen[i] = True
        fault("spill-write")
    os.unlink(src)
    bounds = [0] + [int(c) for c in cuts] + [2**64]
    return [(os.path.join(dest_dir, f"r{i:04d}.bin"), bounds[i], bounds[i + 1] - 1)
            for i in np.flatnonzero(seen).tolist()]


def _slices(path: str, lo: int, hi: int, budget: Budget, slab: np.ndarray, fault,
            threads: int = 1, clock: Clock | None = None):
    """Yield the sorted unique keys of bucket ``path`` (every key in [lo, hi]) one
    key range at a time, lowest first, each a view of ``slab`` (``budget.slice_keys``
    keys, reused: no allocation per slice, so the heap does not grow by fragments);
    a bucket too large is split into key ranges of about half a slice each, cut at
    the quantiles of a sample of its keys (``splitters``), recursively. A split by
    key bits would not do: a busy host's keys share their top 20 bits (host-skewed
    streams), so bit splits below the shard bits would copy its bucket level by
    level without dividing it."""
    clock = clock or Clock()
    n = os.path.getsize(path) // 8
    if n <= len(slab) or lo == hi:  # a range of one key value: that key, repeated
        n = min(n, len(slab))
        t = clock.start()
        with open(path, "rb", buffering=0) as f:
            got = f.readinto(memoryview(slab[:n]).cast("B"))
        if got != 8 * n:
            raise CorruptionError(f"{path}: spill bucket ends early")
        os.unlink(path)
        clock.stop("read", t)
        keys = slab[:n]
        t = clock.start()
        # the store's sort (radix where it is faster: its buffer is one more slice,
        # within the budget's slack, allocated per slice and freed)
        m = sorting.sort_unique_keys(keys, threads)
        clock.stop("sort", t)
        yield keys[:m]
        return
    t = clock.start()
    parts = min(MAX_PARTS, max(2, -(-2 * n // len(slab))))
    subs = _split(path, path + ".d", splitters(_sample(path, n), parts, lo, hi), budget, fault)
    clock.stop("split", t)
    for sub, a, b in subs:
        yield from _slices(sub, max(a, lo), min(b, hi), budget, slab, fault, threads, clock)


def check_window(readers: list, batch: np.ndarray, found: np.ndarray, buf: np.ndarray) -> int:
    """Mark in ``found`` the keys of sorted unique ``batch`` (one key range of a shard)
    held by any of ``readers``, reading of each run only the part that can hold the
    range (positional reads into ``buf``, not the memory map: the pages read do not
    stay in this process). Returns bytes read."""
    read = 0
    lo, hi = int(batch[0]), int(batch[-1])
    for reader in readers:
        if reader.count == 0:
            continue
        if runs_live.compressed(reader):  # the blocks that can hold [lo, hi], swept
            read += reader.sweep(batch, found, lo, hi)
            continue
        j, prev, have = 0, np.uint64(0), False
        raw = memoryview(buf).cast("B")
        with open(reader.path, "rb", buffering=0) as f:
            a = _bisect(f.fileno(), reader.count, lo, lambda k, x: k < x)
            b = _bisect(f.fileno(), reader.count, hi, lambda k, x: k <= x)
            for off in range(a, b, len(buf)):
                n = min(len(buf), b - off)
                if os.preadv(f.fileno(), [raw[: 8 * n]], HEADER_SIZE + 8 * off) != 8 * n:
                    raise CorruptionError(f"{reader.name}: body ends early")
                j, prev, have, ok = _merge_kernels.sweep_step(buf, n, batch, j, found, prev, have)
                prev = np.uint64(prev)
                if not ok:
                    raise CorruptionError(f"{reader.name}: keys are not sorted and unique")
                read += 8 * n
    return read


def check_slice(readers: list, keys: np.ndarray, found: np.ndarray, buf: np.ndarray,
                whole: bool, halves) -> int:
    """Mark in ``found`` the keys of sorted unique ``keys`` (a slice of a shard's
    bucket) that ``readers`` (the shard's live runs) hold; returns bytes read.

    ``halves``: an executor of one thread, or None. With it, and every run
    compressed, the slice is checked in two key halves at once, one on the
    executor's thread: each reads and decodes only the blocks that can hold its half
    (each block checked by its checksum, as a window of a split bucket is), so two
    cores decode instead of one. Otherwise a whole shard is swept run by run
    (``runs_live.check_runs``: the run's count and body checksum checked too) and a
    window of a split bucket by ``check_window``."""
    if (halves is not None and len(keys) >= HALVES_MIN_KEYS and readers
            and all(runs_live.compressed(r) for r in readers)):
        mid = len(keys) // 2
        upper = halves.submit(check_window, readers, keys[mid:], found[mid:], buf)
        try:
            lower = check_window(readers, keys[:mid], found[:mid], buf)
        finally:
            read = upper.result()
        return lower + read
    if whole:
        return runs_live.check_runs(readers, keys, found, buf)
    return check_window(readers, keys, found, buf)


def _read_ahead(path: str) -> None:
    """Let the OS start reading the bucket ``path`` (the next shard's, read whole
    once this shard is checked); a no-op without posix_fadvise."""
    if not hasattr(os, "posix_fadvise"):
        return
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(fd)


def _bisect(fd: int, count: int, x: int, before) -> int:
    """First position in a run file's body whose key ``k`` is not ``before(k, x)``,
    by positional reads of single keys (not the memory map: each page it faults
    in would count in this process's resident memory, about 1 MiB per search)."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        k = int.from_bytes(os.pread(fd, 8, HEADER_SIZE + 8 * mid), "little")
        if before(k, x):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _start_insert(store):
    """At the start of a spilled batch's check: a DeferredInsert fed each shard's new
    run as it is finished, so the batch's keys go into the filter beside its own
    check (issue 15: the last batch's insert, read back after its commit, was waited
    for at the end: 37.8 ns per offered key of the 1e10 run's last batch). It waits on
    its thread for the new filter's prefault and for the previous batch's insert; the
    filter holds keys of uncommitted runs meanwhile, which nobody reads (the spilled
    check never asks it; readers settle after the commit), and a failed batch drops
    it (``abandon``). None without a filter."""
    if store._keeper.bf is None:
        return None
    behind = store._bloom_behind
    prefault, store._prefault = store._prefault, None
    from seenstore.store.runs.live import iter_keys

    return DeferredInsert(store._keeper, chunks_of=lambda r, n: iter_keys([r], n),
                          after=(prefault, behind.thread if behind is not None else None))


def _defer_insert(store, early, clock: Clock, figures: dict) -> None:
    """After the commit: the previous batch's deferred insert waited for ("bloom" in
    ``clock``: it ran beside this batch's spill and check; its thread's wall and CPU
    seconds in ``figures``; the filter dropped if it failed), then this batch's
    insert ``early`` (``_start_insert``), which runs on past the return, made the
    store's (``settle`` waits for it)."""
    behind = store._bloom_behind
    t = clock.start()
    settle(store)
    clock.stop("bloom", t)
    if behind is not None:
        figures["bloom_background_s"], figures["bloom_cpu_s"] = behind.book()
    if early is not None:
        early.close()
        store._bloom_behind = early


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

    budget = Budget(int(memory))
    t0 = time.perf_counter()
    work = spill_dir(store.path)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    sb = store.shard_bits
    pd = policy_digest(store.policy_id)
    writers: dict = {}
    early = None  # this batch's Bloom insert (_start_insert), until the commit
    syncer = None  # the new runs' fsyncs (Syncer), until they are waited for
    sink = None  # the new runs' writer thread (RunSink), until it is closed
    appender = None  # the spill's bucket appends, until they are done
    halves = None  # the check's second thread
    figures = {"offered": 0, "unique": 0, "new": 0, "slices": 0, "bytes_spilled": 0,
               "bytes_read": 0, "bytes_written": 0, "compact_wait_s": 0.0}
    clock = Clock()
    store._spill_phase = "spill"  # for a sampler of the memory by phase (benchrun.py)
    try:
        # 1. spill: every chunk's keys appended to their shard's bucket
        # a chunk's appends run on a thread while the next chunk is read (or
        # generated); its partition waits for them (one partition buffer)
        out = np.empty(budget.chunk_keys, dtype=np.uint64)
        bounds = np.empty((1 << sb) + 1, dtype=np.int64)
        buckets = set()
        appender = ThreadPoolExecutor(1, thread_name_prefix="seenstore-spill-append")
        appending = None
        for chunk in source_chunks(path, budget.chunk_keys):
            t = clock.start()
            if appending is not None:
                appending.result()  # ``out`` is free again
            figures["offered"] += len(chunk)
            _kernels.partition_top_bits(chunk, sb, out, bounds)
            shards = np.flatnonzero(np.diff(bounds))
            buckets.update(shards.tolist())
            appending = appender.submit(_append_buckets, work, out, bounds.copy(), shards)
            clock.stop("spill", t)
            fault("spill-write")
        t = clock.start()
        appender, closing = None, appender
        closing.shutdown(wait=True)
        if appending is not None:
            appending.result()
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
        # shard is checked (waited for before the commit); the next shard's bucket is
        # read ahead by the OS while this one is checked
        syncer = Syncer(1) if store.sync else None

        def open_writer(s: int):  # on the sink's thread
            w = writers[s] = runs_live.new_writer(
                os.path.join(store.path, run_name(s, gen)),
                store.layout.host_bits, sb, s, pd, store.run_format, buf=wbuf)
            return w

        def write(s: int, w, keys: np.ndarray) -> None:  # on the sink's thread
            w.write(keys)
            if new_path is not None:
                _append(new_path, keys)

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
        halves = (ThreadPoolExecutor(1, thread_name_prefix="seenstore-check")
                  if store.threads >= 2 else None)
        order = sorted(buckets)
        for i, s in enumerate(order):
            bucket = os.path.join(work, f"s{s:04d}.bin")
            if i + 1 < len(order):
                _read_ahead(os.path.join(work, f"s{order[i + 1]:04d}.bin"))
            readers = store._runs.get(s, [])
            whole = os.path.getsize(bucket) // 8 <= budget.slice_keys
            lo = s << (64 - sb) if sb else 0
            hi = lo + (1 << (64 - sb)) - 1
            for keys in _slices(bucket, lo, hi, budget, slab, fault, store.threads, clock):
                figures["unique"] += len(keys)
                figures["slices"] += 1
                found = found_slab[: len(keys)]
                found[:] = False
                t = clock.start()
                figures["bytes_read"] += check_slice(readers, keys, found, buf, whole, halves)
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
        if added:
            store._commit(gen, added, [], {"batches": 1, "new": figures["new"],
                                           "bytes_written": figures["bytes_written"]})
            writers.clear()  # committed: the runs are the store's now
            store._compactor.earn(figures["bytes_written"])
        elif figures["offered"]:
            store._commit_counters(0)
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
        if appender is not None:
            appender.shutdown(wait=True, cancel_futures=True)
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
        if halves is not None:  # its one task is waited for by check_slice itself
            halves.shutdown(wait=True)
        store._spill_phase = None
        shutil.rmtree(work, ignore_errors=True)

