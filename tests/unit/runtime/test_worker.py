"""The background worker (seenstore/runtime/worker.py): the body runs once on a named
daemon thread; its error reaches the waiter; its wall and thread-CPU seconds."""

import gc
import threading
import time
import weakref

import pytest

from seenstore.runtime.worker import Worker


def _burn(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_the_body_runs_once_on_a_named_daemon_thread_and_its_result_is_returned():
    calls = []

    def body():
        t = threading.current_thread()
        calls.append((t.name, t.daemon, t is threading.main_thread()))
        return 42

    w = Worker(body, "test-worker")
    assert w.join() == 42 and w.result == 42 and w.error is None
    assert w.join() == 42  # joining again neither runs it again nor waits
    assert calls == [("test-worker", True, False)]
    assert not w.is_alive() and w.name == "test-worker"


def test_it_starts_at_once_and_figures_stay_zero_until_the_body_ends():
    go, started = threading.Event(), threading.Event()

    def body():
        started.set()
        go.wait(30)
        return "done"

    w = Worker(body, "test-held")
    assert started.wait(30)  # running without anyone asking it to start
    assert w.is_alive() and w.result is None and (w.elapsed_s, w.cpu_s) == (0.0, 0.0)
    go.set()
    assert w.join() == "done" and not w.is_alive() and w.elapsed_s > 0


def test_the_error_is_raised_on_the_waiters_thread_at_every_join(monkeypatch):
    lost = []
    monkeypatch.setattr(threading, "excepthook", lost.append)  # what a bare thread loses

    def body():
        raise ValueError("boom")

    w = Worker(body, "test-fails")
    with pytest.raises(ValueError, match="boom"):
        w.join()
    with pytest.raises(ValueError, match="boom"):
        w.join()
    assert isinstance(w.error, ValueError) and w.result is None
    assert lost == []  # kept for the waiter, not handed to threading's hook


def test_join_without_raising_returns_and_leaves_the_error_to_read():
    def body():
        raise OSError(28, "No space left on device")

    w = Worker(body, "test-quiet")
    assert w.join(raise_error=False) is None
    assert isinstance(w.error, OSError) and w.error.errno == 28
    assert w.elapsed_s > 0  # measured on an error too


def test_base_exceptions_are_kept_too():
    def body():
        raise SystemExit(3)

    w = Worker(body, "test-exit")
    with pytest.raises(SystemExit):
        w.join()


def test_cpu_seconds_are_the_bodys_thread_only_and_wall_seconds_include_waiting():
    def body():
        _burn(0.05)
        time.sleep(0.2)

    w = Worker(body, "test-figures")
    _burn(0.3)  # this thread's CPU: not the worker's
    w.join()
    assert 0.05 <= w.cpu_s < 0.2, w.cpu_s
    assert w.elapsed_s >= 0.25 and w.elapsed_s >= w.cpu_s


def test_the_body_and_what_it_holds_are_let_go_once_it_ended():
    class Big:
        pass

    big = Big()
    ref = weakref.ref(big)
    w = Worker(lambda big=big: None, "test-frees")
    del big
    w.join()
    gc.collect()
    assert ref() is None
