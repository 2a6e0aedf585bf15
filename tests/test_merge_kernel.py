"""The merge and batch kernels against their naive twins (tests/naive.py)."""

import numpy as np
from hypothesis import given, settings, strategies as st

from conftest import EDGE_KEYS
from naive import merge_naive
from seenstore.errors import CorruptionError
from seenstore.kernels.batch import compact_inplace, mark_first_new, unique_inplace, unique_sorted
from seenstore.kernels.merge import is_strictly_increasing, merge_step
from seenstore.merge import merge_run

key = st.one_of(st.sampled_from(EDGE_KEYS), st.integers(0, 2**64 - 1), st.integers(0, 40))
sorted_unique = st.sets(key, max_size=60).map(lambda s: np.array(sorted(s), dtype=np.uint64))


class ListWriter:
    def __init__(self):
        self.parts = []

    def write(self, keys):
        self.parts.append(np.array(keys, copy=True))

    @property
    def keys(self):
        return np.concatenate(self.parts) if self.parts else np.empty(0, np.uint64)


class ArrayReader:
    """Stands in for RunReader: streams an in-memory run in chunks."""

    name = "memory"

    def __init__(self, keys):
        self.keys = keys
        self.count = len(keys)

    def chunks(self, buf):
        for lo in range(0, self.count, len(buf)):
            n = min(len(buf), self.count - lo)
            buf[:n] = self.keys[lo:lo + n]
            yield n


@settings(max_examples=300, deadline=None)
@given(old=sorted_unique, batch=sorted_unique, chunk=st.integers(1, 9))
def test_merge_run_equals_naive(old, batch, chunk):
    w = ListWriter()
    is_new = merge_run(ArrayReader(old), batch, w, chunk_keys=chunk)
    want_merged, want_new = merge_naive(old, batch)
    assert w.keys.tolist() == want_merged.tolist()
    assert is_new.tolist() == want_new.tolist()


@settings(max_examples=100, deadline=None)
@given(batch=sorted_unique, chunk=st.integers(1, 5))
def test_merge_into_empty_run(batch, chunk):
    w = ListWriter()
    is_new = merge_run(None, batch, w, chunk_keys=chunk)
    assert w.keys.tolist() == batch.tolist()
    assert is_new.all()


def test_merge_step_rejects_unsorted_run():
    old = np.array([5, 3, 9], dtype=np.uint64)
    with_err = None
    try:
        merge_run(ArrayReader(old), np.array([4], dtype=np.uint64), ListWriter(), chunk_keys=2)
    except CorruptionError as e:
        with_err = e
    assert with_err is not None


def test_merge_step_top_bit_keys_compare_unsigned():
    old = np.array([1, 2**63], dtype=np.uint64)
    batch = np.array([2**63 - 1, 2**64 - 1], dtype=np.uint64)
    out = np.empty(8, dtype=np.uint64)
    is_new = np.zeros(2, dtype=np.bool_)
    i, j, n, prev, have, ok = merge_step(old, 0, 2, True, batch, 0, is_new, out,
                                         np.uint64(0), False)
    assert ok and (i, j, n) == (2, 2, 4)
    assert out[:4].tolist() == [1, 2**63 - 1, 2**63, 2**64 - 1]


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(key, max_size=80))
def test_unique_sorted_and_strict_order(keys):
    a = np.array(sorted(keys), dtype=np.uint64)
    u = unique_sorted(a)
    assert u.tolist() == sorted(set(keys))
    assert is_strictly_increasing(u)
    if len(u) != len(a):
        assert not is_strictly_increasing(a)


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(key, max_size=80), keep=st.lists(st.booleans(), max_size=80))
def test_in_place_unique_and_compaction_equal_numpy(keys, keep):
    a = np.array(sorted(keys), dtype=np.uint64)
    m = unique_inplace(a)
    assert a[:m].tolist() == sorted(set(keys))
    b = np.array(keys, dtype=np.uint64)
    mask = np.array((keep + [True] * len(keys))[: len(keys)], dtype=np.bool_)
    want = b[mask].tolist()
    n = compact_inplace(b, mask)
    assert b[:n].tolist() == want


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(key, max_size=80), data=st.data())
def test_mark_first_new_equals_naive(keys, data):
    distinct = sorted(set(keys))
    chosen = data.draw(st.lists(st.sampled_from(distinct), unique=True) if distinct
                       else st.just([]))
    extra = data.draw(st.lists(key, max_size=5))
    new = np.array(sorted(set(chosen) | set(extra)), dtype=np.uint64)
    got = mark_first_new(np.array(keys, dtype=np.uint64), new)
    seen, want = set(), []
    for k in keys:
        want.append(k in set(new.tolist()) and k not in seen)
        seen.add(k)
    assert got.tolist() == want
