"""One writer at a time: an OS advisory lock (flock) on the store's LOCK file.

The holder writes who it is (pid, host, command, time) into the file, so a
second writer's error names the holder. The OS drops the lock when the holder
dies, kill -9 included, so a stale LOCK file never blocks anyone.
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
import time

from seenstore.errors import LockedError, StoreIOError

NAME = "LOCK"


class WriterLock:
    def __init__(self, directory: str, wait: float = 0.0):
        """Take the lock or raise LockedError. ``wait``: seconds to keep trying
        (0 = fail at once, None = wait forever)."""
        self.path = os.path.join(directory, NAME)
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StoreIOError(f"{self.path}: cannot open lock file: {e.strerror}") from e
        deadline = None if wait is None else time.monotonic() + wait
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    holder = self._holder()
                    os.close(self._fd)
                    raise LockedError(
                        f"store {directory} is locked by another writer ({holder})"
                        + (f"; waited {wait:g}s" if wait else "; use --wait to wait for it"))
                time.sleep(0.05)
        command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))
        who = (f"pid {os.getpid()} on {socket.gethostname()}, '{command[:200]}', "
               f"since {time.strftime('%Y-%m-%d %H:%M:%S')}")
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, who.encode("utf-8", "replace"), 0)

    def _holder(self) -> str:
        try:
            text = os.pread(self._fd, 4096, 0).decode("utf-8", "replace").strip()
        except OSError:
            text = ""
        return text or "holder unknown"

    def release(self) -> None:
        if self._fd >= 0:
            try:
                os.ftruncate(self._fd, 0)
            except OSError:
                pass
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = -1
