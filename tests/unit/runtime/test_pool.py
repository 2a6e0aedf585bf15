"""The process's thread pools (seenstore/runtime/pool.py) and their users."""

import os
import threading

import pytest

from seenstore.runtime import parallel
from seenstore.runtime.pool import shared_pool


def test_one_pool_per_name_and_size():
    a = shared_pool(2, "test-pool")
    assert shared_pool(2, "test-pool") is a
    assert shared_pool(3, "test-pool") is not a
    assert shared_pool(2, "test-pool-other") is not a
    assert shared_pool(1) is shared_pool(1, "seenstore")


def test_its_threads_are_named_and_as_many_as_asked():
    pool = shared_pool(2, "test-named")
    both = threading.Barrier(2, timeout=30)  # broken (an error) unless two run at once

    def task():
        both.wait()
        return threading.current_thread().name

    names = [f.result(timeout=60) for f in [pool.submit(task), pool.submit(task)]]
    assert len(set(names)) == 2 and all(n.startswith("test-named_") for n in names)


def test_a_thread_count_below_one_is_refused():
    with pytest.raises(ValueError):
        shared_pool(0, "test-zero")


def test_run_all_runs_the_first_call_here_and_the_rest_on_the_shared_pool():
    here = threading.current_thread().name
    calls = [lambda: threading.current_thread().name for _ in range(3)]
    names = parallel.run_all(calls)
    assert names[0] == here
    assert all(n.startswith("seenstore_") for n in names[1:])
    pool_threads = {t.name for t in shared_pool(2)._threads}
    assert set(names[1:]) <= pool_threads


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_gets_pools_of_its_own():
    pool = shared_pool(1, "test-fork")
    assert pool.submit(lambda: 1).result(timeout=60) == 1  # a thread made, now idle
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread is not here; its pool would never run
        code = 1
        try:
            code = 0 if shared_pool(1, "test-fork").submit(lambda: 7).result(timeout=20) == 7 else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
