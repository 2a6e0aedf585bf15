"""Delivering what a commit produced (new keys, new URLs) without losing any.

An ``Output`` is opened and checked before the first commit (a path: a temporary
file beside it, renamed into place when complete; stdout: refused if its reader
has gone). If writing fails after a commit, the committed results not yet accepted
by the operating system are saved to a recovery file in the store directory
(``undelivered-<UTC time>-<pid>.bin`` or ``.txt``, docs/format.md) and
``UndeliveredError`` says how many and where: at-least-once delivery (a key or
line cut mid-write is saved too, so a consumer may see it in both places).
"""

from __future__ import annotations

import errno
import io
import os
import select
import sys
import time

from seenstore.errors import StoreIOError, UndeliveredError

_POLL_GONE = select.POLLERR | select.POLLHUP | getattr(select, "POLLNVAL", 0)


class Output:
    """``target``: a path, or ``'-'`` for stdout. ``record``: bytes per item (8 for
    raw keys) or 0 for newline-terminated lines. ``what`` names the items."""

    def __init__(self, target: str, store_dir: str, record: int, what: str) -> None:
        self.target, self.store_dir, self.record, self.what = target, store_dir, record, what
        self.fd: int | None = None
        self.stream = None  # stdout without a file descriptor (tests capturing it)
        self.tmp: str | None = None
        self.delivered = 0

    # ------------------------------------------------------------- before commit
    def open(self) -> "Output":
        """Open the output; raise StoreIOError (nothing committed yet) if unusable."""
        if self.target == "-":
            sys.stdout.flush()
            try:
                self.fd = sys.stdout.fileno()
            except (AttributeError, ValueError, io.UnsupportedOperation):  # captured stdout
                self.stream = sys.stdout.buffer
            self.check()
            return self
        folder = os.path.dirname(os.path.abspath(self.target)) or "."
        if os.path.isdir(self.target):
            raise StoreIOError(f"{self.target}: is a directory; nothing was committed")
        self.tmp = os.path.join(folder, f".{os.path.basename(self.target)}.{os.getpid()}.tmp")
        try:
            self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            raise StoreIOError(f"cannot write {self.target}: {e.strerror}; nothing was "
                               "committed") from None
        return self

    def check(self) -> None:
        """Raise StoreIOError if stdout's reader has gone (a closed pipe): called before
        each commit, so a batch is not committed for nobody."""
        if self.target != "-" or self.fd is None:
            return
        p = select.poll()
        p.register(self.fd, select.POLLOUT)
        for _, ev in p.poll(0):
            if ev & _POLL_GONE:
                raise StoreIOError("output closed (the reader of stdout has gone); the "
                                   "batch was not committed")

    # -------------------------------------------------------------- after commit
    def send(self, data: bytes | memoryview) -> None:
        """Write ``data`` (whole items) completely, or save what was not accepted to a
        recovery file and raise UndeliveredError."""
        view = memoryview(data)
        done = 0
        try:
            if self.fd is None:
                self.stream.write(view)
                self.stream.flush()
                done = len(view)
            while done < len(view):
                done += os.write(self.fd, view[done:done + (1 << 24)])
        except OSError as e:
            self._rescue(bytes(view), done, e)
        self.delivered += self._count(view)

    def close(self) -> None:
        """Finish a file output (fsync, rename into place); a failure here still
        saves the whole of its content."""
        if self.tmp is None or self.fd is None:
            return
        try:
            os.fsync(self.fd)
            fd, self.fd = self.fd, None
            os.close(fd)
            os.replace(self.tmp, self.target)
        except OSError as e:
            with open(self.tmp, "rb") as f:
                data = f.read()
            self._rescue(data, 0, e)
        self.tmp = None

    def abandon(self) -> None:
        """Remove the temporary file of an output nothing was committed for."""
        if self.tmp is not None:
            fd, self.fd = self.fd, None
            for step in (lambda: fd is not None and os.close(fd), lambda: os.unlink(self.tmp)):
                try:
                    step()
                except OSError:
                    pass
            self.tmp = None

    # ------------------------------------------------------------------ helpers
    def _count(self, data) -> int:
        return len(data) // self.record if self.record else bytes(data).count(b"\n")

    def _rescue(self, data: bytes, done: int, err: OSError) -> None:
        cut = done // self.record * self.record if self.record else data.rfind(b"\n", 0, done) + 1
        rest = data[cut:]
        if self.tmp is not None:  # a file output is complete or not at all
            rest, self.delivered = data, 0
            self.abandon()
        n = self._count(rest)
        try:
            path = save_recovery(self.store_dir, rest, "bin" if self.record else "txt")
        except OSError as e2:
            raise UndeliveredError(
                f"output failed after commit ({err.strerror or err}) and {n:,} committed new "
                f"{self.what} could not be saved either ({e2.strerror or e2}): they are lost"
            ) from None
        why = err.strerror or errno.errorcode.get(err.errno or 0, str(err))
        raise UndeliveredError(
            f"output failed after commit ({why}: {self.target if self.target != '-' else 'stdout'})"
            f": {n:,} committed new {self.what} not delivered, saved in {path}") from None


def save_recovery(store_dir: str, data: bytes, ext: str) -> str:
    """Write ``data`` to ``undelivered-<UTC>-<pid>.<ext>`` in the store directory
    (write, fsync, rename: a recovery file present is complete); return its path."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = os.path.join(store_dir, f"undelivered-{stamp}-{os.getpid()}.{ext}")
    n = 0
    while os.path.exists(path):
        n += 1
        path = os.path.join(store_dir, f"undelivered-{stamp}-{os.getpid()}-{n}.{ext}")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path
