"""Small inputs need no JIT (issue 11.2): every numpy twin in seenstore/dispatch.py
computes exactly what its numba kernel does, a first ``add``/``merge`` of a small input
never imports numba, and the CLI says once when it is about to compile."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conftest import EDGE_KEYS
from seenstore.kernels import dispatch as D

keys_st = st.lists(st.one_of(st.sampled_from(EDGE_KEYS), st.integers(0, 2**64 - 1),
                             st.integers(0, 40)), max_size=300)


def u64(xs) -> np.ndarray:
    return np.array(xs, dtype=np.uint64)


def both(family, name, *args):
    """(kernel result, twin result), each on its own copy of the array arguments."""
    copy = lambda: [a.copy() if isinstance(a, np.ndarray) else a for a in args]  # noqa: E731
    ka, ta = copy(), copy()
    kr = family.kernel(name)(*ka)
    tr = family.twin(name)(*ta)
    return (kr, ka), (tr, ta)


def same(a, b) -> bool:
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b or (a is None and b is None)


@settings(max_examples=60, deadline=None)
@given(keys=keys_st, other=keys_st, bits=st.integers(0, 16))
@example(keys=EDGE_KEYS * 2, other=EDGE_KEYS[:3], bits=1)
def test_batch_twins_equal_kernels(keys, other, bits):
    k, o = u64(keys), np.unique(u64(other))
    s = np.sort(k)
    (kr, ka), (tr, ta) = both(D.batch, "unique_inplace", s)
    assert kr == tr and np.array_equal(ka[0][:kr], ta[0][:tr])
    assert same(both(D.batch, "unique_sorted", s)[0][0], both(D.batch, "unique_sorted", s)[1][0])
    keep = (k % np.uint64(3)) == 0
    (kr, ka), (tr, ta) = both(D.batch, "compact_inplace", k, keep)
    assert kr == tr and np.array_equal(ka[0][:kr], ta[0][:tr])
    for name in ("mark_first_new", "mark_members"):
        (kr, _), (tr, _) = both(D.batch, name, k, o)
        assert np.array_equal(kr, tr), name
    out, starts = np.zeros(len(k) + 3, np.uint64), np.zeros((1 << bits) + 1, np.int64)
    (_, ka), (_, ta) = both(D.batch, "partition_top_bits", k, bits, out, starts)
    assert np.array_equal(ka[2][: len(k)], ta[2][: len(k)]) and np.array_equal(ka[3], ta[3])
    cuts = o[: bits + 1]  # 0..17 ascending cuts, edge keys among them; repeats in k
    ids, out = np.zeros(len(k), np.int32), np.zeros(len(k), np.uint64)
    starts = np.zeros(len(cuts) + 2, np.int64)
    (_, ka), (_, ta) = both(D.batch, "partition_by_cuts", k, cuts, ids, out, starts)
    assert np.array_equal(ka[3], ta[3]) and np.array_equal(ka[4], ta[4])
    assert np.array_equal(ka[3], k[np.argsort(np.searchsorted(cuts, k, "right"), kind="stable")])


def test_merge_twin_detects_an_unsorted_run():
    assert D.merge.twin("is_strictly_increasing")(u64([1, 5, 3, 7])) is False
    found = np.zeros(1, bool)
    assert D.merge.twin("sweep_step")(u64([1, 5, 3, 7]), 4, u64([2]), 0, found, np.uint64(0),
                                      False)[3] is False


@settings(max_examples=40, deadline=None)
@given(keys=keys_st, probes=keys_st, n_blocks=st.integers(1, 9), k=st.integers(1, 16))
@example(keys=EDGE_KEYS * 2, probes=EDGE_KEYS, n_blocks=1, k=16)
def test_bloom_twins_set_the_same_bits(keys, probes, n_blocks, k):
    words = np.zeros(8 * n_blocks, np.uint64)
    ks, ps = u64(keys), u64(probes)
    out = np.zeros(len(ks), bool)
    (kr, ka), (tr, ta) = both(D.bloom, "bloom_add_query", words, ks, k, 32, out, True)
    assert kr == tr and np.array_equal(ka[0], ta[0]) and np.array_equal(ka[4], ta[4])
    filled = ka[0]
    (_, ka), (_, ta) = both(D.bloom, "bloom_query", filled, ps, k, 32, np.zeros(len(ps), bool))
    assert np.array_equal(ka[4], ta[4])
    (kr, ka), (tr, ta) = both(D.bloom, "bloom_add_regions", words, ks, k, 32, 0,
                              np.empty(max(1, len(ks)), np.uint64))
    assert np.array_equal(ka[0], ta[0]) and tr >= kr  # region order may count fewer fresh
    hist = np.zeros(64 * 8 + 1, np.int64)
    (_, ka), (_, ta) = both(D.bloom, "block_fill_histogram", filled, 8, hist)
    assert np.array_equal(ka[2], ta[2])


def test_url_twins_equal_kernels():
    from seenstore.url.fastpath import normalise_buffer
    from seenstore.url.buffer import URLBuffer

    urls = ["http://a.example/x", "HTTP://B.example:80/./y#f", "mailto:x", "http://é.example/",
            "rel/../z", "http://[::1]/", "http://a.example/%7e"]
    fb = normalise_buffer(URLBuffer.from_strs(urls, base="http://base.example/p/"))
    out, offs, accepted, piece_of, pdata, poffs = fb.parts
    for nl in (0, 1):
        (kr, _), (tr, _) = both(D.url, "gather", out, offs, accepted, piece_of, pdata, poffs, nl)
        assert same(kr, tr)
    data = np.frombuffer("http://a.example/xhttp://é.example/".encode(), np.uint8)
    offsets = np.array([0, 18, len(data)], np.int64)
    for bits in (0, 20, 32):
        (kr, _), (tr, _) = both(D.fingerprint, "fingerprint_batch", data, offsets, bits)
        assert np.array_equal(kr, tr)


def test_small_path_gives_the_same_store_as_the_kernels(tmp_path, monkeypatch):
    """One workload through twins (SMALL large) and kernels (SMALL 0): same files."""
    from seenstore.bloom import BloomFilter
    from seenstore.store import SeenStore

    rng = np.random.default_rng(7)
    batches = [rng.integers(0, 2**64, 3000, dtype=np.uint64) for _ in range(3)]
    batches[1][:1000] = batches[0][:1000]
    contents = []
    for small in (10**9, 0):
        monkeypatch.setattr(D, "SMALL", small)
        path = str(tmp_path / f"s{small}")
        with D.twins_only() if small else contextlib.nullcontext(), \
                SeenStore.open(path, create=True, sync=False) as st:
            masks = [st.add(b).tolist() for b in batches]
            masks.append(st.contains(batches[2][::7]).tolist())
        names = sorted(n for n in os.listdir(path) if n.endswith(".run"))
        runs = {n: open(os.path.join(path, n), "rb").read() for n in names}
        # the BLOOM header names its store (a random id), so compare the filters' bits
        bf, gen = BloomFilter.load(os.path.join(path, "BLOOM"))
        contents.append((masks, runs, gen, bf.n_hashes, bf.words.tobytes()))
    assert contents[0] == contents[1]


def _cold(tmp_path, *args, stdin=None):
    """Run the CLI with an empty numba cache and the default threshold; report whether
    numba was imported."""
    code = ("import sys; from seenstore.cli import main\n"
            "try:\n    main(prog_name='seenstore')\n"
            "finally:\n    sys.stderr.write('NUMBA=%s\\n' % ('numba' in sys.modules))")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "nc")}
    env.pop("SEENSTORE_JIT_MIN", None)
    return subprocess.run([sys.executable, "-c", code, *args], input=stdin, env=env,
                          capture_output=True, text=True)


def test_small_add_and_merge_never_import_numba(tmp_path):
    urls = "".join(f"http://cold.test/{i}\n" for i in range(12))
    p = _cold(tmp_path, "add", "-", "--store", str(tmp_path / "s"), stdin=urls)
    assert p.returncode == 0 and p.stdout == urls and "NUMBA=False" in p.stderr, p.stderr
    batch = tmp_path / "k.bin"
    np.arange(1, 10_001, dtype="<u8").tofile(batch)
    p = _cold(tmp_path, "merge", str(batch), "--store", str(tmp_path / "s"))
    assert p.returncode == 0 and "new 10,000" in p.stdout and "NUMBA=False" in p.stderr
    assert "compiling" not in p.stderr


def test_small_merges_into_a_large_bloom_filter_never_import_numba(tmp_path):
    """A filter of KERNEL_MIN_BYTES or more takes the kernels for small calls only in
    a process that runs kernels already: a small merge into it, and the sample check
    of its next open, take the twins (importing numba cost ~0.5 s of a 0.9 s merge)."""
    from seenstore.bloom.filter import KERNEL_MIN_BYTES

    store, batch = str(tmp_path / "s"), tmp_path / "k.bin"
    np.arange(1, 10_001, dtype="<u8").tofile(batch)
    p = _cold(tmp_path, "merge", str(batch), "--store", store, "--bloom-capacity", "4e6")
    assert p.returncode == 0 and "new 10,000" in p.stdout and "NUMBA=False" in p.stderr, p.stderr
    assert os.path.getsize(os.path.join(store, "BLOOM")) >= KERNEL_MIN_BYTES
    np.arange(5_001, 15_001, dtype="<u8").tofile(batch)
    p = _cold(tmp_path, "merge", str(batch), "--store", store, "--json")
    assert p.returncode == 0 and "NUMBA=False" in p.stderr, p.stderr
    doc = json.loads(p.stdout)
    assert doc["new"] == 5_000 and doc["bloom"]["state"] == "loaded", doc


def test_compile_is_announced_once(monkeypatch):
    said = []
    monkeypatch.setattr(D, "on_compile", lambda: said.append(1))
    monkeypatch.setattr(D, "_announced", False)

    class Fresh:  # a kernel with nothing compiled and no cache index
        signatures = []

    D.announce(Fresh())
    D.announce(Fresh())
    assert said == [1]


def test_warmup_command_compiles_every_kernel_and_says_how_long():
    import json

    from click.testing import CliRunner

    from seenstore.cli import main

    r = CliRunner().invoke(main, ["warmup", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["ok"] and doc["seconds"] > 0
    for family in D.FAMILIES.values():
        for name in family.names():
            assert family.kernel(name).signatures, name  # compiled (or loaded) for real


CODEC_WARMED = """
import json, sys, tempfile
from seenstore.kernels import codec
from seenstore.warmup import warm_steps
for name, step in warm_steps(tempfile.mkdtemp()):
    if name.startswith("compressed"):
        step()
print(json.dumps({n: len(getattr(codec, n).signatures) for n in sys.argv[1:]}))
"""


def test_warmup_compiles_the_compressed_runs_kernels():
    """The codec's kernels are called directly (no dispatch family): the warm-up's
    step for them must reach them, in a fresh process (this one may have run them)."""
    import json
    import subprocess
    import sys

    names = ["encode_blocks", "encoded_bound", "max_block_words", "decode_blocks",
             "sweep_blocks", "lookup"]
    out = subprocess.run([sys.executable, "-c", CODEC_WARMED, *names], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    assert json.loads(out) == {n: 1 for n in names}


def test_small_calls_take_the_kernel_once_this_process_runs_kernels(monkeypatch):
    """Below SMALL a call takes its twin while its kernel is not live (a fresh
    process, or a kernel that would compile), the kernel once this process runs
    kernels (a long-lived pipeline's small calls: 5-15x faster), and the twin again
    inside ``twins_only``; the same answer every time."""
    run = np.arange(0, 30_000, 3, dtype=np.uint64)
    batch = np.arange(0, 30_000, 2, dtype=np.uint64)
    want = np.isin(batch, run)

    def sweep(fn):
        found = np.zeros(len(batch), np.bool_)
        assert fn(run, len(run), batch, 0, found) == len(batch) - 1  # 29,998 > the run's last
        return found

    assert np.array_equal(sweep(D.merge.kernel("sweep_sorted")), want)  # in memory now
    monkeypatch.setattr(D, "SMALL", 10**9)
    twin, size = D.merge._twins["sweep_sorted"]
    calls = []
    monkeypatch.setitem(D.merge._twins, "sweep_sorted",
                        (lambda *a: calls.append(1) or twin(*a), size))
    monkeypatch.setattr(D.merge, "_cache", {})  # a fresh dispatch function
    monkeypatch.setattr(D, "jit_live", lambda: False)  # a fresh process
    assert np.array_equal(sweep(D.merge.sweep_sorted), want) and len(calls) == 1
    monkeypatch.setattr(D, "jit_live", lambda: True)
    with monkeypatch.context() as m:
        m.setattr(D, "_will_compile", lambda kernel: True)  # never compile for a small call
        assert np.array_equal(sweep(D.merge.sweep_sorted), want) and len(calls) == 2
    assert np.array_equal(sweep(D.merge.sweep_sorted), want) and len(calls) == 2  # the kernel
    monkeypatch.setattr(D, "jit_live", lambda: False)
    assert np.array_equal(sweep(D.merge.sweep_sorted), want) and len(calls) == 2  # stays so
    with D.twins_only():
        assert np.array_equal(sweep(D.merge.sweep_sorted), want) and len(calls) == 3
    assert np.array_equal(sweep(D.merge.sweep_sorted), want) and len(calls) == 3


def test_small_sorts_take_the_radix_sort_only_where_this_process_chose_it(monkeypatch):
    """Between SMALL_KEYS and dispatch.SMALL keys: numpy's sort, unless this process
    already chose the radix sort and its kernel is live (no measurement, no compile
    for a first run's small input)."""
    from seenstore.keys import sort as sorting
    from seenstore.kernels.sort import sort_unique

    sort_unique(np.arange(100, 0, -1, dtype=np.uint64), np.empty(100, np.uint64))  # in memory
    monkeypatch.setattr(D, "SMALL", 10**9)
    monkeypatch.delenv(sorting.ENV, raising=False)
    n = sorting.SMALL_KEYS
    monkeypatch.setattr(sorting, "_choice", {"sort": "radix"})
    monkeypatch.setattr(D, "jit_live", lambda: True)
    assert sorting._method_for(n - 1, "sort_unique") == "numpy"
    assert sorting._method_for(n, "sort_unique") == "radix"
    keys = np.random.default_rng(3).integers(0, 2**20, 3 * n, dtype=np.uint64)
    a = keys.copy()
    assert np.array_equal(a[:sorting.sort_unique_keys(a)], np.unique(keys))
    with monkeypatch.context() as m:
        m.setattr(D, "_will_compile", lambda kernel: True)
        assert sorting._method_for(n, "sort_unique") == "numpy"
    monkeypatch.setattr(D, "jit_live", lambda: False)
    assert sorting._method_for(n, "sort_unique") == "numpy"
    monkeypatch.setattr(D, "jit_live", lambda: True)
    monkeypatch.setattr(sorting, "_choice", {})  # not decided in this process: no probe
    assert sorting._method_for(n, "sort_unique") == "numpy"
    monkeypatch.setenv(sorting.ENV, "radix")
    assert sorting._method_for(n, "sort_unique") == "radix"


def test_a_process_of_small_calls_takes_the_kernels_once_settled(monkeypatch):
    """A process whose calls all stay below SMALL (never ``jit_live`` from a large
    call) takes its twins until they have done TWIN_ITEMS items, then the kernel
    where it loads without compiling; a kernel that would compile keeps its twin and
    numba's cache is asked again only after another TWIN_ITEMS items. Same answers."""
    run = np.arange(0, 30_000, 3, dtype=np.uint64)
    batch = np.arange(0, 30_000, 2, dtype=np.uint64)
    want = np.isin(batch, run)  # a call of 25,000 items (the run's and the batch's keys)

    def sweep():
        found = np.zeros(len(batch), np.bool_)
        D.merge.sweep_sorted(run, len(run), batch, 0, found)
        return found

    D.merge.kernel("sweep_sorted")(run, len(run), batch, 0, np.zeros(len(batch), np.bool_))
    twin, size = D.merge._twins["sweep_sorted"]
    calls = []
    monkeypatch.setitem(D.merge._twins, "sweep_sorted",
                        (lambda *a: calls.append(1) or twin(*a), size))
    monkeypatch.setattr(D.merge, "_cache", {})  # a fresh dispatch function
    monkeypatch.setattr(D, "_live_seen", [False])  # a fresh process ...
    monkeypatch.setattr(D, "_twin_items", [0])
    monkeypatch.setattr(D, "TWIN_ITEMS", 100_000)
    monkeypatch.setattr(D, "SMALL", 10**9)  # ... whose calls are all small
    for _ in range(4):  # 0, 25,000, 50,000, 75,000 items done before each: below 100,000
        assert np.array_equal(sweep(), want)
    assert len(calls) == 4 and D._twin_items[0] == 100_000 and not D.jit_live()
    assert np.array_equal(sweep(), want) and len(calls) == 4  # settled: the kernel
    assert D.jit_live()  # and this process runs kernels from now on

    # a settled process whose kernel would compile: the twin, the cache asked rarely
    asked = []
    monkeypatch.setattr(D.merge, "_cache", {})
    monkeypatch.setattr(D, "_live_seen", [False])
    monkeypatch.setattr(D, "_will_compile", lambda kernel: asked.append(1) or True)
    for _ in range(6):  # asked at the first call, then only once 100,000 more went by
        assert np.array_equal(sweep(), want)
    assert len(calls) == 10 and len(asked) == 2 and not D.jit_live()
