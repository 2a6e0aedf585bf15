"""Batch: the brief's mask against a set oracle, at every partitioning of the join."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import EDGE_KEYS
from naive import add_naive, uniq
from seenstore.keys.batch import as_keys, prepare, read_batch_file, unique_first
from seenstore.errors import InvalidInputError
from seenstore.kernels.batch import mark_first_new, mark_members

key = st.one_of(st.sampled_from(EDGE_KEYS), st.integers(0, 2**64 - 1), st.integers(0, 20))


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(key, max_size=60), seen=st.sets(key, max_size=30))
def test_mask_matches_oracle(keys, seen):
    arr = as_keys(keys)
    want = add_naive(set(seen), keys)
    distinct = prepare(arr)
    assert distinct.tolist() == sorted(set(keys))
    is_new = np.array([int(k) not in seen for k in distinct], dtype=bool)
    new = distinct[is_new]
    assert mark_first_new(arr, new).tolist() == want.tolist()
    for part_bits in (0, 1, 3, 6):  # the partitioned join, forced on small inputs
        assert mark_first_new(arr, new, part_bits).tolist() == want.tolist()


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(key, max_size=60), members=st.sets(key, max_size=30))
def test_mark_members_marks_every_occurrence(keys, members):
    arr = as_keys(keys)
    want = [int(k) in members for k in keys]
    m = np.array(sorted(members), dtype=np.uint64)
    for part_bits in (-1, 0, 1, 3, 6):
        assert mark_members(arr, m, part_bits).tolist() == want


@pytest.mark.parametrize("m", [9_000, 40_000, 150_000])
@pytest.mark.parametrize("part_bits", [-1, 0, 2])
def test_filtered_join_of_a_mostly_seen_stream(rng, m, part_bits):
    """Tables past FILTER_SLOTS slots turn most input keys away by a bitmap: a
    stream where few keys are new (a crawl's), repeats and all, against numpy's
    answer (first occurrences of the members), members, joins and the partitioned
    joins whose parts are filtered or not."""
    from seenstore.kernels.batch import FILTER_SLOTS
    pool = rng.integers(0, 2**64, 300_000, dtype=np.uint64)
    keys = pool[rng.integers(0, len(pool), 500_000)]
    new = np.unique(rng.choice(pool, m, replace=False))
    assert 2 * m > FILTER_SLOTS  # the unpartitioned table is filtered
    _, first = np.unique(keys, return_index=True)
    member = np.isin(keys, new)
    want = np.zeros(len(keys), dtype=bool)
    want[first[member[first]]] = True
    assert np.array_equal(mark_first_new(keys, new, part_bits), want)
    assert np.array_equal(mark_members(keys, new, part_bits), member)


def test_partitioned_join_at_scale_equals_unpartitioned(rng):
    keys = rng.integers(0, 2**64, 600_000, dtype=np.uint64)
    keys[:100_000] = keys[300_000:400_000]  # repeats: first occurrence must win
    new = uniq(keys)[:300_000]  # above the 2^18 partitioning threshold
    auto = mark_first_new(keys, new)
    assert np.array_equal(auto, mark_first_new(keys, new, 0))
    assert auto.sum() == len(new)


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(key, max_size=60), seen=st.sets(key, max_size=30),
       part_bits=st.sampled_from([1, 2, 3, 6]))
def test_two_thread_join_gives_the_one_thread_mask(keys, seen, part_bits):
    """first_new_mask on two threads (partitions side by side, the parts' joins split
    in two) against the oracle, its threshold lowered so small inputs take it."""
    import seenstore.keys.batch as B

    arr = as_keys(keys)
    want = add_naive(set(seen), keys)
    new = np.array(sorted(set(keys) - seen), dtype=np.uint64)
    saved, B.PARALLEL_JOIN_KEYS = B.PARALLEL_JOIN_KEYS, 0
    try:
        assert B.first_new_mask(arr, new, 2, part_bits).tolist() == want.tolist()
        assert B.first_new_mask(arr, new, 1, part_bits).tolist() == want.tolist()
    finally:
        B.PARALLEL_JOIN_KEYS = saved


def test_two_thread_join_at_scale_equals_one_thread(rng):
    from seenstore.keys.batch import PARALLEL_JOIN_KEYS, first_new_mask

    keys = rng.integers(0, 2**64, PARALLEL_JOIN_KEYS + 300_000, dtype=np.uint64)
    keys[:200_000] = keys[500_000:700_000]  # repeats: the first occurrence wins
    new = uniq(keys)[::2].copy()  # above the 2^18 partitioning threshold
    one = mark_first_new(keys, new)
    assert np.array_equal(first_new_mask(keys, new, 2), one) and one.sum() == len(new)


def test_batch_file_reading(tmp_path):
    p = tmp_path / "b.bin"
    np.array([1, 2**64 - 1], dtype=">u8").tofile(p)  # big-endian on disk is not our format
    got = read_batch_file(str(p))
    assert got.dtype == np.uint64 and got.tolist() == [2**56, 0xFFFFFFFFFFFFFFFF]
    with pytest.raises(InvalidInputError, match="directory"):
        read_batch_file(str(tmp_path))


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(key, max_size=80), bits=st.sampled_from([0, 1, 2, 4, 7]))
def test_partition_top_bits_is_a_stable_sort_by_top_bits(keys, bits):
    from seenstore.kernels.batch import partition_top_bits

    arr = as_keys(keys)
    out = np.empty(len(arr), np.uint64)
    starts = np.empty((1 << bits) + 1, np.int64)
    partition_top_bits(arr, bits, out, starts)
    top = [k >> (64 - bits) if bits else 0 for k in keys]
    order = sorted(range(len(keys)), key=lambda i: top[i])  # stable
    assert out.tolist() == [keys[i] for i in order]
    assert starts.tolist() == [sum(t < g for t in top) for g in range(1 << bits)] + [len(keys)]


@settings(max_examples=100, deadline=None)
@given(keys=st.lists(key, max_size=80), bits=st.sampled_from([1, 2, 7, 16]),
       cut=st.integers(0, 80))
def test_count_then_scatter_by_slices_is_the_stable_partition(keys, bits, cut):
    """Two slices counted then scattered (as two threads would) give what a stable sort
    by the top bits gives (the twin: Python's sorted), counts as np.bincount does."""
    from seenstore.kernels.batch import count_top_bits, scatter_top_bits

    arr = as_keys(keys)
    cut = min(cut, len(arr))
    top = [k >> (64 - bits) for k in keys]
    counts = np.zeros((2, 1 << bits), np.int64)
    count_top_bits(arr[:cut], bits, counts[0])
    count_top_bits(arr[cut:], bits, counts[1])
    want_counts = np.bincount(np.array(top, dtype=np.int64), minlength=1 << bits)
    assert counts.sum(axis=0).tolist() == want_counts.tolist()
    starts = np.concatenate([[0], np.cumsum(want_counts)[:-1]]).astype(np.int64)
    fill = np.stack([starts, starts + counts[0]])
    out = np.zeros(len(arr), np.uint64)
    scatter_top_bits(arr[:cut], bits, out, fill[0])
    scatter_top_bits(arr[cut:], bits, out, fill[1])
    order = sorted(range(len(keys)), key=lambda i: top[i])  # stable
    assert out.tolist() == [keys[i] for i in order]


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(key, max_size=80))
def test_unique_first_is_np_unique_with_index(keys):
    """The stage's first occurrences: the same as np.unique(return_index=True)."""
    arr = np.array(keys, dtype=np.uint64)
    got_u, got_i = unique_first(arr)
    want_u, want_i = np.unique(arr, return_index=True)
    assert got_u.dtype == np.uint64 and got_u.tolist() == want_u.tolist()
    assert got_i.tolist() == want_i.tolist()


def _first_unique_oracle(keys: list[int], check_at: int, max_unique: int, room: int):
    """(distinct keys in order of first occurrence, the index of each), or None when
    the first ``check_at`` keys (only checked when there are more) hold more than
    ``max_unique`` distinct, or all of them more than ``room``."""
    if check_at < len(keys) and len(set(keys[:check_at])) > max_unique:
        return None
    first: dict[int, int] = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    return None if len(first) > room else (list(first), list(first.values()))


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(key, max_size=80), check_at=st.integers(0, 90), max_unique=st.integers(0, 40),
       room=st.integers(0, 90))
def test_first_unique_against_an_ordered_set(keys, check_at, max_unique, room):
    from seenstore.kernels.twins.batch import first_unique as _first_unique
    from seenstore.kernels.batch import first_unique

    arr = as_keys(keys)
    want = _first_unique_oracle(keys, check_at, max_unique, room)
    for fn in (first_unique, _first_unique):  # the kernel and its numpy twin
        out, pos = np.zeros(room, np.uint64), np.zeros(room, np.int64)
        m = fn(arr, out, pos, check_at, max_unique)
        assert (None if m < 0 else (out[:m].tolist(), pos[:m].tolist())) == want


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(key, max_size=60), seen=st.sets(key, max_size=30))
def test_mask_of_the_distinct_keys_is_the_mask(keys, seen):
    """add's mask built from first_unique's distinct keys and their indexes equals the
    join over every key (and the set oracle)."""
    from seenstore.keys.batch import first_new_mask_of_distinct
    from seenstore.kernels.batch import first_unique

    arr = as_keys(keys)
    out, pos = np.empty(len(arr), np.uint64), np.empty(len(arr), np.int64)
    m = first_unique(arr, out, pos, len(arr), len(arr))
    new = np.array(sorted(set(keys) - seen), dtype=np.uint64)
    want = add_naive(set(seen), keys)
    assert first_new_mask_of_distinct(len(arr), out[:m], pos[:m], new).tolist() == want.tolist()


@pytest.mark.parametrize("distinct", [1, 5_000, 40_000, 300_000])
def test_first_unique_grows_its_table(rng, distinct):
    """Past 2**15 slots' half the table doubles and is refilled: every size up to
    all-distinct keys (key 0 among them) against np.unique's first occurrences."""
    from seenstore.kernels.batch import first_unique

    pool = rng.integers(0, 2**64, distinct, dtype=np.uint64)
    pool[0] = 0
    keys = np.concatenate([pool, pool[rng.integers(0, distinct, 200_000)]])
    out, pos = np.empty(len(keys), np.uint64), np.empty(len(keys), np.int64)
    m = first_unique(keys, out, pos, len(keys), len(keys))
    _, first = np.unique(keys, return_index=True)
    assert m == distinct and np.array_equal(pos[:m], np.sort(first))
    assert np.array_equal(out[:m], keys[pos[:m]])
    assert first_unique(keys, out, pos, 20_000, 1_000) == (-1 if distinct > 1_000 else distinct)
