"""seenstore/bench/result.py and report.py: the verdict of a batch's answer, the floor
arithmetic, the totals of the booked batches, and the text report of their object."""

from __future__ import annotations

import math

import numpy as np
import pytest

from seenstore.bench.plan import ResourcePlan
from seenstore.bench.probes import DiskBandwidth
from seenstore.bench.report import document, text_lines
from seenstore.bench.result import STAGES, BenchResult, verify_answer
from seenstore.bench.workload import CrawlStream


def _batch():
    return next(iter(CrawlStream(4_000, 1_000, reoffer=0.5, dup=0.1, seed=3)))


def test_a_correct_answer_verifies_and_any_lie_does_not():
    b = _batch()
    mask = b.expected_mask()
    assert verify_answer(b, mask, "mask") == (b.n_fresh, True)
    flipped = mask.copy()
    flipped[-1] = not flipped[-1]
    assert verify_answer(b, flipped, "mask")[1] is False
    new = np.sort(b.keys[: b.n_fresh])
    assert verify_answer(b, new, "new") == (b.n_fresh, True)
    assert verify_answer(b, new[:-1], "new") == (b.n_fresh - 1, False)
    other = new.copy()
    other[0] ^= np.uint64(1)  # same count, one key that is not new
    assert verify_answer(b, np.sort(other), "new")[1] is False


def _row(index: int, offered: int, new: int, ok: bool = True, add_s: float = 1.0) -> dict:
    row = {"batch": index, "stored_before": 0, "offered": offered, "new": new,
           "expected_new": new, "ok": ok, "other_s": 0.0,
           "generate_s": 0.5, "add_s": add_s, "sort_numpy_s": 0.2, "sort_radix_s": 0.1,
           "bytes_read": 800, "bytes_cached": 0, "bytes_written": 1600,
           "bloom_background_s": 0.0, "bloom_cpu_s": 0.0, "shard_sort_s": 0.0,
           "compact_wait_s": 0.0}
    row.update({f"{s}_s": 0.1 for s in STAGES[1:]})
    return row


def test_booked_batches_sum_up_and_a_wrong_one_fails_the_run():
    res = BenchResult(params={})
    res.add_batch(_row(0, 100, 90), {"merge_parts": {"check_s": 0.25}})
    res.add_batch(_row(1, 100, 40, ok=False), {"spill_stages": {"sort": {"wall_s": 1.0,
                                                                          "cpu_s": 0.5}}})
    assert (res.offered, res.new, res.expected_new) == (200, 130, 130)
    assert res.store_s == 2.0 and res.stage_s["generate"] == 1.0
    assert res.sort_floor_s == min(res.sort_numpy_s, res.sort_radix_s) == 0.2
    assert res.thread_laps["check_s"] == 0.25 and res.spill_stages["sort"]["cpu_s"] == 0.5
    assert res.bad_batches == [1] and not res.verified
    res.add_settled_bloom(0.5, 2.0, 1.5)  # booked in the last batch's store time
    assert res.batches[-1]["add_s"] == 1.5 and res.stage_s["bloom"] == pytest.approx(0.7)
    assert res.store_s == 2.5 and res.bloom_background_s == 2.0 and res.bloom_cpu_s == 1.5
    # the wait after the last batch: in the store total and the stage, not in the row
    res.add_settled_bloom(0.25, 1.0, 0.5, final=True)
    assert res.batches[-1]["add_s"] == 1.5 and res.batches[-1]["bloom_s"] == pytest.approx(0.6)
    assert res.store_s == 2.75 and res.stage_s["bloom"] == pytest.approx(0.95)
    assert res.final_bloom_wait_s == 0.25 and res.bloom_background_s == 3.0


def test_the_floor_takes_the_best_rates_the_probes_saw():
    res = BenchResult(params={}, sort_floor_s=1.0, bytes_read=4e9, bytes_written=2e9)
    res.disk = [DiskBandwidth(1, write_bps=1e9, read_bps=1e9, direct_write_bps=None),
                DiskBandwidth(1, write_bps=2e9, read_bps=4e9, direct_write_bps=None)]
    assert res.floor_s() == 1.0 + 1.0 + 1.0
    assert math.isnan(res.floor_s(direct=True))  # a probe without O_DIRECT: no such floor
    res.disk[0].direct_write_bps = res.disk[1].direct_write_bps = 0.5e9
    assert res.floor_s(direct=True) == 1.0 + 1.0 + 4.0


def test_the_report_renders_the_document_of_a_run():
    res = BenchResult(params={"batch": 100, "reoffer": 0.5, "dup": 0.1, "seed": 0,
                              "threads": 2})
    res.add_batch(_row(0, 100, 90), {})
    res.disk = [DiskBandwidth(8 << 20, 1e9, 1e9, None)] * 2
    res.store_stats = {"keys": 90}
    plan = ResourcePlan(memory_available=1 << 30, memory_total=2 << 30, disk_free=1 << 30,
                        batch=100, bloom_bytes=0, disk_needed=1 << 20)
    r = document(res, plan, None)
    assert r["params"]["kept_store"] is None and r["resources"]["batch"] == 100
    lines = text_lines(r)
    assert lines[0].split()[:3] == ["batch", "stored", "offered"]
    assert any(line.startswith("new keys         90 (expected 90): VERIFIED") for line in lines)
    assert lines[-1].startswith("resources       batch 100 keys in memory")
    assert not any(line.startswith("memory plan") for line in lines)  # spilled runs only
    assert not any("after the last batch" in line for line in lines)  # no final wait
    res.add_settled_bloom(0.125, 0.5, 0.5, final=True)
    lines = text_lines(document(res, plan, None))
    assert any("after the last batch, 0.125 s waited for its Bloom insert" in line
               for line in lines)
