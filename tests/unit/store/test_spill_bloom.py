"""A spilled batch's Bloom insert, deferred past its commit (deferred.DeferredInsert):
answers stay exact while it runs, and a crash before it ends leaves a store whose
next open answers every key (the filter rebuilt from the runs)."""

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from seenstore.bloom import deferred
from seenstore.store import SeenStore
from conftest import REPO, TESTS



def _hold(monkeypatch, method: str) -> threading.Event:
    """DeferredInsert.``method`` waits (at most 30 s) for the returned event first."""
    go = threading.Event()
    real = getattr(deferred.DeferredInsert, method)

    def held(self):
        go.wait(30)
        real(self)

    monkeypatch.setattr(deferred.DeferredInsert, method, held)
    return go


@pytest.fixture
def gate(monkeypatch):
    """Deferred inserts start only once the test sets the returned event."""
    go = _hold(monkeypatch, "_run")
    yield go
    go.set()


def _batches(seed, n_batches=3, n=3000):
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 2**64 - 1, 4 * n, dtype=np.uint64, endpoint=True)
    pool[:3] = [0, 2**63, 2**64 - 1]
    return [rng.choice(pool, n) for _ in range(n_batches)], pool


def test_answers_right_after_a_spilled_batch_wait_for_its_insert(tmp_path, gate):
    batches, pool = _batches(1)
    seen = set()
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False, shard_bits=2) as s:
        for i, b in enumerate(batches):
            b.astype("<u8").tofile(str(tmp_path / "b.bin"))
            r = s.add_new_file(str(tmp_path / "b.bin"), 1 << 26)
            assert r["new"] == len(set(b.tolist()) - seen)
            seen |= set(b.tolist())
            if i == 0:  # the insert is held: the filter itself lacks the batch's keys ...
                assert not s._keeper.bf.query(np.array(sorted(seen), dtype=np.uint64)).all()
                threading.Timer(0.3, gate.set).start()
            # ... but every answer waits for it: a Python set's answers exactly
            want = np.array([int(k) in seen for k in pool])
            assert np.array_equal(s.contains(pool), want)
            assert s.bloom.query(np.array(sorted(seen), dtype=np.uint64)).all()
        assert s.add_new(pool).tolist() == sorted(set(pool.tolist()) - seen)  # in-memory after
        assert s.contains(pool).all()


def test_a_failed_deferred_insert_drops_the_filter_not_the_batch(tmp_path, monkeypatch):
    def broken(self, keys):
        raise OSError("injected")

    batches, _ = _batches(2, 1)
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False) as s:
        monkeypatch.setattr(type(s._keeper.bf), "add", broken)
        batches[0].astype("<u8").tofile(str(tmp_path / "b.bin"))
        s.add_new_file(str(tmp_path / "b.bin"), 1 << 26)
        with pytest.warns(UserWarning, match="filter dropped"):
            assert s.bloom is None
        assert s.contains(batches[0]).all()  # the runs answer


CHILD = """
import os, sys, threading
import numpy as np
from seenstore.store import spill
from seenstore.bloom import deferred
from seenstore.store import SeenStore

path, batch_dir, checkpoint = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
run, block = deferred.DeferredInsert._run, threading.Event()

def held(self):  # the second batch's insert starts only when let go
    if self.keeper.bf.n_added:
        block.wait(None if not checkpoint else 1.0)
    run(self)

deferred.DeferredInsert._run = held
s = SeenStore.open(path, create=True, shard_bits=2)
for i in range(2):
    s.add_new_file(os.path.join(batch_dir, f"b{i}.bin"), 1 << 26)
    if i == 0:
        s.checkpoint()  # BLOOM of generation 1
if checkpoint:
    s.checkpoint()  # waits for the held insert, then saves generation 2
os._exit(0)  # killed: no close
"""


def _child_setup(tmp_path, batches):
    """The batch files b<i>.bin, and (store path, environment) for a child process."""
    for i, b in enumerate(batches):
        b.astype("<u8").tofile(str(tmp_path / f"b{i}.bin"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [REPO, TESTS, os.environ.get("PYTHONPATH", "")]))
    return str(tmp_path / "s"), env


@pytest.mark.parametrize("checkpoint", [False, True])
def test_a_crash_before_the_deferred_insert_ends_leaves_a_consistent_store(tmp_path,
                                                                           checkpoint):
    batches, pool = _batches(3, 2)
    path, env = _child_setup(tmp_path, batches)
    subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), path, str(tmp_path),
                    "1" if checkpoint else "0"], check=True, env=env, timeout=300)
    seen = set(batches[0].tolist()) | set(batches[1].tolist())
    with SeenStore.open(path) as s:
        # without the checkpoint the saved filter is generation 1's: stale, rebuilt;
        # with it, the checkpoint waited for the insert: loaded, every key in it
        assert s._bloom_state == ("loaded" if checkpoint else "rebuilt (stale file)")
        assert s.bloom.query(np.array(sorted(seen), dtype=np.uint64)).all()
        assert np.array_equal(s.contains(pool), np.array([int(k) in seen for k in pool]))
        s.verify()


def test_a_spilled_batch_does_not_wait_for_the_new_filters_prefault(tmp_path, monkeypatch):
    """The first spilled batch runs beside the new filter's prefault (issue 15: joining
    it first cost batch 0 75.8 s at 1e10); its deferred insert waits for it, so the
    prefault's zeros never overwrite inserted keys, and answers stay exact."""
    from seenstore.bloom import keeper as keepermod

    go, real = threading.Event(), keepermod.prefault

    def held(words):
        go.wait(30)
        real(words)

    monkeypatch.setattr(keepermod, "prefault", held)
    batches, pool = _batches(4, 2)
    seen = set()
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False, shard_bits=2,
                        bloom_capacity=8_000_000) as s:
        faulting = s._keeper._prefault
        assert faulting is not None and faulting.is_alive()
        for i, b in enumerate(batches):
            b.astype("<u8").tofile(str(tmp_path / "b.bin"))
            assert s.add_new_file(str(tmp_path / "b.bin"), 1 << 26)["new"] == len(
                set(b.tolist()) - seen)
            seen |= set(b.tolist())
            if i == 0:  # returned while the prefault still runs (the gate is shut)
                assert faulting.is_alive()
                go.set()
        assert not faulting.is_alive()
        assert s.bloom.query(np.array(sorted(seen), dtype=np.uint64)).all()
        assert np.array_equal(s.contains(pool), np.array([int(k) in seen for k in pool]))


def _fail_once_inserting(s, then, at=2):
    """A store fault seam that, at the ``at``-th slice of a spilled batch (shards
    before it finished and fed to the batch's insert), waits until the insert has put
    keys in the filter, then calls ``then``."""
    calls = [0]

    def fault(point):
        if point == "spill-sorted":
            calls[0] += 1
            if calls[0] == at:
                for _ in range(3000):
                    if s._keeper.bf.n_added:
                        break
                    threading.Event().wait(0.01)
                assert s._keeper.bf.n_added, "the batch's insert never began"
                then()
    return fault


def test_a_batch_failing_after_its_insert_began_drops_the_filter(tmp_path, monkeypatch):
    """The batch's keys go into the filter as its shards finish, before the commit:
    a batch that fails after that leaves a filter with keys the store lacks, so it is
    dropped (approximate answers would call them seen); the runs answer exactly."""
    from seenstore.store import admission

    monkeypatch.setattr(deferred, "DEFERRED_CHUNK_KEYS", 64)  # lots small enough to go in
    batches, pool = _batches(5, 1)
    batches[0].astype("<u8").tofile(str(tmp_path / "b.bin"))
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False, shard_bits=2) as s:
        def boom():
            raise OSError("injected")
        monkeypatch.setattr(admission, "fault", _fail_once_inserting(s, boom))
        with pytest.raises(OSError, match="injected"), pytest.warns(UserWarning,
                                                                     match="filter dropped"):
            s.add_new_file(str(tmp_path / "b.bin"), 1 << 26)
        assert s.bloom is None and len(s) == 0
        assert not s.contains(pool).any()
        monkeypatch.setattr(admission, "fault", lambda point: None)
        assert s.add_new_file(str(tmp_path / "b.bin"), 1 << 26)["new"] == len(
            set(batches[0].tolist()))
        assert s.contains(batches[0]).all()


KILL_CHILD = """
import os, signal, sys
sys.path.insert(0, sys.argv[3])
from seenstore.store import spill
from seenstore.bloom import deferred
from seenstore.store import SeenStore, admission
from test_spill_bloom import _fail_once_inserting

deferred.DEFERRED_CHUNK_KEYS = 64
s = SeenStore.open(sys.argv[1], create=True, shard_bits=2)
s.add_new_file(os.path.join(sys.argv[2], "b0.bin"), 1 << 26)
s.checkpoint()  # BLOOM of generation 1
admission.fault = _fail_once_inserting(s, lambda: os.kill(os.getpid(), signal.SIGKILL))
s.add_new_file(os.path.join(sys.argv[2], "b1.bin"), 1 << 26)  # killed inside its check
"""


def test_sigkill_after_a_batchs_insert_began_leaves_a_set(tmp_path):
    """Killed while the filter in memory holds keys of the batch's uncommitted runs:
    the next open answers like a set of the committed batches (the saved filter is
    generation 1's, which lacks none of them), and the store verifies."""
    batches, pool = _batches(6, 2)
    path, env = _child_setup(tmp_path, batches)
    p = subprocess.run([sys.executable, "-c", KILL_CHILD, path, str(tmp_path),
                        os.path.dirname(os.path.abspath(__file__))],
                       env=env, timeout=300, capture_output=True, text=True)
    assert p.returncode == -9, p.stderr
    seen = set(batches[0].tolist())
    with SeenStore.open(path) as s:
        assert s.generation == 1 and s._bloom_state == "loaded"
        assert np.array_equal(s.contains(pool), np.array([int(k) in seen for k in pool]))
        s.verify()


def test_a_spilled_batch_after_in_memory_ones_chains_their_inserts(tmp_path, monkeypatch):
    """In-memory batches' inserts (past their return, held here once their keys are
    copied) and then a spilled batch's: each insert waits for the one before, and
    every answer is a set's."""
    gate = _hold(monkeypatch, "_insert_all")
    batches, pool = _batches(7, n_batches=4)
    seen = set()
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False, shard_bits=2) as s:
        for b in batches[:3]:
            assert s.add_new(b).tolist() == sorted(set(b.tolist()) - seen)
            seen |= set(b.tolist())
        assert s._keeper.behind is not None and not gate.is_set()  # held
        threading.Timer(0.3, gate.set).start()
        batches[3].astype("<u8").tofile(str(tmp_path / "b.bin"))
        r = s.add_new_file(str(tmp_path / "b.bin"), 1 << 26)
        assert r["new"] == len(set(batches[3].tolist()) - seen)
        seen |= set(batches[3].tolist())
        want = np.array([int(k) in seen for k in pool])
        assert np.array_equal(s.contains(pool), want)
        assert s.bloom.query(np.array(sorted(seen), dtype=np.uint64)).all()
        assert s.bloom.n_added == len(seen)
