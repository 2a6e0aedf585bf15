"""Bloom kernels against their pure-Python twins (seenstore/kernels/bloom.py).

The twins below restate scheme 1 (docs/bloom.md) with Python ints; the kernels
must leave a bit-identical array and give the same answers, for any keys
including 0, 2**63 and 2**64-1, any group size, and any block count.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seenstore.kernels import bloom as K
from naive import uniq

M64 = 2**64 - 1
GOLDEN = 0x9E3779B97F4A7C15
EDGE_KEYS = [0, 1, 2**63, 2**63 - 1, 2**64 - 1]


# -- twins ------------------------------------------------------------------


def fmix64(x: int) -> int:
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & M64
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & M64
    return x ^ (x >> 33)


def stream_word(seed: int, j: int) -> int:
    z = (seed + j * GOLDEN) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def twin_locate(key: int, n_blocks: int, k: int) -> tuple[int, list[int]]:
    """(first word of the key's block, its k bit numbers 0..511)."""
    seed = fmix64(key)
    w = stream_word(seed, 1)
    block = ((w >> 32) * n_blocks) >> 32
    bits = w & 0xFFFFFFFF
    fields = [(bits >> (9 * i)) & 511 for i in range(3)]
    j = 1
    while len(fields) < k:
        j += 1
        w = stream_word(seed, j)
        fields += [(w >> (9 * i)) & 511 for i in range(7)]
    return 8 * block, fields[:k]


def twin_add_query(words: list[int], keys, k: int) -> tuple[list[bool], int]:
    """Sequential add-query on a list of Python-int words; returns (out, fresh)."""
    n_blocks = len(words) // 8
    out, fresh = [], 0
    for key in keys:
        base, pos = twin_locate(int(key), n_blocks, k)
        present = all(words[base + p // 64] >> (p % 64) & 1 for p in pos)
        for p in pos:
            words[base + p // 64] |= 1 << (p % 64)
        out.append(present)
        fresh += not present
    return out, fresh


def twin_query(words: list[int], keys, k: int) -> list[bool]:
    n_blocks = len(words) // 8
    res = []
    for key in keys:
        base, pos = twin_locate(int(key), n_blocks, k)
        res.append(all(words[base + p // 64] >> (p % 64) & 1 for p in pos))
    return res


def twin_classic_positions(key: int, m: int, k: int) -> list[int]:
    seed = fmix64(key)
    pos = []
    for p in range(k):
        h = stream_word(seed, p // 2 + 1)
        half = h >> 32 if p % 2 == 0 else h & 0xFFFFFFFF
        pos.append((half * m) >> 32)
    return pos


def twin_histogram(words: np.ndarray) -> np.ndarray:
    per_block = np.unpackbits(words.view(np.uint8)).reshape(-1, 512).sum(axis=1)
    return np.bincount(per_block, minlength=513)


# -- strategies -------------------------------------------------------------

keys_st = st.lists(
    st.one_of(st.sampled_from(EDGE_KEYS), st.integers(0, M64)), min_size=0, max_size=120)


def as_u64(keys) -> np.ndarray:
    return np.array(keys, dtype=np.uint64)


# -- tests ------------------------------------------------------------------


def test_splitmix_stream_matches_published_value():
    # splitmix64 seeded with 0: first output is 0xE220A8397B1DCDAF (Vigna's reference).
    assert int(K.stream_word(np.uint64(0), 1)) == 0xE220A8397B1DCDAF == stream_word(0, 1)


@settings(max_examples=150, deadline=None)
@given(key=st.one_of(st.sampled_from(EDGE_KEYS), st.integers(0, M64)),
       n_blocks=st.one_of(st.sampled_from([1, 2**32 - 1]), st.integers(1, 2**32 - 1)),
       k=st.integers(1, 40))
def test_locate_matches_twin(key, n_blocks, k):
    pos = np.zeros((3, k), np.uint64)
    base = K.locate(np.uint64(key), np.uint64(n_blocks), pos, 1)
    want_base, want_pos = twin_locate(key, n_blocks, k)
    assert int(base) == want_base < 8 * n_blocks
    assert [int(p) for p in pos[1]] == want_pos
    assert not pos[0].any() and not pos[2].any()  # only the given row is written


@settings(max_examples=80, deadline=None)
@given(keys=keys_st, probes=keys_st, n_blocks=st.integers(1, 12), k=st.integers(1, 20),
       group=st.sampled_from([1, 3, 32]))
def test_add_query_and_query_bit_identical_to_twin(keys, probes, n_blocks, k, group):
    words = np.zeros(8 * n_blocks, np.uint64)
    out = np.empty(len(keys), np.bool_)
    fresh = K.bloom_add_query(words, as_u64(keys), k, group, out, True)
    twin_words = [0] * (8 * n_blocks)
    want_out, want_fresh = twin_add_query(twin_words, keys, k)
    assert [int(w) for w in words] == twin_words
    assert out.tolist() == want_out and fresh == want_fresh

    answers = np.empty(len(probes), np.bool_)
    K.bloom_query(words, as_u64(probes), k, group, answers)
    assert answers.tolist() == twin_query(twin_words, probes, k)


@settings(max_examples=60, deadline=None)
@given(keys=keys_st, n_blocks=st.integers(1, 6), k=st.integers(1, 24),
       group=st.sampled_from([1, 2, 32]))
def test_no_false_negatives_and_add_without_out_is_the_same_insert(keys, n_blocks, k, group):
    a = np.zeros(8 * n_blocks, np.uint64)
    b = np.zeros(8 * n_blocks, np.uint64)
    out = np.empty(len(keys), np.bool_)
    fresh_a = K.bloom_add_query(a, as_u64(keys), k, group, out, True)
    fresh_b = K.bloom_add_query(b, as_u64(keys), k, group, np.empty(0, np.bool_), False)
    assert np.array_equal(a, b) and fresh_a == fresh_b == int((~out).sum())
    answers = np.empty(len(keys), np.bool_)
    K.bloom_query(a, as_u64(keys), k, group, answers)
    assert answers.all()


def test_large_random_batch_matches_twin():
    rng = np.random.default_rng(7)
    keys = np.concatenate([as_u64(EDGE_KEYS), rng.integers(0, M64, 3000, np.uint64, True)])
    words = np.zeros(8 * 37, np.uint64)
    out = np.empty(len(keys), np.bool_)
    fresh = K.bloom_add_query(words, keys, 9, 32, out, True)
    twin_words = [0] * (8 * 37)
    want_out, want_fresh = twin_add_query(twin_words, keys.tolist(), 9)
    assert [int(w) for w in words] == twin_words
    assert out.tolist() == want_out and fresh == want_fresh


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), n_blocks=st.integers(1, 20), density=st.floats(0, 1))
def test_block_fill_histogram_matches_unpackbits(seed, n_blocks, density):
    rng = np.random.default_rng(seed)
    bits = rng.random(512 * n_blocks) < density
    words = np.packbits(bits).view(np.uint64).copy()
    hist = np.zeros(513, np.int64)
    K.block_fill_histogram(words, 8, hist)
    assert np.array_equal(hist, twin_histogram(words))


@settings(max_examples=40, deadline=None)
@given(keys=keys_st, probes=keys_st, n_words=st.integers(1, 40), k=st.integers(1, 12),
       group=st.sampled_from([1, 5, 32]))
def test_classic_kernels_match_twin(keys, probes, n_words, k, group):
    m = 64 * n_words
    words = np.zeros(n_words, np.uint64)
    K.classic_add(words, as_u64(keys), k, group)
    twin = [0] * n_words
    for key in keys:
        for p in twin_classic_positions(key, m, k):
            twin[p // 64] |= 1 << (p % 64)
    assert [int(w) for w in words] == twin
    out = np.empty(len(probes), np.bool_)
    K.classic_query(words, as_u64(probes), k, group, out)
    want = [all(twin[p // 64] >> (p % 64) & 1 for p in twin_classic_positions(q, m, k))
            for q in probes]
    assert out.tolist() == want


def twin_fresh_keys(n_blocks: int, keys, k: int) -> int:
    """Distinct keys whose k bits collide with no other distinct key's: each of them
    sets a clear bit whatever the insertion order (the order-free part of ``fresh``)."""
    bits: dict[tuple[int, int], int] = {}
    placed = {}
    for key in set(int(x) for x in keys):
        base, pos = twin_locate(key, n_blocks, k)
        placed[key] = [(base, p) for p in pos]
        for bp in set(placed[key]):
            bits[bp] = bits.get(bp, 0) + 1
    return sum(any(bits[bp] == 1 for bp in bps) for bps in placed.values())


@settings(max_examples=80, deadline=None)
@given(keys=keys_st, n_blocks=st.integers(1, 40), k=st.integers(1, 20),
       region_bits=st.integers(0, 6), chunk=st.integers(1, 50), group=st.sampled_from([1, 3, 32]))
def test_region_insert_sets_the_twin_bits(keys, n_blocks, k, region_bits, chunk, group):
    """Any region count (more regions than blocks included) and any chunk size: the
    same bits as the key-order twin; ``fresh`` between the order-free lower bound and
    the number of distinct keys (which colliding key counts depends on order)."""
    words = np.zeros(8 * n_blocks, np.uint64)
    fresh = K.bloom_add_regions(words, as_u64(keys), k, group, region_bits,
                                np.empty(chunk, np.uint64))
    twin_words = [0] * (8 * n_blocks)
    _, want_fresh = twin_add_query(twin_words, keys, k)
    assert [int(w) for w in words] == twin_words
    assert twin_fresh_keys(n_blocks, keys, k) <= fresh <= len(set(keys))
    if len(set(keys)) <= 1:
        assert fresh == want_fresh


@pytest.mark.parametrize("n", [0, 1, 2, 31, 32, 33, 64, 65, 100])
@pytest.mark.parametrize("k", [7, 8, 10])
def test_seed_insert_around_group_edges_equals_key_order(n, k):
    """``insert_seeds`` locates the next group ahead (double-buffered): at key counts
    around multiples of the group, the same words and the same count as the key-order
    insert of the same keys (seeds are fmix64 of the keys), the edge keys among them."""
    rng = np.random.default_rng(n * 31 + k)
    keys = np.array((EDGE_KEYS + [int(x) for x in rng.integers(0, M64, n, np.uint64, True)])[:n],
                    np.uint64)
    seeds = np.array([fmix64(int(x)) for x in keys], np.uint64)
    a, b = np.zeros(8 * 5, np.uint64), np.zeros(8 * 5, np.uint64)
    fresh = K.insert_seeds(a, seeds, k, 32)
    want = K.bloom_add_query(b, keys, k, 32, np.empty(0, np.bool_), False)
    assert np.array_equal(a, b)
    assert fresh == want
    twin_words = [0] * (8 * 5)
    twin_add_query(twin_words, [int(x) for x in keys], k)
    assert [int(w) for w in a] == twin_words


def test_region_insert_large_batch_equals_plain_insert():
    """3e5 keys (repeats included) into 4096 blocks with 2**6 regions and chunks of
    1e5: identical words to the plain kernel; fresh equal (a sparse filter: no key
    lands wholly on bits another key set)."""
    rng = np.random.default_rng(11)
    keys = rng.integers(0, M64, 300_000, np.uint64, True)
    keys[1::2] = keys[::2]  # every key twice: repeats inside the call
    a = np.zeros(8 * 4096 * 64, np.uint64)
    b = np.zeros_like(a)
    fresh_a = K.bloom_add_query(a, keys, 8, 32, np.empty(0, np.bool_), False)
    fresh_b = K.bloom_add_regions(b, keys, 8, 32, 6, np.empty(100_000, np.uint64))
    assert np.array_equal(a, b) and fresh_a == fresh_b == len(uniq(keys))


@pytest.mark.parametrize("k", sorted({*K.SPECIAL_K, min(K.SPECIAL_K) - 1, max(K.SPECIAL_K) + 1}))
def test_constant_k_kernels_set_the_twin_bits_and_match_the_previous_kernel(k):
    """The kernels compiled with k a constant (SPECIAL_K) and the generic ones beside
    them: the twin's bits and answers, edge keys included, and the same words and
    counts as the previous kernels kept as the benchmark's baseline."""
    rng = np.random.default_rng(k)
    keys = np.concatenate([as_u64(EDGE_KEYS), rng.integers(0, M64, 400, np.uint64, True)])
    probes = np.concatenate([keys[::3], rng.integers(0, M64, 400, np.uint64, True)])
    words = np.zeros(8 * 9, np.uint64)
    out = np.empty(len(keys), np.bool_)
    fresh = K.bloom_add_query(words, keys, k, 32, out, True)
    twin_words = [0] * (8 * 9)
    want_out, want_fresh = twin_add_query(twin_words, keys.tolist(), k)
    assert [int(w) for w in words] == twin_words
    assert out.tolist() == want_out and fresh == want_fresh
    answers = np.empty(len(probes), np.bool_)
    K.bloom_query(words, probes, k, 32, answers)
    assert answers.tolist() == twin_query(twin_words, probes.tolist(), k)
    assert 0 < answers.sum() < len(probes)  # both answers occur: the test can fail
    regions = np.zeros_like(words)
    K.bloom_add_regions(regions, keys, k, 32, 3, np.empty(100, np.uint64))
    assert np.array_equal(regions, words)
