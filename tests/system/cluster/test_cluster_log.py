"""The shard's answer log without Ray: a ShardActor used as a plain object, "crashes"
made by dropping an instance after a chosen step (its store closed, nothing else
written) and starting another on the same directory. Exactly-once: a retried batch
id gets its first answer in every case."""

import os
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seenstore.cluster.actor import ShardActor, digest
from seenstore.cluster.answers import AnswerLog
from seenstore.cluster.files import read_sealed, write_sealed
from seenstore.cluster.ranges import balanced_ranges, check_ranges, equal_ranges
from seenstore.errors import (CorruptionError, InvalidInputError, MismatchError,
                              NotSupportedError)
from seenstore.layout import DEFAULT_LAYOUT
from seenstore.store import SeenStore
from naive import setdiff, uniq

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


def test_reply_lost_after_a_batch_that_readmits_forgotten_keys(tmp_path, rng):
    """The answer is recomputed from the snapshot of the state before the batch, which
    must carry the forgotten keys' file: readmitted keys are new."""
    a = shard(tmp_path)
    k0 = batch(rng)
    a.admit("b0", k0)
    a.ack(["b0"])
    assert a.forget(k0[:100]) == len(np.unique(k0[:100]))
    k1 = np.concatenate([k0[:300], batch(rng, 500)])
    first = a.admit("b1", k1)
    assert np.array_equal(first, setdiff(uniq(k1), uniq(k0[100:])))
    crash(a)
    b = ShardActor(str(tmp_path), 0, 0, KW)
    assert np.array_equal(b.admit("b1", k1), first)
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
    want = setdiff(k1, k0)
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
    k = uniq(batch(rng))
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
    open(path, "w").write("[" * 100_000)  # nested past the JSON parser's depth
    with pytest.raises(CorruptionError, match="not valid JSON"):
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


def test_snapshot_retaken_when_a_compaction_commits_meanwhile(tmp_path, rng, monkeypatch):
    """A background compaction may commit while a batch's snapshot is being linked and
    retire the runs it merged: the snapshot is then taken again from the new MANIFEST,
    so the committed batch's answer is still recomputed exactly (it linked whatever
    the directory listed, skipping runs gone: an unreadable snapshot)."""
    from seenstore.keys.batch import prepare

    a = shard(tmp_path)
    # the compaction below is the one that commits meanwhile: none between batches, or
    # one still running could already have merged the shard of the first run linked
    # into that single run, which a full compaction then leaves in place
    a.store.compact_between_batches = False
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
    (recorded nodes), else the shards spread evenly; the smallest share, at least 1.
    And the most shards one node holds (they share its run cache budget)."""
    from types import SimpleNamespace

    from seenstore.cluster.sharded import _node_shares

    def _threads_per_shard(ray, shards):
        return _node_shares(ray, shards)[0]

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
    assert _node_shares(fake, at)[1] == 2  # two shards on a, two on b
    assert _node_shares(fake, [{"node_ip": "a"}] * 3 + [{"node_ip": "b"}])[1] == 3
    assert _node_shares(fake, [{"node_ip": None}] * 8)[1] == 4  # spread over a and b


# ------------------------------------------------------------- key ranges
group_counts_st = st.lists(st.integers(0, 50), min_size=256, max_size=256)


def _sample_from_counts(counts):
    """Keys with ``counts[g]`` keys of top 8 bits g (low bits: the key's rank)."""
    g = np.repeat(np.arange(256, dtype=np.uint64), counts)
    return (g << np.uint64(56)) | np.arange(len(g), dtype=np.uint64)


@settings(max_examples=30, deadline=None)
@given(counts=group_counts_st, bits=st.integers(0, 8))
def test_balanced_ranges_cover_in_order_and_share_evenly(counts, bits):
    """Balanced ranges cover 0..256 in order, none empty, and no shard gets more than
    its equal share of the sample plus twice the largest group (a group is never cut)."""
    n = 1 << bits
    sample = _sample_from_counts(counts)
    ranges = balanced_ranges(sample, n)
    assert check_ranges(ranges, n, "test") == ranges
    got = [sum(counts[lo:hi]) for lo, hi in ranges]
    assert max(got) <= len(sample) / n + 2 * max(counts)


def test_balanced_ranges_even_out_the_crawl_streams_host_skew():
    """The bench stream's top bits are a host hash: equal halves give one shard 54 % of
    a batch; ranges cut from a sample of the first batch give each about half."""
    from seenstore.bench.workload import CrawlStream

    s = CrawlStream(2_000_000, 1_000_000)
    first, later = (s.batch(*p).keys for p in list(s.plan())[:2])

    def shares(ranges, keys):
        g = (keys >> np.uint64(56)).astype(np.int64)
        return [float(np.mean((g >= lo) & (g < hi))) for lo, hi in ranges]

    assert max(shares(equal_ranges(2), later)) > 0.53
    for n in (2, 4):
        assert max(shares(balanced_ranges(first[::16], n), later)) < 1 / n + 0.01
    assert balanced_ranges(np.empty(0, dtype=np.uint64), 4) == equal_ranges(4)


@pytest.mark.parametrize("bad", [[[0, 128]], [[0, 100], [101, 256]], [[0, 0], [0, 256]],
                                 [[0, 200], [100, 256]], [[0, 128], [128, 255]],
                                 [[0, 128.0], [128, 256]], "x"])
def test_bad_ranges_refused(tmp_path, bad):
    from seenstore.cluster.sharded import read_cluster, write_cluster

    with pytest.raises(CorruptionError, match="ranges"):
        check_ranges(bad, 2, "x")
    shards = [{"dir": "a", "node_ip": None, "range": r} for r in (bad if isinstance(
        bad, list) else [bad, bad])]
    write_cluster(str(tmp_path), {"layout": {}, "policy_id": "p", "shards": shards})
    with pytest.raises(CorruptionError, match="ranges"):
        read_cluster(str(tmp_path))


def test_cluster_and_shard_files_of_major_1_read_as_equal_ranges(tmp_path, rng):
    """Files written before ranges were recorded (major 1) hold equal ranges; a newer
    major than this seenstore reads is refused."""
    from seenstore.cluster.sharded import read_cluster

    doc = {"layout": {}, "policy_id": "p", "shards": [{"dir": "a"}, {"dir": "b"}]}
    write_sealed(str(tmp_path / "CLUSTER"), "seenstore-cluster", doc, False, 1)
    assert [s["range"] for s in read_cluster(str(tmp_path))["shards"]] == [[0, 128], [128, 256]]
    write_sealed(str(tmp_path / "CLUSTER"), "seenstore-cluster", doc, False, 3)
    with pytest.raises(NotSupportedError, match="version 3"):
        read_cluster(str(tmp_path))
    d = tmp_path / "s"
    a = shard(d, index=1, bits=1)
    a.admit("b", np.array([2**63 + 1], dtype=np.uint64))
    a.close()
    write_sealed(str(d / "SHARD"), "seenstore-shard", {"index": 1, "shard_bits": 1}, False, 1)
    b = ShardActor(str(d), 1, 1, KW)
    assert b.range == [128, 256] and b.verify()["keys"] == 1
    b.close()
    with pytest.raises(MismatchError, match="key range"):
        ShardActor(str(d), 1, 1, KW, [100, 256]).verify()


def test_shard_of_unequal_range_verifies_its_bounds_and_splits_in_halves(tmp_path, rng):
    """A shard of range [0x13, 0x40): verify finds a key just below or at its upper
    bound; its split writes each key into the half holding it; a one-group range
    cannot be split."""
    lo, hi = 0x13 << 56, 0x40 << 56
    a = ShardActor(str(tmp_path / "p"), 0, 1, KW, [0x13, 0x40])
    a.create(DEFAULT_LAYOUT.to_dict(), "safe-v1")
    k = rng.integers(lo, hi, 5000, dtype=np.uint64)
    k[:2] = [lo, hi - 1]
    a.admit("b", k)
    assert a.verify()["keys"] == len(uniq(k))
    kids = [str(tmp_path / "c0"), str(tmp_path / "c1")]
    res = a.split_into(kids, 1000)
    assert res["ranges"] == [[0x13, 0x29], [0x29, 0x40]]
    assert sum(res["children"]) == res["parent"] == len(uniq(k))
    for j, d in enumerate(kids):
        c = ShardActor(d, j, 2, KW, res["ranges"][j])
        c_lo, c_hi = res["ranges"][j][0] << 56, res["ranges"][j][1] << 56
        inside = uniq(k[(k >= c_lo) & (k < c_hi)])
        assert c.verify()["keys"] == len(inside) and c.contains(inside).tolist() == inside.tolist()
        c.close()
    a.close()
    for j, bad in enumerate((lo - 1, hi)):
        b = ShardActor(str(tmp_path / f"bad{j}"), 0, 1, KW, [0x13, 0x40])
        b.create(DEFAULT_LAYOUT.to_dict(), "safe-v1")
        b.admit("b", k[:10])
        b.store.add(np.array([bad], dtype=np.uint64))  # behind the protocol
        with pytest.raises(CorruptionError, match="outside shard 0"):
            b.verify()
        b.close()
    one = ShardActor(str(tmp_path / "one"), 0, 1, KW, [0, 1])
    one.create(DEFAULT_LAYOUT.to_dict(), "safe-v1")
    with pytest.raises(InvalidInputError, match="cannot be split"):
        one.split_into([str(tmp_path / "x0"), str(tmp_path / "x1")], 1000)
    one.close()


@pytest.mark.parametrize("shards", [[], [1, 2], [{"dir": "a"}] * 3, "x", [{"dir": 5}]])
def test_cluster_file_without_a_shard_list_refused(tmp_path, shards):
    from seenstore.cluster.sharded import read_cluster

    write_sealed(str(tmp_path / "CLUSTER"), "seenstore-cluster", {"shards": shards}, False, 2)
    with pytest.raises(CorruptionError, match="shards"):
        read_cluster(str(tmp_path))


@pytest.mark.parametrize("size", [1, 3, 4, 1000])
def test_split_regroups_the_store_chunks_into_commits_of_chunk_keys(size):
    """A split commits a child's keys ``chunk_keys`` at a time, whatever the sizes of
    the chunks the store yields: the same keys in order, every commit full but the last."""
    from seenstore.cluster.actor import _regrouped

    parts = [np.arange(a, b, dtype=np.uint64) for a, b in [(0, 5), (5, 5), (5, 6), (6, 14)]]
    got = [c.copy() for c in _regrouped(iter(parts), size)]
    assert np.concatenate(got).tolist() == list(range(14))
    assert all(len(c) == size for c in got[:-1]) and 0 < len(got[-1]) <= size
    assert list(_regrouped(iter([]), size)) == []
