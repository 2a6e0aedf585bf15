"""Stateful oracle: random sequences of add / add_new / add_sorted / contains / compact /
reopen / upgrade against a Python set, on a new store or on a format 1 store (written
by the code before tiered runs) that the first write upgrades."""

import json
import os
import shutil
import tempfile

import numpy as np
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from conftest import EDGE_KEYS, FIXTURES
from naive import add_naive
from seenstore.store import manifest
from seenstore.store import SeenStore

V1_KEYS = json.load(open(os.path.join(FIXTURES, "v1-store-keys.json")))
key = st.one_of(st.sampled_from(EDGE_KEYS + V1_KEYS["stored"][:5] + V1_KEYS["absent"][:3]),
                st.integers(0, 2**64 - 1), st.integers(0, 50), st.integers(2**63, 2**63 + 50))
batch = st.lists(key, max_size=40)


class StoreOracle(RuleBasedStateMachine):
    @initialize(shard_bits=st.sampled_from([0, 1, 2]), from_v1=st.booleans(),
                bloom=st.booleans(), run_format=st.sampled_from([1, 2]))
    def open_store(self, shard_bits, from_v1, bloom, run_format):
        self.dir = tempfile.mkdtemp(prefix="oracle-")
        self.path = os.path.join(self.dir, "s")
        self.bloom = bloom
        if from_v1:
            shutil.copytree(os.path.join(FIXTURES, "v1-store"), self.path)
            self.seen = set(V1_KEYS["stored"])
            self.store = SeenStore.open(self.path, sync=False, bloom=bloom,
                                        run_format=run_format)
        else:
            self.seen = set()
            self.store = SeenStore.open(self.path, create=True, shard_bits=shard_bits,
                                        sync=False, bloom=bloom, bloom_capacity=64,
                                        run_format=run_format)

    @rule(keys=batch)
    def add(self, keys):
        got = self.store.add(np.array(keys, dtype=np.uint64))
        assert got.tolist() == add_naive(self.seen, keys).tolist()

    @rule(keys=batch)
    def add_new(self, keys):
        want = sorted(set(keys) - self.seen)
        assert self.store.add_new(np.array(keys, dtype=np.uint64)).tolist() == want
        self.seen |= set(keys)

    @rule(keys=batch)
    def add_sorted(self, keys):
        uniq = np.array(sorted(set(keys)), dtype=np.uint64)
        mask = self.store.add_sorted(uniq)
        assert uniq[mask].tolist() == sorted(set(keys) - self.seen)
        self.seen |= set(keys)

    @rule(keys=batch)
    def contains(self, keys):
        got = self.store.contains(np.array(keys, dtype=np.uint64)).tolist()
        assert got == [k in self.seen for k in keys]

    @rule(full=st.booleans())
    def compact(self, full):
        self.store.compact(full=full)
        if full:
            assert self.store.stats()["max_runs_per_shard"] <= 1

    @rule(save_bloom=st.booleans(), run_format=st.sampled_from([1, 2]))
    def reopen(self, save_bloom, run_format):
        """Reopened to write runs in either format: a store of both (compaction
        rewrites the runs it merges in the new writer's format)."""
        self.store.close(save_bloom=save_bloom)
        self.store = SeenStore.open(self.path, sync=False, bloom=self.bloom,
                                    run_format=run_format)

    @rule()
    def upgrade(self):
        self.store.upgrade()
        assert manifest.read(self.path)["major"] == manifest.MAJOR

    @precondition(lambda self: hasattr(self, "store"))
    @invariant()
    def same_set(self):
        assert len(self.store) == len(self.seen)

    def teardown(self):
        if hasattr(self, "store"):
            self.store.verify()
            parts = [r.keys for r in self.store._all_readers()]
            stored = sorted(int(k) for p in parts for k in p)
            assert stored == sorted(self.seen)  # every key once: runs are disjoint
            self.store.close()
            live = {r["file"] for r in manifest.read(self.path)["runs"]}
            assert {n for n in os.listdir(self.path) if n.endswith(".run")} == live
        shutil.rmtree(self.dir, ignore_errors=True)


StoreOracle.TestCase.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_store_oracle = StoreOracle.TestCase
