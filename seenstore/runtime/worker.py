"""One body of work on a background thread of its own: the package's one way to run
something beside the caller and wait for it later.

``Worker(body, name)`` starts a daemon thread named ``name`` at once, which calls
``body()`` once. Promises: the body's exception is never lost in the thread: it is
kept (``error``) and raised again on the thread that calls ``join()``;
``join(raise_error=False)`` waits without raising (the caller reads ``error``).
``result`` is what the body returned (None until it returned, or if it raised).
``elapsed_s`` and ``cpu_s`` are the body's wall and thread-CPU seconds, measured on
its thread (0.0 until it ended; the CPU time leaves out the turns other threads
took, which the wall time on a busy machine includes). The body is dropped once it
ended, so what it refers to is freed as soon as the work is done. A loop (a queue's
consumer, a periodic flush) is a body too: it ends when the loop does.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable


class Worker:
    """``body()`` run once on a daemon thread named ``name``, started by the
    constructor (see the module docstring). ``is_alive()`` and ``join()`` can stand
    where a ``threading.Thread`` was waited for; ``join`` may be called any number
    of times, from any threads."""

    def __init__(self, body: Callable[[], Any], name: str) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.elapsed_s = 0.0
        self.cpu_s = 0.0
        self._body: Callable[[], Any] | None = body
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def name(self) -> str:
        return self._thread.name

    def _run(self) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            self.result = self._body()
        except BaseException as e:  # handed to the waiter, never lost in the thread
            self.error = e
        finally:
            self._body = None
            self.cpu_s = time.thread_time() - c0
            self.elapsed_s = time.perf_counter() - t0

    def is_alive(self) -> bool:
        """True until the body has ended (returned or raised)."""
        return self._thread.is_alive()

    def join(self, raise_error: bool = True) -> Any:
        """Wait until the body has ended; return its ``result``. If it raised, raise
        its exception here (every call), unless ``raise_error`` is False."""
        self._thread.join()
        if raise_error and self.error is not None:
            raise self.error
        return self.result

    def __repr__(self) -> str:
        state = "running" if self.is_alive() else ("failed" if self.error else "done")
        return f"Worker({self.name!r}, {state})"
