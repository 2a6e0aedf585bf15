"""The shard's answer log without Ray: a ShardActor used as a plain object, "crashes"
made by dropping an instance after a chosen step (its store closed, nothing else
written) and starting another on the same directory. Exactly-once: a retried batch
id gets its first answer in every case."""

import os
import time

import numpy as np
import pytest

from seenstore.cluster.actor import ShardActor, digest
from seenstore.cluster.answers import AnswerLog
from seenstore.cluster.files import read_sealed, write_sealed
from seenstore.errors import CorruptionError, InvalidInputError, NotSupportedError
from seenstore.layout import DEFAULT_LAYOUT
from seenstore.store import SeenStore

KW = {"sync": False, "wait": 0.0, "bloom": True, "bloom_fpr": 1e-3, "bloom_capacity": None}


def shard(path, index=0, bits=0):
    a = ShardActor(str(path), index, bits, KW)
    a.create(DEFAULT_LAYOUT.to_dict(), "safe-v1")
    return a


def crash(a):
    """Stop an actor as a crash would: the store's lock goes, nothing is written."""
    a.store.close(save_bloom=False)


def batch(rng, n=2000, old=None):
    k = rng.integers(0, 2**64, n, dtype=np.uint64)
    if old is not None:
        k[: n // 2] = old[: n // 2]
    return k


def test_reply_lost_after_commit(tmp_path, rng):
    a = shard(tmp_path)
    k1 = batch(rng)
    first = a.admit("b1", k1)
    crash(a)
    b = ShardActor(str(tmp_path), 0, 0, KW)  # the restart: pending -> committed
    assert [e.state for e in b.log.entries.values()] == ["committed"]
    assert np.array_equal(b.admit("b1", k1), first)
    assert np.array_equal(b.admit("b1", k1), first)
    assert len(b.admit("b2", k1)) == 0
    b.close()


def test_crash_before_commit_is_a_fresh_batch(tmp_path, rng):
    a = shard(tmp_path)
    k0 = batch(rng)
    a.admit("b0", k0)
    k1 = batch(rng, old=k0)
    a.log.begin("b1", digest(k1), a.store)  # pending written, store never called
    crash(a)
    b = ShardActor(str(tmp_path), 0, 0, KW)
    assert b.log.find("b1").state == "void"
    want = np.setdiff1d(k1, k0)
    assert np.array_equal(b.admit("b1", k1), want)
    assert np.array_equal(b.admit("b1", k1), want)  # and again, now committed
    b.close()


def test_batch_with_nothing_new_resolves_committed_and_answers_empty(tmp_path, rng):
    a = shard(tmp_path)
    k = batch(rng)
    a.admit("b0", k)
    assert len(a.admit("b1", k)) == 0  # commits its counters only: no run changes
    crash(a)
    b = ShardActor(str(tmp_path), 0, 0, KW)
    # the store counted the batch, so the retry answers from the snapshot: nothing new
    assert b.log.find("b1").state == "committed" and len(b.admit("b1", k)) == 0
    b.close()


def test_ack_drops_entry_and_snapshot_and_reused_id_is_refused(tmp_path, rng):
    a = shard(tmp_path)
    k = batch(rng)
    a.admit("b1", k)
    with pytest.raises(InvalidInputError, match="other keys"):
        a.admit("b1", k[:5])
    a.ack(["b1"])
    a.log._join()
    assert a.log.find("b1") is None
    assert [n for n in os.listdir(a.log.dir) if n.endswith(".pre")] == []
    a.close()


def test_sorted_path_and_another_writer_detected(tmp_path, rng):
    a = shard(tmp_path)
    k = np.unique(batch(rng))
    first = a.admit("s1", k, sorted_unique=True)
    assert np.array_equal(first, k)
    crash(a)
    b = ShardActor(str(tmp_path), 0, 0, KW)
    assert np.array_equal(b.admit("s1", k, sorted_unique=True), k)
    b.log.begin("s2", "0", b.store)
    b.store.add(batch(rng))  # two commits while s2 is pending: not this protocol's
    b.store.add(batch(rng))
    with pytest.raises(CorruptionError, match="another writer"):
        b.log.resolve_all(b.store)
    b.close()


def test_damaged_or_foreign_entry_refused(tmp_path, rng):
    a = shard(tmp_path)
    a.admit("b1", batch(rng))
    crash(a)
    name = next(n for n in os.listdir(a.log.dir) if n.endswith(".ans"))
    path = os.path.join(a.log.dir, name)
    raw = open(path, "rb").read()
    open(path, "wb").write(raw.replace(b"b1", b"b9"))
    with pytest.raises(CorruptionError, match="checksum"):
        AnswerLog(str(tmp_path))
    b = ShardActor(str(tmp_path), 0, 0, KW)  # the error is raised by calls, not __init__
    with pytest.raises(CorruptionError):
        b.admit("b2", batch(rng))
    SeenStore.open(str(tmp_path / "store")).close()  # b let go of the store's lock
    write_sealed(path, "something-else", {"x": 1})
    with pytest.raises(NotSupportedError):
        read_sealed(path, "seenstore-answer")


def test_shard_identity_checked(tmp_path):
    a = shard(tmp_path, index=1, bits=2)
    a.close()
    with pytest.raises(Exception, match="holds shard 1 of 4"):
        ShardActor(str(tmp_path), 2, 2, KW).admit("x", np.zeros(1, dtype=np.uint64))


def test_verify_checks_the_shard_range(tmp_path):
    a = shard(tmp_path, index=1, bits=1)
    a.admit("in", np.array([2**63 + 5], dtype=np.uint64))
    assert a.verify()["keys"] == 1
    a.store.add(np.array([5], dtype=np.uint64))  # a key of shard 0, behind the protocol
    with pytest.raises(CorruptionError, match="outside shard 1"):
        a.verify()
    a.close()


def test_bench_shards_refuses_bad_options_without_ray(tmp_path):
    from click.testing import CliRunner

    from seenstore.cli import main

    for extra in (["--shards", "2", "--answer", "mask"], ["--shards", "3"],
                  ["--shards", "two"]):
        out = CliRunner().invoke(main, ["bench", "--keys", "1e3", "--dir", str(tmp_path)]
                                 + extra)
        assert out.exit_code == 3 and out.output.startswith("seenstore: error:"), out.output


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_client_partition_on_threads_equals_one_thread(monkeypatch, threads, rng):
    """The client's partition on several threads (slices counted, then scattered) is
    the single-threaded kernel's, byte for byte: a retried batch gets the same parts."""
    from concurrent.futures import ThreadPoolExecutor

    from seenstore.cluster import sharded
    from seenstore.kernels.batch import partition_top_bits

    monkeypatch.setattr(sharded, "PARALLEL_MIN_KEYS", 7)
    keys = rng.integers(0, 2**64, 1000, dtype=np.uint64)
    keys[::50] = [0, 2**63, 2**64 - 1] * 6 + [5, 6]
    with ThreadPoolExecutor(threads) as pool:
        for bits in (1, 3, 8):
            out, bounds = sharded.partition(keys, bits, pool, threads)
            want, wb = np.empty_like(keys), np.empty((1 << bits) + 1, np.int64)
            partition_top_bits(keys, bits, want, wb)
            assert np.array_equal(out, want) and np.array_equal(bounds, wb)


def test_snapshot_retaken_when_a_compaction_commits_meanwhile(tmp_path, rng, monkeypatch):
    """A background compaction may commit while a batch's snapshot is being linked and
    retire the runs it merged: the snapshot is then taken again from the new MANIFEST,
    so the committed batch's answer is still recomputed exactly (it linked whatever
    the directory listed, skipping runs gone: an unreadable snapshot)."""
    from seenstore.batch import prepare

    a = shard(tmp_path)
    for i in range(5):
        a.admit(f"b{i}", batch(rng))
        a.ack([f"b{i}"])
    st, real_link, fired = a.store, os.link, []

    def link(src, dst):
        if not fired and src.endswith(".run"):
            fired.append(src)
            st.compact(full=True)  # commits, then unlinks the merged runs on a thread
            for _ in range(500):
                if not os.path.exists(src):
                    break
                time.sleep(0.01)
        return real_link(src, dst)

    monkeypatch.setattr(os, "link", link)
    k = batch(rng)
    e = a.log.begin("x", digest(k), st)
    monkeypatch.setattr(os, "link", real_link)
    assert fired and not os.path.exists(fired[0])  # the compaction did retire a run
    new = st.add_new(k)
    a.log.resolve(e, st)
    assert e.state == "committed"
    assert np.array_equal(a.log.recompute(e, prepare(k)), new)
    a.close()


def test_shard_threads_share_each_nodes_cpus():
    """Default sort threads of a shard's store: its node's CPUs over the shards on it
    (recorded nodes), else the shards spread evenly; the smallest share, at least 1."""
    from types import SimpleNamespace

    from seenstore.cluster.sharded import _threads_per_shard

    nodes = [{"Alive": True, "NodeManagerAddress": "a", "Resources": {"CPU": 2}},
             {"Alive": True, "NodeManagerAddress": "b", "Resources": {"CPU": 8}},
             {"Alive": False, "NodeManagerAddress": "c", "Resources": {"CPU": 64}}]
    fake = SimpleNamespace(nodes=lambda: nodes)
    at = [{"node_ip": ip} for ip in "aabb"]
    assert _threads_per_shard(fake, at) == 1  # 2 CPUs over 2 shards on node a
    assert _threads_per_shard(fake, at[1:3]) == 2
    assert _threads_per_shard(fake, [{"node_ip": None}] * 2) == 2  # one per live node
    assert _threads_per_shard(fake, [{"node_ip": None}] * 8) == 1
    assert _threads_per_shard(fake, [{"node_ip": "c"}]) == 2  # dead node: spread
