"""The run cache (store/runcache.py): answers equal a Python set's with the cache on,
off, too small for the store (runs refused, entries dropped), across compaction and
reopen; entries leave with their runs; a name reused after an aborted batch never
finds stale keys."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from seenstore import SeenStore
from seenstore.errors import InvalidInputError
from seenstore.store.runs import live as runsmod
from seenstore.store.runcache import BLOCK_BYTES, BLOCK_KEYS, RunCache

EDGE = [0, 1, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1]


def _batches(seed: int, n_batches: int, n: int, universe: int) -> list:
    rng = np.random.default_rng(seed)
    spread = np.uint64(2**64 // universe)  # keys over every shard
    out = []
    for b in range(n_batches):
        keys = rng.integers(0, universe, n, dtype=np.uint64) * spread
        if b == 0:
            keys = np.concatenate([keys, np.array(EDGE, np.uint64)])
        out.append(keys)
    return out


def _replay(store, batches: list, seen: set) -> None:
    for keys in batches:
        got = store.add_new(keys)
        want = sorted(set(int(k) for k in keys) - seen)
        assert [int(k) for k in got] == want
        seen.update(want)
        probe = np.concatenate([keys[:50], np.array([3, 5, 7], np.uint64)])
        assert store.contains(probe).tolist() == [int(k) in seen for k in probe]


@pytest.mark.parametrize("budget", [0, 2 * BLOCK_BYTES, 64 << 20])
def test_answers_match_a_set(tmp_path, budget):
    seen: set = set()
    batches = _batches(budget, 8, 30_000, 120_000)
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False, bloom=False,
                        cache_bytes=budget, shard_bits=2) as s:
        _replay(s, batches[:5], seen)
        s._join_compactor()  # a compaction between batches files its output before its commit
        st_ = s.stats()["run_cache"]
        assert st_["budget_bytes"] == budget
        assert st_["pool_bytes"] <= budget
        if budget == 0:
            assert st_["runs"] == 0 and st_["hits"] == 0
        if budget == 64 << 20:  # everything fits: every live run is cached, checked from memory
            assert st_["runs"] == s.stats()["runs"] and st_["hits"] > 0
            assert s.last_timings["bytes_read"] == 0 and s.last_timings["bytes_cached"] > 0
        s.compact()  # outputs cached from their cached inputs, inputs leave
        if budget == 64 << 20:
            assert s.stats()["run_cache"]["runs"] == s.stats()["runs"]
        _replay(s, batches[5:7], seen)
    with SeenStore.open(str(tmp_path / "s"), bloom=False, cache_bytes=budget, sync=False) as s:
        _replay(s, batches[7:], seen)  # a reopened store fills its cache as it reads
        assert len(s) == len(seen)
        s.verify()


def test_retired_runs_leave_and_blocks_are_reused(tmp_path):
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False, bloom=False,
                        cache_bytes=256 << 20, shard_bits=0) as s:
        s.compact_between_batches = False
        for b in _batches(1, 4, 50_000, 10**9):
            s.add_new(b)
        before = s.stats()["run_cache"]
        assert before["runs"] == 4
        done = s.compact()  # merged from memory: nothing read from disk
        assert done["bytes_read"] == 0 and done["bytes_cached"] == 8 * len(s)
        after = s.stats()["run_cache"]
        assert after["runs"] == 1 and after["keys"] == len(s)
        # the compacted run took blocks its inputs gave back: the pool did not double
        assert after["pool_bytes"] <= before["pool_bytes"] + 2 * BLOCK_BYTES
        s.cache_bytes = 0
        assert s.stats()["run_cache"]["pool_bytes"] == 0 and s.stats()["run_cache"]["runs"] == 0


def test_cache_bytes_is_checked(tmp_path):
    for bad in (-1, 1.5, "1G", True):
        with pytest.raises(InvalidInputError):
            SeenStore.open(str(tmp_path / "s"), create=True, cache_bytes=bad)


class _Header:
    def __init__(self, count, checksum):
        self.count, self.body_checksum = count, checksum


class _Reader:
    def __init__(self, name, count, checksum):
        self.name, self.header = name, _Header(count, checksum)

    @property
    def count(self):
        return self.header.count


def _fill(cache, name, keys, checksum=7):
    b = cache.builder()
    for lo in range(0, len(keys), 1000):
        b.add(keys[lo:lo + 1000])
    b.seal((name, len(keys), checksum))
    return _Reader(name, len(keys), checksum)


def test_entries_are_named_by_count_and_checksum():
    c = RunCache(8 * BLOCK_BYTES)
    keys = np.arange(0, 3 * BLOCK_KEYS + 5, dtype=np.uint64) * np.uint64(3)
    r = _fill(c, "shard-000-00000001.run", keys)
    assert c.acquire(_Reader(r.name, r.count, 8)) is None  # same name, other contents
    e = c.acquire(r)
    assert np.array_equal(np.concatenate([b[:n] for b, n in e.chunks()]), keys)
    c.forget([r.name])  # retired while a sweep holds it: its blocks wait for the release
    assert c.stats()["runs"] == 0 and e.blocks
    c.release(e)
    assert not e.blocks and c.acquire(r) is None


def test_a_run_that_does_not_fit_is_not_cached():
    c = RunCache(2 * BLOCK_BYTES)
    keys = np.arange(3 * BLOCK_KEYS, dtype=np.uint64)
    r = _fill(c, "big.run", keys)
    assert c.acquire(r) is None and c.stats()["pool_bytes"] <= 2 * BLOCK_BYTES
    small = _fill(c, "small.run", keys[:10])
    assert c.acquire(small) is not None



def test_small_runs_hold_their_keys_not_a_block_each():
    # a server's small groups leave hundreds of runs of a few thousand keys live: each
    # entry must cost its keys (plus at most the pool's free blocks), not a 1 MiB block
    c = RunCache(64 * BLOCK_BYTES)
    runs = [_fill(c, f"shard-{i:03d}.run", np.arange(i, i + 3000 * 7, 7, dtype=np.uint64))
            for i in range(200)]
    st_ = c.stats()
    assert st_["runs"] == 200 and st_["keys"] == 200 * 3000
    assert st_["tail_bytes"] == 8 * 200 * 3000
    assert st_["held_bytes"] <= st_["bytes"] + 2 * BLOCK_BYTES
    e = c.acquire(runs[5])  # a shrunk tail reads back as the run's keys
    assert np.array_equal(np.concatenate([b[:n] for b, n in e.chunks()]),
                          np.arange(5, 5 + 3000 * 7, 7, dtype=np.uint64))
    c.release(e)
    c.forget([r.name for r in runs])  # retired: their tails are let go
    assert c.stats()["tail_bytes"] == 0 and c.stats()["runs"] == 0


def test_a_big_run_keeps_full_blocks_and_an_exact_tail():
    c = RunCache(8 * BLOCK_BYTES)
    keys = np.arange(2 * BLOCK_KEYS + 10, dtype=np.uint64)
    r = _fill(c, "big.run", keys)
    e = c.acquire(r)
    assert [len(b) for b in e.blocks] == [BLOCK_KEYS, BLOCK_KEYS, 10]
    assert np.array_equal(np.concatenate([b[:n] for b, n in e.chunks()]), keys)
    c.release(e)
    st_ = c.stats()
    assert st_["held_bytes"] <= 8 * BLOCK_BYTES and st_["tail_bytes"] == 80
    c.set_budget(BLOCK_BYTES)  # too small now: the entry leaves, the pool shrinks to fit
    assert c.stats()["runs"] == 0 and c.stats()["held_bytes"] <= BLOCK_BYTES


def test_server_sized_batches_keep_the_cache_near_the_live_keys(tmp_path):
    # many small batches, compaction between them: the cache holds the live runs' keys
    # (entries of retired runs leave), not a block per run ever written
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False, bloom=False,
                        cache_bytes=256 << 20, shard_bits=4) as s:
        for b in _batches(3, 60, 4_000, 10**9):
            s.add_new(b)
        s._join_compactor()
        st_ = s.stats()
        rc = st_["run_cache"]
        assert rc["runs"] == st_["runs"] and rc["keys"] == len(s)
        assert rc["held_bytes"] <= 8 * len(s) + 16 * BLOCK_BYTES + (16 << 20)


@settings(max_examples=60, deadline=None)
@given(run=st.lists(st.integers(0, 2**64 - 1), max_size=300, unique=True),
       batch=st.lists(st.integers(0, 2**64 - 1), max_size=300, unique=True),
       ratio=st.sampled_from([1, 64, 10**9]))
def test_cached_check_matches_a_set(run, batch, ratio):
    c = RunCache(4 * BLOCK_BYTES)
    run = np.array(sorted(run), np.uint64)
    reader = _fill(c, "r.run", run)
    b = np.array(sorted(batch), np.uint64)
    found = np.zeros(len(b), np.bool_)
    tally: dict = {}
    read = runsmod.check_runs([reader] if len(run) else [], b, found, np.empty(0, np.uint64),
                              probe_ratio=ratio, cache=c, tally=tally)
    assert read == 0
    assert found.tolist() == [int(k) in set(run.tolist()) for k in b]


def test_a_spilled_batch_turns_the_cache_off(tmp_path):
    keys = np.arange(1, 20_001, dtype=np.uint64) * np.uint64(2**44 + 7)
    f = tmp_path / "batch.bin"
    keys.tofile(f)
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False, bloom=False,
                        cache_bytes=64 << 20) as s:
        s.add_new(keys[:10_000])
        assert s.stats()["run_cache"]["runs"] > 0
        assert s.add_new_file(str(f), memory=64 << 20)["new"] == 10_000
        assert s.cache_bytes == 0 and s.stats()["run_cache"]["pool_bytes"] == 0
        assert len(s.add_new(keys + np.uint64(1))) == 20_000
        s.verify()


@pytest.mark.parametrize("chunks", [[[5, 3, 9]], [[1, 2, 2]], [[1, 5], [5, 6]], [[4, 7], [2, 9]]])
def test_keys_out_of_order_are_never_cached(chunks):
    """Sweeps of a cached run skip the order check (runs.sweep_cached): the cache
    checks the keys as they enter it, and a builder fed keys out of order or
    repeated (within a chunk or across two) files nothing."""
    c = RunCache(4 * BLOCK_BYTES)
    b = c.builder()
    for part in chunks:
        b.add(np.array(part, np.uint64))
    n = sum(len(p) for p in chunks)
    b.seal(("bad.run", n, 7))
    assert c.acquire(_Reader("bad.run", n, 7)) is None
    assert c.stats()["runs"] == 0
