"""Batches bigger than memory (seenstore/spill.py, ``add_new_file``, ``merge --memory``)."""

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from seenstore.store import buckets, check
from seenstore.store.runs import live as runs_live
from seenstore.errors import InvalidInputError
from seenstore.store import SeenStore
from seenstore.runtime.aligned import aligned_empty, direct_ready
from seenstore.runtime.clock import Clock
from naive import setdiff, union

EDGE = [0, 1, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1]
key = st.one_of(st.sampled_from(EDGE), st.integers(0, 2**64 - 1),
                st.integers(2**63 - 50, 2**63 + 50))  # dense: many keys in one slice


class TinyBudget(buckets.Budget):
    """A budget of a few keys: every shard's bucket splits again, recursively; a
    bucket is cut into key ranges as it is spilled past ``range_at`` keys (never, by
    default)."""

    range_at = 10**9

    def __init__(self, memory):
        self.memory = memory
        self.io_keys, self.chunk_keys, self.slice_keys = 4, 5, 3
        self.range_keys = TinyBudget.range_at


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setattr(buckets, "Budget", TinyBudget)


def _write(path, keys):
    np.asarray(keys, dtype=np.uint64).astype("<u8").tofile(path)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(key, max_size=60), min_size=1, max_size=4),
       shard_bits=st.sampled_from([0, 2]), run_format=st.sampled_from([1, 2]),
       range_at=st.sampled_from([10**9, 2, 7]))
@example(batches=[[2**64 - 1] * 20 + [0] * 9, [2**64 - 1, 5]], shard_bits=0,  # repeats
         run_format=1, range_at=10**9)
@example(batches=[[2**64 - 1] * 20 + [0] * 9, [2**64 - 1, 5]], shard_bits=0,
         run_format=1, range_at=2)  # repeats cut into ranges as spilled
@example(batches=[list(range(0, 400, 2)), [], list(range(0, 400, 3)) + [2**64 - 1]],
         shard_bits=0, run_format=2, range_at=10**9)  # windows of 3 keys, compressed runs
@example(batches=[list(range(0, 400, 2)), [], list(range(0, 400, 3)) + [2**64 - 1]],
         shard_bits=2, run_format=2, range_at=7)  # busy shards cut as spilled
def test_spilled_merges_equal_a_python_set(tmp_path_factory, tiny, monkeypatch, batches,
                                           shard_bits, run_format, range_at):
    monkeypatch.setattr(TinyBudget, "range_at", range_at)
    d = tmp_path_factory.mktemp("spill")
    seen = set()
    with SeenStore.open(str(d / "s"), create=True, sync=False, shard_bits=shard_bits,
                        bloom=False, run_format=run_format) as s:
        for i, b in enumerate(batches):
            if i % 2:  # the in-memory path between spilled batches: they must agree
                got = set(int(k) for k in s.add_new(np.array(b, dtype=np.uint64)))
            else:
                _write(str(d / "b.bin"), b)
                r = s.add_new_file(str(d / "b.bin"), 1 << 30, new_out=str(d / "new.bin"))
                new = np.fromfile(str(d / "new.bin"), dtype="<u8")
                assert np.all(new[1:] > new[:-1])  # sorted ascending, each once
                got = set(int(k) for k in new)
                assert r["offered"] == len(b) and r["unique"] == len(set(b))
                assert r["new"] == len(got)
            assert got == set(b) - seen
            seen |= set(b)
            assert sorted(seen) == sorted(int(k) for r in s._all_readers() for k in r.keys)
            assert s.contains(np.array(sorted(seen), dtype=np.uint64)).all()
        s.verify()
        assert not any(n.startswith("spill.tmp.") for n in os.listdir(s.path))
    shutil.rmtree(d)


def test_a_spilled_batch_feeds_the_bloom_filter(tmp_path, tiny):
    keys = np.arange(1, 200, dtype=np.uint64) * np.uint64(2**56 + 12345)
    _write(str(tmp_path / "b.bin"), keys)
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False) as s:
        assert s.add_new_file(str(tmp_path / "b.bin"), 1 << 30)["new"] == len(keys)
        assert s.bloom.query(keys).all()
        assert not s.add_new(keys).size


def test_spilled_batches_start_compaction_between_batches(tmp_path):
    """Spilled batches earn compaction credit and start the size-tiered jobs, as add()
    does: before, a store fed only by add_new_file kept one more run per shard per
    batch (no compaction ever ran during the 1e10 bench)."""
    rng = np.random.default_rng(3)
    seen = np.empty(0, dtype=np.uint64)
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False, bloom=False,
                        shard_bits=1) as s:
        for i in range(6):
            b = rng.integers(0, 2**64, 20_000, dtype=np.uint64)
            _write(str(tmp_path / "b.bin"), b)
            assert s.add_new_file(str(tmp_path / "b.bin"), 1 << 26)["new"] == len(setdiff(b, seen))
            seen = union(seen, b)
        s._join_compactor()
        assert s._doc["counters"]["compactions"] >= 1
        assert max(sum(r["shard"] == sh for r in s._doc["runs"]) for sh in (0, 1)) < 6
        got = np.sort(np.concatenate([r.keys for r in s._all_readers()]))
        assert np.array_equal(got, seen)
        s.verify()


class SmallBudget(buckets.Budget):
    """Slices of 500 keys: a shard's bucket of a few thousand keys is split."""

    def __init__(self, memory):
        self.memory = memory
        self.io_keys, self.chunk_keys, self.slice_keys = 64, 300, 500
        self.range_keys = 10**9  # never cut while spilled: the check splits


def test_a_busy_hosts_bucket_splits_once_into_key_ranges(tmp_path, monkeypatch):
    """A host-skewed bucket (3,000 keys sharing their top 20 bits, a busy host, plus
    1,000 others) bigger than a slice splits in ONE pass into key ranges that each
    fit a slice; a split by the next key bits copied it level by level (every level
    kept the host's keys in one sub-bucket) until it passed the host's bits."""
    monkeypatch.setattr(buckets, "Budget", SmallBudget)
    calls = []
    split = buckets.split
    monkeypatch.setattr(buckets, "split", lambda *a: calls.append(1) or split(*a))
    rng = np.random.default_rng(5)
    host = (np.uint64(0x12345) << np.uint64(44)) | rng.integers(0, 2**44, 3000, dtype=np.uint64)
    b = np.concatenate([host, rng.integers(0, 2**62, 1000, dtype=np.uint64), host[:100]])
    _write(str(tmp_path / "b.bin"), b)
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False, shard_bits=2,
                        bloom=False, run_format=2) as s:
        s.add_new(b[::7].copy())  # runs to check against, window by window
        want = setdiff(b, b[::7])
        r = s.add_new_file(str(tmp_path / "b.bin"), 1 << 30, new_out=str(tmp_path / "n.bin"))
        assert np.array_equal(np.fromfile(str(tmp_path / "n.bin"), dtype="<u8"), want)
        assert r["new"] == len(want) and r["slices"] > 2
        s.verify()
    assert len(calls) == 1


class RangedBudget(SmallBudget):
    """Slices of 800 keys; a bucket is cut into key ranges once past 400 keys."""

    def __init__(self, memory):
        super().__init__(memory)
        self.slice_keys, self.range_keys = 800, 400


def test_a_busy_shard_is_cut_into_key_ranges_as_it_is_spilled(tmp_path, monkeypatch):
    """The busy host's shard (all 4,100 keys are shard 0's) passes ``range_keys`` in its
    second chunk: what its bucket held moves into key ranges, the rest is spilled into them, and no bucket
    is split when checked (no "split" stage); the new keys equal a set's."""
    monkeypatch.setattr(buckets, "Budget", RangedBudget)
    rng = np.random.default_rng(5)
    host = (np.uint64(0x12345) << np.uint64(44)) | rng.integers(0, 2**44, 3000, dtype=np.uint64)
    b = np.concatenate([host, rng.integers(0, 2**62, 1000, dtype=np.uint64), host[:100]])
    rng.shuffle(b)
    _write(str(tmp_path / "b.bin"), b)
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False, shard_bits=2,
                        bloom=False, run_format=2) as s:
        s.add_new(b[::7].copy())
        want = setdiff(b, b[::7])
        r = s.add_new_file(str(tmp_path / "b.bin"), 1 << 30, new_out=str(tmp_path / "n.bin"))
        assert np.array_equal(np.fromfile(str(tmp_path / "n.bin"), dtype="<u8"), want)
        assert r["new"] == len(want) and r["ranged_shards"] >= 1 and r["slices"] > 2
        assert "split" not in r["stages"], r["stages"]
        s.verify()
        assert not any(n.startswith("spill.tmp.") for n in os.listdir(s.path))


def test_compaction_runs_on_beside_the_spill_and_is_joined_before_the_check(tmp_path,
                                                                            monkeypatch):
    """The compaction the last batch started is joined after the batch is spilled
    (the spill reads no run) and before any run is read or the generation taken;
    the batch then commits on top of the compaction's commits."""
    events = []
    append, check = buckets.append, runs_live.check_runs
    monkeypatch.setattr(buckets, "append", lambda *a: events.append("spill") or append(*a))
    monkeypatch.setattr(runs_live, "check_runs", lambda *a: events.append("check") or check(*a))
    rng = np.random.default_rng(4)
    seen = np.empty(0, dtype=np.uint64)
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False, bloom=False,
                        shard_bits=1) as s:
        join = s._join_compactor
        s._join_compactor = lambda stop=False: events.append("join") or join(stop)
        for i in range(5):
            b = rng.integers(0, 2**64, 20_000, dtype=np.uint64)
            _write(str(tmp_path / "b.bin"), b)
            events.clear()
            assert s.add_new_file(str(tmp_path / "b.bin"), 1 << 26)["new"] == len(setdiff(b, seen))
            seen = union(seen, b)
            assert events.index("join") > max(i for i, e in enumerate(events) if e == "spill")
            assert i == 0 or events.index("join") < events.index("check")
        s._join_compactor()
        assert s._doc["counters"]["compactions"] >= 1
        assert np.array_equal(np.sort(np.concatenate([r.keys for r in s._all_readers()])), seen)
        s.verify()


def test_bad_batch_files_commit_nothing(tmp_path):
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False) as s:
        (tmp_path / "odd.bin").write_bytes(b"\0" * 12)
        with pytest.raises(InvalidInputError, match="multiple of 8"):
            s.add_new_file(str(tmp_path / "odd.bin"), 1 << 30)
        with pytest.raises(InvalidInputError, match="below the minimum"):
            s.add_new_file(str(tmp_path / "odd.bin"), 1 << 20)
        assert s.generation == 0 and len(s) == 0
        assert not any(n.startswith("spill.tmp.") for n in os.listdir(s.path))


def test_a_leftover_spill_folder_is_removed_by_the_next_open(tmp_path):
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False):
        pass
    os.makedirs(tmp_path / "s" / "spill.tmp.999" / "s0001.bin.d")
    (tmp_path / "s" / "spill.tmp.999.new").write_bytes(b"x" * 8)
    with SeenStore.open(str(tmp_path / "s"), sync=False) as s:
        assert not any(n.startswith("spill.tmp.") for n in os.listdir(s.path))


# ------------------------------------------------------------ peak memory, as a process
# The CLI process's own baseline (interpreter, numpy, numba and the kernels the spill
# path loads) is measured in a process doing everything but the batch, and subtracted:
# measured here 160-165 MiB. The merge's own peak was 55 MiB over it for --memory 64M.
BASELINE = textwrap.dedent("""
    import numpy as np
    import seenstore.cli, seenstore.store, seenstore.store.spill
    from seenstore.kernels import batch as kb, merge as km
    from seenstore.runtime.aligned import aligned_empty
    k = np.arange(10, dtype=np.uint64)
    out, b = np.empty(10, dtype=np.uint64), np.empty(17, dtype=np.int64)
    kb.partition_top_bits(k, 4, out, b)
    kb.unique_inplace(k.copy()), kb.compact_inplace(k.copy(), np.ones(10, dtype=np.bool_))
    km.sweep_step(aligned_empty(10), 0, k, 0, np.zeros(10, dtype=np.bool_), np.uint64(0), False)
""")
MEASURE = textwrap.dedent("""
    import resource, subprocess, sys
    r = subprocess.run(sys.argv[1:], capture_output=True)
    sys.stderr.write(r.stderr.decode())
    print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
""")


def _peak_rss(*args) -> tuple[int, int]:
    """(exit code, peak RSS in bytes) of a command run in a fresh measuring process."""
    p = subprocess.run([sys.executable, "-c", MEASURE, *args], capture_output=True, text=True)
    code, rss = p.stdout.split()
    assert code == "0", p.stderr
    return int(code), int(rss)


def _store_and_batch_2x(tmp_path, memory: int, seed: int, **open_kw):
    """A store of 2e6 random keys and a batch file 2x ``memory`` (half of the store's
    keys among it): (batch path, store path, the new keys, the store's keys after)."""
    rng = np.random.default_rng(seed)
    old = rng.integers(0, 2**64, 2_000_000, dtype=np.uint64)
    batch = np.concatenate([old[:1_000_000],
                            rng.integers(0, 2**64, 2 * memory // 8 - 1_000_000, dtype=np.uint64)])
    path, store = str(tmp_path / "big.bin"), str(tmp_path / "s")
    batch.astype("<u8").tofile(path)
    assert os.path.getsize(path) == 2 * memory
    with SeenStore.open(store, create=True, sync=False, bloom=False, **open_kw) as s:
        s.add_new(old)
    return path, store, setdiff(batch, old), union(old, batch)


@given(memory=st.integers(buckets.MIN_MEMORY, 64 << 30))
def test_the_io_buffers_of_any_budget_are_whole_direct_blocks(memory):
    """The spill's write buffer is lent to every new run's writer only if O_DIRECT can
    take it (direct_ready): whole blocks, whatever the budget's size."""
    b = buckets.Budget(memory)
    assert 0 < b.io_keys <= 1 << 20 and 64 * 8 * b.io_keys <= max(memory, 64 * 8 * (1 << 14))
    assert direct_ready(aligned_empty(b.io_keys))


def test_merge_of_a_batch_2x_its_memory_stays_within_the_budget(tmp_path):
    """A budget of no round size (as a plan computes one): its I/O buffers are not
    whole O_DIRECT blocks unless rounded, and then every shard's run writer made an
    8 MiB buffer of its own and held it until the commit (2 GiB at 256 shards)."""
    memory = (24 << 20) + 4104
    path, store, want_new, want_store = _store_and_batch_2x(tmp_path, memory, 11)
    _, base = _peak_rss(sys.executable, "-c", BASELINE)
    _, peak = _peak_rss(sys.executable, "-m", "seenstore.cli", "merge", path, "--store", store,
                        "--memory", str(memory), "--new-out", str(tmp_path / "new.bin"))
    assert peak - base < memory, (peak >> 20, base >> 20)
    new = np.fromfile(str(tmp_path / "new.bin"), dtype="<u8")
    assert np.array_equal(new, want_new)
    with SeenStore.open(store, readonly=True) as s:
        got = np.sort(np.concatenate([r.keys for r in s._all_readers()]))
        s.verify()
    assert np.array_equal(got, want_store)


SPILL_API = textwrap.dedent("""
    import sys
    from seenstore.store import SeenStore
    store, batch, new_out, memory = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    with SeenStore.open(store, sync=False, bloom=False, run_format=2) as s:
        s.add_new_file(batch, memory, new_out=new_out)
""")


def test_spilled_merge_into_compressed_runs_stays_within_the_budget(tmp_path):
    """Compressed runs (format 2) on both sides: the store's runs are decoded by the
    sweeps and the new runs are written compressed, one writer per shard kept until
    the commit (each held its 16 MiB of buffers: 459 MiB peak for a 64 MiB budget
    before the writers freed them at finish). Batch 2x the budget, oracle check."""
    memory = 32 << 20
    path, store, want_new, want_store = _store_and_batch_2x(tmp_path, memory, 12, run_format=2,
                                                            shard_bits=6)
    # baseline: the same script, a 64-key batch, on a copy of the store (every kernel
    # of the path loaded: partition, sort, sweep decode, encode)
    shutil.copytree(store, str(tmp_path / "s2"))
    _write(str(tmp_path / "small.bin"), np.arange(64) * (2**58))
    _, base = _peak_rss(sys.executable, "-c", SPILL_API, str(tmp_path / "s2"),
                        str(tmp_path / "small.bin"), str(tmp_path / "n2.bin"), str(memory))
    _, peak = _peak_rss(sys.executable, "-c", SPILL_API, store, path, str(tmp_path / "new.bin"),
                        str(memory))
    assert peak - base < memory, (peak >> 20, base >> 20)
    new = np.fromfile(str(tmp_path / "new.bin"), dtype="<u8")
    assert np.array_equal(new, want_new)
    with SeenStore.open(store, readonly=True) as s:
        assert all(runs_live.compressed(r) for r in s._all_readers())
        got = np.sort(np.concatenate([r.keys for r in s._all_readers()]))
        s.verify()
    assert np.array_equal(got, want_store)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(key, max_size=80), min_size=1, max_size=4),
       shard_bits=st.sampled_from([0, 2]))
@example(batches=[list(range(0, 400, 2)), list(range(0, 400, 3)) + [2**64 - 1]],
         shard_bits=0)
def test_spilled_checks_in_two_halves_equal_a_python_set(tmp_path_factory, tiny, monkeypatch,
                                                        batches, shard_bits):
    """Every slice of two keys or more checked in two key halves on two threads
    (check_slice), against compressed runs: the same answers as a set."""
    monkeypatch.setattr(check, "HALVES_MIN_KEYS", 2)
    d = tmp_path_factory.mktemp("halves")
    seen = set()
    with SeenStore.open(str(d / "s"), create=True, sync=False, shard_bits=shard_bits,
                        bloom=False, run_format=2, threads=2) as s:
        for b in batches:
            _write(str(d / "b.bin"), b)
            r = s.add_new_file(str(d / "b.bin"), 1 << 30, new_out=str(d / "new.bin"))
            got = np.fromfile(str(d / "new.bin"), dtype=np.uint64)
            want = sorted(set(b) - seen)
            assert sorted(int(k) for k in got) == want and r["new"] == len(want)
            seen |= set(b)
        assert set(int(k) for k in runs_live.iter_keys(runs_live.all_readers(s._runs), 64)
                   for k in k) == seen


def test_check_slice_halves_agree_with_one_thread(tmp_path):
    """check_slice with its second thread and without it mark the same keys, equal to
    np.isin, over a shard of several compressed runs."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(7)
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False, shard_bits=0,
                        bloom=False, run_format=2) as s:
        stored = np.unique(rng.integers(0, 2**64, 300_000, dtype=np.uint64))
        for part in np.array_split(rng.permutation(stored), 3):
            s.add_new(part)
        readers = s._runs[0]
        assert len(readers) >= 2 and all(runs_live.compressed(r) for r in readers)
        batch = np.unique(np.concatenate([rng.choice(stored, 100_000),
                                          rng.integers(0, 2**64, 100_000, dtype=np.uint64)]))
        buf = np.empty(1 << 16, np.uint64)
        one = np.zeros(len(batch), bool)
        check.check_slice(readers, batch, one, buf, True, None)
        with ThreadPoolExecutor(1) as ex:
            two = np.zeros(len(batch), bool)
            assert check.check_slice(readers, batch, two, buf, True, ex) > 0
        np.testing.assert_array_equal(one, np.isin(batch, stored))
        np.testing.assert_array_equal(two, one)


def test_the_remover_removes_every_path_and_reports_a_failure_after_all(tmp_path):
    """Removals run on the remover's thread; ``wait`` returns once all are done. A path
    already gone is no error; any other failure (a folder: not a file to unlink) is
    raised by ``wait``, after every other removal asked was done."""
    paths = [tmp_path / f"b{i}.bin" for i in range(20)]
    for p in paths:
        p.write_bytes(b"k" * 8)
    (tmp_path / "d").mkdir()
    remover = buckets.Remover()
    for p in paths[:10]:
        remover(str(p))
    remover(str(tmp_path / "gone.bin"))
    remover.wait()
    assert [p.exists() for p in paths] == [False] * 10 + [True] * 10
    remover(str(tmp_path / "d"))
    for p in paths[10:]:
        remover(str(p))
    with pytest.raises(OSError):
        remover.wait()
    assert not any(p.exists() for p in paths) and (tmp_path / "d").is_dir()
    remover.wait()  # the failure was reported once


def test_slices_hand_every_bucket_they_read_to_remove(tmp_path, tiny):
    """``slices`` calls ``remove`` for the bucket and for every key range it was split
    into, once each, and only after reading it: with a remover that keeps the files,
    every file the slicing made (and only those) is named, and the slices still hold
    the bucket's keys."""
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 2**64, 200, dtype=np.uint64)
    path = str(tmp_path / "s0000.bin")
    _write(path, keys)
    removed = []
    slab = np.empty(3, dtype=np.uint64)
    got = [s.copy() for s in buckets.slices(path, 0, 2**64 - 1, buckets.Budget(1 << 30),
                                            slab, lambda *_: None, 1, Clock(),
                                            removed.append)]
    assert np.array_equal(np.concatenate(got), np.unique(keys))
    made = {path} | {os.path.join(d, f) for d, _, fs in os.walk(str(tmp_path)) for f in fs}
    assert len(removed) == len(set(removed)) and set(removed) == made
    # each slice is one leaf bucket's, and the bucket itself was split: all named
    assert len(got) > 1 and len(removed) >= len(got) + 1
