"""seenstore/bench/plan.py: the resource plan. The spilled plan's memory model
(spill_peak) keeps the 1e10 plan's estimated peak under 12 GiB by construction, with
the filter the store really allocates; the batch is as large as the disk holds; a
run the machine cannot hold is refused before it starts."""

import pytest

from seenstore.bench import plan as benchplan
from seenstore.bench import probes
from seenstore.bench.workload import CrawlStream
from seenstore.bloom import LayeredBloom
from seenstore.errors import DiskFullError, StoreIOError

GiB = 1 << 30


@pytest.mark.parametrize("fpr", [1e-3, 2e-3])
def test_the_planned_bloom_bytes_are_the_filter_the_store_allocates(fpr):
    assert benchplan.bloom_bytes_for(3_000_000, fpr) == LayeredBloom.for_capacity(
        3_000_000, fpr).nbytes
    assert benchplan.bloom_bytes_for(None, fpr) == 0


def _machine(monkeypatch, tmp_path, free_gb=70, avail=22 * GiB):
    """The planner sees a 24 GiB machine with ``avail`` bytes available and ``free_gb``
    GB of free disk."""
    from collections import namedtuple

    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(benchplan.shutil, "disk_usage", lambda p: Usage(0, 0, free_gb * 10**9))
    monkeypatch.setattr(probes, "available_memory", lambda: avail)
    monkeypatch.setattr(probes, "total_memory", lambda: 24 * GiB)


def test_the_1e10_plan_estimates_its_peak_under_the_cap(monkeypatch, tmp_path):
    """A 24 GiB machine with 70 GB free (``_machine``): the 5.4e9-key filter at the default target
    (one layer at 0.05%, 11.2 GiB) leaves no room under 12 GiB, so the plan takes the
    next target (one layer at 0.1%, 9.9 GiB) and the largest budget whose estimate
    stays RSS_MARGIN under the cap (half the memory here)."""
    _machine(monkeypatch, tmp_path)
    distinct = CrawlStream(10**10, 2 * 10**9).expected_total_new
    p = benchplan.plan_resources(10**10, distinct, None, str(tmp_path), distinct, GiB, "auto",
                                None, None, (20, None, 0))
    est = p.memory_estimate
    assert p.bloom_fpr == 2e-3 and p.bloom_bytes == benchplan.bloom_bytes_for(distinct, 2e-3)
    assert benchplan.bloom_bytes_for(distinct, 1e-3) > 11 * GiB  # why the default is passed
    assert est["bloom"] == p.bloom_bytes and est["total"] <= 12 * GiB - benchplan.RSS_MARGIN
    assert est["total"] == (est["interpreter"] + est["heap_slack"] + est["bloom"]
                            + max(est["spill_phase"], est["check_phase"]))
    assert p.spill_memory >= benchplan.MIN_SPILL_MEMORY  # and as large as the room allows:
    bigger = benchplan.spill_peak(p.spill_memory + (64 << 20), p.bloom_bytes)["total"]
    assert bigger > 12 * GiB - benchplan.RSS_MARGIN


def test_a_given_bloom_target_is_the_only_one_the_spilled_plan_takes(monkeypatch, tmp_path):
    """--bloom-fpr: the plan sizes that filter alone (no fallback to another target),
    and the memory it leaves goes to the spill budget."""
    _machine(monkeypatch, tmp_path)
    distinct = CrawlStream(10**10, 2 * 10**9).expected_total_new
    args = (10**10, distinct, None, str(tmp_path), distinct, GiB, "auto", None, None,
            (20, None, 0))
    default = benchplan.plan_resources(*args)
    p = benchplan.plan_resources(*args, bloom_fpr=0.02)
    assert p.bloom_fpr == 0.02 and p.bloom_bytes == benchplan.bloom_bytes_for(distinct, 0.02)
    assert p.bloom_bytes < 0.7 * default.bloom_bytes and p.spill_memory > default.spill_memory
    assert p.memory_estimate["total"] <= 12 * GiB - benchplan.RSS_MARGIN
    with pytest.raises(StoreIOError, match="Bloom filter"):  # 1e-9: no room, no fallback
        benchplan.plan_resources(*args, bloom_fpr=1e-9)


def test_a_small_run_keeps_the_default_bloom_target(monkeypatch, tmp_path):
    _machine(monkeypatch, tmp_path)
    p = benchplan.plan_resources(10**8, 5 * 10**7, 10**7, str(tmp_path), 5 * 10**7, GiB, 1,
                                None, True, (20, None, 0))
    assert p.bloom_fpr == 1e-3 and p.spill_memory > GiB
    assert p.memory_estimate["total"] <= 12 * GiB - benchplan.RSS_MARGIN


def test_a_filter_too_large_for_any_target_is_refused(monkeypatch, tmp_path):
    _machine(monkeypatch, tmp_path)
    with pytest.raises(StoreIOError, match="leaving too little for spilled batches"):
        benchplan.plan_resources(10**10, 10**10, None, str(tmp_path), 10**10, GiB, "auto",
                                None, True, (20, None, 0))


def _plan_1e10(monkeypatch, tmp_path, free_gb):
    _machine(monkeypatch, tmp_path, free_gb=free_gb)
    distinct = CrawlStream(10**10, 2 * 10**9).expected_total_new
    return benchplan.plan_resources(10**10, distinct, None, str(tmp_path), distinct, GiB,
                                   "auto", None, None, (20, None, 0))


def test_the_1e10_plan_takes_as_few_batches_as_the_disk_holds(monkeypatch, tmp_path):
    """82.5 GB free: 3 batches of 3.33e9 keys (buckets 28 GB of the 37.6 GB the runs,
    Bloom file and probe leave), not 5 of 2e9 from half the spare: each batch fewer
    saves a sweep of the store (docs/bench.md)."""
    p = _plan_1e10(monkeypatch, tmp_path, 82.5)
    assert -(-10**10 // p.batch) == 3
    spare = 82.5e9 - (p.disk["runs"] + p.disk["bloom_file"] + p.disk["disk_probe"])
    assert p.disk["spill_buckets"] <= benchplan.SPILL_DISK_SHARE * spare
    assert p.disk_needed <= 82.5e9
    # less disk, smaller batches; too little, the clear error before anything is written
    assert _plan_1e10(monkeypatch, tmp_path, 60).batch < p.batch
    with pytest.raises(DiskFullError, match="needs about .* of free disk"):
        _plan_1e10(monkeypatch, tmp_path, 40)


def test_the_memory_estimate_counts_the_allocators_slack(monkeypatch, tmp_path):
    """A 1e10 run with a 2169 MiB budget beside its filter peaked at 11.69 GiB, more
    than the parts the model names: the estimate (HEAP_SLACK counted) is at least that
    peak, and the plan's stays under the cap."""
    p = _plan_1e10(monkeypatch, tmp_path, 82.5)
    est = benchplan.spill_peak(2169 << 20, p.bloom_bytes)
    assert est["total"] >= 11.69 * GiB
    assert p.memory_estimate["total"] <= 12 * GiB - benchplan.RSS_MARGIN


def test_the_bench_takes_one_batch_more_when_the_bigger_batchs_keys_do_not_fit(
        monkeypatch, tmp_path):
    """Fewer, bigger batches re-offer less, so the plan is remade for the chosen batch's
    own distinct keys; when their filter no longer fits (1e10 on a 24 GiB machine:
    3 batches of 3.33e9 have 6e9 distinct keys), plan_bench takes one batch more
    instead of failing."""
    _machine(monkeypatch, tmp_path, free_gb=82, avail=23 * GiB)
    first = benchplan.stream_distinct(10**10, None, 0.5, 0.1, 0)
    assert first == CrawlStream(10**10, 10**8, 0.5, 0.1, seed=0).expected_total_new
    plan, cap = benchplan.plan_bench(10**10, first, None, 0.5, 0.1, 0, str(tmp_path),
                                     1 << 30, first, True, True, "auto", None, None)
    assert plan.spill_memory is not None
    n_batches = -(-10**10 // plan.batch)
    assert n_batches >= 4  # 3 batches' filter does not fit under the cap
    assert cap == CrawlStream(10**10, plan.batch, 0.5, 0.1, seed=0).expected_total_new
    assert plan.bloom_bytes == benchplan.bloom_bytes_for(cap, plan.bloom_fpr)
    assert plan.memory_estimate["total"] <= benchplan.RSS_CAP
    # the plan of one batch fewer, with its own distinct keys, is the one refused
    fewer = -(-10**10 // (n_batches - 1))
    d = CrawlStream(10**10, fewer, 0.5, 0.1, seed=0).expected_total_new
    with pytest.raises(StoreIOError):
        benchplan.plan_resources(10**10, d, fewer, str(tmp_path), d, 1 << 30, "auto", None,
                                True, (20, None, 0))


@pytest.mark.parametrize("free_gb,fmt", [(70, 2), (300, None), (40, "short")])
def test_the_1e10_plan_spills_within_12_gib_and_fits_the_disk(monkeypatch, tmp_path, free_gb, fmt):
    """A 24 GiB machine (``_machine``): 1e10 keys are spilled batches under the RSS cap,
    every run compressed where raw ones would not leave room, else the store's tiered
    default (None); with the disk short the plan stops with what it needs
    (DiskFullError, exit 6)."""
    _machine(monkeypatch, tmp_path, free_gb=free_gb)
    distinct = CrawlStream(10**10, 10**9).expected_total_new
    args = (10**10, distinct, None, str(tmp_path), distinct, GiB, "auto", None, None,
            (20, None, 0))
    if fmt == "short":
        with pytest.raises(DiskFullError,
                           match="needs about .* spill buckets.* only 37.3 GiB is free"):
            benchplan.plan_resources(*args)
        return
    p = benchplan.plan_resources(*args)
    assert p.spill_memory and p.run_format == fmt and p.shard_bits == benchplan.SPILL_SHARD_BITS
    assert p.memory_estimate["total"] <= 12 * GiB - benchplan.RSS_MARGIN  # spill_peak
    assert 5 * 10**8 <= p.batch <= benchplan.SPILL_MAX_BATCH  # ~20 sweeps at most, not 100
    assert p.disk_needed == sum(p.disk.values()) <= free_gb * 10**9
    assert p.disk["spill_buckets"] == int(8 * p.batch * (1 + p.busiest_shard_share))
