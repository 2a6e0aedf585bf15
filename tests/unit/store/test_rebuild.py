"""A policy change rebuilds: afterwards the store answers as a fresh store fed the
kept URLs under the new policy (hypothesis, against that oracle and a set of
keys); a store without kept URLs refuses; a kill at any step of a rebuild
leaves the old policy with the old keys or the new policy with the new keys."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from conftest import REPO, request_cleanup
from seenstore.errors import PolicyError
from seenstore.store import SeenStore
from seenstore.store.urls import kept_files
from seenstore.url.fingerprint import fingerprint_many
from seenstore.url.normalise import Rejection, try_normalise
from seenstore.url.policy import DEFAULT_POLICY, parse_policy

RULES = [
    'strip_params = ["sid"]', "sort_query = true", 'trailing_slash = "remove"',
    'trailing_slash = "add"', "strip_www = true", "strip_tracking = true",
]
HOSTS = ["a.test", "www.a.test", "b.test", "www.c.test", "c.test"]
PATHS = ["/", "/x", "/x/", "/x?b=1&a=2", "/x?a=2&b=1", "/y?sid=1", "/y?sid=2", "/y",
         "/z?utm_source=q", "/z"]


def policy_of(picks: list[int], hosts: str = "*"):
    if not picks:
        return DEFAULT_POLICY
    body = "\n".join(RULES[i] for i in sorted(set(picks)) if not (
        i == 3 and 2 in picks))  # one trailing_slash mode
    return parse_policy(f'version = "p"\n[[rule]]\nhosts = ["{hosts}"]\n{body}\n')


def kept(store) -> list[str]:
    return [u.decode() for f in kept_files(store) for b in f.iter_all() for u in b]


def stored(store) -> set:
    return set(np.concatenate(list(store.iter_keys()) or [np.empty(0, np.uint64)]).tolist())


def keys_under(urls, policy) -> set:
    forms = [try_normalise(u, None, policy) for u in urls]
    return set(fingerprint_many([f for f in forms if not isinstance(f, Rejection)]).tolist())


url_st = st.builds(lambda h, p: f"http://{h}{p}", st.sampled_from(HOSTS), st.sampled_from(PATHS))


@settings(max_examples=30, deadline=None)
@given(batches=st.lists(st.lists(url_st, min_size=1, max_size=25), min_size=1, max_size=3),
       old=st.lists(st.integers(0, len(RULES) - 1), max_size=3),
       new=st.lists(st.integers(0, len(RULES) - 1), max_size=3),
       shard_bits=st.sampled_from([0, 2, 4]))
def test_rebuild_equals_a_fresh_store_fed_the_kept_urls(tmp_path_factory, batches, old, new,
                                                        shard_bits):
    base = request_cleanup(tmp_path_factory.mktemp("r"))
    p_old, p_new = policy_of(old), policy_of(new)
    with SeenStore.open(str(base / "s"), create=True, sync=False, policy=p_old,
                        shard_bits=shard_bits) as store:
        for b in batches:
            store.add_urls(b)
        urls = kept(store)
        assert stored(store) == keys_under(urls, p_old)
        fig = store.set_policy(p_new)
        assert store.policy.identity == p_new.identity
        assert store.policy_version == 1
        assert stored(store) == keys_under(urls, p_new), fig
        probe = [f"http://{h}{p}" for h in HOSTS for p in PATHS]
        answer = store.contains_urls(probe).tolist()
    with SeenStore.open(str(base / "fresh"), create=True, sync=False, policy=p_new) as fresh:
        fresh.add_urls(urls)
        assert fresh.contains_urls(probe).tolist() == answer
    with SeenStore.open(str(base / "s"), sync=False) as again:  # the policy is held
        assert again.policy.identity == p_new.identity
        assert again.contains_urls(probe).tolist() == answer
        again.verify()


def test_a_store_that_keeps_no_urls_refuses_a_policy_change(tmp_path):
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False) as store:
        store.add([1, 2, 3])
        with pytest.raises(PolicyError, match="keeps no URLs"):
            store.set_policy(policy_of([1]))
        assert store.policy_id == DEFAULT_POLICY.identity and len(store) == 3


def test_rebuild_of_named_hosts_leaves_the_others(tmp_path):
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False) as store:
        store.add_urls([f"http://{h}{p}" for h in HOSTS for p in PATHS])
        store.add([5])  # a key without a URL, on no host of ours
        before = stored(store)
        fig = store.rebuild(["b.test"])
        after = stored(store)
        assert after == before and fig["keys_removed"] == fig["keys_added"] > 0
        assert fig["shards_rewritten"] >= 1


KILL_SCRIPT = r"""
import sys, json
from seenstore.store import SeenStore
from seenstore.url.policy import parse_policy
path, point = sys.argv[1], sys.argv[2]
from seenstore.store.files import arm_fault
with SeenStore.open(path, sync=True) as store:
    arm_fault(point)
    store.set_policy(parse_policy(sys.argv[3]))
print("finished")
"""


@pytest.mark.parametrize("point", ["rebuild-write", "rebuild-written",
                                   "rebuild-before-manifest", "rebuild-after-manifest"])
def test_kill_inside_a_rebuild_leaves_policy_and_keys_agreeing(tmp_path, point):
    path = str(tmp_path / "s")
    urls = [f"http://{h}{p}" for h in HOSTS for p in PATHS]
    new_text = 'version = "n"\n[[rule]]\nhosts = ["*"]\nsort_query = true\nstrip_www = true\n'
    with SeenStore.open(path, create=True, values=True) as store:
        store.add_urls(urls)
        store.update_urls(urls[::3], state=2, fetched_at=7)  # DONE: carried by the rebuild
        old_id = store.policy_id
    r = subprocess.run([sys.executable, "-c", KILL_SCRIPT, path, point, new_text],
                       capture_output=True, text=True, cwd=REPO,
                       env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == -9, r.stderr
    with SeenStore.open(path) as store:
        keys = stored(store)
        policy = store.policy
        assert store.policy_id in (old_id, parse_policy(new_text).identity)
        assert keys == keys_under(urls, policy)
        store.verify()
        leftovers = {n for n in os.listdir(path) if n.endswith((".run", ".url", ".val"))}
        doc = store._doc
        assert leftovers == {r["file"] for r in doc["runs"]} | {
            e["file"] for e in doc["url_files"]} | {e["file"] for e in doc["value_files"]}
        from seenstore.store import values
        counts = store.counts()
        assert counts == values.recount(store) and counts[2] > 0  # the DONE pages, old or new


LEARN_SCRIPT = r"""
import sys
from seenstore.store import SeenStore
from seenstore.store.files import arm_fault
path, point = sys.argv[1], sys.argv[2]
body = lambda n: (f"<html><body><p>{'alpha beta gamma ' * 20} item {n}</p></body></html>").encode()
with SeenStore.open(path) as store:
    for n in range(8):
        for sid in ("a1", "b2", "c3"):
            store.record_fetch(f"http://shop.test/item/{n}?sid={sid}", 200, body=body(n))
    arm_fault(point)
    store.learn(apply=True)
print("finished")
"""


@pytest.mark.parametrize("point", ["rebuild-write", "rebuild-before-manifest",
                                   "rebuild-after-manifest"])
def test_kill_inside_learn_leaves_policy_version_and_keys_agreeing(tmp_path, point):
    path = str(tmp_path / "s")
    urls = [f"http://shop.test/item/{n}?sid={s}" for n in range(8) for s in ("x", "y")]
    with SeenStore.open(path, create=True) as store:
        store.add_urls(urls)
    r = subprocess.run([sys.executable, "-c", LEARN_SCRIPT, path, point], capture_output=True,
                       text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == -9, r.stderr
    with SeenStore.open(path) as store:
        assert store.policy_version in (0, 1)
        assert stored(store) == keys_under(urls, store.policy)
        assert len(store) == (16 if store.policy_version == 0 else 8)
        store.learn(apply=True)  # the evidence survived: learning again applies the rule
        assert store.policy_version == 1 and len(store) == 8
        store.verify()


def _keys_of(urls, policy) -> list:
    """Each URL's key under ``policy`` (None where rejected), aligned with ``urls``."""
    forms = [try_normalise(u, None, policy) for u in urls]
    ok = [f for f in forms if not isinstance(f, Rejection)]
    keys = iter(fingerprint_many(ok).tolist()) if ok else iter(())
    return [None if isinstance(f, Rejection) else next(keys) for f in forms]


@settings(max_examples=25, deadline=None)
@given(urls=st.lists(url_st, min_size=1, max_size=30),
       recs=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3)), min_size=30,
                     max_size=30),
       old=st.lists(st.integers(0, len(RULES) - 1), max_size=3),
       new=st.lists(st.integers(0, len(RULES) - 1), max_size=3),
       forget=st.integers(0, 3), shard_bits=st.sampled_from([0, 2]))
@example(urls=["http://a.test/y?sid=1"], recs=[(2, 1)] * 30, old=[], new=[0], forget=1,
         shard_bits=0)  # every key forgotten: the store is empty, the rebuild still runs
def test_a_rebuild_carries_each_page_s_record_to_its_new_key(tmp_path_factory, urls, recs, old,
                                                             new, forget, shard_bits):
    """Under the new policy each key holds the record of the old key of its URLs that
    was fetched last (then the higher state); the counts equal a recount and the
    oracle's; a forgotten key's record stays reset. Oracle: dicts by key."""
    from seenstore.store import values
    from seenstore.frontier.state import State

    base = request_cleanup(tmp_path_factory.mktemp("rv"))
    p_old, p_new = policy_of(old), policy_of(new)
    with SeenStore.open(str(base / "s"), create=True, sync=False, policy=p_old, values=True,
                        shard_bits=shard_bits) as store:
        store.check_update_urls(urls)
        state = [r[0] for r in recs[:len(urls)]]
        fetched = [r[1] for r in recs[:len(urls)]]
        store.update_urls(urls, state=state, fetched_at=fetched)
        kept_urls = kept(store)
        old_keys = _keys_of(urls, p_old)
        model = {}  # old key -> (state, fetched_at): the last occurrence wins
        for k, s_, f in zip(old_keys, state, fetched):
            model[k] = (s_, f)
        gone = sorted(model)[:forget]  # forgotten before the policy change
        if gone:
            store.forget(np.array(gone, dtype=np.uint64))
            for k in gone:
                model[k] = (0, 0)
        store.set_policy(p_new)
        want = {}  # new key -> the record it must hold
        for u, ko, kn in zip(kept_urls, _keys_of(kept_urls, p_old), _keys_of(kept_urls, p_new)):
            s_, f = model[ko]
            if kn not in want or (f, s_) > (want[kn][1], want[kn][0]):
                want[kn] = (s_, f)
        for k in set(gone) & set(want):  # a forgotten key the new policy leaves: forgotten
            want.pop(k)
        keys = np.array(sorted(want), dtype=np.uint64)
        got = store.get(keys)
        assert got["present"].all()
        assert list(zip(got["state"].tolist(), got["fetched_at"].tolist())) == [
            want[k] for k in sorted(want)]
        counts = store.counts()
        assert counts == values.recount(store)
        for st_ in State:
            assert counts[st_] == sum(1 for s_, _ in want.values() if s_ == st_), (st_, counts)
        store.verify()


def test_a_rebuild_writes_only_the_records_it_changes(tmp_path):
    """A policy that changes a few spellings of a host rewrites those keys' records
    (and the leaving keys' that held one), not one per key of the host: a key that
    comes back with its own record keeps it where it is."""
    from seenstore.frontier.state import State
    from seenstore.store import values

    plain = [f"http://a.test/p{i}" for i in range(200)]
    with_sid = [f"http://a.test/q?sid={i}" for i in range(5)]  # one key under strip sid
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False, values=True) as store:
        store.check_update_urls(plain + with_sid)
        store.update_urls(plain[:50], state=State.DONE, fetched_at=7)
        store.update_urls(with_sid[:2], state=State.DONE, fetched_at=9)
        files_before = len(store._doc["value_files"])
        store.set_policy(policy_of([0]))  # strip_params sid
        entry = store._doc["value_files"][-1]
        assert len(store._doc["value_files"]) == files_before + 1
        # the 5 sid keys leave (2 held a record), 1 key enters: 2 + 1 entries, not 206
        assert entry["count"] == 3, entry
        got = store.get_urls(plain[:60] + ["http://a.test/q"])
        assert got["state"].tolist() == [State.DONE] * 50 + [State.QUEUED] * 10 + [State.DONE]
        assert got["fetched_at"][-1] == 9
        assert store.counts() == values.recount(store)
