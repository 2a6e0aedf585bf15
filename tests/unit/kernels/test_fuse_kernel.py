"""Binary fuse filter: the kernels against their twins (same bits, same answers), no
false negative ever (property test against a set), the false-positive rate near 2^-bits."""

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from conftest import EDGE_KEYS
from seenstore.bloom.fuse import FuseFilter, shape_for, words_for
from seenstore.errors import InvalidInputError
from seenstore.kernels import fuse as K
from seenstore.kernels.twins import fuse as T

key = st.one_of(st.sampled_from(EDGE_KEYS), st.integers(0, 2**64 - 1), st.integers(0, 300))
key_sets = st.sets(key, max_size=400).map(lambda s: np.array(sorted(s), dtype=np.uint64))


def _build(build, keys, bits):
    shape = shape_for(len(keys))
    words = np.zeros(words_for(shape, bits), np.uint64)
    seed, tries = build(keys, shape.seg_len, shape.scl, shape.array_length, bits, words)
    return words, np.uint64(seed), tries, shape


@settings(max_examples=60, deadline=None)
@given(keys=key_sets, bits=st.sampled_from([1, 5, 8, 11, 12, 16]), probe=key_sets)
@example(keys=np.array([128, 4655], np.uint64), bits=1, probe=np.empty(0, np.uint64))
def test_kernels_match_twins_and_never_miss(keys, bits, probe):
    words, seed, tries, shape = _build(K.fuse_build, keys, bits)
    t_words, t_seed, t_tries, _ = _build(T.fuse_build, keys, bits)
    assert tries > 0 and (int(seed), tries) == (int(t_seed), t_tries)
    assert words.tolist() == t_words.tolist()
    asked = np.concatenate([keys, probe])
    got = np.empty(len(asked), np.bool_)
    K.fuse_query(words, asked, seed, shape.seg_len, shape.scl, bits, got)
    want = np.empty(len(asked), np.bool_)
    T.fuse_query(words, asked, seed, shape.seg_len, shape.scl, bits, want)
    assert got.tolist() == want.tolist()
    assert got[:len(keys)].all()  # no false negative


@pytest.mark.parametrize("bits", [8, 12])
def test_false_positive_rate_near_two_to_minus_bits(bits):
    rng = np.random.default_rng(3)
    keys = np.unique(rng.integers(0, 2**64, 50_000, dtype=np.uint64, endpoint=False))
    f = FuseFilter.build(keys, bits)
    assert f.query(keys).all()
    absent = rng.integers(0, 2**64, 400_000, dtype=np.uint64, endpoint=False)
    absent = absent[~np.isin(absent, keys)]
    rate = f.query(absent).mean()
    expect = 2.0 ** -bits
    assert expect / 2 < rate < expect * 2 if bits == 8 else rate < expect * 4
    assert 1.125 * bits < f.bits_per_key < 1.125 * bits * 1.1  # 50,000 keys: factor ~1.19


def test_twin_constants_are_the_kernels():
    assert (T.MAX_ITERATIONS, T.RNG_START) == (K.MAX_ITERATIONS, K.RNG_START)


def test_build_refuses_bad_input():
    with pytest.raises(InvalidInputError):
        FuseFilter.build(np.arange(5, dtype=np.uint64), bits=17)
    with pytest.raises(InvalidInputError):
        FuseFilter.build(np.arange(5, dtype=np.int64))
    empty = FuseFilter.build(np.empty(0, np.uint64))
    assert not empty.query(np.arange(100, dtype=np.uint64)).all()
