"""``add --parquet``, the Arrow API, ``check``, ``export`` and ``dump-run``: results,
read-only use beside a writer, and bad input (one-line errors, exit codes)."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest
from clirun import cli_bytes

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

from seenstore.cli.integration_cmds import host_range  # noqa: E402
from seenstore.url.fastpath import normalise_urls  # noqa: E402
from seenstore.url.fingerprint import fingerprint_many  # noqa: E402
from seenstore.integrations.arrow import admit_arrow, buffer_from_arrow  # noqa: E402
from seenstore.layout import DEFAULT_LAYOUT  # noqa: E402
from seenstore.store import SeenStore  # noqa: E402
from naive import uniq

URLS = ["http://A.test/x", "http://a.test:80/x#f", "http://b.test/%7euser", "ftp://c.test/",
        "rel/page", "http://b.test/~user", None, "https://c.test/q?b=1&a=2"]
BASES = [None, None, None, None, "http://base.test/dir/", None, None, None]


_cli = cli_bytes


def _one_line_error(r, code: int, text: bytes) -> None:
    err = r.stderr.decode().strip().splitlines()
    assert r.returncode == code, r.stderr
    assert len(err) == 1 and err[0].startswith("seenstore: error: "), r.stderr
    assert text in r.stderr


def test_arrow_buffer_is_zero_copy_and_matches_the_list_path():
    arr = pa.array(URLS, type=pa.string())
    ub = buffer_from_arrow(arr, pa.array(BASES, type=pa.string()))
    assert ub.strs is None  # no Python object per URL
    dense = pa.array([u for u in URLS if u])  # no nulls: the buffer is Arrow's own bytes
    assert np.shares_memory(buffer_from_arrow(dense).data,
                            np.frombuffer(dense.buffers()[2], dtype=np.uint8))
    from seenstore.url.fastpath import normalise_buffer

    fb = normalise_buffer(ub)
    expect = [normalise_urls([u or ""], b).urls for u, b in zip(URLS, BASES)]
    assert fb.urls == [u for e in expect for u in e]
    assert fb.urls[3] == "http://base.test/dir/rel/page"
    big = pa.chunked_array([arr.slice(2), pa.array(URLS[:3])])  # sliced, two chunks
    assert buffer_from_arrow(big).tolist()[:2] == ["http://b.test/%7euser", "ftp://c.test/"]
    binary = pa.array([u.encode() for u in URLS[:3]], type=pa.large_binary())
    assert buffer_from_arrow(binary).tolist() == URLS[:3]


def test_admit_arrow_into_a_store(tmp_path):
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False) as store:
        fb, mask = admit_arrow(store, pa.array(URLS))
        assert fb.lines(mask).decode().splitlines() == [
            "http://a.test/x", "http://b.test/~user", "https://c.test/q?b=1&a=2"]
        _, again = admit_arrow(store, pa.array(URLS))
        assert not again.any()


def _parquet(path, **cols):
    pq.write_table(pa.table(cols), path)
    return str(path)


def test_add_parquet_equals_add_from_text(tmp_path):
    urls = [f"http://H{i % 7}.test/p{i % 70}?a={i % 2}" for i in range(500)] + ["bad url"]
    pf = _parquet(tmp_path / "u.parquet", url=urls, n=list(range(len(urls))))
    txt = tmp_path / "u.txt"
    txt.write_text("\n".join(urls) + "\n")
    a = _cli("add", "--store", str(tmp_path / "a"), "--parquet", pf, "--column", "url",
             "--batch-lines", "128")
    b = _cli("add", "--store", str(tmp_path / "b"), str(txt))
    assert a.stdout == b.stdout and len(a.stdout.splitlines()) == 70
    assert a.stderr.splitlines()[-1] == b.stderr.splitlines()[-1]
    base = _parquet(tmp_path / "b.parquet", href=["x", "../y", "http://o.test/"],
                    page=["http://p.test/a/b", "http://p.test/a/b", None])
    r = _cli("add", "--store", str(tmp_path / "c"), "--parquet", base, "--column", "href",
             "--base-column", "page")
    assert r.stdout.decode().splitlines() == ["http://p.test/a/x", "http://p.test/y",
                                              "http://o.test/"]
    r = _cli("add", "--store", str(tmp_path / "d"), "--parquet", base, "--column", "href",
             "--base", "http://q.test/z/")
    assert r.stdout.decode().splitlines() == ["http://q.test/z/x", "http://q.test/y",
                                              "http://o.test/"]


def test_add_parquet_bad_input(tmp_path):
    s = str(tmp_path / "s")
    pf = _parquet(tmp_path / "u.parquet", url=["http://a.test/"], n=[1])
    _one_line_error(_cli("add", "--store", s, "--parquet", pf, "--column", "nope",
                         check=False), 3, b"no column 'nope' (columns: url, n)")
    _one_line_error(_cli("add", "--store", s, "--parquet", pf, "--column", "n", check=False),
                    3, b"has type int64, not a string column")
    _one_line_error(_cli("add", "--store", s, "--parquet", pf, "--base-column", "n",
                         check=False), 3, b"not a string column")
    empty = tmp_path / "empty.parquet"
    empty.write_bytes(b"")
    _one_line_error(_cli("add", "--store", s, "--parquet", str(empty), check=False), 3,
                    b"not a Parquet file")
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1" + os.urandom(3000) + b"PAR1")
    _one_line_error(_cli("add", "--store", s, "--parquet", str(junk), check=False), 3,
                    b"junk.parquet")
    no_rows = _parquet(tmp_path / "none.parquet", url=pa.array([], pa.string()))
    r = _cli("add", "--store", s, "--parquet", no_rows)
    assert r.stdout == b"" and b"read 0, new 0" in r.stderr
    _one_line_error(_cli("add", "--store", s, "--parquet", "--warc", pf, check=False), 2,
                    b"do not go together")


def test_check_reports_without_admitting_and_beside_a_writer(tmp_path):
    s = str(tmp_path / "s")
    _cli("add", "--store", s, "-", stdin=b"http://a.test/x\nhttp://b.test/~u\n")
    gen_before = json.loads(_cli("stats", "--store", s, "--json").stdout)["generation"]
    with SeenStore.open(s):  # a writer holds the lock: check still runs (read-only)
        r = _cli("check", "--store", s, "HTTP://A.test:80/x#y", "http://c.test/", "ftp://x/")
    assert r.stdout.decode().splitlines() == ["seen\thttp://a.test/x", "new\thttp://c.test/",
                                              "rejected\tftp://x/\tscheme"]
    assert b"1 seen, 1 new, 1 rejected" in r.stderr
    r = _cli("check", "--store", s, "--json", "--seen-only", "-",
             stdin=b"http://b.test/%7Eu\nhttp://c.test/\n")
    (line,) = r.stdout.decode().splitlines()
    assert json.loads(line)["canonical"] == "http://b.test/~u" and json.loads(line)["seen"]
    assert json.loads(r.stderr) == {"seen": 1, "new": 1, "rejected": 0}
    keys = fingerprint_many(["http://a.test/x", "http://z.test/"], DEFAULT_LAYOUT)
    kf = tmp_path / "k.bin"
    kf.write_bytes(keys.astype("<u8").tobytes())
    r = _cli("check", "--store", s, "--keys", str(kf))
    assert r.stdout.decode().splitlines() == [f"seen\t{keys[0]:016x}", f"new\t{keys[1]:016x}"]
    assert json.loads(_cli("stats", "--store", s, "--json").stdout)["generation"] == gen_before
    assert json.loads(_cli("stats", "--store", s, "--json").stdout)["keys"] == 2
    kf.write_bytes(b"123")
    _one_line_error(_cli("check", "--store", s, "--keys", str(kf), check=False), 3,
                    b"not a multiple of 8")
    _one_line_error(_cli("check", "--store", str(tmp_path / "none"), "http://a.test/",
                         check=False), 3, b"no store here")


def test_export_all_and_one_host_and_dump_run(tmp_path):
    s = str(tmp_path / "s")
    urls = [f"http://h{i % 5}.test/p{i}" for i in range(2000)]
    _cli("add", "--store", s, "-", stdin="\n".join(urls).encode())
    keys = np.sort(fingerprint_many(urls, DEFAULT_LAYOUT))
    out = tmp_path / "all.bin"
    r = _cli("export", "--store", s, "-o", str(out), "--json")
    assert np.array_equal(np.frombuffer(out.read_bytes(), "<u8"), keys)
    assert json.loads(r.stderr)["keys"] == 2000
    raw = _cli("export", "--store", s, "--host", "H3.test").stdout
    h3 = np.sort(fingerprint_many(urls[3::5], DEFAULT_LAYOUT))
    assert np.array_equal(np.frombuffer(raw, "<u8"), h3)
    lo, hi = host_range("h3.test", DEFAULT_LAYOUT)
    assert all(lo <= k < hi for k in h3.tolist())
    pqf = tmp_path / "k.parquet"
    _cli("export", "--store", s, "--format", "parquet", "-o", str(pqf), "--host", "h1.test")
    t = pq.read_table(pqf)
    assert t.schema.field("key").type == pa.uint64()
    assert t.column("key").to_numpy().tolist() == np.sort(
        fingerprint_many(urls[1::5], DEFAULT_LAYOUT)).tolist()
    _one_line_error(_cli("export", "--store", s, "--host", "a/b", check=False), 3,
                    b"not a host name")

    run = sorted(glob.glob(os.path.join(s, "*.run")) + glob.glob(os.path.join(s, "run*")))
    assert run, os.listdir(s)
    doc = json.loads(_cli("dump-run", run[0], "-n", "3", "--verify", "--json").stdout)
    assert doc["format"] == "1.1" and doc["pages"] >= 1 and doc["verified"] and len(doc["first_keys"]) <= 3
    assert [int(k, 16) for k in doc["first_keys"]] == sorted(int(k, 16) for k in
                                                             doc["first_keys"])
    text = _cli("dump-run", run[0]).stdout.decode()
    assert "count:" in text and "host_bits: 20" in text
    junk = tmp_path / "junk.run"
    junk.write_bytes(os.urandom(5000))
    _one_line_error(_cli("dump-run", str(junk), check=False), 4, b"not a seenstore run file")
    bad = tmp_path / "bad.run"
    data = bytearray(open(run[0], "rb").read())
    data[20] ^= 0xFF
    bad.write_bytes(bytes(data))
    _one_line_error(_cli("dump-run", str(bad), check=False), 4, b"checksum mismatch")
    for cmd in ("check", "export", "dump-run"):
        assert _cli(cmd, "--help").returncode == 0


def test_dump_run_reads_compressed_runs(tmp_path):
    """A 2.0 (compressed) run: header with its codec and blocks, the first keys decoded
    from the first block(s) only, --verify decodes and checks every block; a damaged
    block is refused (exit 4) under --verify."""
    from seenstore.store import SeenStore

    keys = uniq(np.random.default_rng(5).integers(0, 2**64, 20_000, dtype=np.uint64))
    s = str(tmp_path / "s")
    with SeenStore.open(s, create=True, sync=False, bloom=False, run_format=2,
                        shard_bits=0) as st:
        st.add_new(keys)
    run = glob.glob(os.path.join(s, "*.run"))
    assert len(run) == 1
    doc = json.loads(_cli("dump-run", run[0], "-n", "5000", "--verify", "--json").stdout)
    assert doc["format"] == "2.0" and doc["verified"] and doc["count"] == len(keys)
    assert doc["codec"] == "rice" and doc["blocks"] == -(-len(keys) // doc["block_keys"])
    assert doc["bytes_per_key"] < 8
    assert [int(k, 16) for k in doc["first_keys"]] == keys[:5000].tolist()
    text = _cli("dump-run", run[0], "-n", "2").stdout.decode()
    assert "format: 2.0" in text and "block_keys:" in text
    assert text.strip().splitlines()[-1] == f"{int(keys[1]):016x}"
    bad = tmp_path / "bad.run"
    data = bytearray(open(run[0], "rb").read())
    data[4096 + 100] ^= 0xFF  # inside the first block's body
    bad.write_bytes(bytes(data))
    _one_line_error(_cli("dump-run", str(bad), "--verify", check=False), 4, b"bad.run")
