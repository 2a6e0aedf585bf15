"""A spilled batch's new runs, written on a thread of their own behind its check.

``spill.admit_file`` checks a batch shard by shard on the calling thread (read the
bucket, sort, check against the shard's runs); the keys it finds new go to a
``RunSink``, which copies them into one of a few I/O-sized buffers and returns, and
the sink's thread encodes and writes them to the shard's new run, finishes the run
when told the shard is done, and hands it on (``finished``: its fsync queued, its
Bloom insert fed). So a shard's encode and write (~10 ns per offered key at 1e9
keys) run on the other core beside the next shard's sort and check, instead of after
them. Memory: ``n_bufs`` buffers of ``buf_keys`` keys, whatever the batch size.

Order is kept: one thread writes every run, in the order the keys were put, so a
run's keys stay ascending and the runs are finished in shard order.
"""

from __future__ import annotations

import queue
import time

import numpy as np

from seenstore.runtime.worker import Worker

WAIT_S = 0.05  # how often a blocked put looks whether the sink's thread has failed


class RunSink:
    """Writes ``put`` keys to per-shard runs on a thread (``thread``, a Worker whose
    body is the write loop); ``close`` waits and re-raises the thread's error.
    ``open_writer(shard)``: a new run's writer (called on the sink's thread, once per
    shard that gets keys); ``write(shard, w, keys)``: write ``keys`` with writer
    ``w`` (and anything else the caller keeps of them); ``finished(shard, w)``: the
    shard's last keys are written (called on the sink's thread, in shard order). The
    first error ends the loop: every later item is dropped, and ``put`` raises it.
    ``busy_s``/``cpu_s``: the thread's wall and CPU seconds at work (not waiting for
    keys)."""

    def __init__(self, open_writer, write, finished, buf_keys: int, n_bufs: int = 4):
        self._open, self._write, self._finished = open_writer, write, finished
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(n_bufs):
            self._free.put(np.empty(buf_keys, dtype=np.uint64))
        self._todo: queue.SimpleQueue = queue.SimpleQueue()
        self._writers: dict = {}
        self._stop = False
        self.busy_s = self.cpu_s = 0.0
        self.thread = Worker(self._run, "seenstore-run-sink")

    @property
    def error(self) -> BaseException | None:
        """The error that ended the sink's thread, if any."""
        return self.thread.error

    def put(self, shard: int, keys: np.ndarray) -> None:
        """Queue ``keys`` (sorted, above the shard's keys put so far) for ``shard``'s
        run; copies them, so the caller may reuse its array once this returns."""
        at = 0
        while at < len(keys):
            buf = self._take()
            n = min(len(buf), len(keys) - at)
            buf[:n] = keys[at:at + n]
            self._todo.put((shard, buf, n))
            at += n

    def end(self, shard: int) -> None:
        """No more keys for ``shard``: its run is finished once its keys are written."""
        self._todo.put((shard, None, 0))

    def close(self) -> None:
        """Wait until every queued item is done; raise the thread's error if any."""
        self._todo.put(None)
        self.thread.join()

    def abort(self) -> None:
        """Stop (dropping what is queued) and wait for the thread; never raises."""
        self._stop = True
        self._todo.put(None)
        self.thread.join(raise_error=False)

    def _take(self) -> np.ndarray:
        while True:
            if self.error is not None:
                raise self.error
            try:
                return self._free.get(timeout=WAIT_S)
            except queue.Empty:
                if not self.thread.is_alive():
                    self.thread.join()  # its error, if it ended on one
                    raise RuntimeError("the run writer thread has ended") from None

    def _run(self) -> None:
        """The sink's thread: items in order until ``None``; an error ends it."""
        while True:
            item = self._todo.get()
            if item is None:
                return
            shard, buf, n = item
            t, c = time.perf_counter(), time.thread_time()
            try:
                if self._stop:
                    continue
                if buf is None:
                    w = self._writers.pop(shard, None)
                    if w is not None:
                        self._finished(shard, w)
                    continue
                w = self._writers.get(shard)
                if w is None:
                    w = self._writers[shard] = self._open(shard)
                self._write(shard, w, buf[:n])
            finally:
                if buf is not None:
                    self._free.put(buf)
                self.busy_s += time.perf_counter() - t
                self.cpu_s += time.thread_time() - c
