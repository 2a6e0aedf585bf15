"""The test run keeps no temp folders of passed tests (issue 11.7: a run left ~600 MB
under pytest's temp folder, mostly stores of passed tests). pyproject.toml's pytest
settings keep only failed tests' folders; checked by running a tiny suite with them."""

from __future__ import annotations

import os
import subprocess
import sys
from conftest import REPO



def test_passed_tests_leave_no_temp_files(tmp_path):
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "test_big.py").write_text(
        "def test_writes_a_store(tmp_path):\n"
        "    (tmp_path / 'big.run').write_bytes(bytes(4 << 20))\n"
        "def test_fails(tmp_path):\n"
        "    (tmp_path / 'evidence').write_text('kept')\n"
        "    assert False\n")
    base = tmp_path / "base"
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-c", os.path.join(REPO, "pyproject.toml"), "--rootdir", str(inner),
                        f"--basetemp={base}", str(inner)], capture_output=True, text=True,
                       cwd=str(inner))
    assert "1 failed, 1 passed" in p.stdout, p.stdout + p.stderr
    left = [os.path.join(d, f) for d, _, fs in os.walk(base) for f in fs]
    assert not any(f.endswith("big.run") for f in left), left
    assert any(f.endswith("evidence") for f in left), left  # a failure keeps its evidence
