"""ShardedStore on a local Ray cluster started here (127.0.0.1, 2 CPUs): the same
answers as one SeenStore for 1, 2, 4 and 8 shards; exactly-once batches through
actor kills (ray.kill, SIGKILL at random moments and at every step of the answer
protocol); a shard started anew in another process loses nothing; split N -> 2N;
a DedupStage and Ray Data on top; the CLI."""

import os
import random
import signal
import threading

import numpy as np
import pytest
import ray
from click.testing import CliRunner
from conftest import EDGE_KEYS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seenstore.cli import main
from seenstore.cluster import ShardedStore, dedup, dedup_stage, split
from seenstore.cluster.sharded import read_cluster
from seenstore.errors import InvalidInputError, MismatchError
from seenstore.store import SeenStore
from naive import uniq

pytestmark = pytest.mark.slow


def spread_keys(rng, n, pool=None):
    """Keys over the whole top-bit range, with repeats."""
    k = rng.integers(0, 2**64, n, dtype=np.uint64)
    if pool is not None and len(pool) and n:
        idx = rng.integers(0, n, n // 3)
        k[idx] = rng.choice(pool, len(idx))
    return k


def skewed_sample(rng, hot_group, share, n=4000):
    """Keys whose top 8 bits are ``hot_group`` for ``share`` of them, else anything:
    balanced ranges cut from it are unequal, some one group wide."""
    k = rng.integers(0, 2**64, n, dtype=np.uint64)
    hot = rng.random(n) < share
    k[hot] = (k[hot] & np.uint64(2**56 - 1)) | np.uint64(hot_group << 56)
    return k


class Twin:
    """A plain SeenStore and sharded ones fed the same calls (``samples[n]``: the
    n-shard store's ranges are cut from it; else equal ranges)."""

    def __init__(self, tmp, shard_counts, samples=None):
        self.plain = SeenStore.open(str(tmp / "plain"), create=True, sync=False)
        self.sharded = [ShardedStore.open(str(tmp / f"c{n}"), shards=n, create=True,
                                          sync=False, sample=(samples or {}).get(n))
                        for n in shard_counts]

    def close(self):
        self.plain.close()
        for s in self.sharded:
            s.close()


# ------------------------------------------------------------------ oracle
key_st = st.one_of(st.sampled_from(EDGE_KEYS), st.integers(0, 2**64 - 1),
                   st.integers(0, 15).map(lambda t: (t << 60) | 5))
op_st = st.tuples(st.sampled_from(["add", "add_new", "contains"]),
                  st.lists(key_st, max_size=40))


@pytest.fixture(scope="module")
def twins(ray_cluster, tmp_path_factory):
    rng = np.random.default_rng(1)  # 2 and 8 shards: unequal ranges (split: equal ones)
    t = Twin(tmp_path_factory.mktemp("oracle"), [1, 2, 8],
             {2: skewed_sample(rng, 0x31, 0.4), 8: skewed_sample(rng, 0x85, 0.6)})
    assert t.sharded[1].ranges == [[0, 0x32], [0x32, 256]]
    assert [hi - lo for lo, hi in t.sharded[2].ranges] == [85, 48, 1, 1, 1, 1, 37, 82]
    yield t
    t.close()


@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op_st, min_size=1, max_size=6))
def test_same_answers_as_one_store(twins, ops):
    """Every call on 1, 2 and 8 shards answers what the single store answers (the
    stores carry their state from one example to the next: still equal by induction)."""
    for op, keys in ops:
        k = np.array(keys, dtype=np.uint64)
        want = getattr(twins.plain, op)(k)
        for s in twins.sharded:
            got = getattr(s, op)(k)
            assert got.dtype == want.dtype and np.array_equal(got, want), (op, len(s.actors))
    for s in twins.sharded:
        assert len(s) == len(twins.plain)


def test_sorted_and_bloom_calls_match(twins):
    rng = np.random.default_rng(3)
    k = uniq(spread_keys(rng, 3000))
    want = twins.plain.add_sorted(k.copy())
    for s in twins.sharded:
        assert np.array_equal(s.add_sorted(k), want)
    assert twins.sharded[2].maybe_contains(k[:200]).all()  # admitted: never "certainly new"
    assert twins.sharded[2].verify()["keys"] == len(twins.sharded[2])


# --------------------------------------------------------- exactly once
def test_batch_id_retry_returns_first_answer(twins):
    """A batch delivered twice (the reply lost) gets its first answer until the client
    acknowledges it; an id reused for other keys is refused."""
    k = spread_keys(np.random.default_rng(5), 5000)  # random 64-bit keys: none stored yet
    shard = twins.sharded[0].actors[0]
    first = ray.get(shard.admit.remote("b-1", k))
    again = ray.get(shard.admit.remote("b-1", k))  # a fresh batch would find none new
    assert len(first) == len(uniq(k)) and np.array_equal(first, again)
    with pytest.raises(InvalidInputError, match="other keys"):
        try:
            ray.get(shard.admit.remote("b-1", k[:10]))
        except ray.exceptions.RayTaskError as e:
            raise e.cause from None
    ray.get(shard.ack.remote(["b-1"]))
    assert len(ray.get(shard.admit.remote("b-1", k))) == 0  # acknowledged: a fresh batch
    twins.plain.add(k)  # keep the twins equal
    for s in twins.sharded[1:]:
        s.add(k)


def test_forget_across_shards_equals_one_store_and_keeps_retried_answers(twins):
    """``forget`` on 1, 2 and 8 shards forgets what the single store forgets (count,
    ``contains``, ``len``; the forgotten keys are new again when offered), and a batch
    id answered before the forget still gets its first answer on a retry."""
    rng = np.random.default_rng(11)
    k = uniq(spread_keys(rng, 4000))
    want_new = twins.plain.add(k)
    shard = twins.sharded[0].actors[0]  # the one shard of its store: every key is its
    first = ray.get(shard.admit.remote("f-1", k))
    for s in twins.sharded:
        s.add(k)
    gone = np.concatenate([k[::3], spread_keys(rng, 50)])  # and keys never stored
    n = twins.plain.forget(gone)
    assert n == len(k[::3]) and want_new.any()
    for s in twins.sharded:
        assert s.forget(gone) == n, len(s.actors)
        assert s.forget(gone) == 0  # idempotent
        assert np.array_equal(s.contains(k), twins.plain.contains(k))
        assert len(s) == len(twins.plain)
    assert np.array_equal(ray.get(shard.admit.remote("f-1", k)), first)  # its first answer
    ray.get(shard.ack.remote(["f-1"]))
    again = twins.plain.add(k)
    assert again.sum() == n
    for s in twins.sharded:
        assert np.array_equal(s.add(k), again), len(s.actors)


FAULTS = ["after-pending", "before-manifest", "after-manifest", "after-commit"]


def test_kill_at_every_protocol_step(twins):
    """SIGKILL of one shard's worker at each step of a batch: Ray restarts the actor,
    the client resends the same batch id, the answers equal a single store's."""
    rng = np.random.default_rng(7)
    s, plain = twins.sharded[1], twins.plain
    pool = np.empty(0, dtype=np.uint64)
    for i, point in enumerate(FAULTS):
        k = spread_keys(rng, 4000, pool)
        pool = np.concatenate([pool, k[:500]])
        victim = s.actors[i % 2]
        ray.get(victim.arm_fault.remote(point))
        pid = ray.get(victim.pid.remote())
        assert np.array_equal(s.add(k), plain.add(k)), point
        assert ray.get(victim.pid.remote()) != pid, f"{point}: the worker was not killed"
    assert s.verify()["keys"] == len(plain)
    assert s.contains(pool).all()


def _kill_later(fn, delay):
    t = threading.Timer(delay, fn)
    t.start()
    return t


@pytest.mark.parametrize("how", ["ray.kill", "sigkill"])
def test_kill_at_random_moments(twins, how):
    """The worker of a shard killed at a random moment of a batch (ray.kill with
    restart, or SIGKILL of its pid): the same answers as one store, and it verifies."""
    rnd = random.Random(how)
    rng = np.random.default_rng(11)
    s, plain = twins.sharded[1], twins.plain
    pool = np.empty(0, dtype=np.uint64)
    for _ in range(2):
        k = spread_keys(rng, 200_000, pool)
        pool = np.concatenate([pool, k[:1000]])
        victim = s.actors[rnd.randrange(2)]
        if how == "ray.kill":
            timer = _kill_later(lambda: ray.kill(victim, no_restart=False), rnd.uniform(0, 0.3))
        else:
            pid = ray.get(victim.pid.remote())
            timer = _kill_later(lambda: os.kill(pid, signal.SIGKILL), rnd.uniform(0, 0.3))
        got = s.add(k)
        timer.join()
        assert np.array_equal(got, plain.add(k))
    assert s.verify()["keys"] == len(plain)
    assert s.contains(pool).all()


def test_dead_shard_started_in_new_process_loses_nothing(twins):
    """A shard whose actor is gone for good (its node died) is started anew in another
    process on the same directory: the batch in flight gets its answer, nothing is lost;
    then the whole cluster reopens in new processes."""
    rng = np.random.default_rng(13)
    s, plain = twins.sharded[1], twins.plain
    k = spread_keys(rng, 20_000)
    assert np.array_equal(s.add(k), plain.add(k))
    old = ray.get(s.actors[1].pid.remote())
    ray.kill(s.actors[1], no_restart=True)  # gone for good: the client starts it anew
    k2 = spread_keys(rng, 20_000, k)
    assert np.array_equal(s.add(k2), plain.add(k2))
    assert ray.get(s.actors[1].pid.remote()) != old and s.counters["revived"] >= 1
    s.close()
    twins.sharded[1] = s = ShardedStore.open(s.root)  # new processes, same directories
    assert len(s) == len(plain) and s.contains(np.concatenate([k, k2])).all()
    k3 = spread_keys(rng, 1000, k2)
    assert np.array_equal(s.add(k3), plain.add(k3))


# ------------------------------------------------------------------ split
def test_split_interrupted_then_done_keeps_every_key(ray_cluster, tmp_path):
    """Children written but CLUSTER not replaced (a crash): the old cluster is intact.
    The split run again replaces the leftovers, doubles the shards, keeps every key and
    removes the old directories; the answers go on equal to a single store's."""
    rng = np.random.default_rng(17)
    plain = SeenStore.open(str(tmp_path / "plain"), create=True, sync=False)
    root = str(tmp_path / "c")
    with ShardedStore.open(root, shards=1, create=True, sync=False) as s:
        k = spread_keys(rng, 20_000)
        s.add(k), plain.add(k)
        ray.get(s.actors[0].split_into.remote(
            [str(tmp_path / "c" / "shard-0000-of-0002"), str(tmp_path / "junk")], 1024))
    with ShardedStore.open(root) as s:
        assert len(s.actors) == 1 and s.contains(k).all()
    old_dirs = [d["dir"] for d in read_cluster(root)["shards"]]
    res = split(root, chunk_keys=4096, sync=False)  # several chunks per child
    assert res["shards_after"] == 2 and res["keys"] == len(plain)
    assert not any(os.path.exists(d) for d in old_dirs)
    with ShardedStore.open(root, shards=2) as s:
        assert s.verify()["keys"] == len(plain) and s.contains(k).all()
        k2 = spread_keys(rng, 5000, k)
        assert np.array_equal(s.add(k2), plain.add(k2))
    with pytest.raises(MismatchError):
        ShardedStore.open(root, shards=4)
    plain.close()


# ------------------------------------------------------------------ values
VALUE_POOL = [(g << 56) | (7 * g + j) for g in (0x05, 0x40, 0x41, 0x9C, 0xF0) for j in range(6)]
value_key_st = st.lists(st.sampled_from(VALUE_POOL), max_size=14)
value_op_st = st.one_of(
    st.tuples(st.just("add"), value_key_st, st.just({})),
    st.tuples(st.just("check_update"), value_key_st,
              st.fixed_dictionaries({"state": st.integers(0, 4),
                                     "next_due": st.integers(0, 30)})),
    st.tuples(st.just("update"), value_key_st,
              st.fixed_dictionaries({"state": st.integers(0, 4)},
                                    optional={"retries": st.integers(0, 255),
                                              "next_due": st.integers(0, 30)})))


@pytest.fixture(scope="module")
def value_twins(ray_cluster, tmp_path_factory):
    """A plain store with values and sharded ones (1 and 4 shards, unequal ranges)."""
    tmp = tmp_path_factory.mktemp("values")
    rng = np.random.default_rng(2)
    plain = SeenStore.open(str(tmp / "plain"), create=True, sync=False, values=True)
    sharded = [ShardedStore.open(str(tmp / f"v{n}"), shards=n, create=True, sync=False,
                                 values=True, sample=skewed_sample(rng, 0x40, 0.5))
               for n in (1, 4)]
    assert all(s.values for s in sharded) and len(sharded[1].ranges) == 4
    yield plain, sharded
    plain.close()
    for s in sharded:
        s.close()


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(value_op_st, min_size=1, max_size=6), now=st.integers(0, 30))
def test_values_across_shards_equal_one_store(value_twins, ops, now):
    """check_update / update (arrays where the field varies per key: a shard gets its
    keys' values) / add on 1 and 4 shards answer what one store with values answers,
    and then hold the same records: get, counts, select of every state, due."""
    plain, sharded = value_twins
    probe = np.array(VALUE_POOL, dtype=np.uint64)
    for op, keys, fields in ops:
        k = np.array(keys, dtype=np.uint64)
        if op == "update":  # arrays aligned with the keys: each shard gets its keys' part
            if "retries" in fields:
                fields = dict(fields, retries=(np.arange(len(k)) + fields["retries"]) % 256)
            if "next_due" in fields:  # due's order then mixes the shards' keys
                fields = dict(fields, next_due=(np.arange(len(k))[::-1] * 7
                                                + fields["next_due"]) % 31)
        want = getattr(plain, op)(k, **fields)
        for s in sharded:
            assert np.array_equal(getattr(s, op)(k, **fields), want), (op, len(s.actors))
    for s in sharded:
        got, want = s.get(probe), plain.get(probe)
        for name in want.dtype.names:
            assert got[name].tolist() == want[name].tolist(), (name, len(s.actors))
        assert s.counts() == plain.counts() and sum(s.counts().values()) == len(s)
        for state in range(5):
            assert s.select(state).tolist() == plain.select(state).tolist()
            assert s.select(state, limit=2).tolist() == plain.select(state, 2).tolist()
        assert s.due(now).tolist() == plain.due(now).tolist()
        assert s.due(now, limit=3).tolist() == plain.due(now, 3).tolist()


def test_values_check_update_retry_and_refusals(value_twins, tmp_path):
    """A check_update batch delivered twice gets its first answer and keeps its first
    records (the answer log's snapshot of a store with values); other fields under the
    same id are refused; value calls on a cluster without values, values=True on one,
    bad fields (before any shard sets one) and a split of a values shard are refused."""
    plain, sharded = value_twins
    shard = sharded[0].actors[0]
    k = spread_keys(np.random.default_rng(23), 3000)
    init = {"state": np.array(2, np.uint8), "next_due": np.array(9, np.int64)}
    first = ray.get(shard.admit.remote("v-1", k, False, [], init))
    again = ray.get(shard.admit.remote("v-1", k, False, [], init))
    assert len(first) == len(uniq(k)) and np.array_equal(first, again)
    with pytest.raises(InvalidInputError, match="other keys"):
        try:
            ray.get(shard.admit.remote("v-1", k, False, [], dict(init, next_due=np.int64(8))))
        except ray.exceptions.RayTaskError as e:
            raise e.cause from None
    ray.get(shard.ack.remote(["v-1"]))
    assert (sharded[0].get(k)["next_due"] == 9).all()
    plain.check_update(k, state=2, next_due=9)  # keep the twins equal
    sharded[1].check_update(k, state=2, next_due=9)
    with pytest.raises(InvalidInputError, match="out of range"):
        sharded[1].update(k[:5], state=[1, 1, 1, 1, 9])
    assert (sharded[1].get(k[:5])["state"] == 2).all()  # no shard set any
    from seenstore.errors import NotSupportedError

    root = str(tmp_path / "plain")
    with ShardedStore.open(root, shards=1, create=True, sync=False) as p:
        p.add(k[:10])
        with pytest.raises(NotSupportedError, match="no values"):
            p.counts()
    with pytest.raises(MismatchError, match="values"):
        ShardedStore.open(root, values=True)
    with pytest.raises(NotSupportedError, match="cannot be split"):
        try:
            ray.get(shard.split_into.remote([str(tmp_path / "x"), str(tmp_path / "y")], 64))
        except ray.exceptions.RayTaskError as e:
            raise e.cause from None


def test_frontier_stage_on_a_sharded_store_with_values(value_twins):
    """A DedupStage on a cluster with values keeps the crawl's frontier there: mark,
    counts, requeue (keys: shards keep no URLs). (Uses the 1-shard values twin last:
    the stage closes it.)"""
    from seenstore import State

    s = value_twins[1][0]
    stage = dedup_stage(s, budget_bytes=8 * 64, wal_sync="never")
    urls = [f"https://v{i % 3}.example/p/{i}" for i in range(40)]
    got = [u for _, u in stage.offer(urls)] + [u for _, u in stage.flush()]
    assert sorted(got) == sorted(urls)
    before = stage.counts()
    assert stage.mark(urls[:10], State.IN_FLIGHT) == 10
    assert stage.mark(urls[10:12], State.DONE, status=200) == 2
    now = stage.counts()
    assert now[State.IN_FLIGHT] == before[State.IN_FLIGHT] + 10
    assert sum(now.values()) == len(s)
    back = stage.requeue()
    assert len(back) == now[State.IN_FLIGHT] and back.dtype == np.uint64
    assert stage.counts()[State.IN_FLIGHT] == 0
    stage.close()


# ------------------------------------------------------------ stage, data
def test_dedup_stage_on_sharded_store(twins):
    """(Uses the 2-shard twin last: it no longer matches the plain store afterwards.)"""
    urls = [f"https://h{i % 7}.example/p/{i % 50}" for i in range(300)]
    s = twins.sharded[1]
    stage = dedup_stage(s, budget_bytes=8 * 64, wal_sync="never")
    got = [u for _, u in stage.offer(urls[:150])]
    got += [u for _, u in stage.offer(urls[150:])]
    got += [u for _, u in stage.flush()]
    assert sorted(got) == sorted(set(urls)) and len(got) == len(set(urls))
    assert len(stage.offer(urls).keys) == 0 and len(stage.flush().keys) == 0
    stage.close()


def test_ray_data_dedup(twins):
    """(Uses the 8-shard twin last: it no longer matches the plain store afterwards.)"""
    import ray.data

    urls = [f"https://site{i % 5}.example/a/{i % 40}" for i in range(200)] + ["mailto:x@y"]
    s = twins.sharded[2]
    ds = ray.data.from_items([{"url": u, "n": i} for i, u in enumerate(urls)])
    rows = dedup(ds, column="url", store=s, batch_size=64).take_all()
    assert sorted(r["url"] for r in rows) == sorted(set(urls) - {"mailto:x@y"})
    assert dedup(ds, column="url", store=s).count() == 0


def test_a_closed_sharded_store_refuses_every_call(ray_cluster, tmp_path):
    """After close (its actors stopped), or in a copy taken after it (a Ray Data task),
    a call raises ClosedError: it never answers from no shard (every key "seen")."""
    import ray.data

    from seenstore.errors import ClosedError

    st = ShardedStore.open(str(tmp_path / "c"), shards=2, create=True, sync=False)
    st.add(np.arange(5, dtype=np.uint64))
    st.close()
    st.close()  # twice: nothing more to do
    keys = np.arange(10, dtype=np.uint64)
    for call in (st.add, st.add_new, st.contains, st.maybe_contains):
        with pytest.raises(ClosedError, match="closed"):
            call(keys)
    with pytest.raises(ClosedError):
        len(st)
    ds = ray.data.from_items([{"url": "https://a.example/x"}])
    with pytest.raises(Exception, match="closed"):
        dedup(ds, column="url", store=st).take_all()


# -------------------------------------------------------------------- CLI
def test_cli_cluster_commands_and_bench(ray_cluster, tmp_path):
    root = str(tmp_path / "c")
    r = CliRunner()
    out = r.invoke(main, ["cluster", "create", root, "--shards", "1"])
    assert out.exit_code == 0, out.output
    out = r.invoke(main, ["cluster", "split", root])
    assert out.exit_code == 0 and "1 -> 2 shards" in out.output, out.output
    out = r.invoke(main, ["cluster", "stats", root, "--json"])
    assert out.exit_code == 0 and '"shards": 2' in out.output, out.output
    out = r.invoke(main, ["cluster", "split", str(tmp_path / "none")])
    assert out.exit_code == 3 and out.output.startswith("seenstore: error:"), out.output
    out = r.invoke(main, ["bench", "--keys", "3e4", "--batch", "1e4", "--shards", "1",
                          "--quiet", "--dir", str(tmp_path / "b")])
    assert out.exit_code == 0 and "VERIFIED" in out.output, out.output


def test_shards_on_one_node_share_the_run_cache_budget(ray_cluster, tmp_path):
    """Two shards on this one node: each store's run cache gets half the store's
    default budget (not a quarter of the node's memory each); cache_bytes= sets it for
    every shard."""
    from seenstore.store.runcache import default_budget

    st = ShardedStore.open(str(tmp_path / "c"), shards=2, create=True)
    try:
        budgets = [s["run_cache"]["budget_bytes"] for s in st.shard_stats()]
    finally:
        st.close()
    want = default_budget() // 2  # the node's memory moves a little between the two reads
    assert len(budgets) == 2 and all(0.7 * want <= b <= 1.3 * want for b in budgets), \
        (budgets, want)
    st = ShardedStore.open(str(tmp_path / "c"), cache_bytes=12_345_678)
    try:
        assert [s["run_cache"]["budget_bytes"] for s in st.shard_stats()] == [12_345_678] * 2
    finally:
        st.close()
    with pytest.raises(InvalidInputError):
        ShardedStore.open(str(tmp_path / "c"), cache_bytes=-1)
