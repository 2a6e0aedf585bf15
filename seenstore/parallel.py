"""Running a nogil kernel over chunks of a batch on several threads.

``default_threads()`` is the number of cores this process may run on.
``ranges(n, threads, min_chunk)`` cuts 0..n into at most ``threads`` contiguous
ranges of at least ``min_chunk`` items (one range when n is small).
``run_all(calls)`` runs zero-argument callables on a shared thread pool and returns
their results in order; the calls must be numba kernels with ``nogil=True`` (or
other code that releases the GIL) for this to use more than one core. An exception
in any call is raised here after all have finished. ``run_ahead(items, call, ahead)``
pipelines: ``call`` on the next items runs on the pool while the caller handles
the earlier results, in order. ``prefetch(items)`` produces the next item on a
helper thread.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

from .errors import InvalidInputError

T = TypeVar("T")
R = TypeVar("R")
MIN_CHUNK = 16384  # items per thread below which one thread is faster (measured: URLs)

_pools: dict[tuple[int, str], ThreadPoolExecutor] = {}
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


def run_ahead(items: Iterable[T], call: Callable[[T], R], ahead: int
              ) -> Iterator[tuple[T, Future]]:
    """(item, future of ``call(item)``) for each item, in order, with ``call`` already
    submitted (to a shared pool of ``ahead`` threads) for up to ``ahead`` items
    beyond the one yielded: while the caller handles an item's result, the next
    ones are computed (``call`` should release the GIL). Requires: ``call`` writes
    only what it returns. Leaving early (an error, ``close()``) cancels the calls
    not started and waits for the running ones."""
    pool = _pool(ahead, "seenstore-ahead")
    pending: deque = deque()
    try:
        for item in items:
            pending.append((item, pool.submit(call, item)))
            if len(pending) > ahead:
                yield pending.popleft()
        while pending:
            yield pending.popleft()
    finally:
        for _, f in pending:
            f.cancel()
        wait([f for _, f in pending])


def _pool(workers: int, prefix: str = "seenstore") -> ThreadPoolExecutor:
    with _pools_lock:
        pool = _pools.get((workers, prefix))
        if pool is None:
            pool = _pools[workers, prefix] = ThreadPoolExecutor(workers, thread_name_prefix=prefix)
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
