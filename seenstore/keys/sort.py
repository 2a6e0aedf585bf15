"""Sorting batches and shards of uint64 keys: which sort, and on how many threads.

``sort_keys(a)`` sorts in place, ``sort_unique_keys(a)`` also moves the unique keys
to the front and returns their count, ``sorted_unique(keys)`` returns a new sorted
unique array. Each uses numpy's ``np.sort`` or the radix sort of
``kernels/sort.py``, whichever ``choice()`` says is faster on this machine:

* ``SEENSTORE_SORT=radix|numpy`` in the environment decides (tests, benchmarks);
* otherwise the first sort of at least ``SMALL_KEYS`` keys times both on the same
  2**20 uniform and 2**20 host-skewed keys (after compiling the kernel; ``measure``)
  and keeps the faster; the verdict is
  cached in ``$SEENSTORE_CACHE_DIR/sort-choice.json``, or without it in
  ``$XDG_CACHE_HOME/seenstore/sort-choice.json`` (default ~/.cache), under
  the CPU model and the numpy version, so it is measured once per machine.

Arrays below ``SMALL_KEYS`` always use ``np.sort``: no JIT for a small input. The
radix sort needs a scratch array as large as the one sorted (the store sorts shard
by shard, so its scratch is a shard's). ``threads=2`` sorts one array on two
threads (the MSD pass split in halves, then each half of the buckets on its own
thread; the kernels release the GIL); ``sort_shards`` sorts a store's shards on
``threads`` threads at once. Results never depend on the thread count.
"""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from seenstore.kernels import dispatch
from seenstore.runtime.parallel import default_threads
from seenstore.runtime.pool import shared_pool

SMALL_KEYS = 1 << 14
ENV = "SEENSTORE_SORT"
CHOICES = ("radix", "numpy")
PROBE_KEYS = 1 << 21
PROBE_VERSION = 8  # part of the cache key: a changed probe or kernel is measured again
# kernel tunables (bench/bench_sort.py measured them; docs/architecture.md)
BUCKET_KEYS = 16384
SMALL_BUCKET_KEYS = 4096  # the least bucket size an array's own sort takes (_bucket_keys)
EXTRA = 1
WIDTH = 11
SINGLE = 11
MSD_BITS = 9

SCRATCH_KEYS = 1 << 23  # a thread keeps a radix scratch array up to this size (64 MiB)


def _tunables(n: int | None = None) -> tuple:
    """The kernels' tunables, in their argument order (read at each call: tests patch
    them); with ``n``, the bucket size for sorting an array of ``n`` keys
    (``_bucket_keys``)."""
    return (BUCKET_KEYS if n is None else _bucket_keys(n)), EXTRA, WIDTH, SINGLE, MSD_BITS


def _bucket_keys(n: int) -> int:
    """The radix sort's bucket size for an array of ``n`` keys: the buckets its first
    MSD pass makes (at most 2**MSD_BITS of them) rounded up to a power of two, within
    SMALL_BUCKET_KEYS..BUCKET_KEYS. Smaller leaves sort host-skewed keys faster where
    the first pass can make them (crawl keys sort 8-15 % faster at 1e5-3e6 keys with
    4,096 or 8,192 than with 16,384; uniform keys lose up to 5 %); from ~4.2e6 keys on
    BUCKET_KEYS (docs/architecture.md, "The sort")."""
    per_bucket = max(1, -(-n >> MSD_BITS))
    return min(BUCKET_KEYS, max(SMALL_BUCKET_KEYS, 1 << (per_bucket - 1).bit_length()))


_lock = threading.Lock()
_local = threading.local()
_choice: dict = {}  # {"sort": ..., "source": ..., "numpy_ns": ..., "radix_ns": ...}


def cpu_model() -> str:
    """The CPU's model name with its family/model numbers (``/proc/cpuinfo``), e.g.
    ``AMD EPYC (family 25 model 1)``; ``platform.processor()`` elsewhere."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor is enough
                k, _, v = line.partition(":")
                fields[k.strip()] = v.strip()
    except OSError:
        pass
    name = fields.get("model name")
    if not name:
        import platform
        return platform.processor() or platform.machine() or "unknown"
    if "cpu family" in fields:
        name += f" (family {fields['cpu family']} model {fields.get('model', '?')})"
    return name


def numpy_simd() -> dict:
    """numpy's SIMD dispatch (as ``np.show_runtime()`` prints it): the baseline, and
    which dispatch targets this CPU has (found) or lacks (not_found)."""
    try:
        from numpy._core import _multiarray_umath as mu
    except ImportError:  # numpy 1.x
        from numpy.core import _multiarray_umath as mu
    feats = mu.__cpu_features__
    return {"baseline": list(mu.__cpu_baseline__),
            "found": [t for t in mu.__cpu_dispatch__ if feats.get(t)],
            "not_found": [t for t in mu.__cpu_dispatch__ if not feats.get(t)]}


def machine() -> dict:
    """The machine facts a sort figure needs beside it: CPU, cores, numpy and its SIMD."""
    return {"cpu": cpu_model(), "cores": default_threads(), "numpy": np.__version__,
            "numpy_simd": numpy_simd()}


def machine_summary(m: dict | None = None) -> str:
    """``machine()`` (or ``m``, one a run recorded) on one line, for bench/RESULTS.md,
    bench_sort.py and peers.py."""
    m = machine() if m is None else m
    simd = m["numpy_simd"]
    return (f"{m['cpu']}, {m['cores']} cores; numpy {m['numpy']} SIMD baseline "
            f"{' '.join(simd['baseline']) or '-'}, "
            f"dispatch found {' '.join(simd['found']) or '-'}, "
            f"not found {' '.join(simd['not_found']) or '-'}")


def warm_up() -> None:
    """Compile (or load) the radix kernels, one- and two-thread paths, and decide the
    sort, so that neither lands in a timed batch."""
    a = np.random.default_rng(1).integers(0, 2**64, 2 * SMALL_KEYS, dtype=np.uint64)
    for threads in (1, 2):
        for unique in (False, True):
            _sort(a.copy(), unique, threads, "radix")
    choice()


def _cache_path() -> str:
    """Where the verdict is kept: ``$SEENSTORE_CACHE_DIR`` (beside the kernels) when it
    is set, else ``$XDG_CACHE_HOME/seenstore`` (default ~/.cache/seenstore)."""
    own = os.environ.get("SEENSTORE_CACHE_DIR")
    if own:
        return os.path.join(own, "sort-choice.json")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "seenstore", "sort-choice.json")


def _machine_key() -> str:
    return f"{cpu_model()} | numpy {np.__version__} | probe {PROBE_VERSION}"


def probe_keys(n: int, skewed: bool, seed: int = 12345) -> np.ndarray:
    """``n`` random keys; ``skewed``: the top 20 bits a Zipf(1) host over 2**20 buckets,
    the low 44 random (the store's keys: a crawl's hosts; the radix sort's hard case)."""
    rng = np.random.default_rng(seed)
    if not skewed:
        return rng.integers(0, 2**64, n, dtype=np.uint64)
    buckets = rng.permutation(2**20).astype(np.uint64)
    ranks = np.minimum(np.floor((2**20 + 1.0) ** rng.random(n)).astype(np.int64) - 1, 2**20 - 1)
    return (buckets[ranks] << np.uint64(44)) | rng.integers(0, 2**44, n, np.uint64)


def measure(n: int = PROBE_KEYS, repeats: int = 3) -> dict:
    """CPU ns/key of np.sort and of the radix sort (one thread): for each, the best of
    ``repeats`` on ``n / 2`` uniform keys plus the best on ``n / 2`` host-skewed keys,
    the kernel compiled first (not timed)."""
    from seenstore.kernels.sort import radix_sort
    buf = np.empty(n // 2, np.uint64)
    radix_sort(np.arange(1000, dtype=np.uint64), buf, *_tunables(1000))  # compile
    total = {"numpy": 0.0, "radix": 0.0}
    for skewed in (False, True):
        keys = probe_keys(n // 2, skewed)
        best = {"numpy": float("inf"), "radix": float("inf")}
        for _ in range(repeats):
            for name in CHOICES:
                a = keys.copy()
                t = time.thread_time()  # CPU time: a shared machine's descheduling is not counted
                if name == "numpy":
                    a.sort()
                else:
                    radix_sort(a, buf, *_tunables(len(a)))
                best[name] = min(best[name], time.thread_time() - t)
        for name in CHOICES:
            total[name] += best[name]
    return {"numpy_ns": total["numpy"] / n * 1e9, "radix_ns": total["radix"] / n * 1e9}


def choice() -> str:
    """"radix" or "numpy": the sort used for arrays of ``SMALL_KEYS`` keys or more."""
    env = os.environ.get(ENV, "").strip().lower()
    if env in CHOICES:
        return env
    return _decide()["sort"]


def describe(measure: bool = True) -> dict:
    """What ``stats()`` and ``seenstore bench`` report: the sort chosen and why.
    ``measure=False``: never run the measurement; before it ran (and with no cached
    verdict), report ``"sort": "undecided"``."""
    env = os.environ.get(ENV, "").strip().lower()
    if env in CHOICES:
        return {"sort": env, "source": f"{ENV}={env}"}
    if not measure and not _choice and _cached() is None:
        return {"sort": "undecided",
                "source": f"measured at the first sort of >= {SMALL_KEYS} keys"}
    return dict(_decide())


def _cached() -> dict | None:
    """This machine's verdict in the cache file, or None."""
    try:
        with open(_cache_path()) as f:
            saved = json.load(f).get(_machine_key())
        return saved if saved and saved.get("sort") in CHOICES else None
    except (OSError, ValueError, AttributeError, RecursionError):
        return None


def _decide() -> dict:
    with _lock:
        if _choice:
            return _choice
        key, path = _machine_key(), _cache_path()
        saved = _cached()
        if saved is not None:
            _choice.update(saved, source=f"cached in {path}")
            return _choice
        m = measure()
        verdict = {"sort": "radix" if m["radix_ns"] < m["numpy_ns"] else "numpy",
                   "numpy_ns": round(m["numpy_ns"], 2), "radix_ns": round(m["radix_ns"], 2)}
        _choice.update(verdict, source="measured in this process")
        _save(path, key, verdict)
        return _choice


def _save(path: str, key: str, verdict: dict) -> None:
    """Add the verdict to the cache file (a temp file renamed over it); a cache that
    cannot be written only means the next process measures again."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            with open(path) as f:
                doc = json.load(f)
            if not isinstance(doc, dict):
                doc = {}
        except (OSError, ValueError, RecursionError):
            doc = {}
        doc[key] = verdict
        tmp = f"{path}.tmp.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, path)
    except OSError:
        pass


def _reset() -> None:
    """Forget the in-process verdict (tests)."""
    with _lock:
        _choice.clear()


# ------------------------------------------------------------------ sorting
def sort_keys(a: np.ndarray, threads: int = 1, *, method: str | None = None,
              buf: np.ndarray | None = None) -> None:
    """Sort uint64 ``a`` in place. ``method``: "radix"/"numpy" (default: ``choice()``).
    ``buf``: the radix sort's scratch, at least ``len(a)`` uint64 (default: one of
    the module's; a caller timing the sort passes one already faulted in)."""
    _sort(a, False, threads, method, buf)


def sort_unique_keys(a: np.ndarray, threads: int = 1, *, method: str | None = None) -> int:
    """Sort uint64 ``a`` in place, move its unique keys to the front; return their
    count (``a[count:]`` is left unspecified)."""
    return _sort(a, True, threads, method)


def sorted_unique(keys: np.ndarray, threads: int = 1) -> np.ndarray:
    """Sorted unique keys of uint64 ``keys`` (not modified): a view of the front of
    one sorted copy."""
    s = keys.copy()
    return s[: sort_unique_keys(s, threads)]


def _sort(a: np.ndarray, unique: bool, threads: int, method: str | None,
          buf: np.ndarray | None = None) -> int:
    """The sorts above; ``buf``: the radix sort's scratch (default ``_scratch``: a
    fresh one costs its page faults, ~1 ns/key of CPU, which bench/bench_sort.py
    keeps out of the comparison of one thread with two)."""
    n = len(a)
    if method is None:
        method = _method_for(n, "sort_unique" if unique else "radix_sort")
    if method == "numpy":
        a.sort()
        return dispatch.batch.unique_inplace(a) if unique else n
    from seenstore.kernels.sort import radix_sort, sort_unique
    buf = _scratch(n) if buf is None else buf[:n]
    if threads >= 2 and n >= max(2 * SMALL_KEYS, dispatch.SMALL):  # kernels of their own
        return _radix_two(a, buf, unique)
    if unique:
        return sort_unique(a, buf, *_tunables(n))
    radix_sort(a, buf, *_tunables(n))
    return n


def _method_for(n: int, kernel: str) -> str:
    """The sort for ``n`` keys by default: numpy's below SMALL_KEYS; ``choice()`` from
    dispatch.SMALL keys on; between the two, numpy's unless this process already chose
    the radix sort and its ``kernel`` is live (``dispatch.live``): below dispatch.SMALL
    nothing may compile or measure (a first run's small input), but a process that
    sorts large batches with the radix sort sorts its small ones so too."""
    if n < SMALL_KEYS:
        return "numpy"
    if n >= dispatch.SMALL:
        return choice()
    env = os.environ.get(ENV, "").strip().lower()
    verdict = env if env in CHOICES else _choice.get("sort")
    if verdict == "radix" and dispatch.jit_live():
        from seenstore.kernels import sort as ks
        if dispatch.live(getattr(ks, kernel)):
            return "radix"
    return "numpy"


def _scratch(n: int) -> np.ndarray:
    """A scratch array of ``n`` keys for the radix sort. On the threads of
    ``sort_shards`` up to ``SCRATCH_KEYS`` keys, one kept per thread and reused: the
    store sorts shard after shard, and a fresh array each time cost its page faults
    (~1 ns/key here); ``_local.reuse`` (set by ``sort_shards``: its largest shard)
    is the least it allocates, so that a thread given a small shard first does not
    fault in a second array for a larger one. Elsewhere, and above that size, a new
    one: nothing stays allocated after the sort."""
    want = int(getattr(_local, "reuse", 0))
    if n > SCRATCH_KEYS or not want:
        return np.empty(n, np.uint64)
    buf = getattr(_local, "buf", None)
    if buf is None or len(buf) < n:
        buf = _local.buf = np.empty(max(n, min(want, SCRATCH_KEYS), 1 << 16), np.uint64)
    return buf[:n]


def _radix_two(a: np.ndarray, buf: np.ndarray, unique: bool) -> int:
    """The radix sort on two threads: each thread counts (and finds the varying bits
    of) and scatters one half of ``a`` (into its own offsets of each bucket); then
    each sorts the buckets of one half of the keys."""
    from seenstore.kernels import sort as ks
    n = len(a)
    h = n // 2
    pool = shared_pool(2, "seenstore-sort")
    tunables = _tunables(n)
    halves = ((0, h), (h, n))
    x = a[0]
    # planned on a sample's varying bits; each half's histogram pass also ORs its keys'
    # varying bits, and a higher bit found there plans again (rare)
    vary = int(ks.sampled_bits(a, 0, n))
    while True:
        shift, bits = ks.msd_plan(np.uint64(vary), n, tunables[0] >> 2, MSD_BITS)
        (c0, v0), (c1, v1) = pool.map(
            lambda r: ks.msd_histogram_vary(a, r[0], r[1], shift, bits, x), halves)
        full = int(v0) | int(v1)
        if full == 0:
            return 1 if unique else n
        if full.bit_length() == vary.bit_length():
            break
        vary = full
    starts = np.zeros(len(c0) + 1, np.int64)
    np.cumsum((c0 + c1).astype(np.int64), out=starts[1:])
    fill0 = starts[:-1].astype(np.uint64)
    fill1 = fill0 + c0
    list(pool.map(lambda r: ks.msd_scatter(a, r[0], r[1], buf, r[2], shift, bits),
                  ((0, h, fill0), (h, n, fill1))))
    nb = len(c0)
    mid = min(max(int(np.searchsorted(starts, h)), 1), nb)  # buckets [0, mid) and [mid, nb)
    lo1 = int(starts[mid])
    f0 = pool.submit(ks.sort_buckets, buf, a, starts, 0, mid, *tunables, unique, 0, a)
    f1 = pool.submit(ks.sort_buckets, buf, a, starts, mid, nb, *tunables, unique, lo1, a)
    w0, w1 = f0.result(), f1.result()
    if not unique:
        return n
    m1 = w1 - lo1
    if lo1 > w0:  # buckets hold distinct keys: the halves only need packing together
        a[w0:w0 + m1] = a[lo1:w1]
    return w0 + m1


FINE_MAX_BITS = 10  # a partition's scatter costs the same to 2**10 groups as to 16 (measured)


def fine_bits(n: int, bits: int) -> int:
    """The top bits to partition ``n`` keys by so that the store's shards (their top
    ``bits``) arrive split in buckets the radix sort takes as they are (of
    ``BUCKET_KEYS`` / 4 to / 2 keys; at most FINE_MAX_BITS, never fewer than ``bits``):
    the partition's scatter then does the sort's first MSD pass. At a 1e7-key batch in
    16 shards, 1024 groups: partition + shard sorts 17.9 against 21.7 ns/key of CPU
    (host-skewed crawl keys), 10.9 against 12.0 (uniform), measured in one process."""
    want = max(0, (max(n, 1) - 1).bit_length() - BUCKET_KEYS.bit_length() + 2)
    return max(bits, min(FINE_MAX_BITS, want))


def sort_unique_buckets(a: np.ndarray, starts: np.ndarray, method: str | None = None) -> int:
    """``sort_unique_keys(a)`` of an ``a`` already grouped by its top bits: group g is
    ``a[starts[g] - starts[0]:starts[g + 1] - starts[0]]``, groups ascending (a fine
    partition's, ``fine_bits``). The radix sort then skips its first MSD pass;
    numpy's sorts each group on its own (groups of ~10**4 keys stay in the L2 cache:
    partition + shard sorts 7.9 against 9.4 ns/key of CPU on 1e7 crawl keys, this
    project's Xeon with AVX-512, where numpy's SIMD sort is the faster), then drops
    the repeats in one pass."""
    n = len(a)
    if method is None:
        method = _method_for(n, "sort_buckets")
    if len(starts) < 3:
        return _sort(a, True, 1, method)
    if method == "numpy":
        base = int(starts[0])
        for lo, hi in zip(starts[:-1].tolist(), starts[1:].tolist()):
            if hi - lo > 1:
                a[lo - base:hi - base].sort()
        return dispatch.batch.unique_inplace(a) if n else 0
    if method != "radix":
        return _sort(a, True, 1, method)
    from seenstore.kernels.sort import sort_buckets
    starts = np.ascontiguousarray(starts - starts[0], dtype=np.int64)
    buf = _scratch(n)
    return sort_buckets(a, buf, starts, 0, len(starts) - 1, *_tunables(), True, 0, a)


def sort_shards(keys: np.ndarray, bounds: np.ndarray, shards, threads: int,
                executor: ThreadPoolExecutor | None = None, fine: np.ndarray | None = None):
    """Sort and deduplicate each shard ``keys[bounds[s]:bounds[s+1]]`` in place, on
    ``threads`` threads, in the order given; return ``(executor, futures)``, the
    future of shard s giving ``(end of its unique keys, CPU seconds of its sort)``. The
    caller shuts the executor down. With ``executor`` (e.g. the store's ShardSorter,
    kept for the store's life) the shards go to it instead of a new one. Each shard
    is sorted on one thread: shards sort side by side. The seconds are the sorting
    thread's CPU time: the store runs these threads beside its Bloom insert and its
    merge threads on the same cores, so a shard's wall time would count the others'
    turns too (about 3x the sort's own cost at 1e8 keys). ``fine``: the starts of the
    finer groups the keys were partitioned by
    (``fine_bits``; shard s is groups ``[s * sub, (s + 1) * sub)``, ``bounds`` every
    ``sub``-th of them): each shard is then sorted from its groups
    (``sort_unique_buckets``)."""
    shards = list(shards)
    largest = max((int(bounds[s + 1] - bounds[s]) for s in shards), default=1)
    sub = (len(fine) - 1) // (len(bounds) - 1) if fine is not None else 1

    def one(shard: int):
        _local.reuse = max(largest, 1)  # this thread's scratch goes with the executor
        lo, hi = int(bounds[shard]), int(bounds[shard + 1])
        t = time.thread_time()
        if fine is None:
            m = sort_unique_keys(keys[lo:hi])
        else:
            m = sort_unique_buckets(keys[lo:hi], fine[shard * sub:(shard + 1) * sub + 1])
        return lo + m, time.thread_time() - t

    # not a shared pool: each thread keeps its scratch (``_local``) for the executor's life
    ex = executor or ThreadPoolExecutor(max_workers=max(1, threads),
                                        thread_name_prefix="seenstore-shard-sort")
    return ex, {s: ex.submit(one, s) for s in shards}
