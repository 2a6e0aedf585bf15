"""The spilled plan's memory model (benchrun.spill_peak, plan_resources): the 1e10
plan's estimated peak stays under 12 GiB by construction, with the filter the store
really allocates."""

import pytest

from seenstore.bench import run as benchrun
from seenstore.bloom import LayeredBloom
from seenstore.bench.workload import CrawlStream

GiB = 1 << 30


@pytest.mark.parametrize("fpr", [1e-3, 2e-3])
def test_the_planned_bloom_bytes_are_the_filter_the_store_allocates(fpr):
    assert benchrun.bloom_bytes_for(3_000_000, fpr) == LayeredBloom.for_capacity(
        3_000_000, fpr).nbytes
    assert benchrun.bloom_bytes_for(None, fpr) == 0


def _machine(monkeypatch, tmp_path, free_gb=70, avail=22 * GiB):
    from collections import namedtuple

    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(benchrun.shutil, "disk_usage", lambda p: Usage(0, 0, free_gb * 10**9))
    monkeypatch.setattr(benchrun, "_available_memory", lambda: avail)
    monkeypatch.setattr(benchrun.os, "sysconf", lambda n: {"SC_PAGE_SIZE": 4096,
                                                            "SC_PHYS_PAGES": 24 * GiB // 4096}[n])


def test_the_1e10_plan_estimates_its_peak_under_the_cap(monkeypatch, tmp_path):
    """This machine (24 GiB, 70 GB free): the 5.4e9-key filter at the default target
    (one layer at 0.05%, 11.2 GiB) leaves no room under 12 GiB, so the plan takes the
    next target (one layer at 0.1%, 9.9 GiB) and the largest budget whose estimate
    stays RSS_MARGIN under the cap (half the memory here)."""
    _machine(monkeypatch, tmp_path)
    distinct = CrawlStream(10**10, 2 * 10**9).expected_total_new
    p = benchrun.plan_resources(10**10, distinct, None, str(tmp_path), distinct, GiB, None,
                                None, None, (20, None, 0))
    est = p.memory_estimate
    assert p.bloom_fpr == 2e-3 and p.bloom_bytes == benchrun.bloom_bytes_for(distinct, 2e-3)
    assert benchrun.bloom_bytes_for(distinct, 1e-3) > 11 * GiB  # why the default is passed
    assert est["bloom"] == p.bloom_bytes and est["total"] <= 12 * GiB - benchrun.RSS_MARGIN
    assert est["total"] == (est["interpreter"] + est["heap_slack"] + est["bloom"]
                            + max(est["spill_phase"], est["check_phase"]))
    assert p.spill_memory >= benchrun.MIN_SPILL_MEMORY  # and as large as the room allows:
    bigger = benchrun.spill_peak(p.spill_memory + (64 << 20), p.bloom_bytes)["total"]
    assert bigger > 12 * GiB - benchrun.RSS_MARGIN


def test_a_small_run_keeps_the_default_bloom_target(monkeypatch, tmp_path):
    _machine(monkeypatch, tmp_path)
    p = benchrun.plan_resources(10**8, 5 * 10**7, 10**7, str(tmp_path), 5 * 10**7, GiB, 1,
                                None, True, (20, None, 0))
    assert p.bloom_fpr == 1e-3 and p.spill_memory > GiB
    assert p.memory_estimate["total"] <= 12 * GiB - benchrun.RSS_MARGIN


def test_a_filter_too_large_for_any_target_is_refused(monkeypatch, tmp_path):
    from seenstore.errors import StoreIOError

    _machine(monkeypatch, tmp_path)
    with pytest.raises(StoreIOError, match="leaving too little for spilled batches"):
        benchrun.plan_resources(10**10, 10**10, None, str(tmp_path), 10**10, GiB, None,
                                None, True, (20, None, 0))


def _plan_1e10(monkeypatch, tmp_path, free_gb):
    _machine(monkeypatch, tmp_path, free_gb=free_gb)
    distinct = CrawlStream(10**10, 2 * 10**9).expected_total_new
    return benchrun.plan_resources(10**10, distinct, None, str(tmp_path), distinct, GiB,
                                   None, None, None, (20, None, 0))


def test_the_1e10_plan_takes_as_few_batches_as_the_disk_holds(monkeypatch, tmp_path):
    """82.5 GB free (this VM's 76.8 GiB): 3 batches of 3.33e9 keys (buckets 28 GB of
    the 37.6 GB the runs, Bloom file and probe leave), not 5 of 2e9 from half the
    spare: each batch fewer saves a sweep of the store (docs/bench.md)."""
    p = _plan_1e10(monkeypatch, tmp_path, 82.5)
    assert -(-10**10 // p.batch) == 3
    spare = 82.5e9 - (p.disk["runs"] + p.disk["bloom_file"] + p.disk["disk_probe"])
    assert p.disk["spill_buckets"] <= benchrun.SPILL_DISK_SHARE * spare
    assert p.disk_needed <= 82.5e9
    # less disk, smaller batches; too little, the clear error before anything is written
    assert _plan_1e10(monkeypatch, tmp_path, 60).batch < p.batch
    from seenstore.errors import DiskFullError
    with pytest.raises(DiskFullError, match="needs about .* of free disk"):
        _plan_1e10(monkeypatch, tmp_path, 40)


def test_the_memory_estimate_counts_the_allocators_slack(monkeypatch, tmp_path):
    """The 1e10 run at 199b99f measured 11.69 GiB, 0.42 GiB over its estimate: the
    estimate now counts HEAP_SLACK, and the measured peak is under it."""
    p = _plan_1e10(monkeypatch, tmp_path, 82.5)
    est = benchrun.spill_peak(2169 << 20, p.bloom_bytes)
    assert est["total"] >= 11.69 * GiB  # the budget of that run: its measured peak
    assert p.memory_estimate["total"] <= 12 * GiB - benchrun.RSS_MARGIN


def test_the_bench_takes_one_batch_more_when_the_bigger_batchs_keys_do_not_fit(
        monkeypatch, tmp_path):
    """Fewer, bigger batches re-offer less, so the plan is remade for the chosen batch's
    own distinct keys; when their filter no longer fits (1e10 on this 24 GiB machine:
    3 batches of 3.33e9 have 6e9 distinct keys), the bench takes one batch more
    instead of failing (it exited 6 before)."""
    from seenstore.cli import bench_cmd

    _machine(monkeypatch, tmp_path, free_gb=82, avail=23 * GiB)
    first = CrawlStream(10**10, 10**8, 0.5, 0.1, seed=0).expected_total_new
    plan, cap = bench_cmd.plan_bench(10**10, first, None, 0.5, 0.1, 0, str(tmp_path),
                                     1 << 30, first, True, True, "auto", None, None)
    assert plan.spill_memory is not None
    n_batches = -(-10**10 // plan.batch)
    assert n_batches >= 4  # 3 batches' filter does not fit under the cap
    assert cap == CrawlStream(10**10, plan.batch, 0.5, 0.1, seed=0).expected_total_new
    assert plan.bloom_bytes == benchrun.bloom_bytes_for(cap, plan.bloom_fpr)
    assert plan.memory_estimate["total"] <= benchrun.RSS_CAP
    # the plan of one batch fewer, with its own distinct keys, is the one refused
    fewer = -(-10**10 // (n_batches - 1))
    d = CrawlStream(10**10, fewer, 0.5, 0.1, seed=0).expected_total_new
    with pytest.raises(benchrun.StoreIOError):
        benchrun.plan_resources(10**10, d, fewer, str(tmp_path), d, 1 << 30, None, None,
                                True, (20, None, 0))
