"""The bench's warm-up: the kernels one ``run_bench`` calls, compiled (or loaded from
numba's cache) before its timers start, and no others.

What compiles is found by running it: ``mini_run`` is ``run_bench`` itself on a small
stream of the same shape (the plan's options, answer, Bloom filter, spilled or not,
up to MINI_BATCHES batches of up to MINI_KEYS keys: past every size at which the
store switches path, REGION_MIN_KEYS and the two-thread cut-offs at 2^20 keys a
thread) inside ``dispatch.kernels_only``, so the kernels a small call would leave to
its numpy twin compile too (``run.mini_run``). On an empty numba cache (``cold``) the
compiling is split over two child processes run at once (``compile_ahead`` with
``warmup.compile_lanes``: compiling leaves ~700 MB of LLVM's memory in the process
that did it, and 2 cores compile two kernels at a time): the Bloom filter's kernels
(``bloom_lane``), and the miniature without its filter. The bench's process then
runs the whole miniature, loading what they saved (a kernel they missed compiles
there: slower, still correct). A plan
of more batches than MINI_BATCHES also runs the store's full warm-up
(``warmup.warm_up``: compactions), as before. ``run_bench`` counts the kernels that
still compile inside its timed batches (none, when this is right).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from seenstore.kernels import dispatch
from seenstore.warmup import compile_lanes, warm_up

MINI_KEYS = 1 << 21  # keys per batch of the miniature: past the 2-thread cut-offs
MINI_BATCHES = 3  # the first batch, one that re-offers (sweeps), one more
MINI_BLOOM_CAPACITY = 1 << 24  # at most: a filter past REGION_BYTES, not a plan's GiBs
# Kernels a bench calls first, per part: where none compiles the cache is warm for it
# (dispatch.cold). Not the whole list (mini_run finds that), only the test of "cold".
FIRST_KERNELS = ("sort.radix_sort", "sort.sort_buckets", "batch.first_unique",
                 "merge.is_strictly_increasing")
FIRST_BLOOM_KERNELS = ("bloom.insert_seeds", "bloom.bucket_seeds")


def cold(bloom: bool) -> bool:
    """True when the kernels a bench (with its Bloom filter if ``bloom``) calls first
    would compile now. Imports numba."""
    return dispatch.cold(FIRST_KERNELS + (FIRST_BLOOM_KERNELS if bloom else ()))


def mini_options(options: dict, n_batches: int) -> dict:
    """``mini_run``'s keyword arguments for a bench of ``n_batches`` batches run with
    ``run_bench`` keyword ``options`` (stream fields included: batch, reoffer, dup,
    seed, host_bits, n_hosts). JSON, for the lanes."""
    keep = ("answer", "bloom", "run_format", "threads", "spill_memory", "shard_bits",
            "bloom_fpr", "reoffer", "dup", "seed", "host_bits", "n_hosts")
    out = {k: options[k] for k in keep if options.get(k) is not None}
    out["batch"] = min(int(options["batch"]), MINI_KEYS)
    out["batches"] = min(n_batches, MINI_BATCHES)
    cap = options.get("bloom_capacity")
    out["bloom_capacity"] = None if cap is None else min(int(cap), MINI_BLOOM_CAPACITY)
    return out


def bloom_lane(work: str, *, batch: int, batches: int, bloom: bool = True,
               bloom_capacity: int | None = None, bloom_fpr: float | None = None,
               **_other) -> None:
    """The Bloom filter's kernels a bench's store calls: a batch inserted (in this
    thread and in the background, as the store's deferred insert does), later batches
    asked and inserted, the fill histogram of its stats."""
    from seenstore.bloom import LayeredBloom
    from seenstore.bloom.keeper import DEFAULT_BLOOM_FPR

    if not bloom:
        return
    keys = np.random.default_rng(5).integers(0, 2**64, batch, dtype=np.uint64)
    with dispatch.kernels_only():
        bf = LayeredBloom.for_capacity(bloom_capacity or 4 * batch,
                                       bloom_fpr or DEFAULT_BLOOM_FPR)
        bf.add_in_background(keys[: batch // 2]).wait()
        bf.add(keys[batch // 2:])
        if batches > 1:
            bf.query(keys)
            bf.add_query(keys)
        bf.layers[-1].stats()


def compile_ahead(work: str, mini: dict, n_batches: int, run_format: int,
                  on_compiled: Callable[[str, str, float], None] | None = None) -> None:
    """On a cold cache (``cold``), compile what a bench of ``n_batches`` batches calls
    in two lanes at once (``mini``: ``mini_options``; ``on_compiled(lane, kernel, s)``
    as a child compiles one); for more than MINI_BATCHES batches, the store's full
    warm-up too. The caller then runs ``run.mini_run(**mini)`` itself (loads)."""
    if cold(bool(mini.get("bloom", True))):
        no_bloom = {**mini, "bloom": False, "bloom_capacity": None, "bloom_fpr": None}
        compile_lanes([("Bloom filter", "seenstore.bench.warm:bloom_lane", mini),
                       ("sorts, merge", "seenstore.bench.run:mini_run", no_bloom)],
                      work, on_compiled)
    if n_batches > MINI_BATCHES:
        warm_up(work, run_format=run_format, child=True)
