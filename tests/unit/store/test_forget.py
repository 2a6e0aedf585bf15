"""Forgetting (store/tombstones.py): a stateful oracle of add / add_new / add_sorted /
forget / contains / compact / reopen against a Python set, in both modes; the
tombstone file refused when damaged; drop_host from the kept URLs; a spilled batch
and a rebuild on a store with forgotten keys."""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from conftest import EDGE_KEYS
from naive import add_naive
from seenstore.errors import CorruptionError, NotSupportedError
from seenstore.store import SeenStore, manifest, tombstones
from seenstore.url.policy import parse_policy

key = st.one_of(st.sampled_from(EDGE_KEYS), st.integers(0, 40),
                st.integers(2**63, 2**63 + 40), st.integers(0, 2**64 - 1))
batch = st.lists(key, max_size=30)


def u64(keys) -> np.ndarray:
    return np.array(keys, dtype=np.uint64)


class ForgetOracle(RuleBasedStateMachine):
    """The store answers as the set ``seen``; ``forget`` removes keys from it."""

    @initialize(shard_bits=st.sampled_from([0, 2]), mode=st.sampled_from(["exact", "approximate"]),
                bloom=st.booleans(), run_format=st.sampled_from([1, 2]))
    def open_store(self, shard_bits, mode, bloom, run_format):
        self.dir = tempfile.mkdtemp(prefix="forget-")
        self.path = os.path.join(self.dir, "s")
        self.mode, self.bloom = mode, bloom or mode == "approximate"
        self.seen: set = set()
        self.store = SeenStore.open(self.path, create=True, shard_bits=shard_bits, sync=False,
                                    mode=mode, bloom=self.bloom, bloom_capacity=64,
                                    run_format=run_format)

    @rule(keys=batch)
    def add(self, keys):
        assert self.store.add(u64(keys)).tolist() == add_naive(self.seen, keys).tolist()

    @rule(keys=batch)
    def add_new(self, keys):
        want = sorted(set(keys) - self.seen)
        assert self.store.add_new(u64(keys)).tolist() == want
        self.seen |= set(keys)

    @rule(keys=batch)
    def add_sorted(self, keys):
        uniq = u64(sorted(set(keys)))
        assert uniq[self.store.add_sorted(uniq)].tolist() == sorted(set(keys) - self.seen)
        self.seen |= set(keys)

    @rule(keys=batch, also=st.lists(key, max_size=5))
    def forget(self, keys, also):
        """Forget some stored keys (and maybe some never stored: ignored)."""
        picks = [k for k in sorted(self.seen) if k in set(keys) or k % 3 == len(keys) % 3]
        offered = picks[:8] + also
        assert self.store.forget(u64(offered)) == len(set(offered) & self.seen)
        self.seen -= set(offered)

    @rule(keys=batch)
    def contains(self, keys):
        assert self.store.contains(u64(keys)).tolist() == [k in self.seen for k in keys]

    @rule(full=st.booleans())
    def compact(self, full):
        self.store.compact(full=full)
        if full and self.mode == "exact":
            assert self.store.stats()["forgotten"] == 0
            assert not self.store._doc.get(tombstones.FIELD)

    @rule(save_bloom=st.booleans())
    def reopen(self, save_bloom):
        self.store.close(save_bloom=save_bloom)
        self.store = SeenStore.open(self.path, sync=False, mode=self.mode, bloom=self.bloom)

    @rule()
    def read_only_view(self):
        ro = SeenStore.open(self.path, readonly=True)
        try:
            assert len(ro) == len(self.seen)
            got = [int(k) for c in ro.iter_keys() for k in c]
            assert got == sorted(self.seen)
        finally:
            ro.close()

    @precondition(lambda self: hasattr(self, "store"))
    @invariant()
    def same_set(self):
        assert len(self.store) == len(self.seen)
        s = self.store.stats()
        assert s["keys"] == len(self.seen)
        want = (min(self.seen), max(self.seen)) if self.seen else None
        assert self.store.bounds() == want
        # the manifest is format 3.0 exactly while it names forgotten keys (one
        # snapshot: a background compaction may commit between two calls)
        assert (s["manifest_format"] == "3.0") == bool(s["forgotten"])

    def teardown(self):
        if hasattr(self, "store"):
            assert self.store.verify()["keys"] == len(self.seen)
            assert [int(k) for c in self.store.iter_keys() for k in c] == sorted(self.seen)
            t = set(self.store._tomb.keys(self.store._doc).tolist())
            runs = sorted(int(k) for r in self.store._all_readers() for k in r.keys)
            assert sorted(set(runs) - t) == sorted(self.seen)  # T within the runs
            assert len(runs) == len(set(runs))  # no key in two runs
            self.store.close()
            doc = manifest.read(self.path)
            named = manifest.named_files(doc)
            assert {n for n in os.listdir(self.path)
                    if n.endswith((".run", ".tomb"))} == {n for n in named
                                                          if n.endswith((".run", ".tomb"))}
        shutil.rmtree(self.dir, ignore_errors=True)


ForgetOracle.TestCase.settings = settings(
    max_examples=30, stateful_step_count=20, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_forget_oracle = ForgetOracle.TestCase


def store_with_forgotten(path, n=200, forget=range(0, 200, 7)):
    store = SeenStore.open(path, create=True, sync=False, shard_bits=2)
    keys = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x0123456789ABCDE)
    store.add(keys)
    store.forget(keys[list(forget)])
    return store, keys


def test_a_damaged_tombstone_file_is_refused_naming_it(tmp_path):
    store, keys = store_with_forgotten(str(tmp_path / "s"))
    name = store._doc[tombstones.FIELD]["file"]
    store.close()
    with open(tmp_path / "s" / name, "r+b") as f:
        f.seek(tombstones.HEADER.size + 8)
        f.write(b"\xff")
    with SeenStore.open(str(tmp_path / "s"), sync=False) as store:
        with pytest.raises(CorruptionError, match=name):
            store.contains(keys)
        with pytest.raises(CorruptionError, match=name):
            store.verify()
        store.close(save_bloom=False)
    os.unlink(tmp_path / "s" / name)
    with SeenStore.open(str(tmp_path / "s"), readonly=True) as store:
        with pytest.raises(CorruptionError, match=f"{name} is missing"):
            store.contains(keys)


def test_a_foreign_or_newer_tombstone_file_is_refused(tmp_path):
    path = str(tmp_path / "t.tomb")
    entry = tombstones.write_file(path, np.arange(5, dtype=np.uint64))
    assert tombstones.read_file(path, entry).tolist() == list(range(5))
    raw = bytearray(open(path, "rb").read())
    open(path, "wb").write(b"NOTTOMB!" + raw[8:])
    with pytest.raises(CorruptionError, match="not a tombstone file"):
        tombstones.read_file(path)
    raw[8] = 9  # major 9
    open(path, "wb").write(bytes(raw))
    with pytest.raises(NotSupportedError, match="9.0"):
        tombstones.read_file(path)


def test_forget_is_one_commit_and_readmission_needs_no_new_run(tmp_path):
    store, keys = store_with_forgotten(str(tmp_path / "s"), forget=[])
    runs = {r["file"] for r in store._doc["runs"]}
    gen = store.generation
    assert store.forget(keys[:10]) == 10 and store.generation == gen + 1
    assert store.add(keys[:20]).tolist() == [True] * 10 + [False] * 10
    assert {r["file"] for r in store._doc["runs"]} == runs  # not written again
    assert not store._doc.get(tombstones.FIELD) and len(store) == len(keys)
    assert [f for f in os.listdir(tmp_path / "s") if f.endswith(".tomb")] == []
    store.close()


def test_add_new_file_answers_forgotten_keys_new(tmp_path):
    store, keys = store_with_forgotten(str(tmp_path / "s"))
    forgotten = keys[0:200:7]
    batch = tmp_path / "batch.bin"
    np.concatenate([keys[:50], keys[:50]]).tofile(batch)
    fig = store.add_new_file(str(batch), memory=1 << 24, new_out=str(tmp_path / "new.bin"))
    want = sorted(k for k in forgotten.tolist() if k in set(keys[:50].tolist()))
    assert np.fromfile(tmp_path / "new.bin", dtype=np.uint64).tolist() == want
    assert fig["new"] == len(want)
    assert store.contains(forgotten).tolist() == [k in set(want) for k in forgotten.tolist()]
    assert len(store) == len(keys) - len(forgotten) + len(want)
    store.verify()
    store.close()


def test_a_compaction_meeting_part_of_t_takes_only_that_part(tmp_path):
    store, keys = store_with_forgotten(str(tmp_path / "s"), forget=[])
    more = keys + np.uint64(1)
    store.add(more)
    store.forget(np.concatenate([keys[:30], more[:30]]))
    assert store.stats()["forgotten"] == 60
    store.compact(full=True)  # every shard holds some: T empties
    assert store.stats()["forgotten"] == 0 and len(store) == 2 * len(keys) - 60
    assert not store.contains(keys[:30]).any() and store.contains(keys[30:]).all()
    assert store.add(keys[:31]).tolist() == [True] * 30 + [False]
    store.verify()
    store.close()


URLS = [f"http://{h}/p{i}?q={j}" for h in ("a.test", "www.a.test", "b.test")
        for i in range(30) for j in range(2)]


def test_drop_host_forgets_exactly_that_hosts_kept_urls(tmp_path):
    policy = parse_policy('version = "p"\n[[rule]]\nhosts = ["b.test"]\nsort_query = true\n')
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False, policy=policy) as store:
        store.add_urls(URLS)
        assert store.drop_host("A.Test") == 60
        got = store.contains_urls(URLS)
        assert got.tolist() == [not u.startswith("http://a.test/") for u in URLS]
        assert len(store) == 120 and store.drop_host("a.test") == 0
        assert store.drop_host("b.test") == 60  # keys made under the store's policy
        assert store.add_urls(URLS).sum() == 120  # new again
        assert store.drop_host("nowhere.test") == 0
        store.verify()


def test_drop_host_needs_kept_urls(tmp_path):
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False) as store:
        store.add(np.arange(5, dtype=np.uint64))
        with pytest.raises(NotSupportedError, match="drop_host needs kept URLs"):
            store.drop_host("a.test")


def test_a_rebuild_keeps_t_within_the_stored_keys(tmp_path):
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False) as store:
        store.add_urls(URLS)
        store.drop_host("b.test")
        store.add(np.arange(1, 50, dtype=np.uint64))
        store.forget(np.arange(1, 10, dtype=np.uint64))
        before = len(store)
        store.set_policy(parse_policy('version = "n"\n[[rule]]\nhosts = ["a.test"]\n'
                                      'strip_www = true\n'))
        store.verify()  # T still names only stored keys
        assert not store.contains(np.arange(1, 10, dtype=np.uint64)).any()
        assert len(store) <= before


@pytest.mark.parametrize("mode", ["exact", "approximate"])
def test_a_stage_hands_out_forgotten_keys_again(tmp_path, mode):
    from seenstore.stage import DedupStage
    from seenstore.store import wal

    path = str(tmp_path / "s")
    keys = np.arange(1000, 1100, dtype=np.uint64)
    with SeenStore.open(path, create=True, sync=False, mode=mode) as store:
        store.add(keys)
        store.forget(keys[:10])
    stage = DedupStage.open(path, mode=mode, sync=False, wal_sync=wal.SYNC_NEVER, cache_keys=0)
    got = stage.offer(keys).keys.tolist() + stage.flush().keys.tolist()
    assert sorted(got) == keys[:10].tolist()  # each forgotten key once, no stored one
    assert stage.offer(keys[:10]).keys.tolist() + stage.flush().keys.tolist() == []
    stage.close()
    with SeenStore.open(path, sync=False) as store:
        assert store.contains(keys).all() and store.stats()["forgotten"] == 0


@pytest.mark.parametrize("n_t,search_only", [(1, False), (1000, False), (1000, True)])
def test_member_agrees_with_isin_on_both_paths(n_t, search_only, monkeypatch):
    if search_only:  # a T too large for the byte map
        monkeypatch.setattr(tombstones, "PREFILTER_MAX_T", n_t - 1)
    rng = np.random.default_rng(n_t)
    t = np.unique(rng.integers(0, 2**64 - 1, n_t, dtype=np.uint64, endpoint=True))
    t[0] = 0
    t[-1] = 2**64 - 1 if len(t) > 1 else t[-1]
    keys = rng.integers(0, 2**64 - 1, 2 * tombstones.PREFILTER_MIN_KEYS, dtype=np.uint64)
    keys[::3] = t[rng.integers(0, len(t), len(keys[::3]))]
    keys[:2] = [0, 2**64 - 1]
    want = np.isin(keys, t)
    assert tombstones.member(t, keys).tolist() == want.tolist()
    assert tombstones.member(t, keys[:10]).tolist() == want[:10].tolist()
    uniq = np.unique(keys)
    assert uniq[tombstones.in_sorted(t, uniq)].tolist() == uniq[np.isin(uniq, t)].tolist()
    assert tombstones.less(t, keys).tolist() == t[~np.isin(t, keys)].tolist()


def test_forgotten_keys_make_the_manifest_3_which_a_format_2_reader_refuses(tmp_path,
                                                                             monkeypatch):
    """A reader that ignores ``tombstones`` would answer forgotten keys stored, so a
    manifest naming any is written as 3.0 (refused by a reader of format 2 only) and
    goes back to 2.1 once none is left."""
    path = str(tmp_path / "s")
    store, keys = store_with_forgotten(path, forget=[])
    assert manifest.read(path)["major"] == 2 and store.manifest_format == "2.1"
    store.forget(keys[:5])
    assert manifest.read(path)["major"] == 3 and store.manifest_format == "3.0"
    store.close()
    with monkeypatch.context() as m:
        m.setattr(manifest, "NEWEST_MAJOR", manifest.MAJOR)  # a reader of format 2 only
        with pytest.raises(NotSupportedError, match="manifest version 3.0 is newer than"):
            SeenStore.open(path, sync=False)
    with SeenStore.open(path, sync=False) as store:
        assert store.contains(keys[:6]).tolist() == [False] * 5 + [True]
        assert store.add(keys[:5]).all()  # readmitted: nothing forgotten is left
        assert store.manifest_format == "2.1"
    assert manifest.read(path)["major"] == 2


def test_values_and_undetected_trap_patterns_make_the_manifest_3(tmp_path):
    with SeenStore.open(str(tmp_path / "v"), create=True, sync=False, values=True) as store:
        store.add(np.arange(1, 10, dtype=np.uint64))
        assert store.manifest_format == "3.0"
    assert manifest.read(str(tmp_path / "v"))["major"] == 3
    seen = {"host": "a.test", "shape": "repeat", "pattern": "/a/a", "count": 3}
    assert manifest.major_for({"traps": [dict(seen, refused=1, bound=2)]}) == 2
    assert manifest.major_for({"traps": [dict(seen, detected=False)]}) == 3
    assert manifest.major_for({"tombstones": None, "values": False}) == 2
