"""Running a nogil kernel over chunks of a batch on several threads.

``default_threads()`` is the number of cores this process may run on.
``ranges(n, threads, min_chunk)`` cuts 0..n into at most ``threads`` contiguous
ranges of at least ``min_chunk`` items (one range when n is small).
``run_all(calls)`` runs zero-argument callables on a shared thread pool and returns
their results in order; the calls must be numba kernels with ``nogil=True`` (or
other code that releases the GIL) for this to use more than one core. An exception
in any call is raised here after all have finished.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

from .errors import InvalidInputError

T = TypeVar("T")
MIN_CHUNK = 16384  # items per thread below which one thread is faster (measured: URLs)

_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


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
    pool = _pool(len(calls) - 1)
    futures = [pool.submit(c) for c in calls[1:]]
    try:
        first = calls[0]()
    finally:
        wait(futures)  # never leave a kernel writing into arrays the caller drops
    return [first, *(f.result() for f in futures)]


def _pool(workers: int) -> ThreadPoolExecutor:
    with _pools_lock:
        pool = _pools.get(workers)
        if pool is None:
            pool = _pools[workers] = ThreadPoolExecutor(workers, thread_name_prefix="seenstore")
        return pool


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed memory for reuse (no mmap per large block, no
    trimming below 1 GiB free): a streaming command allocates arrays of the same
    sizes batch after batch, and on the VMs measured here first-touching fresh pages
    cost about as much as the kernels (docs/fastpath.md). Process-wide, so only
    commands call it (``seenstore add``). Returns False where there is no glibc."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_max = -1, -4
        return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))
    except (OSError, AttributeError):
        return False


def prefetch(items: Iterator[T]) -> Iterator[T]:
    """The items of ``items``, the next one produced on a helper thread while the
    caller works on the current one (useful when producing it releases the GIL)."""
    with ThreadPoolExecutor(1, thread_name_prefix="seenstore-prefetch") as pool:
        nxt = pool.submit(next, items, None)
        while True:
            item = nxt.result()
            if item is None:
                return
            nxt = pool.submit(next, items, None)
            yield item
