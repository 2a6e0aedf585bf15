"""The crawl-like stream: its own expectation must equal a Python set oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seenstore.errors import InvalidInputError
from seenstore.bench.workload import CrawlStream, keys_of_ids, perm_bits
from naive import uniq


def oracle_masks(stream: CrawlStream) -> list[np.ndarray]:
    seen: set[int] = set()
    masks = []
    for b in stream:
        m = []
        for k in b.keys.tolist():
            m.append(k not in seen)
            seen.add(k)
        masks.append(np.array(m, dtype=bool))
    return masks


STREAM = dict(total=st.integers(0, 3000), batch=st.integers(1, 700), reoffer=st.floats(0, 1),
              dup=st.floats(0, 0.95), seed=st.integers(0, 2**32))


@settings(max_examples=60, deadline=None)
@given(**STREAM, host_bits=st.sampled_from([0, 1, 8, 20, 32]))
def test_expectation_equals_set_oracle(total, batch, reoffer, dup, seed, host_bits):
    stream = CrawlStream(total, batch, reoffer, dup, seed=seed, host_bits=host_bits)
    batches = list(stream)
    masks = oracle_masks(stream)
    assert sum(len(b.keys) for b in batches) == total
    for b, m in zip(batches, masks):
        assert b.keys.dtype == np.uint64
        assert np.array_equal(b.expected_mask(), m)
        assert b.expected_new == int(m.sum())
    assert stream.expected_total_new == sum(int(m.sum()) for m in masks)


@settings(max_examples=40, deadline=None)
@given(**STREAM, chunk=st.integers(1, 300))
def test_streamed_batches_keep_the_exact_expectation(total, batch, reoffer, dup, seed, chunk):
    """batch_chunks (batches bigger than memory): same sizes, same fresh block as
    ``batch``, and its new keys are exactly the fresh ones (set oracle), whatever
    the chunk size."""
    stream = CrawlStream(total, batch, reoffer, dup, seed=seed)
    seen: set[int] = set()
    for plan in stream.plan():
        b = stream.batch(*plan)
        parts = list(stream.batch_chunks(*plan, chunk_keys=chunk))
        assert all(p.dtype == np.uint64 and 0 < len(p) <= chunk for p in parts)
        keys = np.concatenate(parts) if parts else np.empty(0, np.uint64)
        assert len(keys) == len(b.keys)
        assert np.array_equal(keys[: b.n_fresh], b.keys[: b.n_fresh])
        again = list(stream.batch_chunks(*plan, chunk_keys=chunk))  # deterministic
        assert all(np.array_equal(p, q) for p, q in zip(parts, again))
        new = []
        for k in keys.tolist():
            new.append(k not in seen)
            seen.add(k)
        assert np.array_equal(np.array(new, dtype=bool), b.expected_mask())


@pytest.mark.parametrize("bits", [1, 2, 7, 13, 16])
def test_perm_bits_is_a_bijection(bits):
    x = np.arange(1 << bits, dtype=np.uint64)
    for seed in (0, 1, 12345):
        y = perm_bits(x, bits, seed)
        assert y.max() < (1 << bits)
        assert len(uniq(y)) == 1 << bits


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**63), host_bits=st.sampled_from([0, 4, 20, 32]))
def test_keys_injective_even_with_colliding_low_ids(seed, host_bits):
    # ids that agree on many low bits, plus the extreme ids of the range.
    top = (1 << (64 - host_bits)) - 1
    ids = np.array(
        [0, 1, top, top - 1] + [i << 20 for i in range(1, 2000)], dtype=np.uint64
    )
    ids = uniq(ids[ids <= np.uint64(top)])
    keys = keys_of_ids(ids, host_bits, 1 << host_bits, seed)
    assert len(uniq(keys)) == len(ids)


def test_batches_are_deterministic_and_regenerable_alone():
    a = CrawlStream(50_000, 8_000, 0.5, 0.1, seed=7)
    b = CrawlStream(50_000, 8_000, 0.5, 0.1, seed=7)
    plans = list(a.plan())
    for x, y in zip(a, b):
        assert np.array_equal(x.keys, y.keys)
    last = a.batch(*plans[-1])
    assert np.array_equal(last.keys, list(b)[-1].keys)
    c = CrawlStream(50_000, 8_000, 0.5, 0.1, seed=8)
    assert not np.array_equal(next(iter(a)).keys, next(iter(c)).keys)


def test_counts_follow_the_requested_shares():
    s = CrawlStream(400_000, 100_000, reoffer=0.5, dup=0.1, seed=1)
    plans = list(s.plan())
    assert plans[0][3] == 0  # nothing to re-offer in the first batch
    for _, _, n_fresh, n_re, n_dup in plans[1:]:
        assert n_dup == 10_000 and n_re == 45_000 and n_fresh == 45_000


def test_host_bits_are_skewed_like_real_fingerprints():
    s = CrawlStream(200_000, 200_000, 0.0, 0.0, seed=3, host_bits=20)
    keys = next(iter(s)).keys
    _, counts = np.unique(keys >> np.uint64(44), return_counts=True)
    # Zipf(1) over 2**20 hosts: the busiest host holds ~5% of keys (uniform: 1e-6).
    assert 0.02 < counts.max() / len(keys) < 0.1
    assert len(counts) > 10_000


def test_bad_parameters_are_typed_errors():
    for kwargs in (
        dict(total_keys=-1, batch_size=1),
        dict(total_keys=10, batch_size=0),
        dict(total_keys=10, batch_size=1, reoffer=1.5),
        dict(total_keys=10, batch_size=1, dup=1.0),
        dict(total_keys=10, batch_size=1, host_bits=33),
        dict(total_keys=1 << 40, batch_size=1, host_bits=24),
    ):
        with pytest.raises(InvalidInputError):
            CrawlStream(**kwargs)
