"""The process's thread pools: one per (name, size), made at first use and kept.

``shared_pool(workers, name)`` returns the one ThreadPoolExecutor of ``workers``
threads named ``name_0``, ``name_1``, ... in this process, the same object at every
call with the same name and size. Why kept: a batch runs its kernels on threads
many times over, and making threads per call cost their start each time. Promises:
a pool is never shut down (nobody may call its ``shutdown``); its threads are
daemons of the executor's own kind (the interpreter joins them at exit); a child
process made by ``fork`` starts with no pools (its parent's threads do not exist
there) and makes its own. Requires of a caller: wait for its own futures (never for
the pool), and never submit from a task of a pool to that same pool and wait for it
(a full pool would then wait for itself): that is why the name is part of the key,
so a role's tasks (run_all's kernels, the two-thread sort, fsyncs) keep threads of
their own. A pool whose threads must keep state of their own from call to call (a
sort's scratch array) is not shared: its owner makes and closes it.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_pools: dict[tuple[str, int], ThreadPoolExecutor] = {}
_lock = threading.Lock()


def shared_pool(workers: int, name: str = "seenstore") -> ThreadPoolExecutor:
    """The process-wide pool of ``workers`` (>= 1) threads named ``name``."""
    if workers < 1:
        raise ValueError(f"a pool needs at least one thread, got {workers}")
    key = (name, workers)
    with _lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = ThreadPoolExecutor(workers, thread_name_prefix=name)
        return pool


def _forget_after_fork() -> None:
    global _lock
    _pools.clear()  # the parent's threads are not in the child: its pools would never run
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
