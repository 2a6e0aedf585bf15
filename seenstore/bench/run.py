"""The end-to-end benchmark behind ``seenstore bench``: stream, store, floor, verdict.

``run_bench`` drives a ``CrawlStream`` through a real ``SeenStore`` batch by batch,
checks every returned mask against the stream's exact expectation, and measures in
the same run the floor: the faster of ``np.sort`` and the radix sort (sorting.py) of
the same batches, each timed in this run, plus a sequential read and write of the bytes
the merges moved, at the disk bandwidth ``disk_bandwidth`` measures.
"""

from __future__ import annotations

import os
import resource
import shutil
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from decimal import Decimal, InvalidOperation

import numpy as np

from seenstore.keys import sort as sorting
from seenstore.errors import DiskFullError, InvalidInputError, StoreIOError
from seenstore.bench.workload import CrawlStream
from seenstore.warmup import warm_up

STAGES = ("generate", "sort", "spill", "bloom", "merge", "commit", "answer", "align")
# the shard threads' laps inside merge (store/scheduling.py), summed over the threads:
# wall seconds and CPU seconds of each; wall minus CPU is time the thread waited
# (for a sort, the disk, or a core)
# shard-thread laps (fsync: in the shard thread, with FSYNC = "inline"), and
# fsync_wait: the batch's wait, after its checks, for the fsyncs run beside them
THREAD_LAPS = ("sort_wait", "check", "write", "fsync", "fsync_wait")
ANSWERS = ("new", "mask")
BYTES_PER_OFFERED_KEY = 64  # measured peak RSS per batch key is below this (docs/bench.md)
_CHUNK = 8 << 20


def parse_count(text: str) -> int:
    """A whole non-negative number written as 1e9, 2.5e6, 1_000_000 or 1000000.

    Raises InvalidInputError for anything else (1.5, -3, 1e-3, abc)."""
    try:
        d = Decimal(str(text).replace("_", ""))
    except InvalidOperation:
        raise InvalidInputError(f"{text!r} is not a number (write e.g. 1e9 or 1000000)") from None
    if not d.is_finite() or d != d.to_integral_value() or d < 0:
        raise InvalidInputError(f"{text!r} is not a whole non-negative number")
    return int(d)


def default_batch_size(total_keys: int, share: float = 0.25, memory: int | None = None) -> int:
    """Batch size for ``share`` of ``memory`` (default: the memory available now), in
    [1e5, 1e8] and <= total_keys, then evened out so that all batches of the run have
    (nearly) the same size."""
    avail = _available_memory() if memory is None else memory
    b = int(avail * share / BYTES_PER_OFFERED_KEY)
    b = max(100_000, min(100_000_000, b))
    b = int(float(f"{b:.1g}"))  # one significant digit: 93,752,123 -> 90,000,000
    b = max(1, min(b, total_keys))
    n_batches = -(-total_keys // b)
    return -(-total_keys // n_batches)  # equal batches: no small, costly remainder


# On-disk bytes per stored key the plan assumes, by run format: raw runs (8 B) or
# compressed ones (~4.2-4.6 B at 1e9-1e10 keys), with a quarter more for what compaction
# holds twice while it merges a shard and the runs of the last batch not yet merged; the
# Bloom file's bytes per key come from its sizing.
PLAN_RUN_BYTES_PER_KEY = 10
PLAN_RUN_BYTES = {1: PLAN_RUN_BYTES_PER_KEY, 2: 6}
# Batches bigger than memory (spilled, DRUM-style: SeenStore.add_new_file): taken when
# in-memory batches would be more than SPILL_ABOVE_BATCHES, each sweeping the whole store.
SPILL_ABOVE_BATCHES = 25
SPILL_SHARD_BITS = 8  # spilled runs: 256 shards, so the busiest shard's bucket stays small
SPILL_MAX_BATCH = 4_000_000_000
# the share of the spare disk (free, less the run's whole need but its buckets) that
# a spilled batch's buckets may take: the spare already counts, beside the buckets,
# the last batch's own new runs (written as its buckets are read and unlinked), the
# Bloom file (written at the close) and the disk probe (before and after the batches),
# so the disk's real peak stays well under the check's need
SPILL_DISK_SHARE = 0.8
RSS_CAP = 12 << 30  # the spilled plan keeps the process under this (and half the memory)
# The spilled plan's memory model (``spill_peak``), each part measured on scaled-down
# spilled runs (docs/bench.md, "Memory of a spilled run"):
RSS_MARGIN = 1 << 28  # the estimate stays this far under the cap: 0.25 GiB
# freed memory the allocator keeps resident (small arrays of the check and of the
# threads beside it): the 1e10 run at 199b99f measured its check 0.42 GiB over the
# model without it (11.69 GiB), a 2e8-key run its spill 0.27 GiB over
HEAP_SLACK = 1 << 29
RSS_BASE = 1 << 28  # interpreter, numpy, numba kernels after the warm-up (190 MiB measured)
GEN_CHUNK = 1 << 22  # keys per generated chunk of a spilled batch
GEN_BYTES = 6 * 8 * GEN_CHUNK  # a generated chunk and its temporaries (workload.py)
COMPACTION_BYTES = 1 << 27  # the compaction beside the spill phase: merge buffers, writer
IO_BYTES = 2 * 8 * (1 << 20)  # the check's two I/O buffers at most (buckets.Budget.io_keys)
# the check's two halves' sweep buffers and scratch (runcodec.SWEEP_BLOCKS blocks each)
SWEEP_BYTES = 2 * 9 * (1 << 20)
MIN_SPILL_MEMORY = 1 << 28  # a smaller budget is refused: the Bloom target is raised first
# Bloom targets a spilled plan may take, in order: the store's default, then twice it,
# whose one layer (LayeredBloom.layer_fpr: half the target) has the default's rate; the
# bench's filter is sized for the stream's exact distinct keys, so it never grows a layer
SPILL_BLOOM_TARGETS = (1e-3, 2e-3)
FLOOR_SAMPLE = 1 << 22  # a spilled batch's floor sort is timed on this many of its keys


@dataclass
class ResourcePlan:
    """What ``seenstore bench`` found and needs, decided before it starts.

    ``spill_memory``: the memory budget of each spilled batch (None: batches are
    sorted in memory); ``disk``: the disk needed, by item."""

    memory_available: int
    memory_total: int
    disk_free: int
    batch: int
    bloom_bytes: int
    disk_needed: int
    run_format: int = 1
    bloom_fpr: float = SPILL_BLOOM_TARGETS[0]
    memory_estimate: dict = field(default_factory=dict)  # spill_peak's parts (spilled)
    spill_memory: int | None = None
    shard_bits: int | None = None
    busiest_shard_share: float | None = None
    disk: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def busiest_shard_share(shard_bits: int, host_bits: int, n_hosts: int | None, seed: int,
                        sample: int = 1 << 20) -> float:
    """The largest share of the stream's keys one shard (top ``shard_bits`` bits) gets,
    measured on the keys of ``sample`` ids (the hosts are Zipf-skewed: the busiest host
    alone is ~7% of all keys)."""
    from seenstore.bench.workload import keys_of_ids

    keys = keys_of_ids(np.arange(sample, dtype=np.uint64), host_bits,
                       n_hosts or (1 << host_bits), seed)
    counts = np.bincount((keys >> np.uint64(64 - shard_bits)).astype(np.int64),
                         minlength=1 << shard_bits)
    return float(counts.max()) / sample


def bloom_bytes_for(capacity: int | None, fpr: float) -> int:
    """Bytes of the filter a store opened with ``bloom_capacity=capacity`` and
    ``bloom_fpr=fpr`` allocates: one LayeredBloom layer at ``layer_fpr(fpr, 0)``
    (half the target; the planner counted a filter at the whole target before, 1.3 GiB
    short at 1e10)."""
    if not capacity:
        return 0
    from seenstore.bloom import LayeredBloom, size_for

    return 64 * size_for(int(capacity), LayeredBloom.layer_fpr(fpr, 0))[0]


def spill_peak(memory: int, bloom_bytes: int, io_bytes: int | None = None) -> dict:
    """Estimated peak resident bytes of a spilled run with budget ``memory``, by part:
    the interpreter, the filter, and the larger of the spill phase (read chunk and
    partition copy, 2/5 of the budget; a generated chunk; the compaction between
    batches beside it) and the check phase (slice, found mask and the sort's scratch,
    17/32; the run sink's buffers, 4/64; two I/O buffers; the two halves' sweep
    buffers); the deferred Bloom insert (two lots) runs beside both (spill.py)."""
    from seenstore.bloom.deferred import DEFERRED_CHUNK_KEYS

    io = IO_BYTES if io_bytes is None else io_bytes
    insert = 2 * 8 * DEFERRED_CHUNK_KEYS
    spill_phase = 2 * memory // 5 + GEN_BYTES + COMPACTION_BYTES + insert
    check_phase = 19 * memory // 32 + io + SWEEP_BYTES + insert
    parts = {"interpreter": RSS_BASE, "heap_slack": HEAP_SLACK, "bloom": bloom_bytes,
             "spill_phase": spill_phase, "check_phase": check_phase}
    parts["total"] = RSS_BASE + HEAP_SLACK + bloom_bytes + max(spill_phase, check_phase)
    return parts


def spill_budget(cap: int, bloom_bytes: int) -> int:
    """The largest budget whose ``spill_peak`` stays RSS_MARGIN under ``cap`` (0: none)."""
    from seenstore.bloom.deferred import DEFERRED_CHUNK_KEYS

    room = cap - RSS_MARGIN - RSS_BASE - HEAP_SLACK - bloom_bytes - 2 * 8 * DEFERRED_CHUNK_KEYS
    by_spill = (room - GEN_BYTES - COMPACTION_BYTES) * 5 // 2
    by_check = (room - IO_BYTES - SWEEP_BYTES) * 32 // 19
    return max(0, min(by_spill, by_check))


def plan_resources(total_keys: int, distinct_keys: int, batch: int | None, work_dir: str,
                   bloom_capacity: int | None, probe_bytes: int, run_format: int | None = 1,
                   memory: int | None = None, spill: bool | None = None,
                   stream_shape: tuple = (20, None, 0),
                   bloom_fpr: float | None = None) -> ResourcePlan:
    """Choose the batch size and path from the memory found (after the Bloom filter's
    share) and check the free disk of ``work_dir`` against the run's needs, before
    anything is written.

    In memory (the default while the stream needs at most SPILL_ABOVE_BATCHES batches of
    at most 1e8 keys): a quarter of the memory left. Spilled (``spill`` True, ``memory``
    given, or more batches than that): each batch streamed through
    ``SeenStore.add_new_file`` with the largest memory budget whose estimated peak
    (``spill_peak``) stays RSS_MARGIN under min(RSS_CAP, half the machine's memory, 80%
    of the available), at the first Bloom target of SPILL_BLOOM_TARGETS that leaves at
    least MIN_SPILL_MEMORY (``bloom_fpr`` given: that one only);
    the batch as large as SPILL_DISK_SHARE of the spare disk holds as spill buckets, the
    busiest shard's bucket (measured on the stream, ``stream_shape`` = (host_bits,
    n_hosts, seed)) counted twice for its split, at most SPILL_MAX_BATCH (docs/bench.md,
    "Batch size of a spilled run"). ``run_format`` None: raw runs (1) when the raw plan
    takes at most 80% of the free disk, else compressed (2).

    Raises DiskFullError (exit 6) naming what is needed when the disk is short,
    StoreIOError when the Bloom filter alone would not leave memory for batches."""
    from seenstore.store.buckets import Budget

    avail = _available_memory()
    total_mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    fpr = bloom_fpr or SPILL_BLOOM_TARGETS[0]
    bloom_bytes = bloom_bytes_for(bloom_capacity, fpr)
    room = avail - bloom_bytes
    free = shutil.disk_usage(work_dir).free
    share = 0.0  # the busiest shard's share of a spilled batch (its bucket is split)

    def disk_for(fmt: int, spill_batch: int) -> dict:
        return {"runs": PLAN_RUN_BYTES[fmt] * distinct_keys, "bloom_file": bloom_bytes,
                "spill_buckets": int(8 * spill_batch * (1 + share)), "disk_probe": probe_bytes}

    def check(d: dict) -> int:
        need = sum(d.values())
        if free < need:
            raise DiskFullError(
                f"{work_dir}: bench --keys {total_keys:,} needs about {gib(need)} of free disk "
                f"({gib(d['runs'])} of runs for {distinct_keys:,} distinct keys, "
                f"{gib(d['bloom_file'])} Bloom file, {gib(d['spill_buckets'])} spill buckets, "
                f"{gib(d['disk_probe'])} disk probe), only {gib(free)} is free")
        return need

    auto_format = run_format is None
    if auto_format:  # raw if it fits with room to spare (the batch decided), else compressed
        run_format = 2
    mem_batch = None
    if batch is None and room >= 4 * 100_000 * BYTES_PER_OFFERED_KEY:
        mem_batch = default_batch_size(total_keys, memory=room)
    if spill is None:
        spill = memory is not None or (
            batch is None and (mem_batch is None
                               or -(-total_keys // mem_batch) > SPILL_ABOVE_BATCHES))
    if not spill:
        if batch is None:
            if mem_batch is None:
                raise StoreIOError(
                    f"the Bloom filter for {bloom_capacity:,} keys needs {gib(bloom_bytes)} of "
                    f"the {gib(avail)} of memory available, leaving too little for batches; "
                    "use --no-bloom or a smaller --bloom-capacity")
            batch = mem_batch
        if auto_format and sum(disk_for(1, 0).values()) <= 0.8 * free:
            run_format = 1
        d = disk_for(run_format, 0)
        return ResourcePlan(avail, total_mem, free, batch, bloom_bytes, check(d), run_format,
                            fpr, disk=d)
    # spilled
    if memory is None:
        cap = min(RSS_CAP, total_mem // 2, int(0.8 * avail))
        for fpr in ([bloom_fpr] if bloom_fpr else SPILL_BLOOM_TARGETS):
            bloom_bytes = bloom_bytes_for(bloom_capacity, fpr)
            memory = spill_budget(cap, bloom_bytes)
            if memory >= MIN_SPILL_MEMORY:
                break
        else:
            raise StoreIOError(
                f"the Bloom filter for {bloom_capacity:,} keys needs {gib(bloom_bytes)} of the "
                f"{gib(cap)} this run may use, leaving too little for spilled batches; "
                "use --no-bloom or a smaller --bloom-capacity")
    Budget(memory)  # refuses a budget below the minimum
    shard_bits = SPILL_SHARD_BITS
    share = busiest_shard_share(shard_bits, *stream_shape)
    if batch is None:
        # as large as the disk holds as spill buckets (SPILL_DISK_SHARE of what the rest
        # of the plan leaves), the busiest shard's bucket counted twice (split into key
        # ranges while it is bigger than a slice, spill._slices). Not capped by the
        # slice: a split costs one more read and write of a few buckets, while every
        # batch fewer saves a sweep of the whole store (issue 15: 8.3e8-key batches
        # made the 1e10 run 2.75x the 1e8 cost per key; 5 of 2e9, from half the spare
        # disk, 2.24x with 48 ns/key of merge growing 17 ns per stored key per batch)
        spare = free - sum(disk_for(run_format, 0).values())
        by_disk = int(SPILL_DISK_SHARE * spare / (8 * (1 + share)))
        batch = max(100_000, min(SPILL_MAX_BATCH, by_disk, total_keys))
        n_batches = -(-total_keys // batch)
        batch = -(-total_keys // n_batches)
    if auto_format and sum(disk_for(1, batch).values()) <= 0.8 * free:
        run_format = 1
    d = disk_for(run_format, batch)
    return ResourcePlan(avail, total_mem, free, batch, bloom_bytes, check(d), run_format,
                        fpr, spill_peak(memory, bloom_bytes), memory, shard_bits, share, d)


def gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _available_memory() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def dir_bytes(path: str) -> int:
    """Bytes allocated on disk (st_blocks x 512) by every file under ``path``."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass  # removed meanwhile
    return total


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far, or since ``reset_peak_rss``
    (Linux ru_maxrss is in KiB; the reset lowers it too)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss() -> bool:
    """Start the peak RSS afresh from the current RSS (Linux: ``5`` written to
    /proc/self/clear_refs), so that a JIT warm-up's transient peak is not reported as
    the run's (what a cold numba cache's compile leaves resident, ~700 MB, still
    is). False where the system has no such reset (the peak then includes the
    warm-up)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@dataclass
class DiskBandwidth:
    """Sequential write (with fsync) and cold read (page cache dropped) of one file;
    ``direct_write_bps``: the same write with O_DIRECT (None where unsupported)."""

    nbytes: int
    write_bps: float
    read_bps: float
    direct_write_bps: float | None = None


CPU_PROBE_KEYS = 1 << 20


def cpu_probe(repeats: int = 5) -> float:
    """This host's speed now: thread CPU ns/key of ``np.sort`` on CPU_PROBE_KEYS random
    uint64 keys, best of ``repeats`` (~0.1 s in all). The VMs this project runs on
    change speed by 1.2-2x within an hour (another tenant on the same cores), so the
    benchmark takes it at its start and end: two runs compare only when it agrees."""
    keys = np.random.default_rng(7).integers(0, 2**64, CPU_PROBE_KEYS, dtype=np.uint64)
    best = float("inf")
    for _ in range(repeats):
        a = keys.copy()
        t = time.thread_time()
        a.sort()
        best = min(best, time.thread_time() - t)
    return best / CPU_PROBE_KEYS * 1e9


def disk_bandwidth(directory: str, nbytes: int) -> DiskBandwidth:
    """dd-style probe in ``directory``: write ``nbytes`` in 8 MiB chunks + fsync, drop the
    file's cached pages (posix_fadvise DONTNEED), read it back. The file is removed."""
    path = os.path.join(directory, "disk-probe.bin")
    buf = np.random.default_rng(0).integers(0, 255, _CHUNK, dtype=np.uint8).tobytes()
    nbytes = max(_CHUNK, nbytes - nbytes % _CHUNK)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        t0 = time.perf_counter()
        try:
            for _ in range(nbytes // _CHUNK):
                os.write(fd, buf)
            os.fsync(fd)
        finally:
            os.close(fd)
        t_write = time.perf_counter() - t0
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            rbuf = bytearray(_CHUNK)
            t0 = time.perf_counter()
            while os.readv(fd, [rbuf]):
                pass
            t_read = time.perf_counter() - t0
        finally:
            os.close(fd)
        direct = _direct_write_bps(path, nbytes)
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return DiskBandwidth(nbytes, nbytes / t_write, nbytes / t_read, direct)


def _direct_write_bps(path: str, nbytes: int) -> float | None:
    """Write ``nbytes`` with O_DIRECT from a page-aligned buffer + fsync; None if refused."""
    import mmap

    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_DIRECT", 0)
    if not getattr(os, "O_DIRECT", 0):
        return None
    buf = mmap.mmap(-1, _CHUNK)  # page-aligned, as O_DIRECT requires
    buf.write(b"\x5a" * _CHUNK)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError:
        return None
    try:
        t0 = time.perf_counter()
        for _ in range(nbytes // _CHUNK):
            os.write(fd, buf)
        os.fsync(fd)
        return nbytes / (time.perf_counter() - t0)
    except OSError:
        return None
    finally:
        os.close(fd)
        buf.close()


@dataclass
class BenchResult:
    """Everything one run measured; ``to_dict`` is the ``--json`` object."""

    params: dict
    warmup_s: float = 0.0
    batches: list = field(default_factory=list)
    stage_s: dict = field(default_factory=lambda: {s: 0.0 for s in STAGES})
    store_s: float = 0.0  # wall time inside store.add / add_new, all batches
    bloom_background_s: float = 0.0  # Bloom inserts run past each call (bloom/deferred.py)
    bloom_cpu_s: float = 0.0  # their CPU time (the insert's threads)
    cpu_user_s: float = 0.0  # process CPU time inside add / add_new (every thread)
    cpu_sys_s: float = 0.0
    thread_laps: dict = field(default_factory=dict)  # THREAD_LAPS, wall and cpu
    shard_sort_s: float = 0.0  # per-shard sorts' CPU time, on their own threads inside the merge
    compact_wait_s: float = 0.0  # waits for the compaction run between batches
    sort_floor_s: float = 0.0  # the faster of the two sorts below, whole run
    sort_numpy_s: float = 0.0  # np.sort of every batch
    sort_radix_s: float = 0.0  # the radix sort of every batch, on the store's threads
    verify_s: float = 0.0
    bytes_read: int = 0
    bytes_cached: int = 0  # run bytes the checks took from the store's run cache, not the disk
    bytes_written: int = 0
    offered: int = 0
    new: int = 0
    expected_new: int = 0
    bad_batches: list = field(default_factory=list)
    disk: list = field(default_factory=list)
    cpu_probe_ns: list = field(default_factory=list)  # cpu_probe() at the start and end
    store_stats: dict = field(default_factory=dict)
    bloom_end: dict | None = None  # the filter after the last batch (``_bloom_end``)
    disk_bytes: int = 0  # allocated by the store directory after close (runs, BLOOM, ...)
    peak_rss: int = 0
    rss_by_phase: dict = field(default_factory=dict)  # spilled runs: RssSampler
    # spilled runs: seconds by stage of admit_file (spill.Clock: wall and process CPU)
    spill_stages: dict = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def verified(self) -> bool:
        return not self.bad_batches and self.new == self.expected_new

    def floor_s(self, direct: bool = False) -> float:
        """The faster sort of the same batches + read and write of the merged bytes at the best
        rates the probes saw (write+fsync through the page cache, or with ``direct`` the
        O_DIRECT write). The best, not the mean: the first probe of a run is often slow
        (0.4 GB/s against 1.3-1.7 later), and a mean would flatter the ratio."""
        read_bps = max(d.read_bps for d in self.disk)
        writes = [d.direct_write_bps if direct else d.write_bps for d in self.disk]
        if any(w is None for w in writes):
            return float("nan")
        return self.sort_floor_s + self.bytes_read / read_bps + self.bytes_written / max(writes)

    def to_dict(self) -> dict:
        n = max(1, self.offered)
        store_keys = self.store_stats.get("keys") or 0
        disk_bytes = self.disk_bytes
        floor = self.floor_s()
        floor_direct = self.floor_s(direct=True)
        return {
            "params": self.params,
            "verified": self.verified,
            "bad_batches": self.bad_batches,
            "offered": self.offered,
            "new": self.new,
            "expected_new": self.expected_new,
            "store_keys": store_keys,
            "warmup_s": self.warmup_s,
            "wall_s": self.wall_s,
            "store_s": self.store_s,
            "keys_per_s": self.offered / self.store_s if self.store_s else None,
            "ns_per_key": {
                **{s: self.stage_s[s] / n * 1e9 for s in STAGES},
                "other": (self.store_s - sum(self.stage_s[s] for s in STAGES[1:])
                          - self.compact_wait_s) / n * 1e9,
                "compact_wait": self.compact_wait_s / n * 1e9,
                "store_total": self.store_s / n * 1e9,
                "bloom_background": self.bloom_background_s / n * 1e9,
                "bloom_cpu": self.bloom_cpu_s / n * 1e9,
                # not measured on the spilled path (the generator runs inside add there)
                "cpu_user": self.cpu_user_s / n * 1e9 if self.cpu_user_s else None,
                "cpu_sys": self.cpu_sys_s / n * 1e9 if self.cpu_user_s else None,
                "shard_sort": self.shard_sort_s / n * 1e9,
            },
            "shard_threads_ns_per_key": {k: v / n * 1e9 for k, v in self.thread_laps.items()},
            "spill_stages_ns_per_key": {k: {"wall": v["wall_s"] / n * 1e9,
                                            "cpu": v["cpu_s"] / n * 1e9}
                                        for k, v in self.spill_stages.items()},
            "bytes_read": self.bytes_read,
            "bytes_cached": self.bytes_cached,
            "run_cache": self.store_stats.get("run_cache"),
            "bloom_end": self.bloom_end,
            "bytes_written": self.bytes_written,
            "disk_bytes": disk_bytes,
            "disk_bytes_per_key": disk_bytes / store_keys if store_keys else None,
            "peak_rss_bytes": self.peak_rss,
            "rss_by_phase": self.rss_by_phase,
            "disk_probe": [d.__dict__ for d in self.disk],
            "cpu_probe_ns_per_key": list(self.cpu_probe_ns),
            "sort": self.store_stats.get("sort"),
            "machine": sorting.machine(),
            "floor": {
                "sort_s": self.sort_floor_s,
                "sort_by": "numpy" if self.sort_numpy_s <= self.sort_radix_s else "radix",
                "sort_numpy_s": self.sort_numpy_s,
                "sort_radix_s": self.sort_radix_s,
                "io_s": floor - self.sort_floor_s,
                "total_s": floor,
                "ratio_store_to_floor": self.store_s / floor if floor else None,
                "ratio_store_plus_generate_to_floor":
                    (self.store_s + self.stage_s["generate"]) / floor if floor else None,
                "direct_total_s": floor_direct if floor_direct == floor_direct else None,
                "ratio_store_to_direct_floor":
                    self.store_s / floor_direct if floor_direct == floor_direct else None,
            },
            "verify_s": self.verify_s,
            "batches": self.batches,
        }


def _check(batch, got: np.ndarray, answer: str) -> tuple[int, bool]:
    """(new keys counted, batch correct) for what the store returned: the count must
    be the stream's exact expectation and every fresh key must be among the new."""
    if answer == "mask":
        n_new = int(np.count_nonzero(got))
        return n_new, n_new == batch.expected_new and bool(got[: batch.n_fresh].all())
    # The stream's new keys are exactly its distinct fresh keys (workload.py), so the
    # sorted answer must equal them sorted (one sort; a searchsorted per fresh key
    # into 1e8 keys was measured 80x slower).
    want = batch.keys[: batch.n_fresh].copy()
    sorting.sort_keys(want)
    ok = len(got) == batch.expected_new and np.array_equal(got, want)
    return len(got), bool(ok)


def _floor_sorts(keys: np.ndarray, threads: int) -> tuple[float, float]:
    """Seconds of np.sort and of the radix sort (on ``threads`` threads) of one copy
    each of ``keys``: the floor's sort is the faster over the run. Each sorts as the
    store runs it: the radix sort's scratch allocated and its pages touched before
    the timer (the store's shard threads keep theirs from batch to batch; a fresh
    one's page faults, 0.3-1 GB/s on this VM, made the radix sort 3.1-3.9 s against
    np.sort's 1.9-2.2 on the same 1e7-key batches)."""
    out = []
    for method in ("numpy", "radix"):
        a = keys.copy()
        buf = None
        if method == "radix":
            buf = np.empty(len(a), np.uint64)
            buf.fill(0)
        t0 = time.perf_counter()
        sorting.sort_keys(a, threads if method == "radix" else 1, method=method, buf=buf)
        out.append(time.perf_counter() - t0)
        del a, buf
    return out[0], out[1]


@dataclass
class _SpilledBatch:
    """What the row of a spilled batch needs of it (its keys are never all in memory)."""

    index: int
    n: int
    expected_new: int

    @property
    def keys(self) -> range:  # len() only
        return range(self.n)


def _spilled_batch(stream: CrawlStream, plan: tuple, store, memory: int) -> tuple:
    """Generate batch ``plan`` chunk by chunk into ``store.add_new_file`` (spilled);
    returns (batch, None, new, ok, generate s, store s, numpy sort s, radix sort s),
    the sorts timed on FLOOR_SAMPLE keys of the batch and scaled to its size."""
    index, _, n_fresh, n_re, n_dup = plan
    n = n_fresh + n_re + n_dup
    sample = next(stream.batch_chunks(*plan, chunk_keys=min(n, FLOOR_SAMPLE)))
    t_numpy, t_radix = (t * n / len(sample) for t in _floor_sorts(sample, store.threads))
    del sample
    gen = [0.0]

    def chunks():
        it = stream.batch_chunks(*plan, chunk_keys=GEN_CHUNK)
        while True:
            t = time.perf_counter()
            c = next(it, None)
            gen[0] += time.perf_counter() - t
            if c is None:
                return
            yield c

    t0 = time.perf_counter()
    fig = store.add_new_file(chunks(), memory=memory)
    t_add = time.perf_counter() - t0 - gen[0]
    ok = fig["offered"] == n and fig["new"] == n_fresh
    return (_SpilledBatch(index, n, n_fresh), None, int(fig["new"]), ok, gen[0], t_add,
            t_numpy, t_radix)


# The run cache (``SeenStore.open(cache_bytes=)``): off for spilled runs, whose memory
# plan has no room for it and whose check reads only the touched range of each run.
SPILL_CACHE_BYTES = 0


def _store_options(spill_memory: int | None, bloom_fpr: float | None) -> dict:
    """SeenStore.open options of the plan: the Bloom target, and for spilled runs
    ``cache_bytes=SPILL_CACHE_BYTES``."""
    opts = {} if bloom_fpr is None else {"bloom_fpr": bloom_fpr}
    if spill_memory:
        opts["cache_bytes"] = SPILL_CACHE_BYTES
    return opts


class RssSampler:
    """Peak resident bytes of this process by phase of the spilled batches (what
    the store names in ``store.spill_phase``: spill, check, commit; between
    batches otherwise), read from /proc/self/statm every SAMPLE_S on a thread. A
    sample misses peaks shorter than its period; the run's peak is ``peak_rss_bytes``."""

    SAMPLE_S = 0.005

    def __init__(self, store) -> None:
        self.store, self.peaks = store, {}
        self._stop = threading.Event()
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            f = open("/proc/self/statm", "rb", buffering=0)
        except OSError:
            return
        with f:
            while not self._stop.wait(self.SAMPLE_S):
                rss = int(os.pread(f.fileno(), 128, 0).split()[1]) * self._page
                phase = self.store.spill_phase or "between"
                if rss > self.peaks.get(phase, 0):
                    self.peaks[phase] = rss

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        return dict(self.peaks)


def _settle_behind(store, res: BenchResult) -> None:
    """The last batch's Bloom insert runs on after its call returned
    (bloom/deferred.py): wait for it and book the wait in that batch's store time
    ("bloom"), its thread's time as background, so the run's totals include it.
    Called after the next batch is generated (the insert overlaps that, as it would
    a crawler's work between batches) and before its floor sorts are timed (nothing
    runs beside them), and after the last batch."""
    waited, elapsed, cpu = store.settle_bloom()
    row = res.batches[-1]
    row["bloom_s"] += waited
    row["add_s"] += waited
    res.stage_s["bloom"] += waited
    res.store_s += waited
    row["bloom_background_s"] += elapsed
    row["bloom_cpu_s"] += cpu
    res.bloom_background_s += elapsed
    res.bloom_cpu_s += cpu


def _bloom_end(store, stats: dict) -> dict:
    """The Bloom filter after the last batch (settled by ``stats``): "kept" with its
    keys and figures, or "dropped" with the store's reason (a failed insert; the
    warning alone went to stderr before)."""
    bf = store.bloom
    if bf is None:
        return {"state": "dropped", "reason": store.bloom_state}
    b = stats.get("bloom") or {}
    return {"state": "kept", "keys": int(bf.n_added), "bytes": b.get("bytes"),
            "layers": b.get("layers"), "fill_ratio": b.get("fill_ratio"),
            "expected_fpr": b.get("expected_fpr")}


def run_bench(
    stream: CrawlStream,
    store_path: str,
    probe_bytes: int,
    on_batch: Callable[[dict], None] | None = None,
    bloom_capacity: int | None = None,
    answer: str = "new",
    bloom: bool = True,
    run_format: int = 1,
    threads: int | None = None,
    spill_memory: int | None = None,
    shard_bits: int | None = None,
    bloom_fpr: float | None = None,
) -> BenchResult:
    """Run ``stream`` through a new store at ``store_path`` and measure the floor beside it.

    ``bloom_capacity``: keys the store's Bloom filter is sized for (None: the store's
    default, which starts small and is rebuilt 2x larger whenever it fills).
    ``bloom``: False opens the store without its Bloom filter (the merge alone answers).
    ``threads``: the store's ``threads`` (default: the machine's cores); the floor's
    radix sort uses as many.
    ``spill_memory``: each batch is generated chunk by chunk straight into
    ``SeenStore.add_new_file`` with this memory budget (batches bigger than memory,
    spilled by shard; never whole in memory), its count of new keys checked against
    the stream's; the floor's sorts are timed on FLOOR_SAMPLE of its keys and scaled.
    ``shard_bits``: the new store's (None: the store's default). ``bloom_fpr``: the
    filter's target (None: the store's default; the spilled plan may raise it,
    plan_resources). Spilled runs open the store with SPILL_CACHE_BYTES of run cache
    where the store has one (``_store_options``) and sample the RSS by phase.
    ``answer``: "new" calls ``store.add_new`` (the sorted new keys, what the peers
    return); "mask" calls ``store.add`` (a mask aligned with the offered keys, one
    more pass: the "align" stage).
    Requires: ``store_path`` does not exist yet (the run creates it). Returns a
    BenchResult; the caller decides what a failed verification means (exit code)."""
    from seenstore.store import SeenStore

    if os.path.exists(store_path):
        raise InvalidInputError(f"{store_path}: already exists; benchmark needs a new store")
    work = os.path.dirname(os.path.abspath(store_path))
    res = BenchResult(params={
        "keys": stream.total_keys, "batch": stream.batch_size, "reoffer": stream.reoffer,
        "dup": stream.dup, "seed": stream.seed, "host_bits": stream.host_bits,
        "n_hosts": stream.n_hosts, "dir": work, "probe_bytes": probe_bytes,
        "bloom_capacity": bloom_capacity if bloom else None, "answer": answer, "bloom": bloom,
        "run_format": run_format,
        "threads": threads or sorting.default_threads(),
        "spill_memory": spill_memory, "shard_bits": shard_bits,
    })
    if answer not in ANSWERS:
        raise InvalidInputError(f"answer must be one of {ANSWERS}, got {answer!r}")
    t_start = time.perf_counter()
    res.warmup_s = warm_up(work, run_format=run_format, child=True)
    reset_peak_rss()  # the compiler's memory is not the run's
    res.disk.append(disk_bandwidth(work, probe_bytes))
    res.cpu_probe_ns.append(cpu_probe())
    sampler = None
    with SeenStore.open(store_path, create=True, bloom=bloom,
                        bloom_capacity=bloom_capacity, run_format=run_format,
                        threads=threads, shard_bits=shard_bits,
                        **_store_options(spill_memory, bloom_fpr)) as store:
        if spill_memory:
            sampler = RssSampler(store)
        for plan in stream.plan():
            n_stored = len(store)
            if spill_memory:
                batch, got, n_new, ok, t_gen, t_add, t_numpy, t_radix = _spilled_batch(
                    stream, plan, store, spill_memory)
            else:
                t0 = time.perf_counter()
                batch = stream.batch(*plan)
                t_gen = time.perf_counter() - t0
                if res.batches:
                    _settle_behind(store, res)
                t_numpy, t_radix = _floor_sorts(batch.keys, store.threads)
                r0 = resource.getrusage(resource.RUSAGE_SELF)
                t0 = time.perf_counter()
                if answer == "mask":
                    got = store.add(batch.keys)
                else:
                    got = store.add_new(batch.keys)
                t_add = time.perf_counter() - t0
                r1 = resource.getrusage(resource.RUSAGE_SELF)
                res.cpu_user_s += r1.ru_utime - r0.ru_utime
                res.cpu_sys_s += r1.ru_stime - r0.ru_stime
                t0 = time.perf_counter()
                n_new, ok = _check(batch, got, answer)
                res.verify_s += time.perf_counter() - t0
            tm = store.last_timings
            row = {
                "batch": batch.index, "stored_before": n_stored, "offered": len(batch.keys),
                "new": n_new, "expected_new": batch.expected_new, "ok": ok,
                "generate_s": t_gen, "add_s": t_add, "sort_floor_s": min(t_numpy, t_radix),
                "sort_numpy_s": t_numpy, "sort_radix_s": t_radix,
                "bytes_read": int(tm.get("bytes_read", 0)),
                "bytes_cached": int(tm.get("bytes_cached", 0)),
                "bytes_written": int(tm.get("bytes_written", 0)),
                **{f"{s}_s": float(tm.get(f"{s}_s", 0.0)) for s in STAGES[1:]},
            }
            row["bloom_s"] += float(tm.get("bloom_rebuild_s", 0.0))  # growth rebuilds
            if spill_memory:  # the generator ran inside the spill phase: not the store's
                row["spill_s"] = max(0.0, row["spill_s"] - t_gen)
                row["bytes_read"] += 8 * len(batch.keys)  # the spill buckets, read back
                row["bytes_written"] += 8 * len(batch.keys)  # and written
                row["rss_bytes"] = peak_rss_bytes()
            row["bloom_background_s"] = float(tm.get("bloom_background_s", 0.0))
            row["bloom_cpu_s"] = float(tm.get("bloom_cpu_s", 0.0))
            row["shard_sort_s"] = float(tm.get("shard_sort_s", 0.0))
            for lap in THREAD_LAPS:
                for k in (f"{lap}_s", f"{lap}_cpu_s"):
                    res.thread_laps[k] = (res.thread_laps.get(k, 0.0)
                                          + float(tm.get("merge_parts", {}).get(k, 0.0)))
            # compaction run between batches that this call waited for (tiered runs);
            # its bytes count in the floor's I/O like the batch's own
            row["compact_wait_s"] = float(tm.get("compact_wait_s", 0.0))
            row["bytes_read"] += int(tm.get("compact_bytes_read", 0))
            row["bytes_written"] += int(tm.get("compact_bytes_written", 0))
            row["bloom_layers"] = int(tm.get("bloom_layers", 0))
            for k, v in tm.get("spill_stages", {}).items():
                acc = res.spill_stages.setdefault(k, {"wall_s": 0.0, "cpu_s": 0.0})
                acc["wall_s"] += v["wall_s"]
                acc["cpu_s"] += v["cpu_s"]
            # time inside add() that the store's timings do not name
            row["other_s"] = (t_add - sum(row[f"{s}_s"] for s in STAGES[1:])
                              - row["compact_wait_s"])
            res.batches.append(row)
            res.stage_s["generate"] += t_gen
            for s in STAGES[1:]:
                res.stage_s[s] += row[f"{s}_s"]
            res.store_s += t_add
            res.bloom_background_s += row["bloom_background_s"]
            res.bloom_cpu_s += row["bloom_cpu_s"]
            res.shard_sort_s += row["shard_sort_s"]
            res.compact_wait_s += row["compact_wait_s"]
            res.sort_numpy_s += t_numpy
            res.sort_radix_s += t_radix
            res.sort_floor_s = min(res.sort_numpy_s, res.sort_radix_s)
            res.bytes_read += row["bytes_read"]
            res.bytes_cached += row["bytes_cached"]
            res.bytes_written += row["bytes_written"]
            res.offered += len(batch.keys)
            res.new += n_new
            res.expected_new += batch.expected_new
            if not ok:
                res.bad_batches.append(batch.index)
            if on_batch is not None:
                on_batch(row)
            del batch, got
        if res.batches:
            _settle_behind(store, res)
        if sampler is not None:
            res.rss_by_phase = sampler.stop()
        res.store_stats = store.stats()
        res.bloom_end = _bloom_end(store, res.store_stats) if bloom else None
    res.disk_bytes = dir_bytes(store_path)
    res.disk.append(disk_bandwidth(work, probe_bytes))
    res.cpu_probe_ns.append(cpu_probe())
    res.peak_rss = peak_rss_bytes()
    res.wall_s = time.perf_counter() - t_start
    return res
