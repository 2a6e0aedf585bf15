"""DedupStage against a Python set oracle: random interleavings of offer/poll/flush,
clean reopen and crash-like reopen (WAL replay), tiny budgets so merges run often."""

import numpy as np
import pytest
from conftest import EDGE_KEYS, request_cleanup
from hypothesis import example, given, settings
from hypothesis import strategies as st

from seenstore.store import wal
from seenstore.errors import InvalidInputError, LockedError, MismatchError
from seenstore.layout import Layout
from seenstore.url.policy import parse_policy
from seenstore.stage import DedupStage
from seenstore.store import SeenStore

UNIVERSE = list(range(200)) + EDGE_KEYS
key_st = st.one_of(st.integers(0, 199), st.sampled_from(EDGE_KEYS))
op_st = st.one_of(
    st.tuples(st.just("offer"), st.lists(key_st, max_size=25)),
    st.tuples(st.just("offer_no_payload"), st.lists(key_st, max_size=25)),
    st.tuples(st.just("flush")), st.tuples(st.just("poll")),
    st.tuples(st.just("reopen")), st.tuples(st.just("crash")))
config_st = st.fixed_dictionaries({
    "budget_bytes": st.integers(1, 40).map(lambda n: 8 * n),
    "cache_keys": st.sampled_from([0, 2, 8, 256]),
    "bloom_fpr": st.sampled_from([0.5, 0.05, 1e-3]),  # 0.5: most keys are held
    "bloom_capacity": st.sampled_from([16, 1000]),
})


def open_stage(path, cfg, mode="exact", **kw):
    return DedupStage.open(path, create=True, mode=mode, shard_bits=1, sync=False,
                           wal_sync=wal.SYNC_NEVER, **cfg, **kw)


class Oracle:
    """What a correct stage may hand out: each offered key not stored before, exactly
    once, with the payload of its first offer; all of them once flushed."""

    def __init__(self, pre):
        self.pre = set(pre)
        self.handed = {}
        self.first = {}  # key -> payload of its first offer not forgotten since

    def offer(self, keys, payloads):
        for k, p in zip(keys, payloads):
            self.first.setdefault(k, p)

    def take(self, res, check_payload=True):
        assert len(res.keys) == len(set(res.keys.tolist()))
        if res.payloads is not None:
            assert len(res.payloads) == len(res.keys)
        for k, p in res:
            assert k not in self.handed, f"key {k} handed out twice"
            assert k not in self.pre and k in self.first
            if check_payload:
                assert p == self.first[k]
            self.handed[k] = p

    def unhanded(self):
        return [k for k in self.first if k not in self.handed and k not in self.pre]

    def check_complete(self):
        assert self.unhanded() == []

    def forget_unhanded(self, stage):
        """After a crash: a key offered but never handed out is either forgotten
        (not in the store: it may be handed out later) or was never new."""
        left = self.unhanded()
        if left:
            assert not stage.store.contains(np.array(left, dtype=np.uint64)).any()
        for k in left:
            del self.first[k]


def preloaded(tmp_path_factory, pre):
    """A fresh store holding ``pre`` and an oracle that knows it."""
    path = str(request_cleanup(tmp_path_factory.mktemp("stage")) / "s")
    with SeenStore.open(path, create=True, shard_bits=1, sync=False) as s:
        s.add(np.array(pre, dtype=np.uint64))
    return path, Oracle(pre)


@settings(max_examples=60, deadline=None)
@given(cfg=config_st, pre=st.lists(key_st, max_size=30), ops=st.lists(op_st, max_size=20))
def test_exact_stage_matches_set_oracle(tmp_path_factory, cfg, pre, ops):
    path, oracle = preloaded(tmp_path_factory, pre)
    stage = open_stage(path, cfg)
    try:
        for step, (op, *args) in enumerate(ops):
            if op.startswith("offer"):
                keys = args[0]
                payloads = [f"{step}:{i}" for i in range(len(keys))]
                oracle.offer(keys, payloads if op == "offer" else [None] * len(keys))
                oracle.take(stage.offer(np.array(keys, dtype=np.uint64),
                                        payloads if op == "offer" else None))
            elif op == "poll":
                oracle.take(stage.poll())
            elif op == "flush":
                oracle.take(stage.flush())
                oracle.check_complete()
            elif op == "reopen":
                oracle.take(stage.close())
                oracle.check_complete()
                stage = open_stage(path, cfg)
            else:  # crash-like: buffered admitted keys only in the WAL, held ones dropped
                oracle.take(stage.close(flush=False))
                stage = open_stage(path, cfg)
                oracle.forget_unhanded(stage)
                if oracle.handed:
                    assert stage.store.contains(np.array(list(oracle.handed), np.uint64)).all()
        oracle.take(stage.flush())
        oracle.check_complete()
        stored = stage.store.contains(np.array(UNIVERSE, dtype=np.uint64))
        assert stored.tolist() == [k in oracle.pre or k in oracle.handed for k in UNIVERSE]
        s = stage.stats()
        assert s["anomalies"] == 0
        assert s["wal_bytes"] == 0  # every segment merged and removed
    finally:
        stage.close()


@settings(max_examples=25, deadline=None)
@given(cfg=config_st, pre=st.lists(key_st, max_size=30), ops=st.lists(op_st, max_size=15))
@example(cfg={"budget_bytes": 8, "cache_keys": 0, "bloom_fpr": 0.5, "bloom_capacity": 1000},
         pre=[162], ops=[("offer", [97]), ("reopen",)])  # skipped by the first stage
def test_approximate_stage_never_hands_out_twice(tmp_path_factory, cfg, pre, ops):
    path, oracle = preloaded(tmp_path_factory, pre)
    stage = open_stage(path, cfg, mode="approximate")
    answered = 0  # Bloom-only answers of every stage opened here (stats are per stage)
    try:
        for step, (op, *args) in enumerate(ops):
            if op.startswith("offer"):
                keys = args[0]
                oracle.offer(keys, [None] * len(keys))
                oracle.take(stage.offer(np.array(keys, dtype=np.uint64)))
            elif op in ("flush", "poll"):
                oracle.take(getattr(stage, op)())
            else:
                answered += stage.stats()["approx_answered"]
                oracle.take(stage.close(flush=op == "reopen"))
                stage = open_stage(path, cfg, mode="approximate")
        oracle.take(stage.flush())
        if oracle.handed:  # every key handed out is recorded, whatever the Bloom says
            assert stage.store.contains(np.array(list(oracle.handed), np.uint64)).all()
        s = stage.stats()
        skipped = len(oracle.unhanded())
        assert skipped <= answered + s["approx_answered"]  # only Bloom positives may be skipped
        assert s["anomalies"] == 0
        # flushed: this session's Bloom-only answers are in the store's durable counter
        assert stage.store.stats()["counters"]["approx_answered"] >= s["approx_answered"]
    finally:
        stage.close()


def test_bloom_positive_is_held_and_resolved_by_merge(store_dir):
    # fpr 0.5 and a store full of keys: most fresh keys are Bloom positives
    with SeenStore.open(store_dir, create=True, shard_bits=0, sync=False) as s:
        s.add(np.arange(1000, 3000, dtype=np.uint64))
    stage = DedupStage.open(store_dir, budget_bytes=1 << 20, sync=False, bloom_fpr=0.5,
                            bloom_capacity=2000, wal_sync=wal.SYNC_NEVER)
    offered = np.concatenate([np.arange(0, 1000), np.arange(1000, 1500)]).astype(np.uint64)
    first = stage.offer(offered, [f"p{k}" for k in offered.tolist()])
    st = stage.stats()
    assert 0 < st["held"] and st["admitted_now"] == len(first) == first.now
    assert set(first.keys.tolist()) < set(range(1000))
    later = stage.flush()
    assert later.now == 0
    got = sorted(first.keys.tolist() + later.keys.tolist())
    assert got == list(range(1000))  # held fresh keys came back; stored ones never
    assert all(p == f"p{k}" for k, p in later)
    st = stage.stats()
    assert st["admitted_after_merge"] == len(later) and st["held_seen"] == 500
    assert st["answered_without_waiting"] == pytest.approx(1 - st["held"] / 1500)
    stage.close()


def test_cache_answers_repeats_and_reports_hit_rate(store_dir):
    stage = DedupStage.open(store_dir, create=True, cache_keys=1 << 12, sync=False,
                            wal_sync=wal.SYNC_NEVER)
    keys = np.arange(100, dtype=np.uint64)
    assert len(stage.offer(keys)) == 100
    for _ in range(3):
        assert len(stage.offer(keys)) == 0
    st = stage.stats()
    assert st["cache_lookups"] == 400 and st["cache_hits"] >= 250
    assert st["cache_hit_rate"] == st["cache_hits"] / 400
    assert st["held"] == 0  # every repeat answered by the cache, none waits (no collision)
    stage.close()


def test_in_call_repeats_first_occurrence_wins(store_dir):
    stage = DedupStage.open(store_dir, create=True, sync=False, wal_sync=wal.SYNC_NEVER)
    keys = np.array([5, 0, 5, 2**64 - 1, 0, 5], dtype=np.uint64)
    res = stage.offer(keys, list("abcdef"))
    assert list(res) == [(5, "a"), (0, "b"), (2**64 - 1, "d")]
    assert stage.stats()["in_call_duplicates"] == 3
    stage.close()


def test_urls_are_normalised_and_the_canonical_url_is_the_payload(store_dir):
    stage = DedupStage.open(store_dir, create=True, sync=False, wal_sync=wal.SYNC_NEVER)
    urls = ["HTTP://Example.com:80/a", "http://example.com/a#x", "mailto:me@x.org",
            "https://example.com/b"]
    res = stage.offer(urls)
    assert [p for _, p in res] == ["http://example.com/a", "https://example.com/b"]
    assert [(i, r.value) for i, r in res.rejected] == [(2, "scheme")]
    res = stage.offer(["../c/./d", "e?x=%7e"], base="http://example.com/a/b")
    assert [p for _, p in res] == ["http://example.com/c/d", "http://example.com/a/e?x=~"]
    res = stage.offer(["http://example.com/f", "bad:"], payloads=["id-f", "id-bad"])
    assert list(res) == [(res.keys[0], "id-f")]  # a caller's payloads instead
    big = [f"http://h{i % 7}.test/p{i}" for i in range(200)]  # the batch fast path
    res = stage.offer(big + big, payloads=big + big)
    assert [p for _, p in res] == big
    assert len(stage.offer(["HTTP://H3.test/p3", "http://h3.test/p3#z"] * 40)) == 0
    assert len(stage.offer("https://example.com/b")) == 0  # a single str is one URL
    stage.close()


def test_url_offers_need_the_store_policy(store_dir):
    pol = parse_policy('version = "t1"\n[[rule]]\nhosts = ["*.test"]\nsort_query = true\n')
    with SeenStore.open(store_dir, create=True, policy_id=pol.identity, sync=False):
        pass
    stage = DedupStage.open(store_dir, sync=False, wal_sync=wal.SYNC_NEVER)
    with pytest.raises(MismatchError, match="policy"):
        stage.offer(["http://a.test/"])
    stage.close()
    with DedupStage.open(store_dir, policy=pol, sync=False, wal_sync=wal.SYNC_NEVER) as stage:
        assert len(stage.offer(["http://a.test/?b=1&a=2", "http://a.test/?a=2&b=1"])) == 1
        stage.flush()


def test_second_stage_on_the_same_store_is_locked_out(store_dir):
    stage = DedupStage.open(store_dir, create=True, sync=False, wal_sync=wal.SYNC_NEVER)
    with pytest.raises(LockedError):
        DedupStage.open(store_dir, sync=False)
    with pytest.raises(LockedError):
        SeenStore.open(store_dir)
    stage.close()
    DedupStage.open(store_dir, sync=False).close()


def test_host_caps_refuse_beyond_the_cap_per_bucket(store_dir):
    layout = Layout(host_bits=8)
    stage = DedupStage.open(store_dir, create=True, layout=layout, host_cap=3, bloom_fpr=0.5,
                            bloom_capacity=16, budget_bytes=64, sync=False,
                            wal_sync=wal.SYNC_NEVER)
    handed, offered = [], []
    rng = np.random.default_rng(3)
    for _ in range(20):  # 4 host buckets, many URLs each; offers and merges interleave
        host = rng.integers(0, 4, 10).astype(np.uint64)
        keys = (host << np.uint64(56)) | rng.integers(0, 50, 10).astype(np.uint64)
        offered.append(keys)
        handed += stage.offer(keys).keys.tolist()
    handed += stage.flush().keys.tolist()
    per_host = np.bincount(np.array(handed, dtype=np.uint64) >> np.uint64(56), minlength=4)
    assert per_host.tolist() == [3, 3, 3, 3]
    st = stage.stats()
    assert st["refused_by_cap"] > 0 and st["hosts_at_cap"] == 4
    assert len(set(handed)) == len(handed)
    stage.close()
    # refused keys are consumed: recorded as seen, never handed out later, even uncapped
    with DedupStage.open(store_dir, sync=False, wal_sync=wal.SYNC_NEVER) as stage:
        assert len(stage.offer(np.concatenate(offered))) == 0
        assert len(stage.flush()) == 0
    with DedupStage.open(store_dir, host_cap=0, sync=False, wal_sync=wal.SYNC_NEVER) as stage:
        assert len(stage.offer(np.array([5 << 56, 2**64 - 1], dtype=np.uint64))) == 0
        assert stage.stats()["refused_by_cap"] == 2


def test_bad_arguments_are_typed_errors(store_dir):
    for kw in ({"mode": "fuzzy"}, {"budget_bytes": 4}, {"cache_keys": -1}, {"host_cap": -2},
               {"wal_sync": "sometimes"}):
        with pytest.raises(InvalidInputError):
            DedupStage.open(store_dir, create=True, sync=False, **kw)
    stage = DedupStage.open(store_dir, create=True, sync=False, wal_sync=wal.SYNC_NEVER)
    with pytest.raises(InvalidInputError):
        stage.offer(np.array([1, 2], dtype=np.int64))
    with pytest.raises(InvalidInputError):
        stage.offer(np.array([1, 2], dtype=np.uint64), ["only one"])
    assert len(stage.offer(np.array([1, 2], dtype=np.uint64))) == 2  # still usable
    stage.close()
    with pytest.raises(InvalidInputError, match="closed"):
        stage.offer([1])


def test_wal_holds_admitted_keys_until_their_merge(store_dir):
    stage = DedupStage.open(store_dir, create=True, budget_bytes=1 << 20, sync=False)
    res = stage.offer(np.array([10, 20, 30], dtype=np.uint64))
    segs = wal.list_segments(stage.store.path)
    assert len(segs) == 1 and wal.read_segment(segs[0][1])[0].tolist() == [10, 20, 30]
    assert stage.stats()["wal_fsyncs"] >= 2  # segment creation + the offer (policy "always")
    assert len(stage.store) == 0  # not merged yet ...
    assert stage.store.contains(res.keys).all()  # ... but contains counts WAL keys
    stage.close(flush=False)
    stage = DedupStage.open(store_dir, sync=False)
    assert stage.replay["keys"] == 3 and stage.replay["merged_new"] == 3
    assert stage.store.contains(res.keys).all() and wal.list_segments(store_dir) == []
    assert len(stage.offer(np.array([10, 20, 30, 40], dtype=np.uint64))) == 1
    stage.close()


def test_a_backlog_larger_than_the_budget_merges_spilled(store_dir, monkeypatch):
    """One offer of 5x the keys a buffer holds (stored keys among them, held as Bloom
    positives, with payloads): its merge goes through SeenStore.add_new_file with the
    stage's budget (spill.py), and hands out exactly what the in-memory merge would:
    every fresh key once, with its payload, never a stored one."""
    from seenstore.store import buckets, spill
    from seenstore import stage as stagemod

    stored = np.arange(1, 200_001, dtype=np.uint64) * np.uint64(7919)
    with SeenStore.open(store_dir, create=True, shard_bits=2, sync=False) as s:
        s.add(stored)
    calls = []
    real = spill.admit_file
    monkeypatch.setattr(spill, "admit_file", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    budget = 1 << 17  # 16384 keys per buffer: the offer below is 5x past SPILL_BUFFERS
    stage = DedupStage.open(store_dir, budget_bytes=budget, sync=False, bloom_fpr=0.3,
                            cache_keys=0, wal_sync=wal.SYNC_NEVER)
    rng = np.random.default_rng(3)
    fresh = rng.integers(2**40, 2**64, 60_000, dtype=np.uint64)
    offered = np.concatenate([fresh, stored[:20_000], fresh[:2_000]])
    rng.shuffle(offered)
    assert len(offered) > stagemod.SPILL_BUFFERS * stage.buffer_keys
    first = stage.offer(offered, [f"p{k}" for k in offered.tolist()])
    later = stage.flush()
    st = stage.stats()
    assert st["spilled_merges"] == 1 and calls == [buckets.MIN_MEMORY]
    got = first.keys.tolist() + later.keys.tolist()
    assert sorted(got) == sorted(set(fresh.tolist()))  # each fresh key once, no stored one
    assert st["held"] > 0 and st["anomalies"] == 0
    assert all(p == f"p{k}" for k, p in list(first) + list(later))
    stage.close()
    with SeenStore.open(store_dir, readonly=True) as s:
        assert s.contains(fresh).all() and len(s) == len(stored) + len(set(fresh.tolist()))


def test_mark_takes_a_state_by_name_and_refuses_an_unknown_one(tmp_path):
    """``mark`` checks its state before it merges anything: an unknown one is
    InvalidInputError naming the states, and nothing is marked."""
    from seenstore.frontier.state import State

    urls = [f"http://m.example/{i}" for i in range(6)]
    with DedupStage.open(str(tmp_path / "s"), create=True, values=True, sync=False,
                         wal_sync="never") as stage:
        assert len(list(stage.offer(urls))) == 6
        assert stage.mark(urls[:2], "in_flight") == 2
        assert stage.mark(urls[2:3], 2, status=200) == 1
        for bad in (9, "LOST", -1):
            with pytest.raises(InvalidInputError, match="unknown state"):
                stage.mark(urls, bad)
        counts = stage.counts()
        assert counts[State.IN_FLIGHT] == 2 and counts[State.DONE] == 1
        assert counts[State.QUEUED] == 3
