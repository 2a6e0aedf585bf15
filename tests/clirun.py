"""Run the real ``seenstore`` entry point in a subprocess (bytes in, bytes out), with
this checkout first on the path."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO


def cli_bytes(*args: str, stdin: bytes = b"", check: bool = True) -> subprocess.CompletedProcess:
    """Run ``python -m seenstore.cli ARGS``; with ``check``, assert it exited 0."""
    root = REPO
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, *sys.path]))
    r = subprocess.run([sys.executable, "-m", "seenstore.cli", *args], input=stdin,
                       capture_output=True, env=env, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr
    return r
