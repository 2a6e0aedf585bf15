"""Delivering what a commit produced (new keys, new URLs) without losing any.

An ``Output`` is opened and checked before the first commit (a path: a temporary
file beside it, renamed into place when complete; stdout: refused if its reader
has gone). If writing fails after a commit, the committed results its reader did
not read are saved to a recovery file in the store directory
(``undelivered-<UTC time>-<pid>.bin`` or ``.txt``, docs/format.md) and
``UndeliveredError`` says how many and where: at-least-once delivery (a key or
line cut mid-write is saved too, so a consumer may see it in both places). When
stdout is a pipe, "not read" includes what still sits in the pipe when its reader
goes away: ``FIONREAD`` on the pipe says how many bytes that is, and the last
bytes written (a pipe's capacity of them) say which items. The reader's going is
noticed by a failed write, by ``check()`` before each commit and by ``finish()``
at the end, which waits while the reader drains the pipe. ``save_recovery``
writes a recovery file; ``recovery_files`` lists them (``seenstore replay``).
"""

from __future__ import annotations

import errno
import fcntl
import glob
import io
import os
import select
import stat
import struct
import sys
import termios
import time
from collections.abc import Callable, Iterable

from seenstore.errors import StoreIOError, UndeliveredError

_POLL_GONE = select.POLLERR | select.POLLHUP | getattr(select, "POLLNVAL", 0)
_F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)  # Linux
PATIENCE = 1.0  # seconds finish() waits for a reader that reads nothing more
_GONE = OSError(errno.EPIPE, "the reader of stdout has gone")


class Output:
    """``target``: a path, or ``'-'`` for stdout. ``record``: bytes per item (8 for
    raw keys) or 0 for newline-terminated lines. ``what`` names the items."""

    def __init__(self, target: str, store_dir: str, record: int, what: str) -> None:
        self.target, self.store_dir, self.record, self.what = target, store_dir, record, what
        self.fd: int | None = None
        self.stream = None  # stdout without a file descriptor (tests capturing it)
        self.tmp: str | None = None
        self.delivered = 0
        self.pipe = 0  # stdout is a pipe: its capacity in bytes (else 0)
        self.tail = b""  # a pipe's last bytes written, at most 2 capacities of them
        # what else a rescue saves after the bytes not delivered (seenstore replay:
        # the rest of its files); called once, at the rescue
        self.remainder: Callable[[], Iterable[bytes]] | None = None

    # ------------------------------------------------------------- before commit
    def open(self) -> "Output":
        """Open the output; raise StoreIOError (nothing committed yet) if unusable."""
        if self.target == "-":
            sys.stdout.flush()
            try:
                self.fd = sys.stdout.fileno()
            except (AttributeError, ValueError, io.UnsupportedOperation):  # captured stdout
                self.stream = sys.stdout.buffer
            if self.fd is not None and stat.S_ISFIFO(os.fstat(self.fd).st_mode):
                try:
                    self.pipe = fcntl.fcntl(self.fd, _F_GETPIPE_SZ)
                except OSError:
                    self.pipe = 1 << 20  # Linux's default pipe-max-size
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
        """Raise if stdout's reader has gone (a closed pipe): called before each commit,
        so a batch is not committed for nobody. Committed items left unread in the
        pipe are saved first (UndeliveredError); with none, StoreIOError."""
        if self.gone():
            self._rescue(b"", 0, _GONE, "; the next batch was not committed")
            raise StoreIOError("output closed (the reader of stdout has gone); the "
                               "batch was not committed")

    def gone(self, timeout: float = 0.0) -> bool:
        """Whether stdout's reader has gone, waiting up to ``timeout`` seconds for it."""
        if self.target != "-" or self.fd is None:
            return False
        p = select.poll()
        p.register(self.fd, 0)  # errors only: a pipe's write end reports POLLERR
        return any(ev & _POLL_GONE for _, ev in p.poll(int(timeout * 1000)))

    def unread(self) -> int:
        """Bytes written to stdout (a pipe) that its reader has not read yet."""
        if not self.pipe:
            return 0
        try:
            return struct.unpack("i", fcntl.ioctl(self.fd, termios.FIONREAD, b"\0" * 4))[0]
        except OSError:
            return 0

    def finish(self, patience: float | None = PATIENCE) -> None:
        """At the end, wait while stdout's reader reads what is left in the pipe: until
        it is empty, or the reader reads nothing for ``patience`` seconds (None: no
        limit; the bytes stay in the pipe for it), or the reader goes away (the items
        it did not read are saved: UndeliveredError)."""
        left = self.unread()
        quiet_since = time.monotonic()
        while left:
            if self.gone(0.02):
                self._rescue(b"", 0, _GONE)
            now, was = time.monotonic(), left
            left = self.unread()
            if left < was:
                quiet_since = now
            elif patience is not None and now - quiet_since >= patience:
                return

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
            self._rescue(view, done, e)
        if self.pipe:
            self._keep(view)
        self.delivered += self._count(view)

    def _keep(self, view) -> None:
        """Keep the last bytes written: twice what the pipe holds, so that the start
        of the first line left unread is among them."""
        keep = 2 * self.pipe
        if len(view) >= keep:
            self.tail = bytes(view[len(view) - keep:])
        else:
            self.tail = (self.tail + bytes(view))[-keep:]

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

    def _rescue(self, data, done: int, err: OSError, after: str = "") -> None:
        """Save what was not delivered of ``data`` (``done`` bytes of it accepted, and
        of a pipe what its reader left unread), then raise UndeliveredError; return
        if nothing is undelivered and there is no ``remainder``."""
        # the stream written so far ends with the tail and data[:done]; its last
        # `unread` bytes are still in the pipe
        data = self.tail + bytes(data) if self.tail else bytes(data)
        at = max(0, len(self.tail) + done - self.unread())  # the first byte not read
        cut = at // self.record * self.record if self.record else data.rfind(b"\n", 0, at) + 1
        rest = data[cut:]
        if self.tmp is not None:  # a file output is complete or not at all
            rest, self.delivered = data, 0
            self.abandon()
        more, self.remainder = self.remainder, None
        if more is not None:
            rest = b"".join([rest, *more()])
        if not rest:
            return
        self.tail = b""
        n = self._count(rest)
        try:
            path = save_recovery(self.store_dir, rest, "bin" if self.record else "txt")
        except OSError as e2:
            raise UndeliveredError(
                f"output failed after commit ({err.strerror or err}) and {n:,} committed new "
                f"{self.what} could not be saved either ({e2.strerror or e2}): they are lost"
            ) from None
        if err is _GONE:
            raise UndeliveredError(f"{_GONE.strerror}: {n:,} committed new {self.what} it did "
                                   f"not read saved in {path}{after}") from None
        why = err.strerror or errno.errorcode.get(err.errno or 0, str(err))
        raise UndeliveredError(
            f"output failed after commit ({why}: {self.target if self.target != '-' else 'stdout'})"
            f": {n:,} committed new {self.what} not delivered, saved in {path}{after}") from None


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


def recovery_files(store_dir: str, ext: str) -> list[str]:
    """The complete recovery files ``undelivered-*.<ext>`` of a store directory,
    oldest first (by the UTC time in their names, then pid and number)."""
    return sorted(glob.glob(os.path.join(glob.escape(store_dir), f"undelivered-*.{ext}")))
