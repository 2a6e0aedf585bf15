"""SeenStore against a Python set oracle, and its refusals."""

import errno
import os
import weakref

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

from conftest import EDGE_KEYS
from naive import add_naive, uniq
from seenstore.store.runs import codec as runcodec, writer as runwriter
from seenstore.store.runs import live as runs_live
from seenstore.errors import (DiskFullError, InvalidInputError, LockedError, MismatchError,
                              NotAStoreError, StoreNotFoundError, CorruptionError)
from seenstore.layout import Layout
from seenstore.store import DEFAULT_BLOOM_FPR, SeenStore

key = st.one_of(st.sampled_from(EDGE_KEYS), st.integers(0, 2**64 - 1), st.integers(0, 30),
                st.integers(2**64 - 30, 2**64 - 1))
batches = st.lists(st.lists(key, max_size=40), max_size=8)


def all_keys(store):
    return sorted(int(k) for r in store._all_readers() for k in r.keys)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seq=batches, shard_bits=st.sampled_from([0, 1, 4]), reopen=st.lists(st.booleans(), max_size=8),
       calls=st.lists(st.sampled_from(["add", "add_new", "add_sorted"]), max_size=8))
def test_add_matches_set_oracle(tmp_path_factory, seq, shard_bits, reopen, calls):
    """add (mask), add_new (sorted new keys) and add_sorted, mixed, against a set."""
    path = str(tmp_path_factory.mktemp("s") / "store")
    oracle = set()
    store = SeenStore.open(path, create=True, shard_bits=shard_bits, bloom_capacity=64, sync=False)
    try:
        for i, batch in enumerate(seq):
            keys = np.array(batch, dtype=np.uint64)
            call = calls[i] if i < len(calls) else "add"
            before = set(oracle)
            want = add_naive(oracle, batch)
            if call == "add":
                assert store.add(keys).tolist() == want.tolist()
            elif call == "add_new":
                assert store.add_new(keys).tolist() == sorted(set(batch) - before)
            else:
                distinct = uniq(keys)
                assert distinct[store.add_sorted(distinct)].tolist() == sorted(set(batch) - before)
            assert store.contains(keys).all()  # the Bloom filter holds them too
            if i < len(reopen) and reopen[i]:
                store.close()
                store = SeenStore.open(path, bloom_capacity=64, sync=False)
            assert all_keys(store) == sorted(oracle)
        probe = np.array(sorted(oracle)[:5] + [12345678901], dtype=np.uint64)
        assert store.contains(probe).tolist() == [int(k) in oracle for k in probe]
        store.verify()
        assert store.stats()["keys"] == len(oracle)
    finally:
        store.close()


def test_python_int_lists_and_dtype_refusal(store_dir):
    with SeenStore.open(store_dir, create=True) as s:
        assert s.add([1, 2, 1]).tolist() == [True, True, False]
        assert s.add(np.array([2, 3], dtype=np.uint32)).tolist() == [False, True]
        with pytest.raises(InvalidInputError):
            s.add(np.array([1, -1], dtype=np.int64))
        with pytest.raises(InvalidInputError):
            s.add([-5])


def test_missing_store_and_not_a_store(tmp_path):
    with pytest.raises(StoreNotFoundError):
        SeenStore.open(str(tmp_path / "nope"))
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "photo.jpg").write_bytes(b"x")
    with pytest.raises(NotAStoreError):
        SeenStore.open(str(tmp_path / "junk"))
    with pytest.raises(NotAStoreError):
        SeenStore.open(str(tmp_path / "junk"), create=True)
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(NotAStoreError):
        SeenStore.open(str(tmp_path / "file"), create=True)


def test_second_writer_refused_with_holder_named(store_dir):
    with SeenStore.open(store_dir, create=True) as s:
        s.add([1])
        with pytest.raises(LockedError, match=f"pid {os.getpid()}"):
            SeenStore.open(store_dir)
        with pytest.raises(LockedError, match="waited"):
            SeenStore.open(store_dir, wait=0.2)
        with SeenStore.open(store_dir, readonly=True) as r:  # readers never block
            assert r.contains([1, 2]).tolist() == [True, False]
            with pytest.raises(InvalidInputError, match="read-only"):
                r.add([3])
    with SeenStore.open(store_dir) as s:  # released on close
        assert len(s) == 1


def test_policy_layout_shard_mismatch_refused(store_dir):
    SeenStore.open(store_dir, create=True, policy_id="v2:abc").close()
    with pytest.raises(MismatchError, match="policy"):
        SeenStore.open(store_dir, policy_id="safe-v1")
    with pytest.raises(MismatchError, match="layout"):
        SeenStore.open(store_dir, layout=Layout(host_bits=16))
    with pytest.raises(MismatchError, match="shard_bits"):
        SeenStore.open(store_dir, shard_bits=2)
    SeenStore.open(store_dir, policy_id="v2:abc", layout=Layout()).close()


def test_leftovers_of_interrupted_merge_removed_on_open(store_dir):
    with SeenStore.open(store_dir, create=True, shard_bits=1) as s:
        s.add([1, 2**63 + 1])
    live = set(os.listdir(store_dir))
    assert "BLOOM" in live
    leftover = os.path.join(store_dir, "s0000-g0000000099.run")
    open(leftover, "wb").write(b"partial")
    open(os.path.join(store_dir, "MANIFEST.tmp"), "wb").write(b"{")
    open(os.path.join(store_dir, "BLOOM.tmp.999"), "wb").write(b"half a filter")
    with SeenStore.open(store_dir, readonly=True):
        assert os.path.exists(leftover)  # readers never delete
    with SeenStore.open(store_dir) as s:
        assert set(os.listdir(store_dir)) == live
        s.verify()


@pytest.mark.parametrize("run_format,writer,method", [
    (1, runwriter.RunWriter, "write"), (2, runcodec.CompressedRunWriter, "_write_all")])
def test_disk_full_mid_merge_leaves_store_unchanged(store_dir, monkeypatch, rng, run_format,
                                                     writer, method):
    keys = rng.integers(0, 2**64, 5000, dtype=np.uint64)
    with SeenStore.open(store_dir, create=True, run_format=run_format) as s:
        s.add(keys)
        s.chunk_keys = 64
        s._join_retire()  # the replaced empty runs are deleted in the background
        before = sorted(os.listdir(store_dir))
        calls = {"n": 0}
        real = getattr(writer, method)

        def failing(self, k):
            calls["n"] += 1
            if calls["n"] > 5:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(self, k)

        monkeypatch.setattr(writer, method, failing)
        with pytest.raises(DiskFullError, match="nothing was committed"):
            s.add(rng.integers(0, 2**64, 5000, dtype=np.uint64))
        monkeypatch.undo()
        assert sorted(os.listdir(store_dir)) == before
        assert all_keys(s) == sorted(set(keys.tolist()))
        assert s.add(keys).sum() == 0  # still usable
    with SeenStore.open(store_dir) as s:
        s.verify()


def test_corrupted_run_refused_on_open_and_merge(store_dir):
    with SeenStore.open(store_dir, create=True, shard_bits=0) as s:
        s.add([0x100, 0x200, 0x300])
        run = os.path.join(store_dir, s._doc["runs"][0]["file"])
    with open(run, "r+b") as f:  # flip a body byte: header still fine
        f.seek(4096 + 8)
        f.write(b"\x01")
    # the saved Bloom filter is checked against the runs' page index (first keys),
    # not their bodies: the writer opens, and the first read of the page fails
    with SeenStore.open(store_dir) as s:
        with pytest.raises(CorruptionError, match="page 0 .*checksum mismatch"):
            s.contains([0x200])
    with SeenStore.open(store_dir, bloom=False) as s:
        with pytest.raises(CorruptionError):
            s.verify()
        with pytest.raises(CorruptionError, match="checksum"):
            s.add([0x150])  # the merge checks the old run as it streams it
        assert s.generation == 1
    with open(run, "r+b") as f:
        f.truncate(4096 + 10)
    with pytest.raises(CorruptionError):
        SeenStore.open(store_dir)


def test_empty_batch_is_a_no_op(store_dir):
    with SeenStore.open(store_dir, create=True) as s:
        assert s.add(np.empty(0, np.uint64)).tolist() == []
        assert s.generation == 0
        assert s.add([5, 5]).tolist() == [True, False]
        assert s.add([5]).tolist() == [False]
        assert s.generation == 1  # nothing new: nothing written


def test_shard_with_nothing_new_is_not_rewritten(store_dir, rng):
    keys = rng.integers(0, 2**64, 20000, dtype=np.uint64)
    with SeenStore.open(store_dir, create=True, shard_bits=1) as s:
        s.add(keys)
        files = {r["shard"]: r["file"] for r in s._doc["runs"]}
        low = keys[keys < 2**63][:10]            # already stored, shard 0
        fresh = np.array([2**63 + 12345], dtype=np.uint64)  # maybe new, shard 1
        mask = s.add(np.concatenate([low, fresh]))
        assert mask.tolist() == [False] * 10 + [int(fresh[0]) not in set(keys.tolist())]
        assert s.last_timings["bytes_read"] <= 8 * len(keys[keys >= 2**63]) + 4096
        now = {r["shard"]: r["file"] for r in s._doc["runs"]}
        assert now[0] == files[0] and now[1] != files[1]
        assert s.add(low).sum() == 0 and s.last_timings["bytes_written"] == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seq=batches, fpr=st.sampled_from([0.5, 0.1, 1e-3]))
def test_exact_mode_same_answers_with_and_without_bloom(tmp_path_factory, seq, fpr):
    d = tmp_path_factory.mktemp("b")
    with SeenStore.open(str(d / "with"), create=True, shard_bits=2, bloom_capacity=8,
                        bloom_fpr=fpr, sync=False) as a, \
            SeenStore.open(str(d / "without"), create=True, shard_bits=2, bloom=False, sync=False) as b:
        assert a.bloom is not None and b.bloom is None
        for batch in seq:
            keys = np.array(batch, dtype=np.uint64)
            assert a.add(keys).tolist() == b.add(keys).tolist()
            assert a.contains(keys).tolist() == b.contains(keys).tolist()
        assert all_keys(a) == all_keys(b)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seq=batches, reopen=st.lists(st.booleans(), max_size=8))
def test_approximate_mode_never_reports_a_key_new_twice(tmp_path_factory, seq, reopen):
    path = str(tmp_path_factory.mktemp("a") / "store")
    reported, offered = set(), set()
    answered = 0
    s = SeenStore.open(path, create=True, mode="approximate", bloom_capacity=8, bloom_fpr=0.5,
                      sync=False)
    try:
        for i, batch in enumerate(seq):
            mask = s.add(np.array(batch, dtype=np.uint64))
            answered += s.last_timings["approx_answered"]
            new = [k for k, m in zip(batch, mask) if m]
            assert not reported & set(new) and len(new) == len(set(new))
            assert set(new) <= set(batch) - offered  # never a key offered before
            reported |= set(new)
            offered |= set(batch)
            if i < len(reopen) and reopen[i]:
                s.close()
                s = SeenStore.open(path, mode="approximate", bloom_capacity=8, bloom_fpr=0.5,
                      sync=False)
        assert set(all_keys(s)) == reported  # the store holds exactly what was handed out
        assert s.stats()["counters"]["approx_answered"] == answered
    finally:
        s.close()


def test_bloom_rebuilt_when_missing_stale_or_damaged(store_dir, rng):
    keys = rng.integers(0, 2**64, 3000, dtype=np.uint64)
    with SeenStore.open(store_dir, create=True) as s:
        s.add(keys)
    bloom = os.path.join(store_dir, "BLOOM")
    with SeenStore.open(store_dir) as s:
        assert s._bloom_state == "loaded" and s.bloom.query(keys).all()
    os.unlink(bloom)
    with SeenStore.open(store_dir) as s:
        assert s._bloom_state == "rebuilt (no file)" and s.bloom.query(keys).all()
        s.checkpoint()
        s.bloom.save(bloom, s.generation - 1)  # as if a crash came after a commit
    with SeenStore.open(store_dir) as s:
        assert s._bloom_state == "rebuilt (stale file)" and s.bloom.query(keys).all()
    open(bloom, "wb").write(b"garbage")
    with SeenStore.open(store_dir) as s:
        assert s._bloom_state == "rebuilt (unreadable file)" and s.bloom.query(keys).all()
        st_ = s.stats()["bloom"]
        assert st_["bits_per_key"] > 8 and 0 < st_["fill_ratio"] < 1 and st_["expected_fpr"] < 0.01


def test_a_store_keeps_the_bloom_rate_it_was_given_unless_asked_another(store_dir):
    """bloom_fpr=None (every CLI command, the stage, the cluster) takes the saved
    filter's target, also when a stale file is rebuilt; another rate rebuilds."""
    keys = np.arange(1, 5001, dtype=np.uint64)
    with SeenStore.open(store_dir, create=True, sync=False, bloom_fpr=0.02) as s:
        s.add(keys)
    with SeenStore.open(store_dir, sync=False) as s:
        assert s._bloom_state == "loaded" and s.bloom.target_fpr == 0.02
        s.add(keys + np.uint64(5000))
        s.close(save_bloom=False)  # the saved file is now a generation behind
    with SeenStore.open(store_dir, sync=False) as s:
        assert s._bloom_state == "rebuilt (stale file)" and s.bloom.target_fpr == 0.02
        assert s.bloom.query(keys).all()
    os.remove(os.path.join(store_dir, "BLOOM"))  # the manifest still records the rate
    with SeenStore.open(store_dir, sync=False) as s:
        assert s._bloom_state == "rebuilt (no file)" and s.bloom.target_fpr == 0.02
    with SeenStore.open(store_dir, sync=False, bloom_fpr=1e-3) as s:
        assert s._bloom_state == "rebuilt (other size or target)"
        assert s.bloom.target_fpr == 1e-3
    os.remove(os.path.join(store_dir, "BLOOM"))
    with SeenStore.open(store_dir, sync=False) as s:  # recorded at the close's commit
        assert s._bloom_state == "rebuilt (no file)" and s.bloom.target_fpr == 1e-3
        assert s.add(keys).sum() == 0
    with SeenStore.open(store_dir + "-new", create=True, sync=False) as s:
        assert s.bloom.target_fpr == DEFAULT_BLOOM_FPR
    with pytest.raises(InvalidInputError, match="bloom_fpr"):
        SeenStore.open(store_dir, bloom_fpr=0.9)


def test_progress_reports_every_touched_shard(store_dir):
    calls = []
    with SeenStore.open(store_dir, create=True, shard_bits=2, sync=False) as s:
        s.add([1, 2**62 + 1, 2**63 + 1], progress=lambda d, t: calls.append((d, t)))
    assert sorted(calls) == [(1, 3), (2, 3), (3, 3)]


def test_failed_background_bloom_insert_never_fails_a_committed_batch(store_dir, monkeypatch):
    """The filter is derived data: if its insert dies, the batch still commits and
    answers, the filter is dropped with a warning, and the next open rebuilds it."""
    from seenstore.bloom import BloomFilter

    with SeenStore.open(store_dir, create=True, sync=False) as s:
        s.add_new(np.array([1, 2, 3], dtype=np.uint64))
        assert s.bloom is not None  # its insert (past the return) done before the patch

        def boom(self, keys):
            raise MemoryError("no room for the filter")

        monkeypatch.setattr(BloomFilter, "_add_counting", boom)
        new = s.add_new(np.array([3, 4, 5, 4], dtype=np.uint64))  # inserts after return
        with pytest.warns(UserWarning, match="filter dropped"):
            assert s.bloom is None  # the next read of the filter waits for it, learns
        monkeypatch.undo()
        assert new.tolist() == [4, 5]
        assert s.contains([1, 4, 6]).tolist() == [True, True, False]
        assert s.add([5, 6]).tolist() == [False, True]  # still usable without it
    with SeenStore.open(store_dir) as s:
        assert s.bloom is not None and s.stats()["keys"] == 6
        assert s.contains([1, 2, 3, 4, 5, 6, 7]).tolist() == [True] * 6 + [False]


@pytest.mark.parametrize("bloom", [True, False])
def test_contains_few_and_many_keys_agree_with_a_set(store_dir, rng, bloom):
    """contains on a few and on many keys, repeats included (every occurrence is
    answered: the hash join of mark_members), against a set."""
    stored = rng.integers(0, 2**64, 40_000, dtype=np.uint64)
    oracle = set(stored.tolist())
    with SeenStore.open(store_dir, create=True, sync=False, shard_bits=1, bloom=bloom) as s:
        s.add_new(stored)
        few = np.concatenate([stored[:3], rng.integers(0, 2**64, 3, dtype=np.uint64)])
        many = np.concatenate([stored[::7], rng.integers(0, 2**64, 9000, dtype=np.uint64),
                               stored[:50]])  # repeats: every occurrence answers
        for probe in (few, many):
            assert s.contains(probe).tolist() == [int(k) in oracle for k in probe]


def test_a_failed_shard_sort_commits_nothing(store_dir, monkeypatch):
    """The per-shard sort runs on its own thread: its failure reaches the caller,
    no shard is committed, and the store takes the batch again afterwards."""
    import seenstore.keys.sort as sorting_mod

    with SeenStore.open(store_dir, create=True, sync=False) as s:
        s.add_new(np.array([1, 2**63 + 1], dtype=np.uint64))
        gen = s.generation
        calls = []

        def failing(part):
            calls.append(len(part))
            if len(calls) == 2:  # the second shard's sort: the first may be merged already
                raise MemoryError("sort failed")
            return real(part)

        real = sorting_mod.sort_unique_keys
        monkeypatch.setattr(sorting_mod, "sort_unique_keys", failing)
        batch = np.array([5, 2**63 + 5, 2**62 + 5], dtype=np.uint64)
        with pytest.raises(MemoryError):
            s.add_new(batch)
        monkeypatch.undo()
        assert s.generation == gen and not s.contains(batch).any()
        runs = sorted(n for n in os.listdir(store_dir) if n.endswith(".run"))
        assert runs == sorted(r["file"] for r in s._doc["runs"])  # the merged shard's run aborted
        assert s.add_new(batch).tolist() == sorted(batch.tolist())
    with SeenStore.open(store_dir) as s:
        assert s.contains(np.array([1, 5, 2**63 + 1], np.uint64)).tolist() == [True] * 3


def test_contains_beside_add_sees_every_committed_key(store_dir, rng):
    """contains on another thread while add commits and retires runs: every key whose
    add returned is found, the keys never offered are not (the runs a contains took
    stay readable after a commit removes their files)."""
    import threading

    with SeenStore.open(store_dir, create=True, sync=False, shard_bits=2) as s:
        committed: list = []
        stop = threading.Event()
        errors: list = []

        def ask():
            absent = rng.integers(0, 2**64, 2000, dtype=np.uint64) | np.uint64(1)
            try:
                while not stop.is_set():
                    done = list(committed)  # batches whose add returned
                    if done:
                        got = np.concatenate(done)
                        assert s.contains(got).all()
                    assert not s.contains(absent).any()
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        t = threading.Thread(target=ask)
        t.start()
        try:
            for _ in range(30):
                batch = rng.integers(0, 2**64, 20_000, dtype=np.uint64) & ~np.uint64(1)
                s.add_new(batch)
                committed.append(batch)
        finally:
            stop.set()
            t.join()
        assert not errors, errors[0]


def test_add_new_answers_in_a_buffer_reused_only_once_the_caller_dropped_it(store_dir):
    """add_new's answer never keeps a batch-sized array alive for a few keys, a later
    batch leaves an answer the caller kept unchanged (the store's reused batch scratch
    never shows through), and a dropped answer's buffer serves the next answer (no
    fresh pages per batch)."""
    def data(a):
        return a.__array_interface__["data"][0]

    keys = np.arange(1000, dtype=np.uint64)[::-1].copy()
    with SeenStore.open(store_dir, create=True, sync=False, shard_bits=0) as s:
        s.add_new(keys[:-2])  # all but 1 and 0
        few = s.add_new(keys)
        assert few.tolist() == [0, 1] and (few.base is None or len(few.base) <= 1 << 18)
        many = s.add_new(np.arange(1000, 2000, dtype=np.uint64))
        mask = s.add(np.arange(2000, 3000, dtype=np.uint64)[::-1].copy())
        s.add_new(np.arange(5000, 7000, dtype=np.uint64))
        s.add(np.arange(8000, 9000, dtype=np.uint64))
        assert many.tolist() == list(range(1000, 2000)) and mask.all()
        kept = many[10:20]  # a view keeps the buffer in use
        at = data(many)
        del many
        again = s.add_new(np.arange(10_000, 11_000, dtype=np.uint64))
        assert data(again) != at and kept.tolist() == list(range(1010, 1020))
        del kept, few
        buf = weakref.ref(again.base)  # the store's buffer (a weak reference: not a use)
        del again
        last = s.add_new(np.arange(20_000, 21_000, dtype=np.uint64))
        assert last.base is buf() and last.tolist() == list(range(20_000, 21_000))


@pytest.mark.parametrize("sort", ["radix", "numpy"])
def test_one_and_two_threads_give_identical_answers_and_runs(tmp_path, rng, monkeypatch, sort):
    """Shards sorted side by side on two threads (and the whole-batch sort of
    approximate mode on two threads) answer and store exactly what one thread does."""
    monkeypatch.setenv("SEENSTORE_SORT", sort)
    batches = [rng.integers(0, 2**64, 60_000, dtype=np.uint64) for _ in range(3)]
    batches[1][:20_000] = batches[0][:20_000]  # re-offered keys
    batches[2][:5] = [0, 2**63, 2**64 - 1, 0, 2**63]
    got = {}
    for threads in (1, 2):
        for mode in ("exact", "approximate"):
            path = str(tmp_path / f"{mode}-{threads}")
            with SeenStore.open(path, create=True, sync=False, threads=threads, mode=mode,
                                shard_bits=1) as s:  # shards of 30k keys: above SMALL_KEYS
                assert s.threads == threads and s.stats()["threads"] == threads
                assert s.stats()["sort"]["sort"] == sort
                answers = [s.add(b) for b in batches] + [s.add_new(batches[2])]
                keys = np.sort(np.concatenate([r.keys for r in s._all_readers()]))
            got[threads, mode] = answers, keys
    for mode in ("exact", "approximate"):
        (a1, k1), (a2, k2) = got[1, mode], got[2, mode]
        assert all(np.array_equal(x, y) for x, y in zip(a1, a2))
        assert np.array_equal(k1, k2)
        assert np.array_equal(k1, uniq(np.concatenate(batches)))


def test_threads_must_be_positive(store_dir):
    with pytest.raises(InvalidInputError, match="threads"):
        SeenStore.open(store_dir, create=True, threads=0)


@pytest.mark.parametrize("mode", ["exact", "approximate"])
def test_batches_of_many_repeats_drop_them_first_with_the_same_answers(tmp_path, monkeypatch, mode):
    """A large batch whose first keys are mostly repeats loses its repeats in one hash
    pass before the partition (admission._drop_repeats); masks, new keys and the runs
    written are those of the path without it, for batches of many and of few repeats."""
    from seenstore.store import admission

    rng = np.random.default_rng(5)
    pool = rng.integers(0, 2**64, 5_000, dtype=np.uint64)
    batches = []
    for i in range(4):
        hot = pool[rng.integers(0, len(pool), 150_000)]
        fresh = rng.integers(0, 2**64, 20_000 if i < 3 else 150_000, dtype=np.uint64)
        b = np.concatenate([hot, fresh, fresh[:5_000]])
        batches.append(b if i < 3 else rng.permutation(b))
    batches[1][:10] = 0  # key 0, the pass's empty slot, repeated
    # repeats only at the start: the probe passes, then more than half are distinct
    batches.append(np.concatenate([pool[rng.integers(0, len(pool), 20_000)],
                                   rng.integers(0, 2**64, 200_000, dtype=np.uint64)]))
    calls = []
    real = admission._kernels.first_unique
    monkeypatch.setattr(admission._kernels, "first_unique",
                        lambda *a: calls.append(real(*a)) or calls[-1])
    results = []
    for min_keys in (admission.REPEATS_MIN_KEYS, 10**12):  # the pass, then never
        monkeypatch.setattr(admission, "REPEATS_MIN_KEYS", min_keys)
        path = str(tmp_path / f"s{min_keys}")
        with SeenStore.open(path, create=True, mode=mode, shard_bits=2, sync=False) as st:
            answers = [st.add(batches[0]).tolist(), st.add_new(batches[1]).tolist(),
                       st.add(batches[2]).tolist(), st.add(batches[3]).tolist(),
                       st.add(batches[4]).tolist()]
            answers.append(st.contains(np.concatenate(batches)[::97]).tolist())
            stored = np.concatenate(list(runs_live.iter_keys(runs_live.all_readers(st._runs), 1 << 20)))
        results.append((answers, stored.tolist()))
    assert results[0] == results[1]
    assert [c >= 0 for c in calls] == [True, True, True, False, False]  # few repeats
    assert sum(results[0][0][0]) == len(np.unique(batches[0]))
