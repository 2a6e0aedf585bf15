"""The batch path's scheduling: the Bloom filter is fed only a batch's new keys, after
the commit on a thread that runs past the return (bloom/deferred.py), a failing
insert never fails a batch, and a new filter faults its pages in beside the caller,
every insert waiting for that."""

import time

import numpy as np
import pytest

from seenstore.store import SeenStore


def _feed_recorder(store):
    """Record every array the store hands its Bloom keeper to insert."""
    fed, start = [], store._keeper.start_insert

    def start_insert(keys):
        fed.append(np.array(keys))
        return start(keys)

    store._keeper.start_insert = start_insert
    return fed


def test_bloom_is_fed_only_the_new_keys(tmp_path, rng):
    with SeenStore.open(tmp_path / "s", create=True, shard_bits=4) as s:
        old = np.unique(rng.integers(0, 2**64, 5000, dtype=np.uint64))
        s.add_new(old)
        fed = _feed_recorder(s)
        fresh = np.setdiff1d(np.unique(rng.integers(0, 2**64, 3000, dtype=np.uint64)), old)
        batch = np.concatenate([old[:2000], fresh, fresh[:100], old[:10]])
        rng.shuffle(batch)
        new = s.add_new(batch)
        assert np.array_equal(new, fresh)
        assert s.bloom is not None  # the insert runs after the return: wait for it
        # each new key once, no stored key, no repeat: the filter already held the rest
        assert np.array_equal(np.sort(np.concatenate(fed)), fresh)
        assert len(fed) == 1  # one insert of the batch's new keys, after the commit
        assert s.bloom.query(np.concatenate([old, fresh])).all()  # no false negative
        # new keys set a clear bit unless they were false positives (FPR 1e-3)
        assert 0.99 * len(fresh) <= s.last_timings["bloom_negative"] <= len(fresh)
        fed.clear()
        assert len(s.add_new(batch)) == 0 and s.bloom is not None
        assert not fed  # nothing new: nothing inserted


def test_a_failing_bloom_insert_drops_the_filter_not_the_batch(tmp_path, rng):
    with SeenStore.open(tmp_path / "s", create=True) as s:
        def fail(keys):
            raise MemoryError("no room for a layer")

        s._keeper.start_insert = fail
        keys = rng.integers(0, 2**64, 4000, dtype=np.uint64)
        mask = s.add(keys)  # committed: the insert fails after the return
        with pytest.warns(UserWarning, match="filter dropped"):
            assert s.bloom is None  # the next read of the filter learns of it
        assert mask.all() and len(s) == len(np.unique(keys))
        assert not s.add(keys).any()  # the runs answer without the filter
    with SeenStore.open(tmp_path / "s") as s:  # rebuilt from the runs at the next open
        assert s.bloom is not None and s.bloom.query(keys).all()


def test_a_new_filter_faults_in_beside_the_caller_and_inserts_wait_for_it(
        tmp_path, rng, monkeypatch):
    from seenstore.bloom import keeper as keepermod
    from seenstore.store import opening

    events = []

    def slow_prefault(words):
        time.sleep(0.3)  # longer than the batch takes to reach its first insert
        keepermod.__dict__["_real_prefault"](words)
        events.append("prefaulted")

    monkeypatch.setitem(keepermod.__dict__, "_real_prefault", keepermod.prefault)
    monkeypatch.setattr(keepermod, "prefault", slow_prefault)
    path = tmp_path / "s"
    keys = rng.integers(0, 2**64, 5000, dtype=np.uint64)
    with SeenStore.open(path, create=True, bloom_capacity=4_000_000) as s:  # ~7 MiB
        assert s._keeper.prefaulting and s.bloom.nbytes >= opening.PREFAULT_MIN_BYTES
        fed = _feed_recorder(s)
        start = s._keeper.start_insert
        s._keeper.start_insert = lambda k: (events.append("insert"), start(k))[1]
        assert s.add(keys).all()
        assert s.bloom is not None  # waits for the insert, which ran after the return
        assert events[0] == "prefaulted" and "insert" in events and fed
        assert not s._keeper.prefaulting and s.bloom.query(keys).all()
    with SeenStore.open(path) as s:  # a loaded filter holds keys: never written over
        assert not s._keeper.prefaulting and s.bloom.query(keys).all()


@pytest.mark.parametrize("slow_copy", [False, True])
def test_the_deferred_insert_owns_its_keys_and_readers_wait_for_it(
        tmp_path, rng, monkeypatch, slow_copy):
    """A batch's Bloom insert runs after the return (bloom/deferred.py) from a copy of
    the new keys it makes on its thread from the store's scratch: a caller that
    overwrites its answer at once cannot take keys out of the filter, nor can the
    next batch, which writes its partition over that scratch only once the copy is
    made; every reader of the filter (contains, the filter itself) sees all of them;
    one insert at a time, each batch's chained after the last."""
    from seenstore.bloom.deferred import DeferredInsert

    if slow_copy:
        copy = DeferredInsert._copy_parts

        def slow(self):
            time.sleep(0.1)
            copy(self)

        monkeypatch.setattr(DeferredInsert, "_copy_parts", slow)
    with SeenStore.open(tmp_path / "s", create=True, shard_bits=3, sync=False) as s:
        held = []  # a slow insert: the batches below queue behind one another
        start = s._keeper.start_insert

        def slow(keys):
            time.sleep(0.05)
            held.append(len(keys))
            return start(keys)

        s._keeper.start_insert = slow
        stored = []
        for _ in range(4):
            keys = rng.integers(0, 2**64, 3000, dtype=np.uint64)
            new = s.add_new(keys)
            assert s._keeper.behind is not None  # still running past the return
            stored.append(new.copy())
            new[:] = 0  # the caller owns its answer
        everything = np.concatenate(stored)
        assert s.contains(everything).all()  # settles: every insert done
        assert s._keeper.behind is None and held == [len(a) for a in stored]
        assert s.bloom.query(everything).all()
        assert s.bloom.n_added == len(everything)


def test_a_bloom_insert_that_cannot_start_drops_the_filter_not_the_batch(tmp_path, rng):
    """No memory for the insert's copy of the new keys (or no thread): the batch is
    committed already, so it still answers; the filter is dropped with a warning
    (it would lack the batch's keys) and the next open rebuilds it from the runs."""
    path = tmp_path / "s"
    keys = rng.integers(0, 2**64, 4000, dtype=np.uint64)
    with SeenStore.open(path, create=True, sync=False) as s:
        answer = s._arena.answer

        def no_room(n, pool="answer"):
            if pool == "bloom":
                raise MemoryError("no room for the copy")
            return answer(n, pool)

        s._arena.answer = no_room
        with pytest.warns(UserWarning, match="filter dropped"):
            new = s.add_new(keys)
        assert np.array_equal(new, np.unique(keys)) and s.bloom is None
        assert s.contains(keys).all() and len(s.add_new(keys)) == 0
    with SeenStore.open(path) as s:
        assert s.bloom is not None and s.bloom.query(keys).all()


def test_add_holds_its_bloom_insert_until_the_mask_and_opens_the_gate_on_errors(
        tmp_path, rng, monkeypatch):
    """``add`` starts the batch's Bloom insert only once its mask is computed (the
    mask's two-thread join then has both cores), and opens that gate also when the
    mask fails: the committed batch's insert, and every reader waiting for it, must
    not hang."""
    import threading

    from seenstore.bloom.deferred import Gate
    from seenstore.store import admission

    gates = []  # opened again at the end, so that a failure here cannot hang close()

    class Recorded(Gate):
        def __init__(self):
            super().__init__()
            gates.append(self)

    inserted, seen_at_mask = [], []
    real = admission.first_new_mask

    def mask(keys, new, threads):
        time.sleep(0.2)  # an insert not held back would start meanwhile
        seen_at_mask.append(list(inserted))
        return real(keys, new, threads)

    def failing(keys, new, threads):
        raise RuntimeError("mask failed")

    monkeypatch.setattr(admission, "Gate", Recorded)
    s = SeenStore.open(tmp_path / "s", create=True, shard_bits=3, sync=False)
    try:
        start = s._keeper.start_insert
        s._keeper.start_insert = lambda keys: inserted.append(len(keys)) or start(keys)
        monkeypatch.setattr(admission, "first_new_mask", mask)
        keys = rng.integers(0, 2**64, 3000, dtype=np.uint64)
        assert s.add(keys).all()
        assert seen_at_mask == [[]]  # nothing inserted before the mask was done
        monkeypatch.setattr(admission, "first_new_mask", failing)
        more = rng.integers(0, 2**64, 3000, dtype=np.uint64)
        with pytest.raises(RuntimeError, match="mask failed"):
            s.add(more)
        answer = []  # contains waits for the batch's insert: must end, not hang
        t = threading.Thread(target=lambda: answer.append(s.contains(more)), daemon=True)
        t.start()
        t.join(30)
        assert answer and answer[0].all()  # the batch committed, its keys are in
        assert inserted == [3000, 3000]
    finally:
        for g in gates:
            g.open()
        s.close()
