"""``seenstore bench``: a tiny end-to-end run, its JSON, and its refusal paths."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from seenstore.bench.result import STAGES
from seenstore.cli import main
from seenstore.store import SeenStore


def _bench(args, tmp_path):
    return CliRunner().invoke(
        main, ["bench", "--json", "--quiet", "--probe-bytes", "8e6", "--dir", str(tmp_path)]
        + args)


def test_tiny_run_subprocess_exit_code_and_json_fields(tmp_path):
    p = subprocess.run(
        [sys.executable, "-c", "from seenstore.cli import main; main()", "bench",
         "--keys", "2e5", "--batch", "5e4", "--json", "--quiet", "--probe-bytes", "8e6",
         "--dir", str(tmp_path)], capture_output=True, text=True,
        timeout=900)  # on a bare clone this is the suite's first compile (2-6 min under load)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["verified"] is True and r["bad_batches"] == []
    assert r["offered"] == 200_000 and len(r["batches"]) == 4
    # 10% in-batch repeats; first batch all fresh, then half of the distinct slots re-offered
    assert r["expected_new"] == 45_000 + 3 * 22_500 == r["new"] == r["store_keys"]
    for s in STAGES + ("store_total", "other"):
        assert s in r["ns_per_key"]
    assert r["ns_per_key"]["store_total"] > 0 and r["keys_per_s"] > 0
    assert r["bytes_written"] >= 8 * r["store_keys"]
    assert r["disk_bytes"] >= 8 * r["store_keys"] and r["disk_bytes_per_key"] >= 8.0
    assert r["peak_rss_bytes"] > 0
    assert r["jit_in_run"]["kernels"] == 0  # the warm-up ran every kernel the run calls
    assert len(r["disk_probe"]) == 2 and all(d["write_bps"] > 0 for d in r["disk_probe"])
    probe = r["cpu_probe_ns_per_key"]  # the host's speed at the start and at the end
    assert len(probe) == 2 and all(0 < x < 1000 for x in probe)
    assert r["floor"]["total_s"] > 0 and r["floor"]["ratio_store_to_floor"] > 0
    assert not os.path.exists(tmp_path / "bench-store")  # removed without --keep
    res = r["resources"]  # what bench found and needed, decided before it started
    assert res["batch"] == 50_000 and res["disk_free"] > res["disk_needed"] > 8 * r["new"]
    assert res["memory_available"] > 0 and res["peak_rss"] == r["peak_rss_bytes"]
    assert res["disk_used"] == r["disk_bytes"]
    # the floor's sort is the faster of the two, both timed in the run
    fl = r["floor"]
    assert fl["sort_s"] == min(fl["sort_numpy_s"], fl["sort_radix_s"]) > 0
    assert fl["sort_by"] == ("numpy" if fl["sort_numpy_s"] <= fl["sort_radix_s"] else "radix")
    assert r["sort"]["sort"] in ("radix", "numpy") and r["params"]["threads"] >= 1
    assert r["machine"]["cpu"] and set(r["machine"]["numpy_simd"]) == {"baseline", "found",
                                                                      "not_found"}


@pytest.mark.parametrize("extra,match", [
    (["--no-bloom"], "needs about .* of free disk .* only .* is free"),
    ([], "Bloom filter for .* keys needs .* use --no-bloom"),
])
def test_a_run_too_big_for_this_machine_stops_before_it_starts(tmp_path, extra, match):
    """1e13 keys: more disk (and Bloom memory) than any test machine has: one line, exit 6,
    nothing written."""
    p = subprocess.run(
        [sys.executable, "-m", "seenstore.cli", "bench", "--keys", "1e13", "--quiet",
         "--dir", str(tmp_path)] + extra, capture_output=True, text=True, timeout=120)
    assert p.returncode == 6, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("seenstore: error: ")
    assert re.search(match, lines[0]), lines[0]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("sort", ["radix", "numpy"])
def test_threads_option_and_sort_override_in_text_output(tmp_path, monkeypatch, sort):
    monkeypatch.setenv("SEENSTORE_SORT", sort)
    r = CliRunner().invoke(main, ["bench", "--keys", "1e5", "--batch", "5e4", "--quiet",
                                  "--probe-bytes", "8e6", "--dir", str(tmp_path),
                                  "--threads", "1"])
    assert r.exit_code == 0, r.output
    assert f"sort             {sort} (SEENSTORE_SORT={sort}); threads 1" in r.output
    assert "machine          " in r.output and "numpy" in r.output
    bad = CliRunner().invoke(main, ["bench", "--keys", "1e5", "--threads", "0"])
    assert bad.exit_code == 2


def _flip_last(mask):
    mask[-1] = not mask[-1]
    return mask


def _swap_one(new):  # same count, one new key replaced by a key that is not new
    out = new.copy()
    out[-1] = out[-1] + np.uint64(1) if out[-1] != np.uint64(2**64 - 1) else np.uint64(0)
    return np.sort(out)


@pytest.mark.parametrize("answer,method,lie", [
    ("mask", "add", _flip_last),
    ("new", "add_new", lambda new: new[:-1]),
    ("new", "add_new", _swap_one),
])
def test_wrong_answers_give_exit_1(tmp_path, monkeypatch, answer, method, lie):
    real = getattr(SeenStore, method)

    def lying(self, keys):
        return lie(real(self, keys))

    monkeypatch.setattr(SeenStore, method, lying)
    r = _bench(["--keys", "3e4", "--batch", "1e4", "--answer", answer], tmp_path)
    assert r.exit_code == 1
    assert "differ from the expectation" in r.output


def test_keep_leaves_a_store_that_holds_the_expected_keys(tmp_path):
    saved = tmp_path / "run.json"
    r = _bench(["--keys", "2e4", "--batch", "1e4", "--keep", "--reoffer", "0",
                "--save", str(saved)], tmp_path)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert json.loads(saved.read_text()) == out
    with SeenStore.open(out["params"]["kept_store"]) as st:
        assert len(st) == out["expected_new"] == 18_000
        assert st.contains(np.array([], dtype=np.uint64)).shape == (0,)


def test_bad_numbers_and_existing_store_are_one_line_errors(tmp_path):
    # malformed or too small: the same usage error (exit 2), never a traceback
    for bad in (["--keys", "abc"], ["--keys", "1.5"], ["--keys", "-3"], ["--batch", "1e-3"],
                ["--keys", "0"], ["--batch", "0"]):
        r = _bench(bad, tmp_path)
        assert r.exit_code == 2 and "Traceback" not in r.output, (bad, r.output)
    assert "at least 1" in _bench(["--keys", "0"], tmp_path).output
    os.makedirs(tmp_path / "bench-store")
    r = _bench(["--keys", "1e3"], tmp_path)
    assert r.exit_code == 3 and "already exists" in r.output
    assert os.path.isdir(tmp_path / "bench-store")  # not ours: left alone


def test_no_bloom_run_verifies_and_spends_nothing_on_the_filter(tmp_path):
    r = _bench(["--keys", "4e4", "--batch", "1e4", "--no-bloom", "--keep"], tmp_path)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["verified"] and out["params"]["bloom"] is False
    assert out["ns_per_key"]["bloom"] == 0 and out["ns_per_key"]["bloom_background"] == 0
    with SeenStore.open(out["params"]["kept_store"], bloom=False) as st:
        assert len(st) == out["expected_new"]
        assert not os.path.exists(os.path.join(st.path, "BLOOM"))
    assert out["bloom_end"] is None


def test_bloom_fpr_sizes_the_stores_filter_and_the_answers_stay_exact(tmp_path):
    """--bloom-fpr reaches the plan and the store's filter (the spilled plan's choice:
    tests/unit/bench/test_plan.py); a looser filter is smaller than the default's for
    the same keys, and the counts still verify."""
    from seenstore.bench.plan import bloom_bytes_for

    r = _bench(["--keys", "2e5", "--batch", "5e4", "--keep", "--bloom-fpr", "0.02"], tmp_path)
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["verified"] and d["resources"]["bloom_fpr"] == 0.02
    with SeenStore.open(d["params"]["kept_store"]) as st:  # no rate asked: its own
        assert st.bloom.target_fpr == 0.02 and st.stats()["bloom"]["state"] == "loaded"
    default = bloom_bytes_for(d["params"]["bloom_capacity"], 1e-3)
    assert 0 < d["bloom_end"]["bytes"] < 0.7 * default
    r = _bench(["--keys", "1e3", "--bloom-fpr", "0.7"], tmp_path / "bad")
    assert r.exit_code == 2 and "--bloom-fpr" in r.output


def test_spilled_batches_verify_and_report_their_budget(tmp_path):
    """--memory: every batch generated straight into SeenStore.add_new_file (spilled by
    shard, never whole in memory), counts checked against the stream's expectation."""
    r = _bench(["--keys", "2e5", "--batch", "5e4", "--memory", "16M", "--run-format", "2"],
               tmp_path)
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["verified"] and d["new"] == d["expected_new"] == 45_000 + 3 * 22_500
    assert d["params"]["spill_memory"] == 16 << 20 and d["params"]["run_format"] == 2
    res = d["resources"]  # the busiest shard's bucket counted twice (split when too big)
    assert res["shard_bits"] == 8
    assert res["disk"]["spill_buckets"] == int(8 * 50_000 * (1 + res["busiest_shard_share"]))
    assert d["ns_per_key"]["spill"] > 0 and all(b["ok"] for b in d["batches"])
    stages = d["spill_stages_ns_per_key"]  # admit_file's own clock, per offered key
    assert {"spill", "read", "sort", "check", "write", "write_behind"} <= set(stages)
    assert all(v["wall"] >= 0 and v["cpu"] >= 0 for v in stages.values())
    assert stages["sort"]["wall"] > 0 and stages["write_behind"]["wall"] > 0
    end = d["bloom_end"]  # the last batch's deferred insert settled: every new key in
    assert end["state"] == "kept" and 0.99 * d["new"] <= end["keys"] <= d["new"]


def test_a_dropped_bloom_filter_is_reported_at_the_end(tmp_path, monkeypatch):
    """A spilled batch's failed Bloom insert drops the filter (a warning on stderr);
    the report says so too, in its text and its JSON."""
    from seenstore.bloom import deferred

    def broken(self, keys):
        raise OSError("injected")
    monkeypatch.setattr(deferred.DeferredInsert, "_insert", broken)
    args = ["--keys", "1e5", "--batch", "5e4", "--memory", "16M", "--dir", str(tmp_path)]
    r = CliRunner().invoke(main, ["bench", "--quiet", "--probe-bytes", "8e6", "--save",
                                  str(tmp_path / "r.json")] + args)
    assert r.exit_code == 0, r.output
    assert "bloom at end     dropped (insert failed" in r.output
    assert json.loads((tmp_path / "r.json").read_text())["bloom_end"]["state"] == "dropped"


def test_bench_with_a_wrong_spilled_count_exits_1(tmp_path, monkeypatch):
    from seenstore.store import spill

    real = spill.admit_file

    def lie(*a, **k):
        f = real(*a, **k)
        f["new"] -= 1
        return f
    monkeypatch.setattr(spill, "admit_file", lie)
    r = _bench(["--keys", "1e5", "--batch", "5e4", "--memory", "16M"], tmp_path)
    assert r.exit_code == 1 and not json.loads(r.output.splitlines()[0])["verified"]


def test_a_cold_numba_cache_is_compiled_in_a_child_before_the_benchmark_loads_it(
        tmp_path, monkeypatch):
    """warmup.warm_up(child=True): compiling leaves LLVM's memory resident (~700 MB) in
    the process that compiled, so with a cold cache a child compiles and the benchmark's
    process only loads the cache; with a warm one no child (it would cost a second)."""
    from seenstore import warmup
    from seenstore.kernels import dispatch

    events = []
    monkeypatch.setattr(warmup, "_warm_up_in_child",
                        lambda d, fmt, progress: events.append(("child", fmt)) or True)
    monkeypatch.setattr(warmup, "_warm_here", lambda d, progress, fmt: events.append(("here",)))
    monkeypatch.setattr(dispatch, "cold", lambda: True)
    warmup.warm_up(str(tmp_path), child=True)
    assert events == [("child", None), ("here",)]
    events.clear()
    monkeypatch.setattr(dispatch, "cold", lambda: False)
    warmup.warm_up(str(tmp_path), child=True)
    assert events == [("here",)]


def test_dispatch_cold_reads_numba_cache_index(tmp_path):
    """dispatch.cold: False where the kernels are cached (this suite warms them up),
    True in a process whose numba cache is empty (and nothing compiled)."""
    from seenstore.kernels import dispatch
    from seenstore.warmup import warm_up

    warm_up(str(tmp_path))  # loads (or, run alone on a new clone, compiles)
    assert dispatch.cold() is False
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "empty")}
    p = subprocess.run([sys.executable, "-c",
                        "from seenstore.kernels import dispatch; print(dispatch.cold())"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0 and p.stdout.strip() == "True", p.stderr


def test_warm_up_in_a_child_process_runs_and_reports_success(tmp_path, monkeypatch):
    """The child imports this very seenstore, even run from a folder holding another
    (a benchmark of a snapshot, started from the checkout, warmed the checkout's)."""
    from seenstore import warmup

    other = tmp_path / "elsewhere"
    (other / "seenstore").mkdir(parents=True)
    (other / "seenstore" / "__init__.py").write_text("raise SystemExit(3)\n")
    monkeypatch.chdir(other)
    steps = []
    assert warmup._warm_up_in_child(str(tmp_path), None,
                                    lambda name, i, n: steps.append((i, n))) is True
    n = len(warmup.warm_steps(str(tmp_path / "unused")))  # 4: modules, store, URL, codec
    assert n == 4
    assert steps == [(i, n) for i in range(1, n + 1)]  # the child's steps, reported as they end
    assert warmup._warm_up_in_child(str(tmp_path / "missing" / "dir"), None) is False


def test_a_cold_cache_is_announced_at_once_with_its_folder_and_kernels(monkeypatch, capsys):
    """On an empty numba cache the bench says it compiles (and where the kernels are
    cached) before anything else, then each kernel as a lane compiles it; on a warm
    one, nothing."""
    from seenstore.bench import warm
    from seenstore.cli import bench_cmd
    from seenstore.kernels.jitcache import cache_dir

    monkeypatch.setattr(bench_cmd, "_noticed", [0.0])
    monkeypatch.setattr(warm, "cold", lambda bloom: False)
    assert bench_cmd._compiling_notice(False) is None
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(warm, "cold", lambda bloom: True)
    step = bench_cmd._compiling_notice(False)
    err = capsys.readouterr().err
    assert "compiling the numba kernels" in err and cache_dir() in err
    step("Bloom filter", "bloom.insert_seeds", 9.5)
    assert "compiled bloom.insert_seeds (9.5 s; Bloom filter)" in capsys.readouterr().err
    step("ready", "", 20.0)
    assert "kernels ready" in capsys.readouterr().err
    monkeypatch.setattr(bench_cmd, "_noticed", [0.0])
    quiet = bench_cmd._compiling_notice(True)  # --quiet: the notice, no kernels
    assert "compiling" in capsys.readouterr().err
    quiet("Bloom filter", "bloom.insert_seeds", 9.5)
    assert capsys.readouterr().err == ""


def test_a_first_run_says_it_compiles_within_a_second(tmp_path):
    """`seenstore bench` on an empty cache: the first stderr line, printed before numba
    is imported (jitcache.surely_cold), says it compiles and where. The process is
    stopped there (the compile itself is not waited for). 1 s on an idle machine;
    asserted with room for a loaded CI runner."""
    import select
    import time

    env = {**os.environ, "SEENSTORE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("NUMBA_CACHE_DIR", None)
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "seenstore.cli", "bench", "--keys", "1e7",
                          "--dir", str(tmp_path / "w")], stderr=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, env=env, text=True)
    try:
        ready, _, _ = select.select([p.stderr], [], [], 20)
        first = p.stderr.readline() if ready else ""
        elapsed = time.perf_counter() - t0
        assert "seenstore: first run: compiling the numba kernels" in first, first
        assert str(tmp_path / "cache") in first and elapsed < 10
        assert "numba" not in _imported_before_notice(env)
    finally:
        p.kill()
        p.wait()


def _imported_before_notice(env: dict) -> set:
    """Top-level modules loaded when ``early_notice`` prints on an empty cache."""
    code = ("import sys; from seenstore.cli import bench_cmd; bench_cmd.early_notice(); "
            "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.returncode == 0 and "first run" in p.stderr, p.stderr
    return set(p.stdout.split())


def test_cache_dir_guess_and_surely_cold_agree_with_numba(tmp_path):
    """jitcache.cache_dir_guess (no numba) names numba's own cache folder, with and
    without SEENSTORE_CACHE_DIR; surely_cold is True on an empty cache and False once
    a kernel of the package is saved there; dispatch.cold(kernels) on named ones."""
    code = ("import sys, numpy as np; from seenstore.kernels import jitcache, dispatch; "
            "g = jitcache.cache_dir_guess(); c0 = jitcache.surely_cold(); "
            "k0 = dispatch.cold(('merge.is_strictly_increasing',)); "
            "from seenstore.kernels import merge; "
            "merge.is_strictly_increasing(np.arange(3, dtype=np.uint64)); "
            "print(g == jitcache.cache_dir(), c0, k0, jitcache.surely_cold(('merge',)), "
            "dispatch.cold(('merge.is_strictly_increasing',)))")
    env = {**os.environ, "SEENSTORE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("NUMBA_CACHE_DIR", None)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 0 and p.stdout.split() == ["True"] * 3 + ["False"] * 2, p.stderr
    env.pop("SEENSTORE_CACHE_DIR")
    p = subprocess.run([sys.executable, "-c", "from seenstore.kernels import jitcache as j; "
                        "print(j.cache_dir_guess() == j.cache_dir())"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0 and p.stdout.strip() == "True", p.stderr


LANE = """
import numpy as np
from numba import njit


@njit(cache=True)
def double(a):
    return a * 2


def lane(work, n, dtype="int64", fail=False):
    assert double(np.arange(n, dtype=dtype)).sum() == n * (n - 1)
    if fail:
        raise SystemExit(3)
"""


def test_compile_lanes_run_at_once_and_report_each_kernel_compiled(tmp_path, monkeypatch):
    """warmup.compile_lanes: every lane runs in a child of its own with its kwargs and
    reports each kernel as it compiled it (a cache load is no compile); a failing lane
    makes it return False."""
    from seenstore.warmup import compile_lanes

    (tmp_path / "lanemod.py").write_text(LANE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    monkeypatch.setenv("SEENSTORE_CACHE_DIR", str(tmp_path / "cache"))
    events = []
    lanes = [("one", "lanemod:lane", {"n": 5}),  # two signatures of one kernel, saved at once
             ("two", "lanemod:lane", {"n": 7, "dtype": "float64"})]
    assert compile_lanes(lanes, str(tmp_path), lambda *e: events.append(e)) is True
    assert sorted(e[:2] for e in events) == [("one", "lanemod.double"), ("two", "lanemod.double")]
    events.clear()
    assert compile_lanes(lanes[:1], str(tmp_path), lambda *e: events.append(e)) is True
    assert events == []  # loaded from the cache the lanes saved
    assert compile_lanes([("bad", "lanemod:lane", {"n": 3, "fail": True})], str(tmp_path)) is False
    assert os.listdir(tmp_path / "cache") and not [
        f for f in os.listdir(tmp_path) if f.startswith("seenstore-warmup-")]


def test_seenstore_cache_dir_is_where_the_kernels_are_cached(tmp_path):
    """SEENSTORE_CACHE_DIR (docs: README, First run) sets the folder numba caches
    seenstore's kernels in: a kernel compiled in a fresh process lands there."""
    code = ("import numpy as np; from seenstore.kernels import merge; "
            "from seenstore.kernels.jitcache import cache_dir; "
            "merge.is_strictly_increasing(np.arange(3, dtype=np.uint64)); print(cache_dir())")
    env = {**os.environ, "SEENSTORE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("NUMBA_CACHE_DIR", None)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().startswith(str(tmp_path / "cache"))
    saved = [f for _, _, files in os.walk(tmp_path / "cache") for f in files]
    assert any(f.startswith("merge.is_strictly_increasing") and f.endswith(".nbi")
               for f in saved), saved
