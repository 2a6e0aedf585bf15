"""Batch: both alignment strategies give the brief's mask, against a set oracle."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import EDGE_KEYS
from naive import add_naive
from seenstore.batch import Batch, as_keys, read_batch_file
from seenstore.errors import InvalidInputError
from seenstore.kernels.batch import unique_first

key = st.one_of(st.sampled_from(EDGE_KEYS), st.integers(0, 2**64 - 1), st.integers(0, 20))


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(key, max_size=60), seen=st.sets(key, max_size=30))
def test_both_strategies_match_oracle(keys, seen):
    arr = as_keys(keys)
    want = add_naive(set(seen), keys)
    for share in (0.0, 1.0):
        b = Batch(arr, expect_new_share=share)
        assert b.uniq.tolist() == sorted(set(keys))
        is_new = np.array([int(k) not in seen for k in b.uniq], dtype=bool)
        assert b.mask(is_new).tolist() == want.tolist()


@settings(max_examples=100, deadline=None)
@given(keys=st.lists(key, max_size=60))
def test_unique_first_gives_first_positions(keys):
    arr = np.array(keys, dtype=np.uint64)
    order = np.argsort(arr)  # not stable: the kernel must still find the first index
    uniq, first = unique_first(arr[order], order)
    assert uniq.tolist() == sorted(set(keys))
    assert first.tolist() == [keys.index(int(u)) for u in uniq]


def test_batch_file_reading(tmp_path):
    p = tmp_path / "b.bin"
    np.array([1, 2**64 - 1], dtype=">u8").tofile(p)  # big-endian on disk is not our format
    got = read_batch_file(str(p))
    assert got.dtype == np.uint64 and got.tolist() == [2**56, 0xFFFFFFFFFFFFFFFF]
    with pytest.raises(InvalidInputError, match="directory"):
        read_batch_file(str(tmp_path))
