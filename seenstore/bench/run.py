"""One ``seenstore bench`` run: a ``CrawlStream`` through a new ``SeenStore``.

``run_bench`` drives the stream batch by batch through the store's public API
(``add_new``, ``add``, or ``add_new_file`` for spilled batches), checks every answer
against the stream's exact expectation (result.verify_answer), and measures in the
same run the floor beside it: the faster of ``np.sort`` and the radix sort of the same
batches, and the disk bandwidth at the start and end (probes.py). It returns a
``BenchResult``; what a failed verification means (the exit code) is the caller's.
"""

from __future__ import annotations

import os
import resource
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

from seenstore.bench.plan import GEN_CHUNK
from seenstore.bench.probes import (RssSampler, cpu_probe, dir_bytes, disk_bandwidth,
                                    floor_sorts, peak_rss_bytes, reset_peak_rss)
from seenstore.bench.result import STAGES, BenchResult, verify_answer
from seenstore.bench.workload import CrawlStream
from seenstore.errors import InvalidInputError
from seenstore.runtime.parallel import default_threads
from seenstore.bench.warm import compile_ahead, mini_options
from seenstore.kernels import dispatch
from seenstore.warmup import CompileCounter

ANSWERS = ("new", "mask")
FLOOR_SAMPLE = 1 << 22  # a spilled batch's floor sort is timed on this many of its keys
# The run cache (``SeenStore.open(cache_bytes=)``): off for spilled runs, whose memory
# plan has no room for it and whose check reads only the touched range of each run.
SPILL_CACHE_BYTES = 0


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
    t_numpy, t_radix = (t * n / len(sample) for t in floor_sorts(sample, store.threads))
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


def _store_options(spill_memory: int | None, bloom_fpr: float | None) -> dict:
    """SeenStore.open options of the plan: the Bloom target, and for spilled runs
    ``cache_bytes=SPILL_CACHE_BYTES``."""
    opts = {} if bloom_fpr is None else {"bloom_fpr": bloom_fpr}
    if spill_memory:
        opts["cache_bytes"] = SPILL_CACHE_BYTES
    return opts


def _row(batch, n_stored: int, n_new: int, ok: bool, t_gen: float, t_add: float,
         t_numpy: float, t_radix: float, tm: dict, spilled: bool) -> dict:
    """The ``--json`` row of one batch from its figures and the store's ``last_timings``
    ``tm`` for it: stages, bytes (the compaction the call waited for included, and
    for a spilled batch its buckets' write and read back), and ``other_s``, the time
    inside the call that the timings do not name."""
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
    if spilled:  # the generator ran inside the spill phase: not the store's
        row["spill_s"] = max(0.0, row["spill_s"] - t_gen)
        row["bytes_read"] += 8 * len(batch.keys)  # the spill buckets, read back
        row["bytes_written"] += 8 * len(batch.keys)  # and written
        row["rss_bytes"] = peak_rss_bytes()
    row["bloom_background_s"] = float(tm.get("bloom_background_s", 0.0))
    row["bloom_cpu_s"] = float(tm.get("bloom_cpu_s", 0.0))
    row["shard_sort_s"] = float(tm.get("shard_sort_s", 0.0))
    # compaction run between batches that this call waited for (tiered runs); its
    # bytes count in the floor's I/O like the batch's own
    row["compact_wait_s"] = float(tm.get("compact_wait_s", 0.0))
    row["bytes_read"] += int(tm.get("compact_bytes_read", 0))
    row["bytes_written"] += int(tm.get("compact_bytes_written", 0))
    row["bloom_layers"] = int(tm.get("bloom_layers", 0))
    row["other_s"] = (t_add - sum(row[f"{s}_s"] for s in STAGES[1:])
                      - row["compact_wait_s"])
    return row


def _bloom_end(store, stats: dict) -> dict:
    """The Bloom filter after the last batch (settled by ``stats``): "kept" with its
    keys and figures, or "dropped" with the store's reason (a failed insert)."""
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
    run_format: int | None = None,
    threads: int | None = None,
    spill_memory: int | None = None,
    shard_bits: int | None = None,
    bloom_fpr: float | None = None,
    on_warmup: Callable[[str, str, float], None] | None = None,
    warm: bool = True,
    probes: bool = True,
) -> BenchResult:
    """Run ``stream`` through a new store at ``store_path`` and measure the floor beside it.

    ``probe_bytes``: the size of the disk probe, run at the start and the end.
    ``on_batch``: called with each batch's row once it is booked.
    ``bloom_capacity``: keys the store's Bloom filter is sized for (None: the store's
    default, which starts small and grows by adding a layer whenever it fills).
    ``bloom``: False opens the store without its Bloom filter (the merge alone answers).
    ``threads``: the store's ``threads`` (default: the machine's cores); the floor's
    radix sort uses as many.
    ``spill_memory``: each batch is generated chunk by chunk straight into
    ``SeenStore.add_new_file`` with this memory budget (batches bigger than memory,
    spilled by shard; never whole in memory), its count of new keys checked against
    the stream's; the floor's sorts are timed on FLOOR_SAMPLE of its keys and scaled.
    ``shard_bits``: the new store's (None: the store's default). ``bloom_fpr``: the
    filter's target (None: the store's default; the spilled plan may raise it,
    plan.plan_resources). Spilled runs open the store with SPILL_CACHE_BYTES of run
    cache and sample the RSS by phase.
    ``answer``: "new" calls ``store.add_new`` (the sorted new keys, what the peers
    return); "mask" calls ``store.add`` (a mask aligned with the offered keys, one
    more pass: the "align" stage).
    ``on_warmup(where, kernel, seconds)``: called as the warm-up before the first
    batch ends compiling a kernel (``where``: a lane, or "bench"; bench/warm.py: on an
    empty numba cache it compiles the kernels this run calls), and once with
    ``("ready", "", warm-up seconds)`` when it is done. ``warm``: False skips
    the warm-up (the miniature run of the warm-up itself); ``probes``: False skips the
    disk and CPU probes (the miniature too: ~1 s of np.sort that calls no kernel).
    The kernels that still compile inside the timed batches are counted
    (``jit_in_run``).

    The last batch's deferred Bloom insert runs on after its call returned
    (bloom/deferred.py): it is waited for after the next batch is generated (the insert
    overlaps that, as it would a crawler's work between batches) and before that
    batch's floor sorts are timed, and after the last batch; the wait is booked in the
    batch's store time (the one after the last batch in the store total only, shown on
    its own line), the insert's own time as background.

    Requires: ``store_path`` does not exist yet (the run creates it; InvalidInputError
    otherwise), ``answer`` in ANSWERS."""
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
        "threads": threads or default_threads(),
        "spill_memory": spill_memory, "shard_bits": shard_bits,
    })
    if answer not in ANSWERS:
        raise InvalidInputError(f"answer must be one of {ANSWERS}, got {answer!r}")
    t_start = time.perf_counter()
    if warm:
        mini = mini_options({**res.params, "batch": stream.batch_size, "bloom_fpr": bloom_fpr,
                             "threads": threads}, stream.n_batches)
        res.warmup_s = _warm(work, mini, stream.n_batches, run_format, on_warmup)
        if on_warmup is not None:
            on_warmup("ready", "", res.warmup_s)
    counter = CompileCounter().__enter__()
    reset_peak_rss()  # the compiler's memory is not the run's
    if probes:
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
                    res.add_settled_bloom(*store.settle_bloom())
                t_numpy, t_radix = floor_sorts(batch.keys, store.threads)
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
                n_new, ok = verify_answer(batch, got, answer)
                res.verify_s += time.perf_counter() - t0
            tm = store.last_timings
            row = _row(batch, n_stored, n_new, ok, t_gen, t_add, t_numpy, t_radix, tm,
                       bool(spill_memory))
            res.add_batch(row, tm)
            if on_batch is not None:
                on_batch(row)
            del batch, got
        if res.batches:
            res.add_settled_bloom(*store.settle_bloom(), final=True)
        if sampler is not None:
            res.rss_by_phase = sampler.stop()
        res.store_stats = store.stats()
        res.bloom_end = _bloom_end(store, res.store_stats) if bloom else None
    counter.__exit__(None, None, None)
    res.jit_in_run = (counter.n, counter.seconds)
    res.disk_bytes = dir_bytes(store_path)
    if probes:
        res.disk.append(disk_bandwidth(work, probe_bytes))
        res.cpu_probe_ns.append(cpu_probe())
    res.peak_rss = peak_rss_bytes()
    res.wall_s = time.perf_counter() - t_start
    return res


def _warm(work: str, mini: dict, n_batches: int, run_format: int,
          on_compiled: Callable[[str, str, float], None] | None) -> float:
    """The warm-up before the timed batches (bench/warm.py): the lanes on a cold cache,
    then ``mini_run`` here (loads, or compiles what the lanes missed). Seconds."""
    t0 = time.perf_counter()
    compile_ahead(work, mini, n_batches, run_format, on_compiled)
    here = tempfile.mkdtemp(prefix="seenstore-warmup-", dir=work)
    report = None if on_compiled is None else (lambda k, s: on_compiled("bench", k, s))
    try:
        with CompileCounter(report):
            mini_run(here, **mini)
    finally:
        shutil.rmtree(here, ignore_errors=True)
    return time.perf_counter() - t0


def mini_run(work: str, *, batch: int, batches: int, reoffer: float = 0.5, dup: float = 0.1,
             seed: int = 0, host_bits: int | None = None, n_hosts: int | None = None,
             **options) -> None:
    """``run_bench`` without its warm-up on ``batches`` batches of ``batch`` keys in
    ``work``, without its probes, every call on the kernels
    (``dispatch.kernels_only``): the warm-up's miniature of a run (bench/warm.py)."""
    shape = {} if host_bits is None else {"host_bits": host_bits}
    stream = CrawlStream(batch * batches, batch, reoffer, dup, seed=seed, n_hosts=n_hosts,
                         **shape)
    with dispatch.kernels_only():
        run_bench(stream, os.path.join(work, "mini-store"), 1, warm=False, probes=False,
                  **options)
