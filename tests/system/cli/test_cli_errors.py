"""Every command's error paths, table-driven: one line `seenstore: error: ...` on stderr,
the documented exit code, no traceback, and under --json one JSON object with the error,
its kind and the exit code (issue 11.3; before: click's 4-line usage block for a missing
argument, `--keys 0` exit 3 against `--keys abc` exit 2, `stats` suggesting create=True,
`verify --json` on a corrupt store printing no JSON)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from seenstore.cli import main
from seenstore.store import SeenStore


def one_line_error(stderr: str) -> bool:
    lines = stderr.strip().splitlines()
    return (len(lines) == 1 and lines[0].startswith("seenstore: error: ")
            and "Traceback" not in stderr)


@pytest.fixture
def env(tmp_path):
    """A healthy store, a corrupt store (a run's body flipped), a batch file, a bad policy."""
    keys = tmp_path / "k.bin"
    np.arange(1, 1001, dtype="<u8").tofile(keys)
    good, bad = tmp_path / "good", tmp_path / "bad"
    for store in (good, bad):
        with SeenStore.open(str(store), create=True, sync=False) as st:
            st.add(np.fromfile(keys, dtype="<u8"))
    run = max((bad / n for n in os.listdir(bad) if n.endswith(".run")), key=os.path.getsize)
    with open(run, "r+b") as f:  # its 11th key (the page index after the body is fine)
        f.seek(4096 + 80)
        f.write(b"\xff" * 8)
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"abc")
    pol = tmp_path / "p.toml"
    pol.write_text("not toml [[[")
    urls = tmp_path / "u.txt"
    urls.write_text("http://a.test/\n")
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    return {"keys": str(keys), "good": str(good), "bad": str(bad), "odd": str(odd),
            "pol": str(pol), "urls": str(urls), "missing": str(tmp_path / "nowhere"),
            "empty": str(empty_dir), "tmp": str(tmp_path)}


# (args with {placeholders}, exit code, text the message must hold)
CASES = [
    (["merge"], 2, "Missing argument"),
    (["merge", "{keys}", "--store", "{good}", "--wait", "abc"], 2, "--wait"),
    (["merge", "{keys}", "--store", "{good}", "--bloom-capacity", "x"], 2, "--bloom-capacity"),
    (["merge", "{tmp}/none.bin", "--store", "{good}"], 3, "no such batch file"),
    (["merge", "{odd}", "--store", "{good}"], 3, "multiple of 8"),
    (["merge", "{tmp}", "--store", "{good}"], 3, "is a directory"),
    (["merge", "{keys}", "--store", "{missing}", "--no-create"], 3, "no store here"),
    (["merge", "{keys}", "--store", "{good}", "--new-out", "{tmp}/no/dir/new.bin"], 6,
     "nothing was committed"),
    (["merge", "{keys}", "--store", "{bad}", "--no-bloom"], 4, ""),
    (["stats", "--store", "{missing}"], 3, "seenstore merge"),
    (["stats", "--store", "{empty}"], 3, "not a seenstore store"),
    (["verify", "--store", "{bad}"], 4, ""),
    (["verify", "--store", "{missing}"], 3, "no store here"),
    (["add", "{tmp}/none.txt", "--store", "{good}"], 2, "does not exist"),
    (["add", "{urls}", "--store", "{good}", "--policy", "{pol}"], 3, ""),
    (["add", "{urls}", "--store", "{good}", "--base", "nope"], 3, ""),
    (["normalise", "--base", "nope", "x"], 3, ""),
    (["fingerprint", "--host-bits", "99", "x"], 2, "--host-bits"),
    (["bench", "--keys", "abc"], 2, "--keys"),
    (["bench", "--keys", "0"], 2, "at least 1"),
    (["bench", "--batch", "0"], 2, "at least 1"),
    (["no-such-command"], 2, "No such command"),
    (["merge", "--no-such-option", "{keys}"], 2, "No such option"),
]
JSON_COMMANDS = {"merge", "stats", "verify", "bench"}


def _run(args, env):
    return CliRunner().invoke(main, [a.format(**env) for a in args])


@pytest.mark.parametrize("args,code,text", CASES,
                         ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_error_is_one_line_with_the_documented_code(env, args, code, text):
    r = _run(args, env)
    assert r.exit_code == code, (r.stdout, r.stderr)
    assert one_line_error(r.stderr), r.stderr
    assert text in r.stderr and "create=True" not in r.stderr
    if args[0] in JSON_COMMANDS and "--help" not in args:
        r = _run(args + ["--json"], env)
        assert r.exit_code == code and one_line_error(r.stderr)
        doc = json.loads(r.stdout)  # one JSON object, even on failure
        assert doc["exit_code"] == code and doc["kind"] and doc["error"] in r.stderr


def test_locked_store_is_exit_5_and_json(env):
    with SeenStore.open(env["good"]):
        r = _run(["merge", "{keys}", "--store", "{good}", "--json"], env)
    assert r.exit_code == 5 and one_line_error(r.stderr)
    assert json.loads(r.stdout)["kind"] == "LockedError"


def test_verify_json_on_a_corrupt_store_prints_json(env):
    r = _run(["verify", "--store", "{bad}", "--json"], env)
    doc = json.loads(r.stdout)
    assert r.exit_code == 4 and doc["kind"] == "CorruptionError" and doc["exit_code"] == 4


def test_help_and_version_still_exit_0(env):
    assert _run(["merge", "--help"], env).exit_code == 0
    assert _run(["--version"], env).exit_code == 0
