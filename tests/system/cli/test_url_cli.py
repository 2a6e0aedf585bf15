"""The URL commands: normalise, fingerprint, add (through click's runner)."""

import numpy as np
from click.testing import CliRunner

from seenstore.cli import main
from seenstore.url.fingerprint import fingerprint
from seenstore.layout import Layout
from seenstore.store import SeenStore

LINES = [
    "HTTP://Example.COM:80/a/./b#frag",
    "ftp://example.com/",
    "relative/path",
    "http://example.com/a/b",
    "http://example.com/\x01",
    "https://www.example.com/?utm_source=x&b=2&a=1",
]
TEXT = "\n".join(LINES) + "\n"


def run(args, stdin=None):
    result = CliRunner().invoke(main, args, input=stdin, catch_exceptions=False)
    return result


def test_normalise_args_and_stdin_align_with_input():
    r = run(["normalise", "-"], TEXT)
    assert r.exit_code == 0
    assert r.stdout.splitlines() == [
        "http://example.com/a/b",
        "# rejected: scheme",
        "# rejected: unparsable",
        "http://example.com/a/b",
        "# rejected: control-char",
        "https://www.example.com/?utm_source=x&b=2&a=1",
    ]
    assert "rejected 3 (control-char 1, scheme 1, unparsable 1)" in r.stderr
    r2 = run(["normalise", "HTTP://X.com:80", "mailto:a@b"])
    assert r2.stdout.splitlines() == ["http://x.com/", "# rejected: scheme"]


def test_normalise_base_policy_and_max_length(tmp_path):
    pol = tmp_path / "p.toml"
    pol.write_text('version = "1"\n[[rule]]\nhosts = ["example.com"]\n'
                   'strip_tracking = true\nsort_query = true\nstrip_www = true\n')
    r = run(["normalise", "--base", "http://h.test/d/", "--policy", str(pol), "-"], TEXT)
    out = r.stdout.splitlines()
    assert out[2] == "http://h.test/d/relative/path"
    assert out[5] == "https://example.com/?a=1&b=2"
    r = run(["normalise", "--max-length", "20", "http://example.com/abc"])
    assert r.stdout == "# rejected: too-long\n"


def test_invalid_utf8_line_is_a_rejection_not_a_crash():
    r = CliRunner().invoke(main, ["normalise"], input=b"http://a.com/\xff\nhttp://b.com\r\n")
    assert r.exit_code == 0
    assert r.stdout.splitlines() == ["# rejected: encoding", "http://b.com/"]


def test_bad_options_are_one_line_errors(tmp_path):
    r = CliRunner().invoke(main, ["normalise", "--base", "nope", "x"])
    assert r.exit_code == 3 and "invalid base URL" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("version = 1\n[[rule]]\nhosts = ['www.x.com']\n")
    r = CliRunner().invoke(main, ["normalise", "--policy", str(bad), "x"])
    assert r.exit_code == 3 and "bad.toml" in r.stderr and "www." in r.stderr


def test_fingerprint_prints_hex_keys():
    r = run(["fingerprint", "-"], TEXT)
    out = r.stdout.splitlines()
    assert out[0] == f"{fingerprint('http://example.com/a/b'):016x}" == out[3]
    assert out[1] == "# rejected: scheme"
    r = run(["fingerprint", "--host-bits", "0", "--with-url", "http://A.com"])
    key, url = r.stdout.rstrip("\n").split("\t")
    assert url == "http://a.com/" and int(key, 16) == fingerprint(url, Layout(host_bits=0))
    assert len(key) == 16


def test_add_prints_only_new_urls_and_is_durable(tmp_path):
    store = str(tmp_path / "st")
    src = tmp_path / "urls.txt"
    src.write_text(TEXT + "\n\nhttp://example.com:80/a/b#again\nhttp://new.com/\n")
    r = run(["add", str(src), "--store", store, "--batch-lines", "3"])
    assert r.exit_code == 0
    assert r.stdout.splitlines() == [
        "http://example.com/a/b",
        "https://www.example.com/?utm_source=x&b=2&a=1",
        "http://new.com/",
    ]
    assert "read 8, new 3, seen 2, rejected 3" in r.stderr
    r = run(["add", "-", "--store", store], "http://new.com/\nhttp://newer.com/#x\n")
    assert r.stdout == "http://newer.com/\n"
    with SeenStore.open(store, readonly=True) as s:
        assert s.policy_id == "safe-v1"
        keys = np.array([fingerprint("http://newer.com/"), fingerprint("http://zzz.com/")],
                        dtype=np.uint64)
        assert s.contains(keys).tolist() == [True, False]
        assert len(s) == 4


def test_add_refuses_another_policy(tmp_path):
    store = str(tmp_path / "st")
    assert run(["add", "-", "--store", store], "http://a.com/\n").exit_code == 0
    pol = tmp_path / "p.toml"
    pol.write_text('version = "v9"\n[[rule]]\nhosts = ["*"]\nsort_query = true\n')
    r = CliRunner().invoke(main, ["add", "-", "--store", store, "--policy", str(pol)],
                           input="http://a.com/?b&a\n")
    assert r.exit_code == 3
    assert "safe-v1" in r.stderr and "v9:" in r.stderr and r.stdout == ""


def test_add_with_policy_and_base(tmp_path):
    store = str(tmp_path / "st")
    pol = tmp_path / "p.toml"
    pol.write_text('version = "v9"\n[[rule]]\nhosts = ["*"]\nsort_query = true\n')
    r = run(["add", "-", "--store", store, "--policy", str(pol), "--base", "http://h.com/",
             "--scalar"], "x?b&a\n/x?a&b\nhttp://H.COM/x?a&b#f\n")
    assert r.stdout == "http://h.com/x?a&b\n"
    with SeenStore.open(store, readonly=True) as s:
        assert s.policy_id.startswith("v9:")


def test_a_long_stream_is_normalised_in_chunks_that_take_the_kernels(monkeypatch):
    """``normalise``/``fingerprint`` read stdin in chunks of at least dispatch.SMALL
    lines: smaller chunks of a long stream each took the scalar path (a chunk below
    SMALL runs the kernels' twins while no kernel is loaded: 1e6 lines took 13 s)."""
    from seenstore.kernels import dispatch
    from seenstore.cli import url_cmds

    sizes = []
    real = url_cmds.normalise_many
    monkeypatch.setattr(url_cmds, "normalise_many",
                        lambda chunk, *a, **k: sizes.append(len(chunk)) or real(chunk, *a, **k))
    monkeypatch.setattr(dispatch, "SMALL", url_cmds._CHUNK + 1000)
    lines = [f"http://h{i % 7}.test/p{i}" for i in range(url_cmds._CHUNK + 1500)]
    out = run(["normalise", "-"], stdin="\n".join(lines) + "\n").output.splitlines()
    assert sizes == [url_cmds._CHUNK + 1000, 500]
    assert out[:2] == ["http://h0.test/p0", "http://h1.test/p1"] and len(out) == len(lines)
