"""Warm-up: every numba kernel compiled (or loaded from numba's cache) before it is
timed or needed, so no later call waits for the compiler.

Owns ``warm_up`` (what ``seenstore warmup`` and the benchmarks run) and
``warm_store`` (a throwaway store driven through the large-batch paths). It sits
above the store and the URL path and calls them with the numpy twins turned off
(``dispatch.kernels_only``), so the kernels themselves compile; nothing below it
imports it. Each call works in a new temporary folder, removed after.

Also ``compile_lanes``: steps run at once in child processes of their own (a 2-core
machine compiles two kernels at a time), each child reporting every kernel it
compiles as it ends (``seenstore bench``'s first-run progress).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

import numpy as np

from seenstore.kernels import dispatch

_U = np.uint64


def warm_up(directory: str | None = None, *,
            progress: Callable[[str, int, int], None] | None = None,
            run_format: int | None = None, child: bool = False) -> float:
    """Compile (or load) every kernel the store and the URL fast path run; returns the
    seconds it took. ``progress(name, i, n)`` after each step. The throwaway stores go
    in a new temporary folder (inside ``directory`` if given), removed after;
    ``run_format``: also drive a store of that run format when it is not the default.

    ``child``: with a cold numba cache (``dispatch.cold``), a child process compiles
    first and this one then loads the cache, because compiling leaves ~700 MB of
    LLVM's memory resident in the process that did it, which a benchmark's peak RSS
    would report as its own. If the child fails, this process compiles."""
    t0 = time.perf_counter()
    if child and dispatch.cold():
        if _warm_up_in_child(directory, run_format, progress):
            progress = None  # the child reported the steps; here they only load
    _warm_here(directory, progress, run_format)
    return time.perf_counter() - t0


def _warm_here(directory: str | None, progress, run_format: int | None) -> None:
    """``warm_up``'s work in this process."""
    from seenstore.store.runs import live as runsmod

    steps = warm_steps(tempfile.mkdtemp(prefix="seenstore-warmup-", dir=directory))
    for i, (name, step) in enumerate(steps, 1):
        step()
        if progress is not None:
            progress(name, i, len(steps))
    if run_format is not None and run_format != runsmod.DEFAULT_RUN_FORMAT:
        work = tempfile.mkdtemp(prefix="seenstore-warmup-", dir=directory)
        try:
            with dispatch.kernels_only():
                warm_store(work, run_format)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _warm_up_in_child(directory: str | None, run_format: int | None,
                      progress: Callable[[str, int, int], None] | None = None) -> bool:
    """``warm_up`` in a fresh Python process sharing this one's numba cache and
    importing this very seenstore (``python -c`` would put its working folder first
    on the path); ``progress`` is called here as the child ends each step. True if
    it succeeded."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ("import sys; sys.path.insert(0, sys.argv[3]); from seenstore.warmup import warm_up; "
            "warm_up(sys.argv[1] or None, run_format=int(sys.argv[2]) or None, progress=lambda "
            "name, i, n: print(f'{i}\\t{n}\\t{name}', flush=True))")
    try:
        child = subprocess.Popen([sys.executable, "-c", code, directory or "",
                                  str(run_format or 0), root], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except OSError:
        return False
    with child:
        for line in child.stdout:
            parts = line.rstrip("\n").split("\t", 2)
            if progress is not None and len(parts) == 3 and parts[0].isdigit():
                progress(parts[2], int(parts[0]), int(parts[1]))
    return child.returncode == 0


def compile_lanes(lanes: list[tuple[str, str, dict]], directory: str | None = None,
                  on_compiled: Callable[[str, str, float], None] | None = None) -> bool:
    """Run each lane ``(label, "package.module:function", kwargs)`` in a child process
    of its own, all at once, sharing this process's numba cache (saves serialised:
    ``jitcache.serialise_cache_saves``) and importing this very seenstore; each runs
    ``function(work, **kwargs)`` with ``work`` a new temporary folder (inside
    ``directory`` if given) removed after. ``on_compiled(label, kernel, seconds)`` is
    called here (from reader threads, one at a time) each time a child ends
    compiling a kernel it called (kernels compiled inside it count in its seconds).
    Returns True if every lane succeeded; a failed lane only leaves work for whoever
    then runs the kernels. ``kwargs`` must be JSON."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from seenstore.warmup import "
            "_lane_main; _lane_main(*sys.argv[2:])")
    lock = threading.Lock()
    children = []
    for label, target, kwargs in lanes:
        try:
            children.append((label, subprocess.Popen(
                [sys.executable, "-c", code, root, target, directory or "", json.dumps(kwargs)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                text=True)))
        except OSError:
            return False

    def read(label: str, child: subprocess.Popen) -> None:
        for line in child.stdout:
            parts = line.rstrip("\n").split("\t")
            if on_compiled is not None and len(parts) == 3 and parts[0] == "compiled":
                with lock:
                    on_compiled(label, parts[1], float(parts[2]))

    readers = [threading.Thread(target=read, args=c, daemon=True) for c in children]
    for r in readers:
        r.start()
    ok = True
    for (_, child), r in zip(children, readers):
        ok &= child.wait() == 0
        r.join()
        child.stdout.close()
    return ok


def _lane_main(target: str, directory: str, kwargs: str) -> None:
    """A ``compile_lanes`` child: print ``compiled<TAB>module.kernel<TAB>seconds`` on
    stdout as each outermost compile ends, run the lane, exit non-zero on failure."""
    import importlib

    from numba.core import event

    from seenstore.kernels.jitcache import serialise_cache_saves

    serialise_cache_saves()
    open_compiles: list[float] = []

    class Printer(event.Listener):
        def on_start(self, ev):
            open_compiles.append(time.perf_counter())

        def on_end(self, ev):
            t = open_compiles.pop()
            if not open_compiles:  # the outermost: the kernel a lane's code called
                print(f"compiled\t{_kernel_name(ev)}\t{time.perf_counter() - t:.2f}",
                      flush=True)

    event.register("numba:compile", Printer())
    module, _, name = target.partition(":")
    work = tempfile.mkdtemp(prefix="seenstore-warmup-", dir=directory or None)
    try:
        getattr(importlib.import_module(module), name)(work, **json.loads(kwargs))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _kernel_name(ev) -> str:
    """``module.kernel`` of a numba compile event."""
    fn = ev.data["dispatcher"].py_func
    return f"{fn.__module__.rpartition('.')[2]}.{fn.__qualname__}"


class CompileCounter:
    """Counts the kernels numba compiles in this process (any thread) while in its
    ``with`` block: ``n`` outermost compiles taking ``seconds`` in all, and calls
    ``on_compiled(module.kernel, seconds)`` as each ends. A cache load is no compile.
    Imports numba."""

    def __init__(self, on_compiled: Callable[[str, float], None] | None = None) -> None:
        self.on_compiled = on_compiled
        self.n = 0
        self.seconds = 0.0
        self._open: list[float] = []

    def __enter__(self) -> "CompileCounter":
        from numba.core import event

        counter = self

        class Listener(event.Listener):
            def on_start(self, ev):
                counter._open.append(time.perf_counter())

            def on_end(self, ev):
                t = counter._open.pop()
                if not counter._open:
                    counter.n += 1
                    counter.seconds += time.perf_counter() - t
                    if counter.on_compiled is not None:
                        counter.on_compiled(_kernel_name(ev), time.perf_counter() - t)

        self._listener = Listener()
        event.register("numba:compile", self._listener)
        return self

    def __exit__(self, *exc) -> None:
        from numba.core import event

        event.unregister("numba:compile", self._listener)


def warm_store(directory: str, run_format: int | None = None) -> None:
    """A throwaway store in ``directory`` through a few batches of 2 ``REGION_MIN_KEYS``
    keys (half of each batch offered before) with a 2e6-key Bloom filter, so the
    large-batch paths run too (region inserts, the deferred insert); both ``add``
    and ``add_new``, a lookup and a compaction. Run it inside
    ``dispatch.kernels_only`` to compile the kernels rather than use the twins."""
    from seenstore.bloom import REGION_MIN_KEYS
    from seenstore.keys import sort as sorting
    from seenstore.store import SeenStore
    from seenstore.store.runs import live as runsmod

    path = os.path.join(directory, "warmup-store")
    sorting.warm_up()
    rng = np.random.default_rng(99)
    size = 2 * REGION_MIN_KEYS
    keys = rng.integers(0, 2**64, size, dtype=_U, endpoint=False)
    try:
        with SeenStore.open(path, create=True, bloom_capacity=2_000_000,
                            run_format=run_format or runsmod.DEFAULT_RUN_FORMAT) as st:
            for i in range(4):
                fresh = rng.integers(0, 2**64, size // 2, dtype=_U, endpoint=False)
                keys = np.concatenate([keys[: size // 2], fresh])
                st.add(keys) if i % 2 else st.add_new(keys)
            st.contains(keys)
            st.compact()  # the k-way merge of compaction
    finally:
        shutil.rmtree(path, ignore_errors=True)


def warm_steps(directory: str) -> list[tuple[str, Callable[[], None]]]:
    """The warm-up's steps as (name, step): the kernel modules imported, the store's
    kernels, the URL kernels, the compressed runs' kernels. The store's step works in
    ``directory`` and removes it; the codec's, in a folder of its own beside it."""

    def store_path():
        try:
            with dispatch.kernels_only():
                warm_store(directory)
                from seenstore.store import SeenStore

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
                dispatch.batch.unique_sorted(keys)  # the stage's
                dispatch.batch.first_unique(keys, np.empty(len(keys), _U),
                                            np.empty(len(keys), np.int64),
                                            64, 32)  # a batch's repeats
                # add's mask on two threads (batches of 2^20 keys and more)
                from seenstore.keys.batch import PARALLEL_JOIN_KEYS, first_new_mask

                many = np.arange(PARALLEL_JOIN_KEYS, dtype=_U)
                first_new_mask(many, many[::2].copy(), 2)
                # a batch's partition on two threads (batches of 2^20 keys and more)
                from seenstore.keys.partition import PARALLEL_PARTITION_KEYS, partition

                partition(np.arange(2 * PARALLEL_PARTITION_KEYS, dtype=_U), 4, 2)
                # a spilled bucket too big for one slice, split by key ranges (store/buckets.py)
                dispatch.batch.partition_by_cuts(keys, keys[::100].copy(),
                                                 np.empty(len(keys), np.int32),
                                                 np.empty(len(keys), _U), np.empty(12, np.int64))
                from seenstore.bloom import GROUP

                # region inserts (large batches into large filters)
                words = np.zeros(8 * 64, dtype=_U)
                dispatch.bloom.kernel("bloom_add_regions")(words, keys, 7, GROUP, 2,
                                                           np.empty(256, _U))
                # a sweep from disk (runs the run cache does not hold): order checked
                dispatch.merge.kernel("sweep_step")(keys, len(keys), keys, 0,
                                                    np.zeros(len(keys), np.bool_), _U(0), False)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def url_path():
        from seenstore.url.fastpath import normalise_buffer
        from seenstore.url.buffer import URLBuffer

        with dispatch.kernels_only():
            URLBuffer.from_bytes(b"\xef\xbb\xbfhttp://a.example/\tx\r\n\n", pairs=True)
            fb = normalise_buffer(URLBuffer.from_strs(
                ["http://a.example/x", "HTTP://b.example:80/./y#f", "mailto:x", "http://[::1",
                 "http://\u00e9.example/routed"]))
            fb.lines(np.ones(len(fb.keys), dtype=bool))
            text = np.frombuffer(b"b\na\n", dtype=np.uint8)  # a kept-URL file's gather
            dispatch.kept.order_lines(text, np.array([1, 0]), np.empty(4, np.uint8),
                                      np.empty(2, np.int64))

    def codec_path():
        # compressed runs (kernels/codec.py): a default store writes its runs of 2^22
        # keys and more so, whose first would otherwise compile the codec in the middle
        # of a crawl
        from seenstore.store import SeenStore

        where = tempfile.mkdtemp(prefix="seenstore-codec-",
                                 dir=os.path.dirname(os.path.abspath(directory)))
        keys = np.arange(1, 1001, dtype=_U)
        try:
            with dispatch.kernels_only():
                for cache in (None, 0):  # swept from the run cache, and from disk
                    with SeenStore.open(os.path.join(where, f"codec{cache}"), create=True,
                                        sync=False, run_format=2, cache_bytes=cache) as st:
                        st.add(keys)
                        st.add(keys + _U(1000))  # a sweep of a compressed run
                        st.contains(keys[::3])  # its block index
                        st.verify()
                        st.compact()  # decoded, merged, encoded
        finally:
            shutil.rmtree(where, ignore_errors=True)

    def contains_path():
        for family in dispatch.FAMILIES.values():
            for name in family.names():
                family.kernel(name)  # import: numba itself and every kernel module

    return [("numba and the kernel modules", contains_path),
            ("store kernels: sort, merge, Bloom filter", store_path),
            ("URL kernels: normalise, fingerprint", url_path),
            ("compressed runs: codec", codec_path)]


