"""Tiered runs: the sweep, k-way merge and sparse-index kernels against their twins,
the compaction policy, and the store's batch / compaction / upgrade behaviour."""

import json
import os
import threading
import time
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import EDGE_KEYS, FIXTURES
from naive import kway_naive, setdiff, sweep_naive, union, uniq
from seenstore.store import manifest
from seenstore.store import compaction
from seenstore.errors import CorruptionError, NotSupportedError
from seenstore.kernels.merge import (kway_step, sparse_member,
                                     sweep_sorted, sweep_step)
from seenstore.store import SeenStore
from seenstore.store.runs.live import kway_arrays

key = st.one_of(st.sampled_from(EDGE_KEYS), st.integers(0, 2**64 - 1), st.integers(0, 40))
sorted_unique = st.sets(key, max_size=80).map(lambda s: np.array(sorted(s), dtype=np.uint64))


@settings(max_examples=200, deadline=None)
@given(run=sorted_unique, batch=sorted_unique, chunk=st.integers(1, 9))
def test_sweep_step_matches_twin(run, batch, chunk):
    assert _sweep_all(sweep_step, run, batch, chunk)[0] == sweep_naive(run, batch).tolist()


def _sweep_all(step, run, batch, chunk):
    """Drive a sweep kernel over ``run`` in chunks, as runs_live.sweep does: (found, j)."""
    found = np.zeros(len(batch), np.bool_)
    j, prev, have = 0, np.uint64(0), False
    for lo in range(0, len(run), chunk):
        part = run[lo:lo + chunk].copy()
        j, prev, have, ok = step(part, len(part), batch, j, found, prev, have)
        prev = np.uint64(prev)
        assert ok
    return found.tolist(), j


dense_run = st.sets(st.one_of(st.integers(0, 2000), st.sampled_from(EDGE_KEYS)),
                   max_size=400).map(lambda s: np.array(sorted(s), dtype=np.uint64))
sparse_batch = st.sets(st.one_of(st.integers(0, 2100), st.sampled_from(EDGE_KEYS)),
                       max_size=60).map(lambda s: np.array(sorted(s), dtype=np.uint64))


@settings(max_examples=150, deadline=None)
@given(run=dense_run, batch=sparse_batch, chunk=st.integers(1, 300))
def test_sweep_step_on_runs_denser_than_the_batch_matches_twins(run, batch, chunk):
    """Long chunks with few batch keys in each: the kernel's skipping path (8 run
    keys at a time) and its tail, against the naive twin and dispatch's numpy twin
    (both ``found`` and the batch position returned)."""
    from seenstore.kernels import dispatch as D
    got = _sweep_all(sweep_step, run, batch, chunk)
    assert got[0] == sweep_naive(run, batch).tolist()
    assert got == _sweep_all(D.merge.twin("sweep_step"), run, batch, chunk)


@settings(max_examples=150, deadline=None)
@given(run=sparse_batch, batch=dense_run, chunk=st.integers(1, 30))
def test_sweep_step_on_batches_denser_than_the_run_matches_twins(run, batch, chunk):
    """Short chunks with many batch keys each: the kernel's path that walks the run
    and skips the batch 8 keys at a time, and its tail, against both twins."""
    from seenstore.kernels import dispatch as D
    got = _sweep_all(sweep_step, run, batch, chunk)
    assert got[0] == sweep_naive(run, batch).tolist()
    assert got == _sweep_all(D.merge.twin("sweep_step"), run, batch, chunk)


def _sorted_all(step, run, batch, chunk):
    """Drive ``sweep_sorted`` (or its twin) over ``run`` in chunks: (found, j)."""
    found = np.zeros(len(batch), np.bool_)
    j = 0
    for lo in range(0, len(run), chunk):
        part = run[lo:lo + chunk].copy()
        j = step(part, len(part), batch, j, found)
    return found.tolist(), j


# runs and batches long enough for sweep_sorted's four chains (more than 16 run
# keys, more than 4 batch keys below the chunk's 16th last), gaps above and below 8
chain_keys = st.sets(st.one_of(st.integers(0, 3000), st.sampled_from(EDGE_KEYS),
                               st.integers(2**64 - 3000, 2**64 - 1)),
                     max_size=700).map(lambda s: np.array(sorted(s), dtype=np.uint64))


@settings(max_examples=200, deadline=None)
@given(run=chain_keys, batch=chain_keys, chunk=st.sampled_from([1, 17, 40, 300, 10**6]))
def test_sweep_sorted_matches_twins(run, batch, chunk):
    """sweep_sorted (the run cache's sweep, order not checked) against the naive
    twin and dispatch's numpy twin: found and the batch position; the same answers
    as sweep_step on every chunking."""
    from seenstore.kernels import dispatch as D
    got = _sorted_all(sweep_sorted, run, batch, chunk)
    assert got[0] == sweep_naive(run, batch).tolist()
    assert got == _sorted_all(D.merge.twin("sweep_sorted"), run, batch, chunk)
    assert got == _sweep_all(sweep_step, run, batch, chunk)


@pytest.mark.parametrize("found_share", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("ratio", [0.1, 0.3, 0.6, 1.0, 1.4, 1.8, 4.9, 6.0, 12.0, 15.9, 80.0])
def test_sweep_sorted_on_long_runs_matches_a_set(found_share, ratio):
    """Hash-like keys at run/batch ratios on both sides of every path (chains,
    their tails, the four-chain merge between 0.2 and 1.5, the wide lower bound
    between 5 and 16, 8-key skips of the batch), none / half / all of the batch found,
    the edge keys 0, 2^63 and 2^64-1 at both ends."""
    rng = np.random.default_rng(int(ratio * 10 + found_share * 3))
    n_batch = 4000
    n_run = int(n_batch * ratio)
    pool = np.unique(rng.integers(0, 2**64 - 1, 3 * (n_run + n_batch), dtype=np.uint64,
                                  endpoint=True))
    rng.shuffle(pool)
    edges = np.array([0, 2**63, 2**64 - 1], np.uint64)
    run = np.union1d(pool[:n_run], edges)
    hits = rng.choice(run, int(found_share * min(n_batch, len(run))), replace=False)
    batch = np.union1d(hits, pool[n_run:n_run + n_batch - len(hits)])
    if found_share == 1.0:  # all found
        batch = np.union1d(hits, edges)
    for chunk in (len(run), 1000, 33):
        got, j = _sorted_all(sweep_sorted, run, batch, chunk)
        assert got == np.isin(batch, run).tolist()
        assert j == len(batch)


@pytest.mark.parametrize("run, prev", [([1, 2, 2, 3], None), ([1, 2, 4, 3, 9], None),
                                       ([7, 8], 7), ([9] * 12, None)])
def test_sweep_step_flags_a_repeat_or_descent_anywhere(run, prev):
    run = np.array(run, np.uint64)
    found = np.zeros(3, np.bool_)
    have = prev is not None
    out = sweep_step(run, len(run), np.array([1, 3, 8], np.uint64), 0, found,
                     np.uint64(prev or 0), have)
    assert out[3] is False or out[3] == False  # noqa: E712 (numba's bool)
    assert not found.any()


def test_sweep_step_flags_an_unsorted_run():
    run = np.array([5, 3], np.uint64)
    found = np.zeros(1, np.bool_)
    assert not sweep_step(run, 2, np.array([3], np.uint64), 0, found, np.uint64(0), False)[3]


def _kway(runs, row, out_len):
    got = kway_arrays(runs, row, out_len, kernel=kway_step)
    return (None, False) if got is None else (got.tolist(), True)


@settings(max_examples=200, deadline=None)
@given(keys=sorted_unique, owner=st.lists(st.integers(0, 4), min_size=80, max_size=80),
       row=st.integers(1, 7), out_len=st.integers(1, 9))
def test_kway_step_matches_twin(keys, owner, row, out_len):
    k = 1 + max(owner)
    runs = [keys[[o == r for o in owner[:len(keys)]]] for r in range(k)]  # disjoint runs
    got, ok = _kway(runs, row, out_len)
    assert ok and got == kway_naive(runs).tolist()


def test_kway_step_flags_a_key_in_two_runs():
    runs = [np.array([1, 5, 9], np.uint64), np.array([2, 5], np.uint64)]
    assert _kway(runs, 2, 3)[1] is False


@settings(max_examples=200, deadline=None)
@given(run=sorted_unique, needles=sorted_unique, stride=st.sampled_from([1, 2, 3, 512]))
def test_sparse_member_matches_isin(run, needles, stride):
    found = np.zeros(len(needles), np.bool_)
    sparse_member(run, run[::stride].copy(), stride, needles, found)
    assert found.tolist() == np.isin(needles, run).tolist()


def test_plan_size_tiered():
    def e(shard, i, count):
        return {"shard": shard, "file": f"s{shard}-{i}", "count": count}
    small = [e(0, i, 1000) for i in range(compaction.FANOUT)]
    big = [e(0, 9, 10**7)]
    assert compaction.plan(small[:-1] + big) == []  # too few of one tier
    jobs = compaction.plan(small + big + [e(1, 0, 0), e(1, 1, 5)])
    assert [(s, len(g)) for s, g in jobs] == [(1, 1), (0, compaction.FANOUT)]  # smallest first
    assert [len(g) for _, g in compaction.plan(small + big, full=True)] == [compaction.FANOUT + 1]
    assert compaction.plan([e(0, 0, 5)], full=True) == []


# ------------------------------------------------------------------- the store

def _stored(s):
    parts = [r.keys for r in s._all_readers()]
    return np.sort(np.concatenate(parts)) if parts else np.empty(0, np.uint64)


def run_file_bytes(counts) -> int:
    """Bytes of raw 1.1 run files of ``counts`` keys: header, body, page index."""
    return sum(4096 + 8 * c + 16 * -(-c // 512) for c in counts)


def test_batch_writes_only_its_new_keys(tmp_path, rng):
    keys = rng.integers(0, 2**64, 100_000, dtype=np.uint64)
    # no run cache: the runs are swept from disk (test_runcache.py checks it from memory)
    with SeenStore.open(str(tmp_path / "s"), create=True, shard_bits=2, sync=False,
                        cache_bytes=0) as s:
        s.compact_between_batches = False
        s.add_new(keys)
        first = [r["count"] for r in s._doc["runs"]]
        assert s.last_timings["bytes_written"] == run_file_bytes(first) == (
            8 * 100_000 + 4 * 4096 + 16 * sum(-(-c // 512) for c in first))
        fresh = rng.integers(0, 2**64, 1000, dtype=np.uint64)
        new = s.add_new(np.concatenate([keys[:50_000], fresh]))
        assert sorted(new.tolist()) == sorted(set(fresh.tolist()))
        # only the 1000 new keys were written, as one more run per shard
        second = [r["count"] for r in s._doc["runs"] if r["file"].endswith("2.run")]
        assert sum(second) == 1000
        assert s.last_timings["bytes_written"] == run_file_bytes(second)
        assert s.last_timings["bytes_read"] == run_file_bytes(first)  # one sweep per run
        assert s.stats()["runs"] == 8 and s.stats()["max_runs_per_shard"] == 2
        small = s.add_new(keys[:10])  # few keys: point lookups, nothing swept
        assert len(small) == 0 and s.last_timings["bytes_read"] == 0
        assert np.array_equal(_stored(s), union(keys, fresh))
        s.verify()



@pytest.mark.parametrize("group_bytes", [None, 0])
def test_small_compaction_jobs_commit_together(tmp_path, rng, monkeypatch, group_bytes):
    """The tier-0 merges of several shards (each below GROUP_JOB_BYTES) are one
    commit: one generation, every shard's runs merged, every key kept once. With
    GROUP_BYTES 0 each shard's merge commits on its own, as before."""
    from seenstore.store import compaction

    if group_bytes is not None:
        monkeypatch.setattr(compaction, "GROUP_BYTES", group_bytes)
    everything = np.empty(0, np.uint64)
    with SeenStore.open(str(tmp_path / "s"), create=True, shard_bits=2, sync=True) as s:
        s.compact_between_batches = False
        for _ in range(compaction.FANOUT):
            b = rng.integers(0, 2**64, 4000, dtype=np.uint64)
            s.add_new(b)
            everything = union(everything, b)
        jobs = compaction.plan(s._doc["runs"])
        assert len(jobs) == 4
        gen = s.generation
        done = s._compactor.run(jobs)
        commits = 1 if group_bytes is None else 4
        assert done["jobs"] == 4 and done["commits"] == commits
        assert s.generation == gen + commits
        assert s.stats()["runs"] == 4 and s._doc["counters"]["compactions"] == 4
        assert np.array_equal(_stored(s), everything)
        s.verify()


def test_a_large_job_is_a_group_of_its_own(tmp_path, rng, monkeypatch):
    """A job above GROUP_JOB_BYTES commits alone, also between small ones."""
    from seenstore.store import compaction

    with SeenStore.open(str(tmp_path / "s"), create=True, shard_bits=2, sync=False) as s:
        s.compact_between_batches = False
        for _ in range(compaction.FANOUT):
            s.add_new(rng.integers(0, 2**64, 4000, dtype=np.uint64))
        jobs = compaction.plan(s._doc["runs"])
        sizes = sorted(compaction.job_bytes(e) for _, e in jobs)
        monkeypatch.setattr(compaction, "GROUP_JOB_BYTES", sizes[1])  # 2 small, 2 large
        done = s._compactor.run(jobs)
        large = sum(1 for b in sizes if b > sizes[1])
        assert done["jobs"] == 4 and done["commits"] == 1 + large
        s.verify()

def test_compaction_merges_runs_and_keeps_every_key(tmp_path, rng):
    path = str(tmp_path / "s")
    everything = np.empty(0, np.uint64)
    with SeenStore.open(path, create=True, shard_bits=1, sync=False) as s:
        s.compact_between_batches = False
        for _ in range(6):
            b = rng.integers(0, 2**64, 3000, dtype=np.uint64)
            s.add_new(b)
            everything = union(everything, b)
        assert s.stats()["max_runs_per_shard"] == 6
        assert s.stats()["pending_compaction"]["jobs"] == 2
        done = s.compact()
        assert done["jobs"] == 2 and done["runs_merged"] == 12
        st_ = s.stats()
        assert st_["runs"] == 2 and st_["pending_compaction"]["jobs"] == 0
        batches = [r for r in manifest.read(path)["runs"]]  # the 2 compacted runs
        assert st_["write_amplification"] == pytest.approx(
            (s._doc["counters"]["bytes_written"] + run_file_bytes([r["count"] for r in batches]))
            / (8 * len(everything)))
        n = len(everything)  # 12 batch runs: headers, keys, page index (a page per 512)
        assert 8 * n + 12 * 4096 + 16 * n // 512 <= s._doc["counters"]["bytes_written"] \
            <= 8 * n + 12 * 4096 + 16 * (n // 512 + 12)
        assert np.array_equal(_stored(s), everything)
        assert s.contains(everything).all()
        s.verify()
    assert sorted(n for n in os.listdir(path) if n.endswith(".run")) == sorted(
        r["file"] for r in manifest.read(path)["runs"])


def test_background_compaction_between_batches(tmp_path, rng):
    path = str(tmp_path / "s")
    everything = np.empty(0, np.uint64)
    with SeenStore.open(path, create=True, shard_bits=0, sync=False) as s:
        for _ in range(3 * compaction.FANOUT):
            b = rng.integers(0, 2**64, 2000, dtype=np.uint64)
            assert np.array_equal(s.add_new(b), setdiff(b, everything))
            everything = union(everything, b)
        s._join_compactor()
        assert s.stats()["runs"] < compaction.FANOUT  # merged as they came
        assert s.stats()["counters"]["compactions"] >= 2
        assert np.array_equal(_stored(s), everything)
        s.verify()


def test_verify_finds_a_key_in_two_runs(tmp_path):
    path = str(tmp_path / "s")
    with SeenStore.open(path, create=True, shard_bits=0, sync=False) as s:
        s.compact_between_batches = False
        s.add([1, 2, 3])
        s.add([4, 5])
        s._runs = {0: s._runs[0] + s._runs[0][:1]}  # as if one run were listed twice
        with pytest.raises(CorruptionError, match="two runs"):
            s.verify()


# --------------------------------------------------------------------- upgrade

V1_STORE = os.path.join(FIXTURES, "v1-store")
V1_KEYS = os.path.join(FIXTURES, "v1-store-keys.json")


def _v1_copy(tmp_path):
    import shutil
    target = str(tmp_path / "v1")
    shutil.copytree(V1_STORE, target)
    return target, json.load(open(V1_KEYS))


def test_format1_store_opens_answers_and_upgrades_on_first_write(tmp_path):
    path, want = _v1_copy(tmp_path)
    probe = np.array(want["stored"] + want["absent"], dtype=np.uint64)
    answer = [True] * len(want["stored"]) + [False] * len(want["absent"])
    with SeenStore.open(path, readonly=True) as s:
        assert s.manifest_format == "1.0" and s.stats()["upgrade_pending"]
        assert s.contains(probe).tolist() == answer
        assert len(s) == len(want["stored"])
        s.verify()
    with SeenStore.open(path, bloom=False) as s:  # opening does not write
        assert manifest.read(path)["major"] == 1
        assert s.add_new(np.array(want["absent"][:1], np.uint64)).tolist() == want["absent"][:1]
        assert s.manifest_format == f"{manifest.MAJOR}.{manifest.MINOR}"
    doc = manifest.read(path)
    assert doc["major"] == 2 and all(r["count"] for r in doc["runs"])  # empty runs dropped
    assert doc["counters"]["bytes_written"] > 0
    with SeenStore.open(path) as s:
        assert s.contains(probe).tolist() == [True] * (len(want["stored"]) + 1) + answer[-len(
            want["absent"]) + 1:]
        s.verify()
    assert sorted(n for n in os.listdir(path) if n.endswith(".run")) == sorted(
        r["file"] for r in doc["runs"])


def test_upgrade_command_and_old_code_refuses_format2(tmp_path):
    from click.testing import CliRunner
    from seenstore.cli import main
    path, want = _v1_copy(tmp_path)
    r = CliRunner().invoke(main, ["upgrade", "--store", path, "--json"])
    assert r.exit_code == 0, r.output
    # the manifest, and the 3 non-empty runs of format 1.0 rewritten as 1.1
    now = f"{manifest.MAJOR}.{manifest.MINOR}"
    assert json.loads(r.output) == {"from": "1.0", "to": now, "runs_rewritten": 3,
                                    "upgraded": True}
    r = CliRunner().invoke(main, ["upgrade", "--store", path, "--json"])
    assert json.loads(r.output)["upgraded"] is False
    with SeenStore.open(path, readonly=True) as s:
        assert s.contains(np.array(want["stored"], np.uint64)).all()
        assert not s.contains(np.array(want["absent"], np.uint64)).any()
        assert s.stats()["run_formats"] == {"1.1": 3} and not s.stats()["upgrade_pending"]
        s.verify()
    # a format 1 reader refuses format 2 (the check the old code makes)
    doc = manifest.read(path)
    assert doc["major"] == 2
    old = manifest.NEWEST_MAJOR
    try:
        manifest.NEWEST_MAJOR = 1
        with pytest.raises(NotSupportedError, match="newer"):
            manifest.read(path)
    finally:
        manifest.NEWEST_MAJOR = old


def test_compact_command(tmp_path, rng):
    from click.testing import CliRunner
    from seenstore.cli import main
    path = str(tmp_path / "s")
    with SeenStore.open(path, create=True, shard_bits=1, sync=False) as s:
        s.compact_between_batches = False
        for _ in range(3):
            s.add(rng.integers(0, 2**64, 500, dtype=np.uint64))
    r = CliRunner().invoke(main, ["compact", "--store", path, "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["jobs"] == 2 and out["runs_merged"] == 6 and out["runs"] == 2
    r = CliRunner().invoke(main, ["compact", "--store", str(tmp_path / "none")])
    assert r.exit_code == 3 and r.output.startswith("seenstore: error:")


def test_small_batch_is_looked_up_not_swept_and_bloom_negatives_too(tmp_path, rng):
    keys = rng.integers(0, 2**64, 50_000, dtype=np.uint64)
    with SeenStore.open(str(tmp_path / "s"), create=True, shard_bits=1, sync=False) as s:
        s.compact_between_batches = False
        s.add_new(keys)
        small = np.concatenate([keys[:5], rng.integers(0, 2**64, 20, dtype=np.uint64)])
        mask = s.add(small)
        assert mask.tolist() == [False] * 5 + [True] * 20
        assert s.last_timings["bytes_read"] == 0  # point lookups, no sweep
        assert s.contains(small).all()
        # a filter that answers every key absent: the runs still decide what is written
        from seenstore.bloom import BloomFilter
        from seenstore.bloom.layers import LayeredBloom
        top = s.bloom.layers[0]
        s.bloom = LayeredBloom([BloomFilter(top.n_blocks, top.n_hashes, capacity=top.capacity,
                                            target_fpr=top.target_fpr)], s.bloom.target_fpr)
        distinct = uniq(keys[:100])
        assert not s.add_sorted(distinct).any()  # all stored: nothing written twice
        assert s.last_timings["bloom_negative"] == 100 and s.last_timings["new"] == 0
        s.verify()


# ------------------------------------------ numpy twins (dispatch.py) = the kernels

@settings(max_examples=100, deadline=None)
@given(run=sorted_unique, batch=sorted_unique, chunk=st.integers(1, 9))
def test_sweep_twin_equals_kernel(run, batch, chunk):
    from seenstore.kernels import dispatch as D
    results = [_sweep_all(step, run, batch, chunk)
               for step in (D.merge.kernel("sweep_step"), D.merge.twin("sweep_step"))]
    assert results[0] == results[1]
    bad = np.array([5, 3], np.uint64)
    assert D.merge.twin("sweep_step")(bad, 2, batch, 0, np.zeros(len(batch), np.bool_),
                                           np.uint64(0), False)[3] is False


@settings(max_examples=100, deadline=None)
@given(keys=sorted_unique, owner=st.lists(st.integers(0, 4), min_size=80, max_size=80),
       row=st.integers(1, 7), out_len=st.integers(1, 9))
def test_kway_twin_equals_kernel(keys, owner, row, out_len):
    from seenstore.kernels import dispatch as D
    k = 1 + max(owner)
    runs = [keys[[o == r for o in owner[:len(keys)]]] for r in range(k)]
    got = [_kway_with(fn, runs, row, out_len)
           for fn in (D.merge.kernel("kway_step"), D.merge.twin("kway_step"))]
    assert got[0] == got[1] == (kway_naive(runs).tolist(), True)
    assert _kway_with(D.merge.twin("kway_step"),
                      [np.array([1, 5], np.uint64), np.array([5], np.uint64)], 2, 3)[1] is False


def _kway_with(fn, runs, row, out_len):
    saved = globals()["kway_step"]
    globals()["kway_step"] = fn
    try:
        return _kway(runs, row, out_len)
    finally:
        globals()["kway_step"] = saved


@settings(max_examples=100, deadline=None)
@given(run=sorted_unique, needles=sorted_unique)
def test_sparse_member_twin_equals_kernel(run, needles):
    from seenstore.kernels import dispatch as D
    outs = []
    for fn in (D.merge.kernel("sparse_member"), D.merge.twin("sparse_member")):
        found = np.zeros(len(needles), np.bool_)
        fn(run, run[::2].copy(), 2, needles, found)
        outs.append(found.tolist())
    assert outs[0] == outs[1] == np.isin(needles, run).tolist()


def test_export_reads_every_live_run_in_order(tmp_path, rng):
    from click.testing import CliRunner
    from seenstore.cli import main
    path = str(tmp_path / "s")
    with SeenStore.open(path, create=True, shard_bits=1, sync=False) as s:
        s.compact_between_batches = False
        a, b = (rng.integers(0, 2**64, 3000, dtype=np.uint64) for _ in range(2))
        s.add(a)
        s.add(b)
        assert s.stats()["max_runs_per_shard"] == 2
    out = str(tmp_path / "keys.bin")
    r = CliRunner().invoke(main, ["export", "--store", path, "-o", out])
    assert r.exit_code == 0, r.output
    assert np.fromfile(out, dtype="<u8").tolist() == union(a, b).tolist()


@pytest.mark.parametrize("row", [1, 2, 5])
def test_kway_step_with_the_top_key_and_empty_runs(row):
    top = 2**64 - 1
    runs = [np.array([3, top], np.uint64), np.array([], np.uint64),
            np.array([1, 2, 7], np.uint64), np.array([top - 1], np.uint64)]
    got, ok = _kway(runs, row, 4)
    assert ok and got == kway_naive(runs).tolist()
    got, ok = _kway([np.array([top], np.uint64)], row, 1)
    assert ok and got == [top]


def _slow_compaction(s, monkeypatch, seconds):
    """Each compaction job of ``s`` sleeps first: a round of several jobs takes a while.
    Returns an event set once the first job is under way."""
    from seenstore.store import compaction

    monkeypatch.setattr(compaction, "GROUP_BYTES", 0)  # each job its own commit
    merge = s._compactor._merge_group
    started = threading.Event()

    def slow(group, *rest):
        started.set()
        time.sleep(seconds)
        return merge(group, *rest)

    monkeypatch.setattr(s._compactor, "_merge_group", slow)
    return started


@pytest.mark.parametrize("behind", [False, True])
def test_a_batch_stops_compaction_after_the_job_under_way_unless_it_fell_behind(
        tmp_path, rng, monkeypatch, behind):
    """A batch asks the background round to stop after its current job (one shard's
    merge): the jobs left wait for a later round, paid by the credit kept. A store
    whose shards hold more than STALL_RUNS runs waits for the whole round instead.
    Either way every key stays, once, and later rounds merge what was left."""
    from seenstore.store import compaction

    if behind:
        monkeypatch.setattr(compaction, "STALL_RUNS", 1)
    everything = np.empty(0, np.uint64)
    with SeenStore.open(str(tmp_path / "s"), create=True, shard_bits=2, sync=False) as s:
        s.compact_between_batches = False
        for _ in range(compaction.FANOUT):  # every shard: FANOUT runs of one tier
            b = rng.integers(0, 2**64, 4000, dtype=np.uint64)
            s.add_new(b)
            everything = union(everything, b)
        jobs = compaction.plan(s._doc["runs"])
        assert len(jobs) == 4
        s.compact_between_batches = True
        started = _slow_compaction(s, monkeypatch, 0.2)
        s._compactor.credit = 10 * sum(compaction.job_bytes(e) for _, e in jobs)
        s._compactor.credit_step = s._compactor.credit
        s._admission._start_compaction()
        assert started.wait(30)  # the round's first job is under way
        b = rng.integers(0, 2**64, 1000, dtype=np.uint64)
        assert np.array_equal(s.add_new(b), setdiff(b, everything))
        everything = union(everything, b)
        joined = s._compactor.joined
        if behind:
            assert joined["jobs"] == 4 and not joined["stopped"]
        else:
            assert joined["jobs"] == 1 and joined["stopped"]
        monkeypatch.undo()
        s._join_compactor()
        s._admission._start_compaction()  # the next round takes the jobs left
        s._join_compactor()
        assert max(Counter(r["shard"] for r in s._doc["runs"]).values()) <= 2
        assert np.array_equal(_stored(s), everything)
        s.verify()


def test_many_small_batches_keep_every_shard_within_the_stall_bound(tmp_path, rng):
    """Batches that leave a few hundred keys per shard earn little credit each: the
    rounds must still keep up (a crowded shard merges first, past the credit when it
    must), so no shard holds many more than STALL_RUNS runs, and every key stays."""
    from collections import Counter

    from seenstore.store import compaction

    everything = np.empty(0, np.uint64)
    worst = 0
    with SeenStore.open(str(tmp_path / "s"), create=True, shard_bits=4, sync=False) as s:
        for _ in range(120):
            b = rng.integers(0, 2**64, 4000, dtype=np.uint64)
            s.add_new(b)
            everything = union(everything, b)
            per_shard = Counter(r["shard"] for r in s._doc["runs"])
            worst = max(worst, max(per_shard.values()))
        assert worst <= compaction.STALL_RUNS + compaction.FANOUT
        assert np.array_equal(_stored(s), everything)
