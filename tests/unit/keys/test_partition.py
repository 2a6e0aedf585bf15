"""keys/partition.py: on any number of threads, from runtime/parallel.py's pool or the
caller's, the partition is the one-thread kernel's, byte for byte (groups ascending,
input order kept inside each), so a store's shards and a retried cluster batch get
the same parts."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from conftest import EDGE_KEYS
from seenstore.kernels import dispatch
from seenstore.kernels.batch import partition_top_bits
from seenstore.keys import partition as partition_module
from seenstore.keys.partition import partition


def _one_thread(keys, bits):
    want, wb = np.empty(len(keys), np.uint64), np.empty((1 << bits) + 1, np.int64)
    partition_top_bits(keys, bits, want, wb)
    return want, wb


def _keys(rng, n):
    keys = rng.integers(0, 2**64, n, dtype=np.uint64)
    keys[:min(n, 6)] = EDGE_KEYS[:min(n, 6)]
    keys[n // 2:n // 2 + n // 10] = keys[:n // 10]  # repeats, some across the slices
    return keys


@pytest.mark.parametrize("n, bits, threads", [(3 << 19, 4, 2), (5000, 8, 3), (5000, 0, 2),
                                              (5000, 1, 4), (7, 4, 2), (0, 4, 2)])
@pytest.mark.parametrize("with_pool", [False, True])
def test_partition_on_threads_is_the_one_thread_partition(n, bits, threads, with_pool, rng,
                                                          monkeypatch):
    monkeypatch.setattr(partition_module, "PARALLEL_PARTITION_KEYS", 1000)
    keys = _keys(rng, n)
    want, wb = _one_thread(keys, bits)
    if with_pool:
        with ThreadPoolExecutor(threads) as pool:
            out, bounds = partition(keys, bits, threads, pool=pool)
    else:
        out, bounds = partition(keys, bits, threads)
    assert np.array_equal(bounds, wb) and np.array_equal(out, want)


def test_partition_writes_into_out_and_takes_the_twin_below_small(rng, monkeypatch):
    """``out`` is filled and returned; one thread runs dispatch's partition_top_bits
    (its numpy twin for a small call in a process running no kernels: same result)."""
    keys = _keys(rng, 3000)
    want, wb = _one_thread(keys, 3)
    out = np.zeros(len(keys) + 5, np.uint64)
    got, bounds = partition(keys, 3, 1, out)
    assert got is out and np.array_equal(out[:len(keys)], want) and np.array_equal(bounds, wb)
    monkeypatch.setattr(dispatch, "SMALL", 10**9)

    def no_kernel(name):
        raise AssertionError(f"kernel {name} called below SMALL")

    monkeypatch.setattr(dispatch.batch, "kernel", no_kernel)
    with dispatch.twins_only():
        got, bounds = partition(keys, 3)
    assert np.array_equal(got, want) and np.array_equal(bounds, wb)


def test_one_slice_per_threshold_of_keys(rng, monkeypatch):
    """Fewer than PARALLEL_PARTITION_KEYS keys per thread: fewer threads (one below it)."""
    monkeypatch.setattr(partition_module, "PARALLEL_PARTITION_KEYS", 1000)
    sizes = []

    def run_all(calls):
        sizes.append(len(calls))
        return [c() for c in calls]

    monkeypatch.setattr(partition_module.parallel, "run_all", run_all)
    keys = _keys(rng, 2500)
    want, wb = _one_thread(keys, 2)
    for threads in (1, 2, 8):
        out, bounds = partition(keys, 2, threads)
        assert np.array_equal(out, want) and np.array_equal(bounds, wb)
    partition(keys[:999], 2, 8)
    assert sizes == [2, 2, 2, 2]  # threads 2 and 8: two slices of >= 1000 keys each
