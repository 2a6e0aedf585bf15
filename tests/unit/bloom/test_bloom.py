"""BloomFilter: sizing, the FPR theory, batch semantics, figures, input checks.

Theory is checked against simulation and against the filter's own bits; the
API against simple invariants (no false negatives, n_added, cache refresh).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seenstore.bloom import (BloomFilter, blocked_fpr, classic_fpr, max_loads,
                             size_for)
from seenstore.errors import InvalidInputError

M64 = 2**64 - 1


def rand_keys(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, M64, n, np.uint64, endpoint=True)


def host_skewed_keys(n: int, seed: int, hosts: int = 50) -> np.ndarray:
    """Top 20 bits from a Zipf(1.1) over a few hosts, low 44 bits random."""
    rng = np.random.default_rng(seed)
    host_ids = rng.integers(0, 2**20, hosts, np.uint64)
    ranks = np.minimum(rng.zipf(1.1, n), hosts) - 1
    low = rng.integers(0, 2**44, n, np.uint64)
    return (host_ids[ranks] << np.uint64(44)) | low


# -- theory -----------------------------------------------------------------


def test_blocked_fpr_is_above_classic_and_monotone_in_load():
    # Blocking only adds variance (uneven loads, shared bits), so at equal bits/key
    # it is above the classic rate, by more as the target gets lower.
    ratios = []
    for bits_per_key, k in [(8, 5), (10, 7), (16, 11)]:
        ratios.append(blocked_fpr(512 / bits_per_key, k) / classic_fpr(bits_per_key, k))
    assert 1.0 < ratios[0] < ratios[1] < ratios[2]
    loads = [1, 5, 20, 50, 100, 300]
    assert all(blocked_fpr(a, 6) < blocked_fpr(b, 6) for a, b in itertools.pairwise(loads))
    assert blocked_fpr(0, 6) == 0.0


def test_blocked_fpr_single_key_per_block_by_hand():
    # With exactly one key in a block the FPR is E[(X_k/512)^k]; for k=1 that is 1/512.
    # Poisson(lam) keys: FPR = sum_i Pois(i) * (1 - (511/512)^i) for k = 1.
    lam = 3.0
    want = sum(math.exp(-lam) * lam**i / math.factorial(i) * (1 - (511 / 512) ** i)
               for i in range(60))
    assert blocked_fpr(lam, 1) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("keys_fn", [rand_keys, host_skewed_keys])
def test_measured_fpr_matches_theory_on_uniform_and_host_skewed_keys(keys_fn):
    bf = BloomFilter(n_blocks=2000, n_hashes=5)
    bf.add(keys_fn(60_000, 1))  # 30 keys per block
    probes = keys_fn(400_000, 2)
    measured = bf.query(probes).mean()
    theory = blocked_fpr(30.0, 5)
    assert abs(measured / theory - 1) < 0.08, (measured, theory)
    assert abs(bf.expected_fpr / theory - 1) < 0.05


@settings(max_examples=15, deadline=None)
@given(n_keys=st.integers(0, 10**10), log_fpr=st.floats(-9, math.log10(0.5)))
def test_size_for_meets_target_within_the_memory_slack_with_the_fewest_hashes(n_keys, log_fpr):
    """Meets the target; any filter MEMORY_SLACK smaller misses it with every k; no
    smaller k meets it in as many blocks (each bit costs time, docs/bloom.md)."""
    from seenstore.bloom.sizing import MEMORY_SLACK

    fpr = 10**log_fpr
    n_blocks, k = size_for(n_keys, fpr)
    n = max(n_keys, 1)
    assert blocked_fpr(n / n_blocks, k) <= fpr
    if n_blocks > 1:  # one block fewer misses the target with this k
        assert blocked_fpr(n / (n_blocks - 1), k) > fpr
    smaller = math.ceil(n_blocks / (1 + MEMORY_SLACK)) - 1
    if smaller >= 1:
        assert all(blocked_fpr(n / smaller, kk) > fpr for kk in range(1, 33))
    assert all(blocked_fpr(n / n_blocks, kk) > fpr for kk in range(1, k))


def test_size_for_trades_a_little_memory_for_fewer_hashes():
    """The store's first layer (0.05%): k = 8, not the fewest-bits k = 10, for <= 2.5%
    more memory (docs/bloom.md "Memory budget")."""
    blocks, k = size_for(10**9, 5e-4)
    assert k == 8 and blocked_fpr(1e9 / blocks, 8) <= 5e-4
    fewest = min(math.ceil(1e9 / load) for _, load in max_loads(5e-4))
    assert fewest < blocks <= 1.025 * fewest


def test_precomputed_loads_equal_the_computation():
    """loads_table.py (tools/bloom_loads.py) saves every store open ~0.1 s of sizing;
    each entry must be exactly what the bisection gives, and it must cover the rates
    a default store and the spilled benchmark ask for (layers 0..7)."""
    from seenstore.bench.plan import SPILL_BLOOM_TARGETS
    from seenstore.bloom.keeper import DEFAULT_BLOOM_FPR
    from seenstore.bloom.layers import LayeredBloom
    from seenstore.bloom.loads_table import KNOWN_LOADS
    from seenstore.bloom.sizing import compute_max_loads

    wanted = {LayeredBloom.layer_fpr(t, i)
              for t in (DEFAULT_BLOOM_FPR, *SPILL_BLOOM_TARGETS) for i in range(8)}
    assert wanted <= set(KNOWN_LOADS)
    for fpr, loads in KNOWN_LOADS.items():
        assert compute_max_loads(fpr) == loads, fpr
    assert max_loads(3e-4) == compute_max_loads(3e-4)  # a rate not in the table


def test_for_capacity_figures():
    bf = BloomFilter.for_capacity(1_000_000, 0.001)
    assert (bf.n_blocks, bf.n_hashes) == size_for(1_000_000, 0.001)
    assert bf.n_bits == 512 * bf.n_blocks == 8 * bf.nbytes
    assert bf.words.dtype == np.uint64 and bf.words.shape == (8 * bf.n_blocks,)
    assert bf.bits_per_key == bf.n_bits / 1_000_000
    assert bf.capacity == 1_000_000 and bf.target_fpr == 0.001
    assert bf.theoretical_fpr(1_000_000) <= 0.001
    assert bf.n_added == 0 and bf.fill_ratio == 0.0 and bf.expected_fpr == 0.0


@pytest.mark.parametrize("n_keys, fpr", [(-1, 0.01), (10, 0.0), (10, 0.6), (10, 1e-10),
                                         (2.5, 0.01), (10**13, 1e-9)])
def test_for_capacity_rejects_bad_arguments(n_keys, fpr):
    with pytest.raises(InvalidInputError):
        BloomFilter.for_capacity(n_keys, fpr)


# -- batch semantics --------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(keys=st.lists(st.one_of(st.sampled_from([0, 2**63, M64]), st.integers(0, M64)),
                     max_size=200),
       n_blocks=st.integers(1, 8))
def test_add_query_semantics(keys, n_blocks):
    arr = np.array(keys, np.uint64)
    a = BloomFilter(n_blocks, 4)
    out = a.add_query(arr)
    assert a.query(arr).all()  # no false negatives
    seen = set()
    for key, maybe in zip(keys, out):
        if key in seen:
            assert maybe  # an earlier occurrence in the same call counts
        seen.add(key)
    assert a.n_added == int((~out).sum())
    b = BloomFilter(n_blocks, 4)
    b.add(arr)
    assert np.array_equal(a.words, b.words) and a.n_added == b.n_added
    b.add(arr)  # re-adding sets nothing
    assert b.n_added == a.n_added


def test_query_accepts_strided_views_and_empty():
    bf = BloomFilter.for_capacity(1000, 0.01)
    keys = rand_keys(200, 3)
    bf.add(keys[::2])
    assert bf.query(keys[::2]).all()
    assert bf.query(np.empty(0, np.uint64)).shape == (0,)
    assert bf.add_query(np.empty(0, np.uint64)).shape == (0,)


@pytest.mark.parametrize("bad", [[1, 2, 3], np.arange(3), np.zeros((2, 2), np.uint64),
                                 np.arange(3, dtype=np.float64), 7])
def test_bad_keys_raise_invalid_input(bad):
    bf = BloomFilter(4, 3)
    for op in (bf.add, bf.query, bf.add_query):
        with pytest.raises(InvalidInputError):
            op(bad)


@pytest.mark.parametrize("n_blocks, k", [(0, 3), (2**32, 3), (4, 0), (4, 65)])
def test_constructor_rejects_bad_shape(n_blocks, k):
    with pytest.raises(InvalidInputError):
        BloomFilter(n_blocks, k)


# -- figures ----------------------------------------------------------------


def test_fill_ratio_and_expected_fpr_follow_the_bits_and_refresh_after_writes():
    bf = BloomFilter(50, 6)
    for step in range(3):
        bf.add(rand_keys(1500, 10 + step))
        per_block = np.unpackbits(bf.words.view(np.uint8)).reshape(-1, 512).sum(axis=1)
        assert bf.fill_ratio == pytest.approx(per_block.sum() / bf.n_bits, rel=1e-12)
        want = np.mean((per_block / 512.0) ** 6)
        assert bf.expected_fpr == pytest.approx(want, rel=1e-12)
    before = bf.fill_ratio
    bf.add_query(rand_keys(1500, 99))
    assert bf.fill_ratio > before


# -- mode bookkeeping -------------------------------------------------------


def test_stats_dict_matches_properties():
    bf = BloomFilter.for_capacity(5000, 0.01)
    bf.add(rand_keys(3000, 5))
    st_ = bf.stats()
    assert st_["fill_ratio"] == bf.fill_ratio and st_["expected_fpr"] == bf.expected_fpr
    assert st_["n_added"] == bf.n_added and st_["bits_per_key"] == bf.bits_per_key
    assert st_["theoretical_fpr"] == bf.theoretical_fpr(bf.n_added)
    assert 0 < st_["expected_fpr"] < 0.01


# -- large inserts and the background insert --------------------------------


def test_large_insert_goes_by_regions_and_sets_the_same_bits_as_the_plain_kernel():
    from seenstore.bloom import filter as B
    from seenstore.kernels import bloom as K

    bf = BloomFilter.for_capacity(4_000_000, 1e-3)  # ~7 MiB: several regions
    assert B.region_bits(bf.nbytes) >= 2
    keys = host_skewed_keys(200_000, 5)
    plain = np.zeros_like(bf.words)
    want = K.bloom_add_query(plain, keys, bf.n_hashes, B.GROUP, np.empty(0, np.bool_), False)
    bf.add(keys)
    assert np.array_equal(bf.words, plain)
    assert abs(bf.n_added - want) <= 2  # which of two colliding keys counts is order's choice
    assert bf.query(keys).all()


def test_background_insert_equals_add_and_reports_fresh_keys():
    keys = rand_keys(300_000, 6)
    a = BloomFilter.for_capacity(1_000_000, 1e-2)
    b = BloomFilter.for_capacity(1_000_000, 1e-2)
    a.add(keys)
    pending = b.add_in_background(keys)
    fresh = pending.wait()
    assert pending.wait() == fresh  # idempotent
    assert np.array_equal(a.words, b.words) and fresh == a.n_added == b.n_added
    assert pending.elapsed_s > 0 and 0 < pending.cpu_s < 60  # thread CPU, both threads


def test_background_insert_hands_its_error_to_the_waiter(monkeypatch):
    bf = BloomFilter.for_capacity(1000, 1e-2)

    def boom(keys):
        raise MemoryError("no room")

    monkeypatch.setattr(bf, "_add_counting", boom)
    pending = bf.add_in_background(rand_keys(10, 1))
    with pytest.raises(MemoryError, match="no room"):
        pending.wait()


def test_background_insert_refuses_non_uint64_keys_at_once():
    with pytest.raises(InvalidInputError):
        BloomFilter.for_capacity(1000, 1e-2).add_in_background(np.arange(5))


def test_shared_region_insert_sets_the_same_bits_whoever_inserts():
    """A large background insert that the waiting thread joins at once: owner and
    helper split the regions, meet mid-chunk, and the seam is mended; the bits are
    exactly the single-threaded insert's, for one chunk and for several."""
    from seenstore import bloom as B

    keys = host_skewed_keys(400_000, 9)
    for capacity in (4_000_000, 200_000):  # ~7 MiB filter (one chunk) / small: many chunks
        ref = BloomFilter.for_capacity(capacity, 1e-4)
        ref.add(keys)
        bf = BloomFilter.for_capacity(capacity, 1e-4)
        pending = bf.add_in_background(keys)
        shared = pending._shared
        fresh = pending.wait()
        assert np.array_equal(bf.words, ref.words)
        assert abs(fresh - ref.n_added) <= 2 and bf.n_added == fresh
        if shared is not None:
            assert shared.front == shared.back and not shared.helping and shared.done
        assert B.region_bits(bf.nbytes) == 0 or shared is not None


def test_shared_region_insert_mends_the_seam_when_both_threads_work():
    from seenstore.bloom import filter as B

    keys = rand_keys(2_000_000, 10)
    ref = BloomFilter.for_capacity(8_000_000, 1e-3)
    ref.add(keys)
    bf = BloomFilter.for_capacity(8_000_000, 1e-3)
    work = B._SharedInsert(bf, keys, B.region_bits(bf.nbytes))
    owner = __import__("threading").Thread(target=work.run_owner)
    owner.start()
    work.help()
    owner.join()
    chunks = -(-len(keys) // max(B.REGION_MIN_KEYS, len(bf.words)))
    assert work.done and work.seams_mended <= chunks  # at most one meeting per chunk
    assert np.array_equal(bf.words, ref.words)
    assert abs(work.fresh - ref.n_added) <= 2


def test_every_block_is_one_cache_line(tmp_path):
    """The words start on a 64-byte boundary, made, loaded or handed in unaligned (the
    kernels prefetch one line per block: a straddling block cost 2.6x on inserts)."""
    from seenstore.bloom import BloomFilter

    bf = BloomFilter.for_capacity(100_000, 0.01)
    bf.add(np.arange(1000, dtype=np.uint64))
    bf.save(tmp_path / "B", 3)
    loaded, gen = BloomFilter.load(tmp_path / "B")
    raw = np.zeros(len(bf.words) + 2, np.uint64)
    off = 1 if (raw.ctypes.data + 8) % 64 else 2
    unaligned = raw[off: off + len(bf.words)]
    assert unaligned.ctypes.data % 64
    unaligned[:] = bf.words
    handed = BloomFilter(bf.n_blocks, bf.n_hashes, words=unaligned)
    for f in (bf, loaded, handed):
        assert f.words.ctypes.data % 64 == 0
        assert np.array_equal(f.words, bf.words) and f.query(np.arange(1000, dtype=np.uint64)).all()
    assert gen == 3


def _vm_flags(addr: int) -> str | None:
    """VmFlags of the mapping holding ``addr`` (Linux /proc/self/smaps), or None."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(" ", 1)[0]
            if "-" in head and not line.startswith("VmFlags"):
                lo, _, hi = head.partition("-")
                try:
                    inside = int(lo, 16) <= addr < int(hi, 16)
                except ValueError:
                    pass
            elif inside and line.startswith("VmFlags:"):
                return line
    return None


def test_large_filters_start_on_a_huge_page_and_ask_for_huge_pages():
    """Filters of 4 MiB and more start on a 2 MiB boundary and are advised to
    transparent huge pages (with 4 KiB pages every probe also misses the TLB: 1.5x
    slower at 341 MiB); small ones stay 64-byte aligned only."""
    from seenstore.bloom.sizing import HUGE_MIN_BYTES, HUGE_PAGE, block_aligned

    numpy_hint = np._core.multiarray._set_madvise_hugepage(False)  # only the filter's own
    try:
        big, small = block_aligned(HUGE_MIN_BYTES // 8), block_aligned(HUGE_MIN_BYTES // 16)
    finally:
        np._core.multiarray._set_madvise_hugepage(numpy_hint)
    assert big.ctypes.data % HUGE_PAGE == 0 and small.ctypes.data % 64 == 0
    assert not big.any() and not small.any()
    try:
        thp = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return  # no THP on this platform: the alignment is all that is promised
    flags = _vm_flags(big.ctypes.data)
    if "[never]" not in thp and flags is not None:
        assert " hg" in flags, flags


def test_a_loaded_large_filter_is_on_a_huge_page_boundary_and_advised(tmp_path):
    """A filter read back from a BLOOM file gets the same words as a new one: 2 MiB
    aligned and advised to huge pages before its body is read in (measured: a 280 MiB
    loaded filter entirely on 2 MiB pages), whatever numpy's own hint."""
    from seenstore.bloom.sizing import HUGE_MIN_BYTES, HUGE_PAGE

    bf = BloomFilter(HUGE_MIN_BYTES // 64, 8)
    keys = np.arange(1, 1000, dtype=np.uint64)
    bf.add(keys)
    bf.save(tmp_path / "BLOOM", 3)
    numpy_hint = np._core.multiarray._set_madvise_hugepage(False)
    try:
        got, generation = BloomFilter.load(tmp_path / "BLOOM")
    finally:
        np._core.multiarray._set_madvise_hugepage(numpy_hint)
    assert generation == 3 and np.array_equal(got.words, bf.words)
    assert got.words.ctypes.data % HUGE_PAGE == 0
    try:
        thp = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return  # no THP on this platform: the alignment is all that is promised
    flags = _vm_flags(got.words.ctypes.data)
    if "[never]" not in thp and flags is not None:
        assert " hg" in flags, flags


def test_region_inserts_reuse_one_kept_seed_buffer():
    """Region inserts take their seed buffer from one kept between calls (fresh pages
    fault in slowly), and set the same bits as key-order inserts."""
    from seenstore.bloom import filter as F
    from seenstore.kernels import bloom as K

    bf = BloomFilter.for_capacity(2_000_000, 1e-3)
    assert bf._region_bits_for(100_000)
    rng = np.random.default_rng(3)
    a, b = (rng.integers(0, 2**64, 100_000, np.uint64, endpoint=False) for _ in range(2))
    F._kept_scratch.clear()
    bf.add(a)
    kept = F._kept_scratch[0]
    bf.add_in_background(b).wait()
    assert F._kept_scratch[0] is kept
    ref = np.zeros_like(bf.words)
    for keys in (a, b):
        K.bloom_add_query(ref, keys, bf.n_hashes, 32, np.empty(0, np.bool_), False)
    assert np.array_equal(ref, bf.words)


def test_inserts_into_a_filter_past_the_tlb_go_by_regions(monkeypatch):
    """Into a filter of TLB_REGION_MIN_BYTES or more, an insert of fewer keys than it
    has blocks still goes by regions (of about KEYS_PER_REGION keys: a TLB miss saved
    per key), with the same bits as a key-order insert; below that size it does not."""
    from seenstore.bloom import filter as F
    from seenstore.kernels import bloom as K

    bf = BloomFilter.for_capacity(10_000_000, 1e-3)
    n = 100_000
    assert F.REGION_MIN_KEYS <= n < bf.n_blocks
    assert bf._region_bits_for(n) == 0
    monkeypatch.setattr(F, "TLB_REGION_MIN_BYTES", bf.nbytes)
    assert bf._region_bits_for(n) == min(F.region_bits(bf.nbytes), 6)
    assert bf._region_bits_for(F.REGION_MIN_KEYS - 1) == 0
    called = []
    real = K.bloom_add_regions
    monkeypatch.setattr(F._k, "kernel", lambda name: (
        called.append(name) or (real if name == "bloom_add_regions" else getattr(K, name))))
    keys = np.random.default_rng(5).integers(0, 2**64, n, np.uint64, endpoint=False)
    bf.add(keys)
    assert called == ["bloom_add_regions"]
    ref = np.zeros_like(bf.words)
    K.bloom_add_query(ref, keys, bf.n_hashes, 32, np.empty(0, np.bool_), False)
    assert np.array_equal(ref, bf.words)
    assert bf.n_added == n


def test_large_filters_run_the_kernels_for_small_calls_once_kernels_run(monkeypatch):
    """Below dispatch.SMALL keys a call runs the numpy twin (no JIT for a first small
    run). A filter of KERNEL_MIN_BYTES or more, where the twin costs ~1.8 us/key, runs
    the kernels for small calls too once this process runs kernels; before that (a
    fresh process: a small merge, the open's sample check) the twin, which costs less
    than importing numba."""
    from seenstore.kernels import dispatch
    from seenstore.bloom import filter as F

    monkeypatch.setattr(dispatch, "SMALL", 100_000)  # the default (conftest may lower it)
    asked = []
    real = dispatch.bloom.kernel
    monkeypatch.setattr(dispatch.bloom, "kernel", lambda name: asked.append(name) or real(name))
    keys = np.arange(1000, dtype=np.uint64)
    small = BloomFilter.for_capacity(10_000, 1e-3)
    large = BloomFilter(F.KERNEL_MIN_BYTES // 64, 8)
    with dispatch.twins_only():  # as in a fresh process (this one runs kernels)
        small.add(keys), small.query(keys), small.add_query(keys)
        large.add(keys)
        assert large.query(keys).all() and large.add_query(keys).all()
    monkeypatch.setattr(dispatch, "jit_live", lambda: False)  # a fresh process, unforced
    assert large.query(keys).all()
    assert asked == []  # the twins
    monkeypatch.setattr(dispatch, "jit_live", lambda: True)  # this process runs kernels
    kernel = BloomFilter(F.KERNEL_MIN_BYTES // 64, 8)
    kernel.add(keys)
    assert kernel.query(keys).all() and kernel.add_query(keys).all()
    assert asked == ["bloom_add_query", "bloom_query", "bloom_add_query"]
    assert np.array_equal(kernel.words, large.words)  # same bits either way
