"""The resource plan of ``seenstore bench``, decided before the first key is written.

Owns the batch size, the path (batches sorted in memory, or spilled DRUM-style through
``SeenStore.add_new_file``), the run format, the Bloom target, the memory budget of a
spilled batch and its model of the peak RSS (``spill_peak``), and the disk the run
needs. ``plan_resources`` plans for one batch size; ``plan_bench`` remakes the plan
until it fits the stream's own distinct keys. A run the machine cannot hold is refused
here, naming what it needs (DiskFullError, StoreIOError), before anything is written.
The model's parts are described and measured in docs/bench.md.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field

import numpy as np

from seenstore.bench import probes
from seenstore.bench.units import gib
from seenstore.bench.workload import CrawlStream, keys_of_ids
from seenstore.bloom import LayeredBloom, size_for
from seenstore.bloom.deferred import DEFERRED_CHUNK_KEYS
from seenstore.errors import DiskFullError, StoreIOError
from seenstore.store.buckets import Budget

BYTES_PER_OFFERED_KEY = 64  # measured peak RSS per batch key is below this (docs/bench.md)
FIRST_GUESS_BATCH = 100_000_000  # the batch of the first guess of the distinct keys
# On-disk bytes per stored key the plan assumes, by run format: raw runs (8 B) or
# compressed ones (~4.2-4.6 B at 1e9-1e10 keys), with a quarter more for what compaction
# holds twice while it merges a shard and the runs of the last batch not yet merged; the
# Bloom file's bytes per key come from its sizing.
PLAN_RUN_BYTES = {1: 10, 2: 6}
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
# threads beside it), which the parts below do not name: without it a large spilled
# run's check measured up to 0.42 GiB over the model
HEAP_SLACK = 1 << 29
RSS_BASE = 1 << 28  # interpreter, numpy, numba kernels after the warm-up (~190 MiB)
GEN_CHUNK = 1 << 22  # keys per generated chunk of a spilled batch (run.py)
GEN_BYTES = 6 * 8 * GEN_CHUNK  # a generated chunk and its temporaries (workload.py)
COMPACTION_BYTES = 1 << 27  # the compaction beside the spill phase: merge buffers, writer
IO_BYTES = 2 * 8 * (1 << 20)  # the check's two I/O buffers at most (buckets.Budget.io_keys)
# the check's two halves' sweep buffers and scratch (runs/codec.SWEEP_BLOCKS blocks each)
SWEEP_BYTES = 2 * 9 * (1 << 20)
INSERT_BYTES = 2 * 8 * DEFERRED_CHUNK_KEYS  # the deferred Bloom insert: two lots
MIN_SPILL_MEMORY = 1 << 28  # a smaller budget is refused: the Bloom target is raised first
# Bloom targets a spilled plan may take, in order: the store's default, then twice it,
# whose one layer (LayeredBloom.layer_fpr: half the target) has the default's rate; the
# bench's filter is sized for the stream's exact distinct keys, so it never grows a layer
SPILL_BLOOM_TARGETS = (1e-3, 2e-3)


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
    run_format: int | None = None  # None: the store's default, by size (runs.live.format_for)
    bloom_fpr: float = SPILL_BLOOM_TARGETS[0]
    memory_estimate: dict = field(default_factory=dict)  # spill_peak's parts (spilled)
    spill_memory: int | None = None
    shard_bits: int | None = None
    busiest_shard_share: float | None = None
    disk: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def default_batch_size(total_keys: int, share: float = 0.25, memory: int | None = None) -> int:
    """Batch size for ``share`` of ``memory`` (default: the memory available now), in
    [1e5, 1e8] and <= total_keys, then evened out so that all batches of the run have
    (nearly) the same size."""
    avail = probes.available_memory() if memory is None else memory
    b = int(avail * share / BYTES_PER_OFFERED_KEY)
    b = max(100_000, min(100_000_000, b))
    b = int(float(f"{b:.1g}"))  # one significant digit: 93,752,123 -> 90,000,000
    b = max(1, min(b, total_keys))
    n_batches = -(-total_keys // b)
    return -(-total_keys // n_batches)  # equal batches: no small, costly remainder


def stream_distinct(total: int, batch: int | None, reoffer: float, dup: float,
                    seed: int) -> int:
    """Distinct keys of the stream in batches of ``batch`` (None: the first guess, one
    batch of FIRST_GUESS_BATCH or all): fewer, bigger batches re-offer fewer keys."""
    b = batch or min(total, FIRST_GUESS_BATCH)
    return CrawlStream(total, b, reoffer, dup, seed=seed).expected_total_new


def busiest_shard_share(shard_bits: int, host_bits: int, n_hosts: int | None, seed: int,
                        sample: int = 1 << 20) -> float:
    """The largest share of the stream's keys one shard (top ``shard_bits`` bits) gets,
    measured on the keys of ``sample`` ids (the hosts are Zipf-skewed: the busiest host
    alone is ~7% of all keys)."""
    keys = keys_of_ids(np.arange(sample, dtype=np.uint64), host_bits,
                       n_hosts or (1 << host_bits), seed)
    counts = np.bincount((keys >> np.uint64(64 - shard_bits)).astype(np.int64),
                         minlength=1 << shard_bits)
    return float(counts.max()) / sample


def bloom_bytes_for(capacity: int | None, fpr: float) -> int:
    """Bytes of the filter a store opened with ``bloom_capacity=capacity`` and
    ``bloom_fpr=fpr`` allocates: one LayeredBloom layer at ``layer_fpr(fpr, 0)``
    (half the target). 0 for no capacity (no filter sized ahead)."""
    if not capacity:
        return 0
    return 64 * size_for(int(capacity), LayeredBloom.layer_fpr(fpr, 0))[0]


def spill_peak(memory: int, bloom_bytes: int) -> dict:
    """Estimated peak resident bytes of a spilled run with budget ``memory``, by part:
    the interpreter, the allocator's slack, the filter, and the larger of the spill
    phase (read chunk and partition copy, 2/5 of the budget; a generated chunk; the
    compaction between batches beside it) and the check phase (slice, found mask and
    the sort's scratch, 17/32; the run sink's buffers, 4/64; two I/O buffers; the two
    halves' sweep buffers); the deferred Bloom insert (two lots) runs beside both."""
    spill_phase = 2 * memory // 5 + GEN_BYTES + COMPACTION_BYTES + INSERT_BYTES
    check_phase = 19 * memory // 32 + IO_BYTES + SWEEP_BYTES + INSERT_BYTES
    parts = {"interpreter": RSS_BASE, "heap_slack": HEAP_SLACK, "bloom": bloom_bytes,
             "spill_phase": spill_phase, "check_phase": check_phase}
    parts["total"] = RSS_BASE + HEAP_SLACK + bloom_bytes + max(spill_phase, check_phase)
    return parts


def spill_budget(cap: int, bloom_bytes: int) -> int:
    """The largest budget whose ``spill_peak`` stays RSS_MARGIN under ``cap`` (0: none)."""
    room = cap - RSS_MARGIN - RSS_BASE - HEAP_SLACK - bloom_bytes - INSERT_BYTES
    by_spill = (room - GEN_BYTES - COMPACTION_BYTES) * 5 // 2
    by_check = (room - IO_BYTES - SWEEP_BYTES) * 32 // 19
    return max(0, min(by_spill, by_check))


def plan_resources(total_keys: int, distinct_keys: int, batch: int | None, work_dir: str,
                   bloom_capacity: int | None, probe_bytes: int,
                   run_format: int | str | None = "auto",
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
    "Batch size of a spilled run"). ``run_format`` 1 or 2 forces that format for every
    run; None is the store's default (runs of 2^22 keys or more compressed, smaller
    ones raw); "auto": that default when the raw plan takes at most 80% of the free disk,
    else compressed (2).

    Raises DiskFullError (exit 6) naming what is needed when the disk is short,
    StoreIOError when the Bloom filter alone would not leave memory for batches,
    InvalidInputError for a ``memory`` below the spilled batch's minimum."""
    avail = probes.available_memory()
    total_mem = probes.total_memory()
    fpr = bloom_fpr or SPILL_BLOOM_TARGETS[0]
    bloom_bytes = bloom_bytes_for(bloom_capacity, fpr)
    room = avail - bloom_bytes
    free = shutil.disk_usage(work_dir).free
    share = 0.0  # the busiest shard's share of a spilled batch (its bucket is split)

    def disk_for(fmt: int | None, spill_batch: int) -> dict:  # by size: planned as raw
        return {"runs": PLAN_RUN_BYTES[fmt or 1] * distinct_keys, "bloom_file": bloom_bytes,
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

    auto_format = run_format == "auto"
    if auto_format:  # by size if raw fits with room to spare (the batch decided), else 2
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
            run_format = None
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
        # ranges while it is bigger than a slice, buckets.slices). Not capped by the
        # slice: a split costs one more read and write of a few buckets, while every
        # batch fewer saves a sweep of the whole store
        spare = free - sum(disk_for(run_format, 0).values())
        by_disk = int(SPILL_DISK_SHARE * spare / (8 * (1 + share)))
        batch = max(100_000, min(SPILL_MAX_BATCH, by_disk, total_keys))
        n_batches = -(-total_keys // batch)
        batch = -(-total_keys // n_batches)
    if auto_format and sum(disk_for(1, batch).values()) <= 0.8 * free:
        run_format = None
    d = disk_for(run_format, batch)
    return ResourcePlan(avail, total_mem, free, batch, bloom_bytes, check(d), run_format,
                        fpr, spill_peak(memory, bloom_bytes), memory, shard_bits, share, d)


def plan_bench(total: int, distinct: int, batch: int | None, reoffer: float, dup: float,
               seed: int, work_dir: str, probe: int, bloom_capacity: int | None, sized: bool,
               bloom: bool, run_format: int | str | None, memory: int | None,
               spill: bool | None, bloom_fpr: float | None = None
               ) -> tuple[ResourcePlan, int | None]:
    """The run's ResourcePlan and the Bloom capacity it was made for, from a first
    guess of the stream's ``distinct`` keys (``stream_distinct``). They depend on the
    batch chosen (fewer, bigger batches re-offer less), so the plan is made again for
    the chosen batch's own count (``sized``: the filter is sized for it). ``bloom_fpr``:
    the filter's target (None: the store's default, or a spilled plan's choice). When a bigger
    spilled batch's keys no longer fit (filter memory, disk), one batch more, until a
    plan fits (e.g. 1e10 keys on 24 GiB: 3 batches of 3.33e9 have 6e9 distinct keys,
    whose filter leaves no memory). The other arguments are ``plan_resources``'s.

    Raises what ``plan_resources`` raises for the last plan tried."""
    plan_batch, plan_spill = batch, spill
    plan = spilled_batch = error = None  # spilled_batch: the last spilled plan's batch
    for _ in range(8):
        try:
            plan = plan_resources(total, distinct, plan_batch, work_dir,
                                  bloom_capacity if bloom else None, probe, run_format,
                                  memory, plan_spill, (20, None, seed), bloom_fpr)
        except StoreIOError as e:
            if spilled_batch is None or batch is not None:
                raise
            plan, error = None, e
            spilled_batch = plan_batch = -(-total // (-(-total // spilled_batch) + 1))
            plan_spill = True
            d = stream_distinct(total, plan_batch, reoffer, dup, seed)
        else:
            if plan.spill_memory is not None:
                spilled_batch = plan.batch
            d = stream_distinct(total, plan.batch, reoffer, dup, seed)
            if d == distinct or (d < distinct and not sized):
                return plan, bloom_capacity
        # the filter sized for the run's own distinct keys, exactly: it never grows,
        # and the spilled plan's memory depends on its size
        distinct = d
        if sized:
            bloom_capacity = distinct
    if plan is None:
        raise error
    return plan, bloom_capacity
