"""The batch kernels and the merge kernels' order check against numpy."""

import numpy as np
from hypothesis import given, settings, strategies as st

from conftest import EDGE_KEYS
from seenstore.kernels.batch import compact_inplace, mark_first_new, unique_inplace, unique_sorted
from seenstore.kernels.merge import is_strictly_increasing

key = st.one_of(st.sampled_from(EDGE_KEYS), st.integers(0, 2**64 - 1), st.integers(0, 40))
sorted_unique = st.sets(key, max_size=60).map(lambda s: np.array(sorted(s), dtype=np.uint64))


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
