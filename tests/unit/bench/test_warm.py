"""The bench's warm-up (seenstore/bench/warm.py): the miniature's options, and the
lanes compiled only on a cold cache, each naming a function that exists."""

from __future__ import annotations

import importlib

from seenstore.bench import warm


def _options(**over):
    opts = {"answer": "new", "bloom": True, "run_format": 1, "threads": 2, "spill_memory": None,
            "shard_bits": None, "bloom_fpr": None, "reoffer": 0.5, "dup": 0.1, "seed": 3,
            "host_bits": 20, "n_hosts": 1 << 20, "batch": 10**8, "bloom_capacity": 9 * 10**8}
    return {**opts, **over}


def test_the_miniature_keeps_the_runs_shape_at_a_small_size():
    mini = warm.mini_options(_options(), n_batches=1)
    assert mini["batch"] == warm.MINI_KEYS and mini["batches"] == 1
    assert mini["bloom_capacity"] == warm.MINI_BLOOM_CAPACITY
    assert {k: mini[k] for k in ("answer", "bloom", "run_format", "seed", "host_bits")} == {
        "answer": "new", "bloom": True, "run_format": 1, "seed": 3, "host_bits": 20}
    assert "spill_memory" not in mini and "bloom_fpr" not in mini  # None: the run's default
    small = warm.mini_options(_options(batch=5000, bloom_capacity=None, spill_memory=1 << 24,
                                       answer="mask"), n_batches=40)
    assert small["batch"] == 5000 and small["batches"] == warm.MINI_BATCHES
    assert small["bloom_capacity"] is None and small["spill_memory"] == 1 << 24
    assert small["answer"] == "mask"


def test_lanes_run_only_on_a_cold_cache_and_name_real_functions(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(warm, "compile_lanes", lambda lanes, work, cb: calls.append(lanes))
    monkeypatch.setattr(warm, "warm_up", lambda *a, **k: calls.append("full"))
    mini = warm.mini_options(_options(), 1)
    monkeypatch.setattr(warm, "cold", lambda bloom: False)
    warm.compile_ahead(str(tmp_path), mini, 1, 1)
    assert calls == []
    warm.compile_ahead(str(tmp_path), mini, warm.MINI_BATCHES + 1, 1)  # compactions: all
    assert calls == ["full"]
    calls.clear()
    monkeypatch.setattr(warm, "cold", lambda bloom: True)
    warm.compile_ahead(str(tmp_path), mini, 1, 1)
    [lanes] = calls
    assert len(lanes) == 2
    for label, target, kwargs in lanes:
        module, _, name = target.partition(":")
        assert callable(getattr(importlib.import_module(module), name)), target
    assert [kw["bloom"] for _, _, kw in lanes] == [True, False]  # the filter; the rest
