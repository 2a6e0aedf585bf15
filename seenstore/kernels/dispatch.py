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
benchmark) stops paying the twins' 5-15x on its small calls, which are common: a
batch of 1e6 keys checks each of its shards' ~6e4 keys against runs of similar size,
calls below ``SMALL`` items (docs/architecture.md, module map). A process whose
calls all stay small (a crawler calling ``add_urls`` with 1e4 links at a time) takes
the kernels the same way once its calls have put ``TWIN_ITEMS`` items through the
twins (``settled``): by then the twins have cost it about what importing numba and
loading the kernels from its cache does (~0.5 s), and each further call runs 4-15x
faster. A kernel that would compile keeps its twin (asked again after another
``TWIN_ITEMS`` items: compiling costs 10-40 s, ``seenstore warmup`` does it ahead).

The twins compute exactly what the kernels do (same bits in the Bloom filter,
same outputs); tests/unit/kernels/test_dispatch.py checks each against its kernel.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
from collections.abc import Callable

import numpy as np

from seenstore.kernels.twins import (batch as tw_batch, bloom as tw_bloom,
                                     fingerprint as tw_fingerprint, kept as tw_kept,
                                     lines as tw_lines, merge as tw_merge, url as tw_url)

# Items (keys, URLs) below which a call takes the numpy twin. SeenStore.add costs
# 3-4.5 us/key on the twins against 0.2-0.4 us/key on the compiled kernels (README
# "First run"), so a call of 1e5 keys loses ~0.3 s to the twins, while compiling the
# kernels costs 10-40 s once.
SMALL = int(os.environ.get("SEENSTORE_JIT_MIN", 100_000))

# Items (each call's size, summed) a process puts through the twins before its small
# calls take the kernels that load without compiling (``settled``): ~0.5-1 s of twin
# work, what numba's import and first cache loads cost once.
TWIN_ITEMS = int(os.environ.get("SEENSTORE_TWIN_ITEMS", 1_000_000))
_twin_items = [0]  # items this process's calls put through the twins (approximate: no lock)

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


def cold(kernels: tuple[str, ...] | None = None) -> bool:
    """True when a warm-up here would compile: some kernel the store or the URL path
    calls first (each family's kernels, the sorts, the URL kernel; or those named in
    ``kernels``, as ``"module.kernel"``) has no machine code in memory nor an
    up-to-date cache index. Imports numba."""
    if kernels is not None:
        return any(_will_compile(getattr(kernel_module(m), k))
                   for m, k in (name.split(".") for name in kernels))
    names = [(family, name) for family in FAMILIES.values() for name in family.names()]
    kernels_ = [family.kernel(name) for family, name in names]
    from seenstore.kernels import sort as ks
    from seenstore.kernels import url as ku
    kernels_ += [ks.radix_sort, ks.sort_unique, ks.sort_buckets, ku.normalise_batch]
    return any(_will_compile(k) for k in kernels_)


def jit_live() -> bool:
    """True once this process has called one of seenstore's kernels through this
    module (``announce``, before each kernel call): numba is imported and its first
    cache load or compile, ~0.5 s of context set-up outside the CLI, is behind;
    each further kernel then loads from numba's cache in a few ms. Tests
    monkeypatch it (or use ``twins_only``) to play a fresh process."""
    return _live_seen[0]


_live_seen = [False]


def settled() -> bool:
    """True once this process's calls have put ``TWIN_ITEMS`` items through the twins:
    a long-lived process whose small calls should take the kernels that load without
    compiling, though no large call has run one yet."""
    return _twin_items[0] >= TWIN_ITEMS


def running_kernels() -> bool:
    """``jit_live``, unless ``twins_only`` plays a fresh process: a caller whose small
    calls should take the kernels once this process runs them (a large Bloom filter's)."""
    return not _twins_forced and jit_live()


def live(kernel) -> bool:
    """True when a small call may take ``kernel`` instead of its twin: this process
    already runs kernels (``jit_live``) or has ``settled``, and calling this one will
    not compile."""
    return not _twins_forced and (jit_live() or settled()) and not _will_compile(kernel)


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
    of CPU). Process-wide: numba then refuses np.dot/linalg in any kernel
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


def kernel_module(name: str):
    """The module ``seenstore.kernels.<name>``, imported the CLI's way when it asked
    (``lean_numba``: numba without scipy, cache loads without the compiler's
    start-up, jitcache.light_cache_loads). Imports numba."""
    if lean_numba:
        _numba_without_scipy()
        from seenstore.kernels.jitcache import light_cache_loads

        light_cache_loads()  # cache loads without numba's compiler start-up
    return importlib.import_module(f"seenstore.kernels.{name}")


class _Family:
    """Functions of ``seenstore.kernels.<name>``; those with a twin below dispatch."""

    def __init__(self, module: str, twins: dict[str, tuple[Callable, Callable]]) -> None:
        self._module = module
        self._twins = twins
        self._cache: dict[str, Callable] = {}

    def names(self) -> list[str]:
        """The kernels of this family that have a twin (those the size switch serves)."""
        return list(self._twins)

    def twin(self, name: str) -> Callable:
        """The numpy twin of kernel ``name`` (tests compare the two)."""
        return self._twins[name][0]

    def kernel(self, name: str):
        """The numba kernel itself (imports numba on first use)."""
        return getattr(kernel_module(self._module), name)

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
        cold_at = [-1]  # twin items when a settled process found it would compile

        def call(*args):
            if twin is not None and (_twins_forced or not ready[0]) and size(args) < SMALL:
                if not family._live(name, cold_at):
                    _twin_items[0] += size(args)
                    return twin(*args)
                ready[0] = True
            kernel = family.kernel(name)
            announce(kernel)
            return kernel(*args)

        call.__name__ = call.__qualname__ = name
        call.__doc__ = (f"seenstore.kernels.{self._module}.{name}, or its numpy twin below "
                        "SMALL while the kernel is not live (dispatch.live).")
        return call

    def _live(self, name: str, cold_at: list | None = None) -> bool:
        """``live`` for kernel ``name``, without fetching the kernel (importing numba)
        when it cannot be. ``cold_at``: where a settled process (not ``jit_live``)
        found that the kernel would compile, in twin items, so it asks numba's cache
        again only after another TWIN_ITEMS (not at every small call)."""
        if _twins_forced:
            return False
        if not jit_live():
            if not settled():
                return False
            if cold_at is not None and cold_at[0] >= 0 \
                    and _twin_items[0] - cold_at[0] < TWIN_ITEMS:
                return False
        ok = live(self.kernel(name))
        if not ok and cold_at is not None and not jit_live():
            cold_at[0] = _twin_items[0]
        return ok


def _keys_len(args) -> int:  # (words, keys, ...): the filter's size does not count
    return len(args[1])


# name -> (twin, size of a call in items). Sizes count the work, not the buffers.
batch = _Family("batch", {
    "unique_inplace": (tw_batch.unique_inplace, _first_len),
    "unique_sorted": (tw_batch.unique_sorted, _first_len),
    "compact_inplace": (tw_batch.compact_inplace, _first_len),
    "mark_first_new": (tw_batch.mark_first_new, _first_len),
    "mark_members": (tw_batch.mark_members, _first_len),
    "partition_top_bits": (tw_batch.partition_top_bits, _first_len),
    "partition_by_cuts": (tw_batch.partition_by_cuts, _first_len),
    "first_unique": (tw_batch.first_unique, _first_len),
})
merge = _Family("merge", {
    "is_strictly_increasing": (tw_merge.is_strictly_increasing, _first_len),
    "sweep_step": (tw_merge.sweep_step, lambda args: args[1] + len(args[2]) - args[3]),
    "sweep_sorted": (tw_merge.sweep_sorted, lambda args: args[1] + len(args[2]) - args[3]),
    "kway_step": (tw_merge.kway_step, lambda args: int(np.sum(args[2] - args[1]))),
    "sparse_member": (tw_merge.sparse_member, lambda args: len(args[3])),
})
bloom = _Family("bloom", {
    "bloom_add_query": (tw_bloom.bloom_add_query, _keys_len),
    "bloom_query": (tw_bloom.bloom_query, _keys_len),
    "bloom_add_regions": (tw_bloom.bloom_add_regions, _keys_len),
    # a word costs the twin ~1/16 of a key: a 2 MiB default filter is 16k "items"
    "block_fill_histogram": (tw_bloom.block_fill_histogram, lambda args: len(args[0]) // 16),
})
url = _Family("url", {"gather": (tw_url.gather, lambda args: len(args[2]))})
fingerprint = _Family("fingerprint", {
    "fingerprint_batch": (tw_fingerprint.fingerprint_batch, lambda args: len(args[1]) - 1)})
# A stream's reader (url/reading.py) passes the bytes read so far as the size: a pipe
# delivers 64 KiB per read, and every read of a large input must take the kernel.
LINE_BYTES = 64  # bytes per "item" of the line splitter's size
lines = _Family("lines", {"split_lines": (tw_lines.split_lines, lambda args: 0)})
kept = _Family("kept", {"order_lines": (tw_kept.order_lines, lambda args: len(args[1]))})
FAMILIES = {"batch": batch, "merge": merge, "bloom": bloom, "url": url,
            "fingerprint": fingerprint, "lines": lines, "kept": kept}


def split_lines_for(bytes_read: int) -> Callable:
    """The line splitter for a stream that has delivered ``bytes_read`` bytes (or is
    known to hold that many): the twin below SMALL lines of LINE_BYTES while the
    kernel is not live (``live``), else the kernel."""
    if bytes_read < SMALL * LINE_BYTES and not lines._live("split_lines"):
        return tw_lines.split_lines
    kernel = lines.kernel("split_lines")
    announce(kernel)
    return kernel


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
