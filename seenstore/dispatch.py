"""Small inputs skip the JIT: each kernel family chooses its numpy twin below a size.

Compiling the numba kernels costs 10-40 s on a first run (an empty numba cache);
a first ``seenstore add`` of a dozen URLs must not wait for it. So the modules that
call kernels import them from here: ``batch``, ``merge`` and ``bloom`` are
namespaces whose functions run the numpy twin below ``SMALL`` items (the size of
the call's largest array argument) and the numba kernel above it. A kernel is
imported (and numba with it) only when first needed; when it is about to
compile rather than load from numba's cache, ``on_compile`` is called once per
process (the CLI prints "compiling kernels, first run only"). ``warm_up`` compiles
every kernel ahead (``seenstore warmup``).

Below ``SMALL`` the twin runs only while the kernel is not at hand: once this process
runs kernels (a large call loaded or compiled one), a small call takes the kernel too
when calling it will not compile (it is in memory, or in numba's cache: a load of a
few ms), since the kernels beat their twins at every size (``live``). A first small
run still never imports numba; a long-lived process (a pipeline, the stage, a
benchmark) stops paying the twins' 5-15x on its small calls: a batch of 1e6 keys
checks each of its shards' ~6e4 keys against runs of similar size, calls below
``SMALL`` items that took the twins (ten batches of 1e6 keys, the two rules run
back to back: the check's CPU 52-63 -> 14-16 ns per offered key; docs/architecture.md,
module map).

The twins compute exactly what the kernels do (same bits in the Bloom filter,
same outputs); tests/test_dispatch.py checks each against its kernel.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
from collections.abc import Callable

import numpy as np

# Items (keys, URLs) below which a call takes the numpy twin. Measured (README "First
# run", scratch CPU time on the shared 2-core machine): SeenStore.add costs 3-4.5 us/key
# on the twins against 0.2-0.4 us/key on the compiled kernels, so a call of 1e5 keys
# loses ~0.3 s to the twins, while compiling the kernels costs 10-40 s once.
SMALL = int(os.environ.get("SEENSTORE_JIT_MIN", 100_000))

on_compile: Callable[[], None] | None = None  # called once, before the first compile
lean_numba = False  # set by the CLI: load numba without scipy (see _numba_without_scipy)
_twins_forced = False  # twins_only(): every call below SMALL takes its twin (tests)
_announced = False
_lock = threading.Lock()

_U = np.uint64


def _first_len(args) -> int:
    return len(args[0])


def _will_compile(kernel) -> bool:
    """True when calling ``kernel`` now compiles it: nothing in memory and no fresh
    entry in numba's cache index (none, or one stamped for another version of the
    source file: numba recompiles after an edit). numba's private index reader;
    where it differs, True (the caller then takes the cautious path)."""
    if kernel.signatures:
        return False
    try:
        return not kernel._cache._cache_file._load_index()
    except Exception:  # noqa: BLE001  (another numba's internals)
        return True


def cold() -> bool:
    """True when a warm-up here would compile: some kernel the store or the URL path
    calls first (each family's kernels, the sorts, the URL kernel) has no machine
    code in memory nor an up-to-date cache index. Imports numba."""
    names = [(family, name) for family in FAMILIES.values() for name in family._twins]
    kernels = [family.kernel(name) for family, name in names]
    from .kernels import sort as ks
    from .kernels import url as ku
    kernels += [ks.radix_sort, ks.sort_unique, ks.sort_buckets, ku.normalise_batch]
    return any(_will_compile(k) for k in kernels)


def jit_live() -> bool:
    """True once this process has called one of seenstore's kernels through this
    module (``announce``, before each kernel call): numba is imported and its first
    cache load or compile, ~0.5 s of context set-up outside the CLI, is behind;
    each further kernel then loads from numba's cache in a few ms. Tests
    monkeypatch it (or use ``twins_only``) to play a fresh process."""
    return _live_seen[0]


_live_seen = [False]


def running_kernels() -> bool:
    """``jit_live``, unless ``twins_only`` plays a fresh process: a caller whose small
    calls should take the kernels once this process runs them (a large Bloom filter's)."""
    return not _twins_forced and jit_live()


def live(kernel) -> bool:
    """True when a small call may take ``kernel`` instead of its twin: this process
    already runs kernels (``jit_live``) and calling this one will not compile."""
    return not _twins_forced and jit_live() and not _will_compile(kernel)


def announce(kernel) -> None:
    """Called before each kernel call: marks the process ``jit_live`` and, the first
    time a call is about to compile, calls ``on_compile``."""
    global _announced
    _live_seen[0] = True
    if _announced or on_compile is None or not _will_compile(kernel):
        return
    with _lock:
        if not _announced:
            _announced = True
            on_compile()


def _numba_without_scipy() -> None:
    """Import numba's array-math registry with scipy hidden, before the first kernel
    loads. numba probes scipy's BLAS once per process (for np.dot and linalg, which no
    kernel here uses), and importing scipy is a third of a command's start-up (0.3-0.4 s
    of CPU measured here). Process-wide: numba then refuses np.dot/linalg in any kernel
    of this process, so only the CLI asks for it (``lean_numba``). No effect when scipy
    or the registry is already imported, or scipy is not installed."""
    import sys

    if "numba.np.arraymath" in sys.modules or "scipy" in sys.modules:
        return
    sys.modules["scipy"] = None  # type: ignore[assignment]  # import scipy.x: ImportError
    try:
        import numba.np.arraymath  # noqa: F401  (its _HAVE_BLAS probe fails quietly)
    finally:
        if sys.modules.get("scipy", 0) is None:
            del sys.modules["scipy"]


class _Family:
    """Functions of ``seenstore.kernels.<name>``; those with a twin below dispatch."""

    def __init__(self, module: str, twins: dict[str, tuple[Callable, Callable]]) -> None:
        self._module = module
        self._twins = twins
        self._cache: dict[str, Callable] = {}

    def kernel(self, name: str):
        """The numba kernel itself (imports numba on first use)."""
        if lean_numba:
            _numba_without_scipy()
            from .jitcache import light_cache_loads

            light_cache_loads()  # cache loads without numba's compiler start-up
        return getattr(importlib.import_module(f"seenstore.kernels.{self._module}"), name)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        fn = self._cache.get(name)
        if fn is None:
            fn = self._cache[name] = self._make(name)
        return fn

    def _make(self, name: str) -> Callable:
        twin, size = self._twins.get(name, (None, None))
        family = self
        ready = [False]  # once the kernel is live here it stays so

        def call(*args):
            if twin is not None and (_twins_forced or not ready[0]) and size(args) < SMALL:
                if not family._live(name):
                    return twin(*args)
                ready[0] = True
            kernel = family.kernel(name)
            announce(kernel)
            return kernel(*args)

        call.__name__ = call.__qualname__ = name
        call.__doc__ = (f"seenstore.kernels.{self._module}.{name}, or its numpy twin below "
                        "SMALL while the kernel is not live (dispatch.live).")
        return call

    def _live(self, name: str) -> bool:
        """``live`` for kernel ``name``, without fetching the kernel (importing numba)
        when it cannot be."""
        if _twins_forced or not jit_live():
            return False
        return live(self.kernel(name))


# ----------------------------------------------------------------- batch twins
def _unique_inplace(a):
    if len(a) == 0:
        return 0
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    m = int(keep.sum())
    a[:m] = a[keep]
    return m


def _unique_sorted(a):
    out = a.copy()
    return out[: _unique_inplace(out)].copy()


def _compact_inplace(a, keep):
    sel = a[np.asarray(keep, dtype=bool)]
    a[: len(sel)] = sel
    return len(sel)


def _mark_first_new(keys, new_keys, part_bits=-1):
    out = np.zeros(len(keys), dtype=bool)
    if len(keys) and len(new_keys):
        _, first = np.unique(keys, return_index=True)
        out[first[np.isin(keys[first], new_keys)]] = True
    return out


def _mark_members(keys, members, part_bits=-1):
    return np.isin(keys, members) if len(members) else np.zeros(len(keys), dtype=bool)


def _first_unique(keys, out, pos, check_at, max_unique):
    if check_at < len(keys) and len(np.unique(keys[:check_at])) > max_unique:
        return -1
    _, first = np.unique(keys, return_index=True)
    m = len(first)
    if m > len(out):
        return -1
    pos[:m] = np.sort(first)
    out[:m] = keys[pos[:m]]
    return m


def _partition_top_bits(keys, bits, out, starts):
    n = len(keys)
    if bits == 0:
        out[:n] = keys
        starts[0], starts[1] = 0, n
        return
    groups = (keys >> _U(64 - bits)).astype(np.int64)
    out[:n] = keys[np.argsort(groups, kind="stable")]
    starts[0] = 0
    np.cumsum(np.bincount(groups, minlength=1 << bits), out=starts[1:])


def _partition_by_cuts(keys, cuts, ids, out, starts):
    n = len(keys)
    ids[:n] = np.searchsorted(cuts, keys, "right")
    out[:n] = keys[np.argsort(ids[:n], kind="stable")]
    starts[0] = 0
    np.cumsum(np.bincount(ids[:n], minlength=len(cuts) + 1), out=starts[1:])


# ----------------------------------------------------------------- merge twins
def _merge_step(old, i, n_old, last_chunk, batch, j, is_new, out, prev, have_prev):
    a, b = old[i:n_old], batch[j:]
    if not last_chunk:
        if len(a) == 0:
            return i, j, 0, prev, have_prev, True
        b = b[: np.searchsorted(b, a[-1], side="right")]
    merged = np.union1d(a, b)[: len(out)]
    n = len(merged)
    if n == 0:
        return i, j, 0, prev, have_prev, True
    last = merged[-1]
    ai = int(np.searchsorted(a, last, side="right"))
    bj = int(np.searchsorted(b, last, side="right"))
    if (ai > 1 and bool(np.any(a[1:ai] <= a[: ai - 1]))) or (have_prev and merged[0] <= prev) \
            or ai + bj < n:  # a key of the run out of order or repeated: corruption
        return i, j, 0, prev, have_prev, False
    is_new[j : j + bj] |= ~np.isin(b[:bj], a[:ai])
    out[:n] = merged
    return i + ai, j + bj, n, last, True, True


def _is_strictly_increasing(a):
    return bool(np.all(a[1:] > a[:-1]))


def _sweep_step(old, n_old, batch, j, found, prev, have_prev):
    a = old[:n_old]
    if n_old == 0:
        return j, prev, have_prev, True
    if not _is_strictly_increasing(a) or (have_prev and a[0] <= prev):
        return j, prev, have_prev, False
    return _sweep_sorted(old, n_old, batch, j, found), a[-1], True, True


def _sweep_sorted(old, n_old, batch, j, found):
    if n_old == 0:
        return j
    a = old[:n_old]
    end = max(j, int(np.searchsorted(batch, a[-1], side="right")))
    b = batch[j:end]
    pos = np.minimum(np.searchsorted(a, b), n_old - 1)
    found[j:end] |= a[pos] == b
    return end


def _kway_step(bufs, pos, fill, last, out, prev, have_prev):
    """kernels/merge.py ``kway_step`` for sorted, disjoint runs (what a store holds);
    on a run out of order or a key in two runs it answers KWAY_BAD having written
    nothing (the caller raises CorruptionError and drops the output either way)."""
    from .kernels.status import KWAY_BAD, KWAY_DONE, KWAY_FULL
    for r in range(len(pos)):
        if pos[r] >= fill[r] and not last[r]:
            return 0, r, prev, have_prev
    rows = [bufs[r, pos[r]:fill[r]] for r in range(len(pos))]
    keys = np.concatenate(rows)
    row_of = np.repeat(np.arange(len(rows)), [len(x) for x in rows])
    order = np.argsort(keys, kind="stable")
    merged, row_of = keys[order], row_of[order]
    if any(not _is_strictly_increasing(x) for x in rows) or not _is_strictly_increasing(merged) \
            or (have_prev and len(merged) and merged[0] <= prev):
        return 0, KWAY_BAD, prev, have_prev
    # a row that is not its run's last chunk stops the merge right after its last key
    stops = [int(np.flatnonzero(row_of == r)[-1]) + 1 for r in range(len(rows))
             if not last[r] and len(rows[r])]
    stop = min(stops) if stops else len(merged)
    n = min(stop, len(out))
    out[:n] = merged[:n]
    pos += np.bincount(row_of[:n], minlength=len(pos))
    if n:
        prev, have_prev = merged[n - 1], True
    if n == len(out):
        return n, KWAY_FULL, prev, have_prev
    if n < len(merged) or stops:
        return n, int(row_of[n - 1]), prev, have_prev
    return n, KWAY_DONE, prev, have_prev


def _sparse_member(run, sparse, stride, needles, found):
    if len(run) and len(needles):  # a binary search in the (memory-mapped) run itself
        pos = np.minimum(np.searchsorted(run, needles), len(run) - 1)
        found |= np.asarray(run[pos]) == needles


# ----------------------------------------------------------------- bloom twins
def _fmix64(x):
    x = x ^ (x >> _U(33))
    x = x * _U(0xFF51AFD7ED558CCD)
    x = x ^ (x >> _U(33))
    x = x * _U(0xC4CEB9FE1A85EC53)
    return x ^ (x >> _U(33))


def _stream_word(seed, j: int):
    z = seed + _U(j) * _U(0x9E3779B97F4A7C15)
    z = (z ^ (z >> _U(30))) * _U(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> _U(27))) * _U(0x94D049BB133111EB)
    return z ^ (z >> _U(31))


def _locate(words, keys, k):
    """Scheme 1 (kernels/bloom.py ``locate``) for all keys: (word index int64, bit
    number uint64, bit mask uint64), each of shape (n, k)."""
    with np.errstate(over="ignore"):
        seed = _fmix64(np.asarray(keys, dtype=_U))
        w = _stream_word(seed, 1)
        block = ((w >> _U(32)) * _U(len(words) >> 3)) >> _U(32)
        pool, avail, j = w & _U(0xFFFFFFFF), 32, 1
        pos = np.empty((len(keys), k), dtype=_U)
        for p in range(k):
            if avail < 9:
                j += 1
                pool, avail = _stream_word(seed, j), 64
            pos[:, p] = pool & _U(511)
            pool = pool >> _U(9)
            avail -= 9
    word = ((block << _U(3))[:, None] + (pos >> _U(6))).astype(np.int64)
    bit = pos & _U(63)
    return word, bit, _U(1) << bit


def _bloom_add_query(words, keys, k, group, out, want_out):
    n = len(keys)
    if n == 0:
        return 0
    word, bit, mask = _locate(words, keys, k)
    flat_bit = (word * 64 + bit.astype(np.int64)).ravel()
    was_set = (words[word] & mask) != 0
    _, first = np.unique(flat_bit, return_index=True)  # first key (in order) to touch a bit
    sets_clear = first[~was_set.ravel()[first]]
    changed = np.zeros(n, dtype=bool)
    changed[sets_clear // k] = True
    np.bitwise_or.at(words, word.ravel(), mask.ravel())
    if want_out:
        out[:] = ~changed
    return int(changed.sum())


def _bloom_query(words, keys, k, group, out):
    if len(keys):
        word, _, mask = _locate(words, keys, k)
        out[:] = np.all((words[word] & mask) != 0, axis=1)


def _bloom_add_regions(words, keys, k, group, region_bits, tmp):
    return _bloom_add_query(words, keys, k, group, np.empty(0, np.bool_), False)


def _block_fill_histogram(words, words_per_block, hist):
    step = words_per_block * 8192
    for s in range(0, len(words), step):
        bits = np.unpackbits(words[s : s + step].view(np.uint8))
        counts = bits.reshape(-1, 64 * words_per_block).sum(axis=1, dtype=np.int64)
        hist += np.bincount(counts, minlength=len(hist))[: len(hist)]


# ------------------------------------------------------------ URL path twins
def _gather(out, out_offsets, select, piece_of, pdata, poffsets, newline):
    end = b"\n" if newline else b""
    parts = []
    for i in np.flatnonzero(select).tolist():
        p = int(piece_of[i])
        src, a, b = (pdata, poffsets[p], poffsets[p + 1]) if p >= 0 else \
            (out, out_offsets[i], out_offsets[i + 1])
        parts.append(src[a:b].tobytes() + end)
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in parts], out=offsets[1:])
    return np.frombuffer(bytearray(b"".join(parts)), dtype=np.uint8), offsets


def _fingerprint_batch(data, offsets, host_bits):
    from .fingerprint import fingerprint
    from .layout import Layout

    layout = Layout(host_bits=int(host_bits))
    raw = data.tobytes()
    return np.array([fingerprint(raw[a:b].decode("utf-8"), layout)
                     for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())], dtype=_U)


def _split_lines(buf, n, final, pairs, max_line, skip, at_start, gbase_id, limit,
                 data, offsets, bdata, boffsets, base_ids, too_long, counts):
    """kernels.lines.split_lines in Python (same contract, same outputs)."""
    raw = buf[:n].tobytes()
    i = 0
    if skip:
        nl = raw.find(b"\n")
        if nl < 0:
            return n, (0 if final else 1)
        i, skip = nl + 1, 0
    if at_start and i == 0:
        if n < 3 and not final:
            return 0, 0
        if raw.startswith(b"\xef\xbb\xbf"):
            i = 3
    nu, nd, nb, nbd, nt = (int(x) for x in counts)
    consumed = i
    while i < n and nu < limit:
        j = raw.find(b"\n", i)
        j = n if j < 0 else j
        if j == n and not final:  # incomplete: wait, or reject it now
            if j - i > max_line + 1:
                too_long[nt], base_ids[nu] = nu, -1
                nt, nu = nt + 1, nu + 1
                offsets[nu], consumed, skip = nd, n, 1
            break
        e = j - 1 if j > i and raw[j - 1] == 13 else j
        if e > i:
            if e - i > max_line:
                too_long[nt], base_ids[nu] = nu, -1
                nt += 1
            else:
                s, tab = i, (raw.find(b"\t", i, e) if pairs else -1)
                if tab < 0:
                    base_ids[nu] = gbase_id
                elif nb and raw[i:tab] == bdata[boffsets[nb - 1]:boffsets[nb]].tobytes():
                    base_ids[nu], s = nb - 1, tab + 1
                else:
                    bdata[nbd : nbd + tab - i] = buf[i:tab]
                    nbd, nb = nbd + tab - i, nb + 1
                    boffsets[nb], base_ids[nu], s = nbd, nb - 1, tab + 1
                data[nd : nd + e - s] = buf[s:e]
                nd += e - s
            nu += 1
            offsets[nu] = nd
        i = j + 1
        consumed = min(i, n)
    counts[:] = (nu, nd, nb, nbd, nt)
    return consumed, skip


def _keys_len(args) -> int:  # (words, keys, ...): the filter's size does not count
    return len(args[1])


def _merge_len(args) -> int:  # what is left of the run chunk and of the batch
    old, i, n_old, _, batch, j = args[:6]
    return (n_old - i) + (len(batch) - j)


# name -> (twin, size of a call in items). Sizes count the work, not the buffers.
batch = _Family("batch", {
    "unique_inplace": (_unique_inplace, _first_len), "unique_sorted": (_unique_sorted, _first_len),
    "compact_inplace": (_compact_inplace, _first_len),
    "mark_first_new": (_mark_first_new, _first_len), "mark_members": (_mark_members, _first_len),
    "partition_top_bits": (_partition_top_bits, _first_len),
    "partition_by_cuts": (_partition_by_cuts, _first_len),
    "first_unique": (_first_unique, _first_len),
})
merge = _Family("merge", {
    "merge_step": (_merge_step, _merge_len),
    "is_strictly_increasing": (_is_strictly_increasing, _first_len),
    "sweep_step": (_sweep_step, lambda args: args[1] + len(args[2]) - args[3]),
    "sweep_sorted": (_sweep_sorted, lambda args: args[1] + len(args[2]) - args[3]),
    "kway_step": (_kway_step, lambda args: int(np.sum(args[2] - args[1]))),
    "sparse_member": (_sparse_member, lambda args: len(args[3])),
})
bloom = _Family("bloom", {
    "bloom_add_query": (_bloom_add_query, _keys_len), "bloom_query": (_bloom_query, _keys_len),
    "bloom_add_regions": (_bloom_add_regions, _keys_len),
    # a word costs the twin ~1/16 of a key: a 2 MiB default filter is 16k "items"
    "block_fill_histogram": (_block_fill_histogram, lambda args: len(args[0]) // 16),
})
url = _Family("url", {"gather": (_gather, lambda args: len(args[2]))})
fingerprint = _Family("fingerprint", {
    "fingerprint_batch": (_fingerprint_batch, lambda args: len(args[1]) - 1)})
# A stream's reader (urlbuffer) passes the bytes read so far as the size: a pipe
# delivers 64 KiB per read, and every read of a large input must take the kernel.
LINE_BYTES = 64  # bytes per "item" of the line splitter's size
lines = _Family("lines", {"split_lines": (_split_lines, lambda args: 0)})
FAMILIES = {"batch": batch, "merge": merge, "bloom": bloom, "url": url,
            "fingerprint": fingerprint, "lines": lines}


def split_lines_for(bytes_read: int) -> Callable:
    """The line splitter for a stream that has delivered ``bytes_read`` bytes (or is
    known to hold that many): the twin below SMALL lines of LINE_BYTES while the
    kernel is not live (``live``), else the kernel."""
    if bytes_read < SMALL * LINE_BYTES and not lines._live("split_lines"):
        return _split_lines
    kernel = lines.kernel("split_lines")
    announce(kernel)
    return kernel


def warm_up(progress: Callable[[str, int, int], None] | None = None,
            directory: str | None = None) -> float:
    """Compile (or load from numba's cache) every kernel the store and the URL fast
    path run, with the kernels themselves (not the twins); ``progress(name, i, n)``
    after each step; its throwaway stores in a new temporary folder (inside
    ``directory`` if given), removed after. Returns the seconds it took."""
    import tempfile
    import time

    t0 = time.perf_counter()
    steps = _warm_steps(tempfile.mkdtemp(prefix="seenstore-warmup-", dir=directory))
    for i, (name, step) in enumerate(steps, 1):
        step()
        if progress is not None:
            progress(name, i, len(steps))
    return time.perf_counter() - t0


def _warm_steps(directory: str) -> list[tuple[str, Callable[[], None]]]:
    import shutil

    def store_path():
        from .benchrun import warm_store

        try:
            with kernels_only():
                warm_store(directory)
                from .store import SeenStore

                with SeenStore.open(os.path.join(directory, "readers"), create=True,
                                    sync=False) as st:  # contains, verify: readers' kernels
                    keys = np.arange(1, 1001, dtype=_U)
                    st.add(keys)
                    st.add(keys + _U(1000))  # the sweep of the first run (tiered runs)
                    st.contains(keys[::3])  # point lookups: the sparse index
                    st.verify()  # two runs in a shard: the k-way merge
                    st.compact()
                    st.verify()  # one run: its order check
                    st.stats()  # the Bloom fill histogram
                with SeenStore.open(os.path.join(directory, "uncached"), create=True, sync=False,
                                    cache_bytes=0) as st:  # a writer whose run cache is off or full
                    st.add(keys)
                    st.add(keys + _U(1000))
                    st.contains(keys[::3])  # its own runs' sparse index (merge.sparse_member)
                batch.unique_sorted(keys)  # the stage's
                batch.first_unique(keys, np.empty(len(keys), _U), np.empty(len(keys), np.int64),
                                   64, 32)  # a batch's repeats
                # add's mask on two threads (batches of 2^20 keys and more)
                from .batch import PARALLEL_JOIN_KEYS, first_new_mask

                many = np.arange(PARALLEL_JOIN_KEYS, dtype=_U)
                first_new_mask(many, many[::2].copy(), 2)
                # a batch's partition on two threads (batches of 2^20 keys and more)
                from .store.scheduling import PARALLEL_PARTITION_KEYS, partition

                partition(np.arange(2 * PARALLEL_PARTITION_KEYS, dtype=_U), 4, 2)
                # a spilled bucket too big for one slice, split by key ranges (spill._split)
                batch.partition_by_cuts(keys, keys[::100].copy(), np.empty(len(keys), np.int32),
                                        np.empty(len(keys), _U), np.empty(12, np.int64))
                from .bloom import GROUP

                # region inserts (large batches into large filters)
                words = np.zeros(8 * 64, dtype=_U)
                bloom.kernel("bloom_add_regions")(words, keys, 7, GROUP, 2, np.empty(256, _U))
                # merge.merge_run (old ∪ batch into a new run): no longer on the store's path
                # (tiered runs write only new keys); kept, with its tests, for comparison
                merge.kernel("merge_step")(keys, 0, len(keys), True, keys + _U(500),
                                           0, np.zeros(len(keys), np.bool_), np.empty(64, _U),
                                           _U(0), False)
                # a sweep from disk (runs the run cache does not hold): order checked
                merge.kernel("sweep_step")(keys, len(keys), keys, 0, np.zeros(len(keys), np.bool_),
                                           _U(0), False)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def url_path():
        from .fastpath import normalise_buffer
        from .urlbuffer import URLBuffer

        with kernels_only():
            URLBuffer.from_bytes(b"\xef\xbb\xbfhttp://a.example/\tx\r\n\n", pairs=True)
            fb = normalise_buffer(URLBuffer.from_strs(
                ["http://a.example/x", "HTTP://b.example:80/./y#f", "mailto:x", "http://[::1",
                 "http://\u00e9.example/routed"]))
            fb.lines(np.ones(len(fb.keys), dtype=bool))

    def contains_path():
        for family in FAMILIES.values():
            for name in family._twins:
                family.kernel(name)  # import: numba itself and every kernel module

    return [("numba and the kernel modules", contains_path),
            ("store kernels: sort, merge, Bloom filter", store_path),
            ("URL kernels: normalise, fingerprint", url_path)]


def _set_small(value: int) -> None:
    global SMALL
    SMALL = value


@contextlib.contextmanager
def twins_only():
    """Within it, every call below SMALL takes its numpy twin, even where the kernel
    is live (``live``): for testing the twins inside a process that runs kernels."""
    global _twins_forced
    saved = _twins_forced
    _twins_forced = True
    try:
        yield
    finally:
        _twins_forced = saved


@contextlib.contextmanager
def kernels_only():
    """Within it, the kernels run on inputs of any size (no numpy twin for small
    ones): for warming them up."""
    saved = SMALL
    _set_small(0)
    try:
        yield
    finally:
        _set_small(saved)
