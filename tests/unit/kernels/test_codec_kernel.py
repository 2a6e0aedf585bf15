"""The block codec kernels (seenstore/kernels/codec.py) against their twins in tests/naive.py."""

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from conftest import EDGE_KEYS
from naive import (rice_decode_block_naive, rice_encode_naive, rice_k_naive, sweep_naive,
                   uniq)
from seenstore.kernels import codec as K
from seenstore.store.runs.codec import block_ends, block_sums

TOP = 2**64 - 1
key = st.one_of(st.sampled_from(EDGE_KEYS), st.integers(0, TOP), st.integers(0, 300),
                st.integers(TOP - 300, TOP))
dense = st.tuples(st.integers(0, TOP), st.integers(1, 200)).map(
    lambda t: set(range(min(t[0], TOP - t[1] + 1), min(t[0], TOP - t[1] + 1) + t[1])))
key_sets = st.tuples(st.sets(key, max_size=80), st.lists(dense, max_size=2)).map(
    lambda t: np.array(sorted(t[0].union(*t[1])), dtype=np.uint64))
block_sizes = st.sampled_from([1, 2, 3, 7, 64, K.MAX_BLOCK_KEYS])


def encode(keys, block_keys):
    nb = -(-len(keys) // block_keys)
    out = np.zeros(K.encoded_bound(len(keys), block_keys), np.uint64)
    first, offsets = np.zeros(nb, np.uint64), np.zeros(nb, np.int64)
    end = K.encode_blocks(keys, block_keys, out, first, offsets)
    out = out[:end]
    out[block_ends(offsets, end) - 1] = block_sums(out, offsets, end)
    return out, first, offsets


@settings(max_examples=300, deadline=None)
@given(keys=key_sets, block_keys=block_sizes)
@example(keys=np.array([], np.uint64), block_keys=3)
@example(keys=np.array([0, TOP], np.uint64), block_keys=2)  # the largest gap there is
@example(keys=np.array([TOP], np.uint64), block_keys=1)
@example(keys=np.arange(1000, dtype=np.uint64), block_keys=64)  # all gaps 0: k = 0
def test_encode_equals_naive_and_decodes_back(keys, block_keys):
    words, first, offsets = encode(keys, block_keys)
    assert words.tolist() == rice_encode_naive(keys, block_keys)
    assert first.tolist() == keys[::block_keys].tolist()
    out = np.zeros(len(keys) + 1, np.uint64)
    used, n, nb, st, _ = K.decode_blocks(words, len(words), out, np.uint64(0), False)
    assert (st, used, n, nb) == (K.OK, len(words), len(keys), len(first))
    assert out[:n].tolist() == keys.tolist()
    ends = block_ends(offsets, len(words))
    naive = [x for a, b in zip(offsets, ends) for x in rice_decode_block_naive(words[a:b].tolist())]
    assert naive == keys.tolist()


@settings(max_examples=200, deadline=None)
@given(keys=key_sets, probes=st.lists(key, max_size=40), block_keys=block_sizes)
def test_lookup_equals_searchsorted(keys, probes, block_keys):
    words, first, offsets = encode(keys, block_keys)
    q = np.sort(np.concatenate([np.array(probes, np.uint64), keys[::3]]))
    found = np.ones(len(q), bool)
    st, _ = K.lookup(words, first, offsets, q, found, np.empty(block_keys, np.uint64))
    pos = np.searchsorted(keys, q)
    want = (pos < len(keys)) & (keys[np.minimum(pos, max(len(keys) - 1, 0))] == q) \
        if len(keys) else np.zeros(len(q), bool)
    assert st == K.OK and found.tolist() == want.tolist()


@settings(max_examples=200, deadline=None)
@given(keys=key_sets.filter(lambda k: len(k) >= 2))
def test_choose_k_equals_naive(keys):
    assert K.choose_k(keys, 0, len(keys)) == rice_k_naive([int(x) for x in keys])


def test_decode_stops_at_buffer_and_block_boundaries():
    keys = np.arange(0, 3000, 3, dtype=np.uint64)
    words, first, offsets = encode(keys, 100)
    out = np.zeros(250, np.uint64)  # room for two blocks of 100, not three
    used, n, nb, st, _ = K.decode_blocks(words, len(words), out, np.uint64(0), False)
    assert (st, n, nb, used) == (K.OK, 200, 2, offsets[2])
    # a partial block at the end of the buffer waits for more words
    used, n, nb, st, _ = K.decode_blocks(words, offsets[1] + 2, out, np.uint64(0), False)
    assert (st, n, nb, used) == (K.OK, 100, 1, offsets[1])


def test_damaged_blocks_give_a_status_never_a_crash():
    """Every single-word change to a block's header or streams either decodes (the
    checksum, compared by the caller, catches it) or returns a non-OK status."""
    rng = np.random.default_rng(5)
    keys = uniq(rng.integers(0, 2**40, 500, dtype=np.uint64))
    words, _, _ = encode(keys, 1000)
    statuses = set()
    for i in range(len(words) - 1):
        for v in (np.uint64(0), ~words[i], words[i] ^ np.uint64(1 << 20), np.uint64(TOP)):
            bad = words.copy()
            bad[i] = v
            out = np.zeros(len(keys) + 1, np.uint64)
            statuses.add(K.decode_blocks(bad, len(bad), out, np.uint64(0), False)[3])
    assert {K.BAD_SIZE, K.BAD_STREAM} <= statuses


def test_blocks_must_ascend():
    words, _, _ = encode(np.array([5, 6, 7], np.uint64), 2)
    out = np.zeros(4, np.uint64)
    assert K.decode_blocks(words, len(words), out, np.uint64(9), True)[3] == K.BAD_ORDER


def one_block_status(words, at, size, fast):
    out = np.zeros(K.MAX_BLOCK_KEYS + 1, np.uint64)
    f = K.decode_block if fast else K._decode_block_checked
    return f(words, at, size, out, 0), out


@settings(max_examples=200, deadline=None)
@given(keys=key_sets.filter(len), word=st.integers(0, 10**6), bit=st.integers(0, 63),
       high=st.booleans())
@example(keys=np.array([TOP - 2, TOP - 1, TOP], np.uint64), word=2, bit=40, high=True)
def test_fast_decode_agrees_with_the_checked_loop(keys, word, bit, high):
    """The two-pass decode (one overflow test per block) returns OK exactly when the
    per-key checked loop does, with the same keys, on valid and on damaged blocks
    (one bit flipped in the streams, or the top bits set: keys wrapping past 2^64)."""
    words, _, _ = encode(keys[:K.MAX_BLOCK_KEYS], K.MAX_BLOCK_KEYS)
    size = len(words)
    for case in range(3):
        bad = words.copy()
        if case == 1 and size > 3:  # a stream bit flipped
            bad[2 + word % (size - 3)] ^= np.uint64((0xFFFF << 48) if high else 1 << bit)
        elif case == 2:  # the first key moved up: the last passes 2^64 - 1, or not
            bad[0] = np.uint64(TOP - word)
        n, sz, st0 = K.block_size(bad, 0, size)
        if st0 != K.OK or sz != size:
            continue
        (a, out_a), (b, out_b) = (one_block_status(bad, 0, size, f) for f in (True, False))
        assert (a == K.OK) == (b == K.OK)
        if a == K.OK:
            assert out_a[:n].tolist() == out_b[:n].tolist()


@settings(max_examples=300, deadline=None)
@given(keys=key_sets, probes=st.lists(key, max_size=60), block_keys=block_sizes,
       start=st.integers(0, 5))
@example(keys=np.array([0, TOP], np.uint64), probes=[0, 1, TOP - 1, TOP], block_keys=1,
         start=0)
def test_sweep_blocks_equals_the_naive_sweep(keys, probes, block_keys, start):
    """The fused decode-and-compare kernel against the twins: the run's keys decoded
    by the naive decoder, membership by a Python set (``found`` only ever set)."""
    words, first, offsets = encode(keys, block_keys)
    batch = uniq(np.concatenate([np.array(probes, np.uint64), keys[::2]]))
    found = np.zeros(len(batch), bool)
    found[:start] = True  # set by an earlier run: stays set
    scratch = np.zeros(block_keys + K.SENTINELS, np.uint64)
    used, n, nb, st, _, j, last, have = K.sweep_blocks(
        words, len(words), first, scratch, batch, 0, found, np.uint64(0), False)
    ends = block_ends(offsets, len(words))
    run = [x for a, b in zip(offsets, ends) for x in rice_decode_block_naive(words[a:b].tolist())]
    want = sweep_naive(np.array(run, np.uint64), batch)
    want[:start] = True
    assert (st, used, n, nb) == (K.OK, len(words), len(keys), len(first))
    assert found.tolist() == want.tolist()
    assert j == int(np.searchsorted(batch, keys[-1], "right")) if len(keys) else j == 0


def test_sweep_blocks_refuses_a_block_the_index_disagrees_with():
    words, first, _ = encode(np.arange(10, 50, dtype=np.uint64), 8)
    first = first.copy()
    first[2] += np.uint64(1)
    out = K.sweep_blocks(words, len(words), first, np.zeros(16, np.uint64),
                         np.arange(5, dtype=np.uint64), 0, np.zeros(5, bool), np.uint64(0), False)
    assert (out[3], out[2]) == (K.BAD_INDEX, 2)


@pytest.mark.parametrize("found_share", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("ratio", [0.5, 1.8, 12.0])
def test_sweep_blocks_on_long_runs_matches_a_set(found_share, ratio):
    """Blocks holding many batch keys each (sweep_blocks' four chains per block and
    their tails) at several run/batch ratios, none / half / all of the batch found,
    the edge keys 0, 2^63 and 2^64-1 in the run (and in the batch when all are)."""
    rng = np.random.default_rng(int(ratio * 10 + found_share * 3))
    n_batch = 3000
    pool = np.unique(rng.integers(0, TOP, 3 * int(n_batch * (ratio + 1)), dtype=np.uint64,
                                  endpoint=True))
    rng.shuffle(pool)
    n_run = int(n_batch * ratio)
    edges = np.array([0, 2**63, TOP], np.uint64)
    run = np.union1d(pool[:n_run], edges)
    hits = rng.choice(run, int(found_share * min(n_batch, len(run))), replace=False)
    batch = (np.union1d(hits, edges) if found_share == 1.0
             else np.union1d(hits, pool[n_run:n_run + n_batch - len(hits)]))
    for block_keys in (512, K.MAX_BLOCK_KEYS):
        words, first, _ = encode(run, block_keys)
        found = np.zeros(len(batch), bool)
        out = K.sweep_blocks(words, len(words), first,
                             np.zeros(block_keys + K.SENTINELS, np.uint64), batch, 0, found,
                             np.uint64(0), False)
        assert out[3] == K.OK and out[5] == len(batch)
        assert found.tolist() == np.isin(batch, run).tolist()
