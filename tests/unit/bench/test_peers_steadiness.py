"""bench/peers.py steadiness report: each batch against the median, the host probe and
the process CPU around it, and the stages of a batch past 1.5x the median."""

import importlib.util
import os

import numpy as np
from conftest import REPO


def _peers():
    path = os.path.join(REPO, "bench", "peers.py")
    spec = importlib.util.spec_from_file_location("peers", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(secs, probes, cpus):
    return {"peer": "seenstore", "batches": [
        {"batch": i, "s": s, "probe_ns": [p, p * 0.9], "cpu_s": c, "sys_s": c / 4,
         "faults": 1500 * i,
         "stages": {"merge_s": s * 0.7, "sort_s": 0.001, "new": 5}}
        for i, (s, p, c) in enumerate(zip(secs, probes, cpus))]}


def test_the_slow_batch_is_named_with_its_ratio_probe_and_stages():
    peers = _peers()
    secs = [0.10, 0.11, 0.09, 0.30, 0.10]
    text = peers.fmt_steadiness([_row(secs, [50, 50, 50, 90, 50], [0.2, 0.2, 0.2, 0.4, 0.2])])
    med = float(np.median(secs))
    assert f"slowest batch 3 0.300 s = {0.30 / med:.2f}x the median" in text
    assert "host probe around each batch (slower of before/after, x its median): " \
           "1.00 1.00 1.00 1.80 1.00" in text
    assert "process CPU seconds in each batch (x its median): 1.00 1.00 1.00 2.00 1.00" in text
    assert "page faults in thousands: 0.050/0k 0.050/2k 0.050/3k 0.100/4k 0.050/6k" in text
    stage_lines = [x for x in text.splitlines() if "by stage" in x]
    # only the batch past 1.5x; stages under 5 ms and counts left out
    assert stage_lines == ["    batch 3 (0.300 s) by stage, s: merge 0.210"]


def test_a_steady_run_names_no_batch_and_a_single_batch_is_not_judged():
    peers = _peers()
    text = peers.fmt_steadiness([_row([0.10, 0.12, 0.11], [50] * 3, [0.2] * 3),
                                 _row([0.5], [50], [0.2])])
    assert "by stage" not in text
    assert text.count("median batch") == 1
