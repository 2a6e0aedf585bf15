"""Stateful oracle for values beside keys: random check_update / update / add / forget /
get / counts / due / select / compact / merge of value files / reopen against a dict of
records (small stores: numpy twins, merges forced by a small file limit)."""

import os
import shutil
import tempfile

import numpy as np
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from seenstore import State
from seenstore.store import SeenStore, manifest, values

EDGE = [0, 1, 2**63, 2**64 - 1]
key = st.one_of(st.sampled_from(EDGE), st.integers(0, 30), st.integers(2**63, 2**63 + 30))
batch = st.lists(key, max_size=25)
RANGES = {"state": (0, 4), "retries": (0, 255), "status": (0, 65535),
          "fetched_at": (-5, 5), "next_due": (0, 12), "digest": (2**64 - 3, 2**64 - 1)}
ZERO = dict.fromkeys(values.FIELDS, 0)


@st.composite
def fields_for(draw, n, allow_empty=True):
    names = draw(st.lists(st.sampled_from(values.FIELDS), unique=True,
                          min_size=0 if allow_empty else 1, max_size=3))
    out = {}
    for name in names:
        lo, hi = RANGES[name]
        if n and draw(st.booleans()):
            out[name] = draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n))
        else:
            out[name] = draw(st.integers(lo, hi))
    return out


def value_at(v, i):
    return v[i] if isinstance(v, list) else v


def as_arrays(fields):
    return {k: (np.array(v, dtype=values.VALUE_DTYPE[k]) if isinstance(v, list) else v)
            for k, v in fields.items()}


class ValuesOracle(RuleBasedStateMachine):
    @initialize(shard_bits=st.sampled_from([0, 2]), bloom=st.booleans())
    def open_store(self, shard_bits, bloom):
        self.saved = values.MAX_VALUE_FILES, values.MERGE_FILES
        values.MAX_VALUE_FILES, values.MERGE_FILES = 4, 2  # merges happen within a few steps
        self.dir = tempfile.mkdtemp(prefix="values-oracle-")
        self.path = os.path.join(self.dir, "s")
        self.bloom = bloom
        self.store = SeenStore.open(self.path, create=True, shard_bits=shard_bits, sync=False,
                                    bloom=bloom, bloom_capacity=64, values=True)
        self.recs: dict = {}  # present key -> record

    @rule(data=st.data(), keys=batch)
    def check_update(self, data, keys):
        fields = data.draw(fields_for(len(keys)))
        want = []
        for i, k in enumerate(keys):
            new = k not in self.recs
            want.append(new)
            if new:
                self.recs[k] = {**ZERO, **{f: value_at(v, i) for f, v in fields.items()}}
        got = self.store.check_update(np.array(keys, dtype=np.uint64), **as_arrays(fields))
        assert got.tolist() == want

    @rule(keys=batch)
    def add(self, keys):
        got = self.store.add(np.array(keys, dtype=np.uint64))
        want = []
        for k in keys:
            want.append(k not in self.recs)
            self.recs.setdefault(k, dict(ZERO))
        assert got.tolist() == want

    @rule(data=st.data(), keys=batch)
    def update(self, data, keys):
        fields = data.draw(fields_for(len(keys), allow_empty=False))
        want = [k in self.recs for k in keys]
        for i, k in enumerate(keys):
            if k in self.recs:
                self.recs[k].update({f: value_at(v, i) for f, v in fields.items()})
        got = self.store.update(np.array(keys, dtype=np.uint64), **as_arrays(fields))
        assert got.tolist() == want

    @rule(keys=batch)
    def forget(self, keys):
        """Forgotten keys are absent; offered again they start from a fresh record."""
        want = len({k for k in keys if k in self.recs})
        for k in keys:
            self.recs.pop(k, None)
        assert self.store.forget(np.array(keys, dtype=np.uint64)) == want

    @rule(keys=batch)
    def get(self, keys):
        got = self.store.get(np.array(keys, dtype=np.uint64))
        for k, row in zip(keys, got):
            assert bool(row["present"]) == (k in self.recs)
            want = self.recs.get(k, ZERO)
            assert {f: int(row[f]) for f in values.FIELDS} == want, k

    @rule(now=st.integers(0, 14), limit=st.sampled_from([None, 0, 3]))
    def due(self, now, limit):
        want = sorted((r["next_due"], k) for k, r in self.recs.items()
                      if 0 < r["next_due"] <= now)
        assert self.store.due(now, limit).tolist() == [k for _, k in want][:limit]
        keys, times = self.store.due(now, limit, times=True)  # with each key's next_due
        assert (list(zip(times.tolist(), keys.tolist())) == want[:limit]
                and times.dtype == np.int64)

    @rule(state=st.sampled_from(list(State)), limit=st.sampled_from([None, 2]))
    def select(self, state, limit):
        want = sorted(k for k, r in self.recs.items() if r["state"] == state)[:limit]
        assert self.store.select(state, limit).tolist() == want

    @rule(full=st.booleans())
    def compact(self, full):
        self.store.compact(full=full)

    @rule()
    def merge_all(self):
        values.merge_value_files(self.store)
        assert len(self.store._doc.get("value_files", [])) <= 1

    @rule(save_bloom=st.booleans())
    def reopen(self, save_bloom):
        self.store.close(save_bloom=save_bloom)
        self.store = SeenStore.open(self.path, sync=False, bloom=self.bloom)

    @invariant()
    def counts_agree(self):
        if not hasattr(self, "store"):
            return
        want = {s: 0 for s in State}
        for r in self.recs.values():
            want[State(r["state"])] += 1
        assert self.store.counts() == want
        assert values.recount(self.store) == want
        assert len(self.store) == len(self.recs)
        assert len(self.store._doc.get("value_files", [])) <= values.MAX_VALUE_FILES

    def teardown(self):
        if hasattr(self, "store"):
            self.store.close()
            named = {e["file"] for e in manifest.read(self.path).get("value_files", [])}
            assert {n for n in os.listdir(self.path) if n.endswith(".val")} == named
        if hasattr(self, "saved"):
            values.MAX_VALUE_FILES, values.MERGE_FILES = self.saved
        shutil.rmtree(self.dir, ignore_errors=True)


ValuesOracle.TestCase.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_values_oracle = ValuesOracle.TestCase
