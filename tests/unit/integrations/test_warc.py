"""WARC input: ``seenstore links`` and ``seenstore add --warc`` on WARC files these
tests write with FastWARC (plain and gzipped, with and without <base>, non-HTML
records, truncated and damaged records)."""

from __future__ import annotations

import json
import os

import pytest
from clirun import cli_bytes

pytest.importorskip("fastwarc")
pytest.importorskip("selectolax")

from fastwarc.stream_io import GzipWriter  # noqa: E402
from fastwarc.warc import WarcRecord, WarcRecordType  # noqa: E402

from seenstore.integrations.warc import WarcReport, iter_links  # noqa: E402

PAGE1 = b"""<html><head><link rel="stylesheet" href="/style.css">
<meta name="x" content="y"></head><body>
<a href="b.html">b</a> <a href=" /abs#frag ">abs</a>
<a href="http://other.test/x" rel="nofollow noopener">ext</a>
<map><area href="area.html"></map><iframe src="frame.html"></iframe>
<a>no href</a> <a href="">empty</a> <a href="mailto:x@y.test">mail</a>
</body></html>"""
PAGE2 = b"""<html><head><base href="/sub/dir/"></head><body>
<a href="c.html">c</a><a href="../up.html">up</a><base href="/ignored/">
</body></html>"""
PAGE3 = b"""<html><head><meta name="robots" content="noindex, nofollow"></head>
<body><a href="d.html">d</a></body></html>"""

PAGE1_LINKS = [("http://site.test/dir/p1.html", "/style.css", False),
               ("http://site.test/dir/p1.html", "b.html", False),
               ("http://site.test/dir/p1.html", "/abs#frag", False),
               ("http://site.test/dir/p1.html", "http://other.test/x", True),
               ("http://site.test/dir/p1.html", "area.html", False),
               ("http://site.test/dir/p1.html", "frame.html", False),
               ("http://site.test/dir/p1.html", "mailto:x@y.test", False)]
PAGE2_LINKS = [("http://site.test/sub/dir/", "c.html", False),
               ("http://site.test/sub/dir/", "../up.html", False)]
PAGE3_LINKS = [("http://site.test/p3", "d.html", True)]


def _record(rtype, uri=None, body=b"", ctype="text/html; charset=utf-8") -> WarcRecord:
    r = WarcRecord()
    r.init_headers(rtype)
    if uri is not None:
        r.headers["WARC-Target-URI"] = uri
    if rtype == WarcRecordType.response:
        r.headers["Content-Type"] = "application/http; msgtype=response"
        head = f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
        body = head.encode() + body
    r.set_bytes_content(body)
    return r


def site_records() -> list[WarcRecord]:
    return [
        _record(WarcRecordType.warcinfo, body=b"software: test\r\n"),
        _record(WarcRecordType.request, "http://site.test/dir/p1.html", b"GET /dir/p1.html"),
        _record(WarcRecordType.response, "http://site.test/dir/p1.html", PAGE1),
        _record(WarcRecordType.response, "http://site.test/img.png", b"\x89PNG<a href=x>",
                ctype="image/png"),
        _record(WarcRecordType.response, "http://site.test/sub/page", PAGE2),
        _record(WarcRecordType.response, "http://site.test/p3", PAGE3),
    ]


def write_warc(path, records, gz: bool) -> list[int]:
    """Write ``records`` (one gzip member each when ``gz``); return each record's offset."""
    offsets = []
    with open(path, "wb") as f:
        out = GzipWriter(f) if gz else f
        for r in records:
            if gz:
                out.flush()
            offsets.append(f.tell())
            r.write(out)
            if gz:
                out.finish()
        if gz:
            out.close()
    return offsets


def _links(paths, report=None):
    return [tuple(link) for link in iter_links([str(p) for p in paths], report)]


@pytest.mark.parametrize("gz", [False, True])
def test_links_of_html_responses_only(tmp_path, gz):
    p = tmp_path / ("a.warc.gz" if gz else "a.warc")
    write_warc(p, site_records(), gz)
    report = WarcReport()
    assert _links([p], report) == PAGE1_LINKS + PAGE2_LINKS + PAGE3_LINKS
    assert (report.records, report.html, report.skipped) == (6, 3, 3)
    assert (report.truncated, report.damaged) == (0, 0)
    assert report.nofollow == 2


@pytest.mark.parametrize("gz", [False, True])
def test_truncated_last_record_is_counted_and_the_rest_kept(tmp_path, gz):
    p = tmp_path / "t.warc"
    write_warc(p, site_records(), gz)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) - 40])  # cut into the last record (PAGE3)
    report = WarcReport()
    links = _links([p], report)
    assert links == PAGE1_LINKS + PAGE2_LINKS
    assert report.truncated + report.damaged == 1
    assert report.problems and "t.warc" in report.problems[0]


@pytest.mark.parametrize("gz", [False, True])
def test_damaged_middle_record_is_counted_and_reading_goes_on(tmp_path, gz):
    p = tmp_path / "d.warc"
    offs = write_warc(p, site_records(), gz)
    data = bytearray(p.read_bytes())
    at = offs[3] + 5  # inside the image record's header (or its gzip member)
    data[at: at + 12] = b"\x00\xffGARBAGE\x00\xff\x00"
    p.write_bytes(bytes(data))
    report = WarcReport()
    links = _links([p], report)
    assert links == PAGE1_LINKS + PAGE2_LINKS + PAGE3_LINKS
    assert report.damaged >= 1


def test_garbage_between_records_and_several_files(tmp_path):
    p = tmp_path / "g.warc"
    offs = write_warc(p, site_records(), False)
    data = p.read_bytes()
    p.write_bytes(data[: offs[4]] + b"not a record\r\n\r\n" + data[offs[4]:])
    q = tmp_path / "q.warc.gz"
    write_warc(q, site_records()[4:5], True)
    report = WarcReport()
    assert _links([p, q], report) == PAGE1_LINKS + PAGE2_LINKS + PAGE3_LINKS + PAGE2_LINKS
    assert report.damaged == 1 and report.files == 2


_cli = cli_bytes


def test_links_cli_columns_json_and_add_warc(tmp_path):
    p = tmp_path / "a.warc.gz"
    write_warc(p, site_records(), True)
    out = _cli("links", str(p)).stdout.decode().splitlines()
    assert out[3] == "http://site.test/dir/p1.html\thttp://other.test/x\tnofollow"
    assert out[1] == "http://site.test/dir/p1.html\tb.html"
    assert all(line.count("\t") == 1 for line in _cli("links", "--no-flag", str(p))
               .stdout.decode().splitlines())
    follow = _cli("links", "--follow-only", str(p)).stdout.decode().splitlines()
    assert len(follow) == len(out) - 2
    js = [json.loads(x) for x in _cli("links", "--json", str(p)).stdout.splitlines()]
    assert js[3] == {"base": "http://site.test/dir/p1.html", "href": "http://other.test/x",
                     "nofollow": True}
    r = _cli("links", str(p))
    assert b"3 HTML pages, 3 skipped, 0 truncated, 0 damaged" in r.stderr

    store = str(tmp_path / "store")
    r = _cli("add", "--store", store, "--warc", str(p), str(p))
    new = r.stdout.decode().splitlines()
    assert new == ["http://site.test/style.css", "http://site.test/dir/b.html",
                   "http://site.test/abs", "http://other.test/x",
                   "http://site.test/dir/area.html", "http://site.test/dir/frame.html",
                   "http://site.test/sub/dir/c.html", "http://site.test/sub/up.html",
                   "http://site.test/d.html"]
    assert b"rejected 2 (scheme 2)" in r.stderr  # mailto:, once per file
    assert _cli("add", "--store", store, "--warc", str(p)).stdout == b""
    # the same links through the 'links | add --pairs' pipeline give the same keys
    store2 = str(tmp_path / "store2")
    pairs = _cli("links", "--no-flag", str(p)).stdout
    assert _cli("add", "--store", store2, "--pairs", "-", stdin=pairs).stdout.decode() \
        .splitlines() == new


def test_bad_input_one_line_errors(tmp_path):
    garbage = tmp_path / "garbage.warc"
    garbage.write_bytes(os.urandom(5000).replace(b"WARC/", b"xxxxx"))
    r = _cli("links", str(garbage), check=False)
    assert r.returncode == 3
    assert r.stderr.decode().strip().splitlines()[-1].startswith("seenstore: error: ")
    assert b"not a WARC file" in r.stderr and b"Traceback" not in r.stderr
    r = _cli("links", str(tmp_path / "missing.warc"), check=False)
    assert r.returncode == 3 and b"no such file" in r.stderr
    empty = tmp_path / "empty.warc"
    empty.write_bytes(b"")
    r = _cli("links", str(empty))
    assert r.stdout == b"" and b"0 records" in r.stderr
    r = _cli("add", "--store", str(tmp_path / "s"), "--warc", str(garbage), check=False)
    assert r.returncode == 3 and b"not a WARC file" in r.stderr
    r = _cli("add", "--store", str(tmp_path / "s"), str(empty), str(empty), check=False)
    assert r.returncode == 2 and b"needs --warc" in r.stderr
    assert _cli("links", "--help").returncode == 0
