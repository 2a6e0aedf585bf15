"""The radix sort kernels and the sort dispatcher against np.sort / np.unique."""

import json

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from conftest import EDGE_KEYS
from seenstore.keys import sort as sorting
from seenstore.kernels.sort import lsd_sort, radix_sort, sort_unique

key = st.one_of(st.sampled_from(EDGE_KEYS), st.integers(0, 2**64 - 1), st.integers(0, 300))
# (bucket_keys, extra, width, single, max_bits): bucket_keys 1 and 4 force MSD passes
# (nested ones too) on tiny inputs; extra 0 and single 2 leave many runs of alike keys
# to sort again; single 2 sends leaves to the LSD passes; the last tuple is the default
tunables = st.one_of(
    st.tuples(st.sampled_from([1, 4, 64, 16384]), st.sampled_from([0, 1, 3]),
              st.sampled_from([4, 8, 11]), st.sampled_from([2, 6, 11]), st.sampled_from([1, 4, 9])),
    st.just(sorting._tunables()))


def shaped(draw_keys, shape):
    a = np.array(draw_keys, dtype=np.uint64)
    if shape == "sorted":
        a.sort()
    elif shape == "reverse":
        a = np.sort(a)[::-1].copy()
    elif shape == "equal" and len(a):
        a[:] = a[0]
    return a


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(key, max_size=400),
       shape=st.sampled_from(["any", "sorted", "reverse", "equal"]),
       t=tunables)
@example(keys=[], shape="any", t=(1, 0, 8, 2, 4))
@example(keys=[2**64 - 1], shape="any", t=(1, 0, 8, 2, 4))
@example(keys=[2**64 - 1, 0], shape="any", t=(1, 0, 8, 2, 4))
@example(keys=EDGE_KEYS * 20, shape="any", t=(4, 0, 8, 2, 1))
def test_radix_sort_and_sort_unique_match_numpy(keys, shape, t):
    a = shaped(keys, shape)
    buf = np.empty(len(a), np.uint64)
    got = a.copy()
    radix_sort(got, buf, *t)
    assert np.array_equal(got, np.sort(a))
    got = a.copy()
    m = sort_unique(got, buf, *t)
    assert np.array_equal(got[:m], np.unique(a))
    got = a.copy()
    lsd_sort(got, buf, t[2])
    assert np.array_equal(got, np.sort(a))


@settings(max_examples=100, deadline=None)
@given(hosts=st.lists(st.integers(0, 2**20 - 1), min_size=1, max_size=4),
       n=st.integers(0, 3000), seed=st.integers(0, 2**32 - 1), t=tunables)
def test_host_skewed_keys(hosts, n, seed, t):
    """Few distinct top 20 bits (a crawl's hosts): MSD buckets of very unequal sizes,
    constant digits inside a host."""
    r = np.random.default_rng(seed)
    h = np.array(hosts, dtype=np.uint64)[r.integers(0, len(hosts), n)]
    low = (r.integers(0, 2**44, n, dtype=np.uint64)
           & np.uint64(r.choice([2**44 - 1, 0xFFF, 0xF000F])))
    a = (h << np.uint64(44)) | low
    buf = np.empty(n, np.uint64)
    got = a.copy()
    radix_sort(got, buf, *t)
    assert np.array_equal(got, np.sort(a))
    got = a.copy()
    assert np.array_equal(got[:sort_unique(got, buf, *t)], np.unique(a))


def test_keys_alike_but_in_their_lowest_bits(rng):
    """Keys equal in their top bits and different only in the lowest: the runs alike
    in the bits a leaf sorted are sorted again on their own bits (an insertion finish
    of them would be quadratic)."""
    a = (np.uint64(7) << np.uint64(60)) | rng.integers(0, 2**8, 50_000).astype(np.uint64)
    a[::3] |= np.uint64(1) << np.uint64(59)
    got = a.copy()
    radix_sort(got, np.empty(len(a), np.uint64), *sorting._tunables())  # no compile of its own
    assert np.array_equal(got, np.sort(a))


@pytest.mark.parametrize("width", [4, 11])
def test_lsd_digits_adds_a_digit_below_when_many_keys_would_stay_alike(width, rng):
    """A leaf of a few large hosts (its top digit shared by thousands of keys): the
    keys alike in the bits the LSD passes would sort are many, so one more digit below
    is sorted first (``_lsd_digits`` returns the lower start); spread keys get no extra
    pass. Either way the output is the input sorted by its bits from that start, stably."""
    from seenstore.kernels.sort import _lsd_digits, varying_bits
    m, nd = 20_000, 2
    start = 46 - nd * width
    top = start + (nd - 1) * width
    cases = [((rng.integers(0, 4, m).astype(np.uint64) << np.uint64(top))
              | rng.integers(0, 2**top, m, dtype=np.uint64), start - width)]
    if width == 11:  # 22 bits sorted: 20k spread keys are alone in them
        cases.append((rng.integers(0, 2**46, m, dtype=np.uint64), start))
    for a, want_start in cases:
        src, alt, out = a.copy(), np.empty(m, np.uint64), np.empty(m, np.uint64)
        counts = np.empty(((64 + width - 1) // width) << width, np.int64)
        got = _lsd_digits(src, alt, out, 0, m, start, nd, width, varying_bits(a, 0, m),
                          counts, np.empty(1 << width, np.uint64))
        assert got == want_start
        assert np.array_equal(out, a[np.argsort(a >> np.uint64(got), kind="stable")])


@pytest.mark.parametrize("threads", [1, 2])
def test_a_varying_bit_the_sample_misses(threads, rng):
    """The top MSD digit is planned on a sample of the keys (every 67th); a higher bit
    that varies only in keys outside the sample (the edge keys 2**63 and 2**64 - 1 in
    a shard's keys) is found by the histogram's pass and the digit planned again."""
    from seenstore.kernels.sort import sampled_bits
    n = 100_000
    for base in (np.full(n, 5, np.uint64), rng.integers(0, 2**20, n).astype(np.uint64)):
        a = base.copy()
        a[1], a[2], a[n - 2] = 2**63, 2**64 - 1, 0
        assert sampled_bits(a, 0, n) < 2**20  # the sample saw none of them
        for unique in (False, True):
            got = a.copy()
            m = sorting._sort(got, unique, threads, "radix")
            assert np.array_equal(got[:m], np.unique(a) if unique else np.sort(a))


@pytest.mark.parametrize("n", [0, 1, 2, 3, 1000, 70_000, 300_001])
@pytest.mark.parametrize("unique", [False, True])
def test_two_threads_identical_to_one(n, unique, rng, monkeypatch):
    monkeypatch.setattr(sorting, "BUCKET_KEYS", 256)  # many buckets even at small n
    a = rng.integers(0, 2**64, n, dtype=np.uint64)
    a[: n // 3] = a[n // 3: 2 * (n // 3)]  # repeats, across both halves
    if n > 10:
        a[5] = 0
        a[6] = np.uint64(2**64 - 1)
    one, two = a.copy(), a.copy()
    m1 = sorting._sort(one, unique, 1, "radix")
    m2 = sorting._radix_two(two, np.empty(n, np.uint64), unique) if n >= 2 else m1
    if n >= 2:
        assert m1 == m2
        assert np.array_equal(one[:m1], two[:m2])
    want = np.unique(a) if unique else np.sort(a)
    assert np.array_equal(one[:m1], want)


def test_two_threads_all_equal_and_skewed(rng):
    for a in (np.full(100_000, 2**63, np.uint64),
              (np.uint64(0xABCDE) << np.uint64(44))
              | rng.integers(0, 2**10, 100_000).astype(np.uint64)):
        for unique in (False, True):
            one, two = a.copy(), a.copy()
            m1 = sorting._sort(one, unique, 1, "radix")
            m2 = sorting._sort(two, unique, 2, "radix")
            assert m1 == m2 and np.array_equal(one[:m1], two[:m2])
            assert np.array_equal(one[:m1], np.unique(a) if unique else np.sort(a))


def test_dispatch_env_override_and_small_arrays(monkeypatch, rng):
    monkeypatch.setenv(sorting.ENV, "numpy")
    assert sorting.choice() == "numpy" and sorting.describe()["sort"] == "numpy"
    monkeypatch.setenv(sorting.ENV, "radix")
    assert sorting.choice() == "radix"
    assert sorting.describe() == {"sort": "radix", "source": "SEENSTORE_SORT=radix"}
    called = []
    monkeypatch.setattr("seenstore.kernels.sort.sort_unique",
                        lambda *a: called.append(1) or 0)  # would break the answer
    small = rng.integers(0, 50, sorting.SMALL_KEYS - 1).astype(np.uint64)
    assert np.array_equal(sorting.sorted_unique(small), np.unique(small))
    assert not called  # small arrays never reach the kernel


def test_the_verdict_goes_to_seenstore_cache_dir_when_set(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("SEENSTORE_CACHE_DIR", raising=False)
    assert sorting._cache_path() == str(tmp_path / "xdg" / "seenstore" / "sort-choice.json")
    monkeypatch.setenv("SEENSTORE_CACHE_DIR", str(tmp_path / "own"))
    assert sorting._cache_path() == str(tmp_path / "own" / "sort-choice.json")


def test_dispatch_measures_once_and_caches(monkeypatch, tmp_path):
    monkeypatch.delenv(sorting.ENV, raising=False)
    monkeypatch.delenv("SEENSTORE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    sorting._reset()
    calls = []
    monkeypatch.setattr(sorting, "measure",
                        lambda: calls.append(1) or {"numpy_ns": 30.0, "radix_ns": 10.0})
    try:
        assert sorting.choice() == "radix"
        assert sorting.describe()["source"] == "measured in this process"
        assert sorting.choice() == "radix" and len(calls) == 1
        path = tmp_path / "seenstore" / "sort-choice.json"
        doc = json.loads(path.read_text())
        assert doc[sorting._machine_key()]["sort"] == "radix"
        sorting._reset()  # a new process: reads the cache, measures nothing
        assert sorting.choice() == "radix" and len(calls) == 1
        assert sorting.describe()["source"].startswith("cached in")
        path.write_text("{not json")  # a broken cache is measured again and replaced
        sorting._reset()
        monkeypatch.setattr(sorting, "measure", lambda: {"numpy_ns": 5.0, "radix_ns": 10.0})
        assert sorting.choice() == "numpy"
        assert json.loads(path.read_text())[sorting._machine_key()]["sort"] == "numpy"
    finally:
        sorting._reset()


def test_machine_description():
    assert sorting.cpu_model()
    simd = sorting.numpy_simd()
    assert set(simd) == {"baseline", "found", "not_found"}


@pytest.mark.parametrize("method", ["radix", "numpy"])
def test_sort_shards_on_threads(method, rng, monkeypatch):
    monkeypatch.setenv(sorting.ENV, method)
    keys = rng.integers(0, 2**64, 200_000, dtype=np.uint64)
    keys[:50_000] = keys[100_000:150_000]
    results = []
    for threads in (1, 2):
        part = keys.copy()
        bounds = np.array([0, 1000, 1000, 120_000, 200_000], dtype=np.int64)
        ex, futs = sorting.sort_shards(part, bounds, [0, 2, 3], threads)
        ends = {s: f.result()[0] for s, f in futs.items()}
        ex.shutdown()
        got = [part[bounds[s]:ends[s]].copy() for s in (0, 2, 3)]
        for s, g in zip((0, 2, 3), got):
            assert np.array_equal(g, np.unique(keys[bounds[s]:bounds[s + 1]]))
        results.append(got)
    assert all(np.array_equal(x, y) for x, y in zip(*results))


@pytest.mark.parametrize("shape", ["uniform", "skewed"])
def test_sizes_around_every_threshold(shape):
    """Sizes at and just above SMALL, a leaf (2 * bucket_keys) and the MSD digit's
    growth, default tunables, against np.sort / np.unique."""
    from seenstore.kernels.sort import SMALL
    bk = sorting.BUCKET_KEYS
    for n in (SMALL, SMALL + 1, 2 * bk, 2 * bk + 1, (bk << 1) + 2, 2 ** 18 + 1):
        a = sorting.probe_keys(n, shape == "skewed", seed=n)
        a[: n // 4] = a[n // 4: 2 * (n // 4)]  # repeats
        got = a.copy()
        radix_sort(got, np.empty(n, np.uint64), *sorting._tunables())
        assert np.array_equal(got, np.sort(a))
        got = a.copy()
        m = sort_unique(got, np.empty(n, np.uint64), *sorting._tunables())
        assert np.array_equal(got[:m], np.unique(a))


def test_scratch_is_reused_on_shard_threads_only():
    """The store sorts shard after shard: on sort_shards' threads the radix sort's
    scratch array is kept and reused (fresh pages cost their faults), except above
    SCRATCH_KEYS; any other caller gets a new one (nothing stays allocated)."""
    from concurrent.futures import ThreadPoolExecutor

    assert not np.shares_memory(sorting._scratch(1000), sorting._scratch(1000))

    def on_shard_thread():
        sorting._local.reuse = True
        a = sorting._scratch(100_000)
        b = sorting._scratch(50_000)
        big = sorting._scratch(sorting.SCRATCH_KEYS + 1)
        return np.shares_memory(a, b), np.shares_memory(a, big)

    def sized_for_the_largest_shard():  # a small shard first: no second array later
        sorting._local.buf = None
        sorting._local.reuse = 300_000
        a = sorting._scratch(50_000)
        return np.shares_memory(a, sorting._scratch(300_000))

    with ThreadPoolExecutor(1) as ex:
        assert ex.submit(on_shard_thread).result() == (True, False)
        assert ex.submit(sized_for_the_largest_shard).result()


def test_sort_shards_reports_the_sorting_threads_cpu_time(monkeypatch, rng):
    """A shard's seconds are its sorting thread's CPU time (time.thread_time), not
    wall time, which counts the turns of the threads sharing the cores."""
    ticks = iter(range(0, 1000, 5))
    monkeypatch.setattr(sorting.time, "thread_time", lambda: float(next(ticks)))
    monkeypatch.setattr(sorting.time, "perf_counter", lambda: 1e6)  # would give 0 s
    keys = rng.integers(0, 2**64, 1000, dtype=np.uint64)
    ex, futs = sorting.sort_shards(keys, np.array([0, 1000], np.int64), [0], 1)
    end, secs = futs[0].result()
    ex.shutdown()
    assert end == 1000 and secs == 5.0


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(key, min_size=1, max_size=300), sh=st.sampled_from([0, 1, 8, 40, 56, 63]))
def test_bubble_finishes_a_prefix_sorted_leaf_or_says_not(keys, sh):
    """kernels/sort.py ``_bubble`` on keys sorted by ``key >> sh`` (what a leaf's
    passes leave): a permutation still so sorted; True exactly when it is now sorted,
    and always when every run alike in those bits is of equal keys or of two."""
    from seenstore.kernels.sort import _bubble
    a = np.array(keys, dtype=np.uint64)
    a = a[np.argsort(a >> np.uint64(sh), kind="stable")]
    got = a.copy()
    ok = _bubble(got, 0, len(got))
    assert np.array_equal(np.sort(got), np.sort(a))
    assert np.all(np.diff((got >> np.uint64(sh)).astype(object)) >= 0)
    assert ok == bool(np.all(got[1:] >= got[:-1]))
    _, starts, sizes = np.unique(a >> np.uint64(sh), return_index=True, return_counts=True)
    if all(n <= 2 or len(set(a[i:i + n].tolist())) == 1 for i, n in zip(starts, sizes)):
        assert ok


def _fine_case(a, bits, fine, bucket_keys, method="radix"):
    """partition_top_bits by ``fine`` bits, then each shard (top ``bits``) through
    sort_unique_buckets (``method``; radix: bucket_keys patched in); the unique keys
    per shard."""
    from seenstore.kernels.batch import partition_top_bits
    part = np.empty(len(a), np.uint64)
    starts = np.empty((1 << fine) + 1, np.int64)
    partition_top_bits(a, fine, part, starts)
    sub = 1 << (fine - bits)
    saved = sorting.BUCKET_KEYS
    sorting.BUCKET_KEYS = bucket_keys
    try:
        got = []
        for s in range(1 << bits):
            lo, hi = starts[s * sub], starts[(s + 1) * sub]
            m = sorting.sort_unique_buckets(part[lo:hi], starts[s * sub:(s + 1) * sub + 1],
                                            method=method)
            got.append(part[lo:lo + m].copy())
    finally:
        sorting.BUCKET_KEYS = saved
    return got


def _shard_twin(a, bits):
    """np.unique of each shard (top ``bits``) of ``a``."""
    top = (a >> np.uint64(64 - bits)) if bits else np.zeros(len(a), np.uint64)
    return [np.unique(a[top == s]) for s in range(1 << bits)]


@settings(max_examples=150, deadline=None)
@given(keys=st.lists(key, max_size=400),
       shape=st.sampled_from(["any", "sorted", "reverse", "equal"]),
       bits=st.integers(0, 3), more=st.integers(0, 6), bk=st.sampled_from([1, 4, 64, 16384]),
       method=st.sampled_from(["radix", "numpy"]))
@example(keys=EDGE_KEYS * 20, shape="any", bits=1, more=3, bk=4, method="radix")
@example(keys=EDGE_KEYS * 20, shape="any", bits=1, more=3, bk=4, method="numpy")
@example(keys=[2**63] * 50 + [0, 2**64 - 1] * 30, shape="reverse", bits=0, more=6, bk=1,
         method="radix")
@example(keys=[2**63] * 50 + [0, 2**64 - 1] * 30, shape="reverse", bits=0, more=6, bk=1,
         method="numpy")
def test_sort_unique_buckets_of_a_fine_partition_match_numpy(keys, shape, bits, more, bk, method):
    """A shard sorted from the finer groups of its partition (the store's path,
    ShardSorter.partition), by either sort: the same unique keys as np.unique of the
    shard."""
    a = shaped(keys, shape)
    got = _fine_case(a, bits, bits + more, bk, method)
    for g, want in zip(got, _shard_twin(a, bits)):
        assert np.array_equal(g, want)


@settings(max_examples=60, deadline=None)
@given(hosts=st.lists(st.integers(0, 2**20 - 1), min_size=1, max_size=4),
       n=st.integers(0, 3000), seed=st.integers(0, 2**32 - 1), bk=st.sampled_from([4, 64, 16384]))
def test_sort_unique_buckets_host_skewed(hosts, n, seed, bk):
    r = np.random.default_rng(seed)
    h = np.array(hosts, dtype=np.uint64)[r.integers(0, len(hosts), n)]
    a = (h << np.uint64(44)) | r.integers(0, 2**44, n, dtype=np.uint64)
    a[: n // 5] = a[n // 5: 2 * (n // 5)]  # repeats
    for method in ("radix", "numpy"):
        got = _fine_case(a, 2, 9, bk, method)
        for g, want in zip(got, _shard_twin(a, 2)):
            assert np.array_equal(g, want)


def test_bucket_keys_rule(monkeypatch):
    """An array's own sort takes buckets of its first MSD pass's size, a power of two
    within SMALL_BUCKET_KEYS..BUCKET_KEYS, never more than BUCKET_KEYS (tests patch it)."""
    sizes = [0, 1, 1000, 10**5, 10**6, 2**21, 2**21 + 1, 3 * 10**6, 2**22 + 1, 10**7, 10**9]
    got = [sorting._bucket_keys(n) for n in sizes]
    assert got == sorted(got)  # never smaller for a larger array
    for n, bk in zip(sizes, got):
        assert sorting.SMALL_BUCKET_KEYS <= bk <= sorting.BUCKET_KEYS and bk & (bk - 1) == 0
        assert bk == sorting.BUCKET_KEYS or -(-n >> sorting.MSD_BITS) <= bk
    assert got[sizes.index(10**6)] == 4096 and got[sizes.index(3 * 10**6)] == 8192
    assert got[sizes.index(10**7)] == sorting.BUCKET_KEYS
    assert sorting._tunables(10**6)[1:] == sorting._tunables()[1:]
    monkeypatch.setattr(sorting, "BUCKET_KEYS", 256)
    assert {sorting._bucket_keys(n) for n in sizes} == {256}


@pytest.mark.parametrize("n", [300_001, 2**21 + 1])
@pytest.mark.parametrize("threads", [1, 2])
def test_sorts_with_the_bucket_size_of_their_length(n, threads):
    """sort_keys / sort_unique_keys where _bucket_keys takes 4,096 and 8,192 keys,
    host-skewed keys with repeats and uniform ones, one thread and two, against np.sort."""
    for skewed in (True, False):
        a = sorting.probe_keys(n, skewed, seed=n + threads)
        a[: n // 8] = a[n // 2: n // 2 + n // 8]  # repeats
        want = np.sort(a)
        got = a.copy()
        sorting.sort_keys(got, threads, method="radix")
        assert np.array_equal(got, want)
        got = a.copy()
        m = sorting.sort_unique_keys(got, threads, method="radix")
        assert np.array_equal(got[:m], want[np.r_[True, want[1:] != want[:-1]]])


def test_fine_bits_rule():
    """At least the shard bits, at most FINE_MAX_BITS, groups of BUCKET_KEYS / 4 to / 2."""
    assert sorting.fine_bits(10_000_000, 4) == sorting.FINE_MAX_BITS
    assert sorting.fine_bits(1000, 4) == 4
    assert sorting.fine_bits(0, 0) == 0
    assert sorting.fine_bits(10_000_000, 12) == 12
    for n in (1 << 18, 1 << 20, (1 << 20) + 1, 3_000_000):
        f = sorting.fine_bits(n, 0)
        assert sorting.BUCKET_KEYS // 4 <= n / (1 << f) <= sorting.BUCKET_KEYS // 2


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("method", ["radix", "numpy"])
def test_shard_sorter_sorts_shards_from_its_fine_partition(threads, method, monkeypatch):
    """ShardSorter.partition + submit (the store's path): shard bounds as a plain
    partition gives, each shard's unique keys as np.unique, sorted from the finer
    groups it returns or, without them, the plain way."""
    from seenstore.keys.partition import partition
    from seenstore.store.scheduling import ShardSorter

    monkeypatch.setenv(sorting.ENV, method)
    keys = sorting.probe_keys(1 << 20, True, seed=3)
    keys[:100_000] = keys[200_000:300_000]
    keys[-5:] = [0, 2**63, 2**64 - 1, 2**64 - 1, 0]
    sorter = ShardSorter()
    try:
        part, bounds, fine = sorter.partition(keys, 3, threads)
        assert fine is not None and len(fine) > len(bounds)
        assert np.array_equal(bounds, partition(keys, 3, 1)[1])
        futs = sorter.submit(part, bounds, range(8), threads, fine)
        for s, want in enumerate(_shard_twin(keys, 3)):
            end = futs[s].result()[0]
            assert np.array_equal(part[bounds[s]:end], want)
        plain, pb = partition(keys, 3, threads)
        futs = sorter.submit(plain, pb, range(8), threads)
        for s, want in enumerate(_shard_twin(keys, 3)):
            assert np.array_equal(plain[pb[s]:futs[s].result()[0]], want)
    finally:
        sorter.close()


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(key, min_size=1, max_size=300), sh=st.sampled_from([0, 1, 8, 40, 56, 63]),
       limit=st.sampled_from([0, 1, 5, 50, 10**6]))
def test_insertion_finishes_a_prefix_sorted_leaf_or_gives_up_still_so_sorted(keys, sh, limit):
    """kernels/sort.py ``_insertion`` (a leaf's pass after a failed bubble pass) on
    keys sorted by ``key >> sh``: a permutation still so sorted; True exactly when the
    leaf's inversions (the moves an insertion sort makes) are within ``limit``, and
    then sorted."""
    from seenstore.kernels.sort import _insertion
    a = np.array(keys, dtype=np.uint64)
    a = a[np.argsort(a >> np.uint64(sh), kind="stable")]
    got = a.copy()
    ok = _insertion(got, 0, len(got), limit)
    assert np.array_equal(np.sort(got), np.sort(a))
    assert np.all(np.diff((got >> np.uint64(sh)).astype(object)) >= 0)
    if ok:
        assert np.all(got[1:] >= got[:-1])
    x = a.tolist()
    inversions = sum(1 for i in range(len(x)) for j in range(i + 1, len(x)) if x[i] > x[j])
    assert ok == (inversions <= limit)


def test_host_skewed_leaves_finished_by_the_insertion_pass(rng):
    """Leaves where a large host fills its slots three deep (the bubble pass leaves
    them unsorted): the radix sort's answer is np.sort's, whether the insertion pass
    finishes the leaf or gives up on it (a host holding most keys: many inversions)."""
    for share in (0.3, 0.6, 0.95):
        n = 20_000
        hosts = rng.integers(0, 2**11, n, dtype=np.uint64)
        hosts[rng.random(n) < share] = 7
        a = (np.uint64(0x3A5) << np.uint64(55)) | (hosts << np.uint64(44)) | \
            rng.integers(0, 2**44, n, dtype=np.uint64)
        for t in ((16384, 1, 11, 11, 9), (4096, 0, 8, 8, 4)):
            got = a.copy()
            radix_sort(got, np.empty(n, np.uint64), *t)
            assert np.array_equal(got, np.sort(a))
