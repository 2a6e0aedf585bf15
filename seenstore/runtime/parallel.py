"""Running a nogil kernel over chunks of a batch on several threads.

``default_threads()`` is the number of cores this process may run on.
``keep_freed_memory()`` and ``limit_malloc_arenas()`` tune glibc's malloc for a
command's whole process (streaming commands, the server).
``ranges(n, threads, min_chunk)`` cuts 0..n into at most ``threads`` contiguous
ranges of at least ``min_chunk`` items (one range when n is small).
``run_all(calls)`` runs zero-argument callables on a shared thread pool (pool.py,
named "seenstore") and returns their results in order; the calls must be numba
kernels with ``nogil=True`` (or other code that releases the GIL) for this to use
more than one core. An exception in any call is raised here after all have
finished. ``ordered_map(items, work, threads)`` is a pipeline instead: helpers draw
the items in turn and work on them with no barrier between items; the results come
back in order.
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

from seenstore.errors import InvalidInputError
from seenstore.runtime.pool import shared_pool

T = TypeVar("T")
R = TypeVar("R")
MIN_CHUNK = 16384  # items per thread below which one thread is faster (measured: URLs)


def default_threads() -> int:
    """Cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - platforms without affinity
        return max(1, os.cpu_count() or 1)


def check_threads(threads: int | None) -> int:
    """``threads`` as a positive count (None: ``default_threads()``)."""
    if threads is None:
        return default_threads()
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise InvalidInputError(f"threads must be a positive integer, got {threads!r}")
    return threads


def ranges(n: int, threads: int, min_chunk: int | None = None) -> list[tuple[int, int]]:
    """At most ``threads`` ranges (a, b) covering 0..n in order, each of at least
    ``min_chunk`` (default MIN_CHUNK) items unless there is only one."""
    min_chunk = MIN_CHUNK if min_chunk is None else min_chunk
    k = max(1, min(threads, n // max(min_chunk, 1)))
    cuts = [n * j // k for j in range(k + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


def run_all(calls: Sequence[Callable[[], T]]) -> list[T]:
    """Results of ``calls`` in order; the first runs on this thread, the rest on the pool."""
    if len(calls) <= 1:
        return [c() for c in calls]
    pool = shared_pool(len(calls) - 1)
    futures = [pool.submit(c) for c in calls[1:]]
    try:
        first = calls[0]()
    finally:
        wait(futures)  # never leave a kernel writing into arrays the caller drops
    return [first, *(f.result() for f in futures)]


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed memory for reuse (no mmap per large block, no
    trimming below 1 GiB free): a streaming command allocates arrays of the same
    sizes batch after batch, and on a VM first-touching fresh pages can cost about as
    much as the kernels (docs/fastpath.md). Process-wide, so only
    commands call it (``seenstore add``). Returns False where there is no glibc."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_max = -1, -4
        return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))
    except (OSError, AttributeError):
        return False


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Cap glibc's malloc at ``arenas`` arenas for threads created from now on (by
    default it makes up to 8 per core, one per thread that allocates at once, and
    memory freed in one is reused only by the threads on it). A long-lived server whose
    executor threads allocate per-request arrays held ~150 MB of free memory across its
    arenas (seenstore serve, 2.25e6 URLs; 32 MB capped at 2), at the same throughput.
    Process-wide, so only commands call it (``seenstore serve``). Returns False where
    there is no glibc."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        m_arena_max = -8
        return bool(libc.mallopt(m_arena_max, int(arenas)))
    except (OSError, AttributeError):
        return False


def ordered_map(items: Iterator[T], work: Callable[[T], R], threads: int,
                ahead: int | None = None) -> Iterator[R]:
    """``work(item)`` for each item of ``items``, in the items' order, computed on
    ``threads`` helper threads. Each helper draws its item itself, one helper at a
    time and in order (drawing may be work too, e.g. a nogil kernel reading a file),
    then works on it while the next helper draws; no barrier between items, so a
    helper never waits for another's work. At most ``ahead`` (default 2 x threads)
    items are drawn or worked on ahead of the caller. An exception drawing or
    working an item is raised when the caller reaches that item. Closing the
    iterator (or its end) stops the drawing and waits for the helpers: ``items``
    is never touched after it. Close it explicitly when leaving it early (a
    suspended generator finalized by the garbage collector would join its pool at
    an arbitrary point)."""
    ahead = 2 * threads if ahead is None else ahead
    if threads < 1 or ahead < 1:
        raise InvalidInputError("ordered_map needs threads >= 1 and ahead >= 1")
    cond = threading.Condition()
    state = {"turn": 0, "end": False}
    done = object()

    def task(k: int):
        with cond:  # draw item k once items 0..k-1 are drawn
            cond.wait_for(lambda: state["turn"] == k or state["end"])
            try:
                if state["end"]:
                    return done
                try:
                    item = next(items)
                except StopIteration:
                    state["end"] = True
                    return done
                except BaseException:
                    state["end"] = True
                    raise
            finally:
                state["turn"] = k + 1
                cond.notify_all()
        return work(item)

    # a pool of its own, not a shared one: a helper waits for its turn to draw, and
    # only a pool whose every thread is this map's runs the turn's holder for sure
    pool = ThreadPoolExecutor(threads, thread_name_prefix="seenstore-ordered")
    futures: collections.deque = collections.deque()
    try:
        futures.extend(pool.submit(task, k) for k in range(ahead))
        submitted = ahead
        while futures:
            result = futures.popleft().result()
            if result is done:
                return
            futures.append(pool.submit(task, submitted))
            submitted += 1
            yield result
    finally:
        with cond:
            state["end"] = True  # helpers waiting for their turn draw nothing
            cond.notify_all()
        pool.shutdown(wait=True, cancel_futures=True)
