"""Start a real ``seenstore serve`` subprocess on 127.0.0.1 for the serve tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from conftest import REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict:
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, *sys.path]))
    # small requests take the numpy twins: a server starts in about a second
    e["SEENSTORE_JIT_MIN"] = "100000"
    return e


class ServerProc:
    """``seenstore serve --store STORE --listen 127.0.0.1:PORT --create ARGS``."""

    def __init__(self, store, *args: str, port: int = 0):
        self.store = str(store)
        self.args = args
        self.port = port
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self, timeout: float = 60) -> "ServerProc":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "seenstore.cli", "serve", "--store", self.store, "--create",
             "--listen", f"127.0.0.1:{self.port}", *self.args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
        line = self.proc.stdout.readline()
        if "serving" not in line:
            self.proc.kill()
            raise AssertionError(f"server did not start: {line!r} {self.proc.stderr.read()}")
        self.url = line.split(" on ")[-1].strip()
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    def stop(self, sig=signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.stderr = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        self.proc = None
        return rc

    def __enter__(self) -> "ServerProc":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop(signal.SIGKILL)


def wait_until(cond, timeout: float = 30.0, step: float = 0.01) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return False
