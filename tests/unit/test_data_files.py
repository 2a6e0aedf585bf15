"""The suite is self-contained: its external data lives in tests/data, pinned by sha256,
and no test reads a file outside the repository (issue 11.1: a bare clone failed at
collection because two tests read ../shared/vectors)."""

from __future__ import annotations

import hashlib
import os
import re
from conftest import DATA, TESTS



def _documented() -> dict[str, str]:
    """File name -> sha256, from tests/data/README.md ('## NAME' ... 'sha256: `HEX`')."""
    text = open(os.path.join(DATA, "README.md"), encoding="utf-8").read()
    return dict(re.findall(r"^## (\S+)\n(?:(?!^## ).)*?sha256: `([0-9a-f]{64})`", text,
                           re.M | re.S))


def test_every_data_file_is_documented_with_its_sha256():
    files = sorted(f for f in os.listdir(DATA) if f != "README.md")
    documented = _documented()
    assert files and sorted(documented) == files
    for name, digest in documented.items():
        with open(os.path.join(DATA, name), "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == digest, name


def test_tests_read_nothing_outside_the_clone():
    outside = re.compile(r"""["']\.\.["']\s*,\s*["']shared|\.\./shared|/work/""")
    offenders = []
    for folder, _, files in os.walk(TESTS):
        for name in sorted(files):
            path = os.path.join(folder, name)
            if name.endswith(".py") and path != os.path.abspath(__file__):
                with open(path, encoding="utf-8") as f:
                    offenders += [f"{path}:{i}" for i, line in enumerate(f, 1)
                                  if outside.search(line)]
    assert offenders == []
