"""Throughput of WARC link extraction and ``seenstore add --warc``, against warcio +
a pure-Python extraction (html.parser) in the same run.

Writes (once, under scratch/) a WARC of real HTML found on this machine
(bench/warcgen.py), then times, best of --repeat:
  links          seenstore's extraction (FastWARC records, selectolax/lexbor HTML)
  add --warc     extraction + normalise + fingerprint + admit into a fresh store
  warcio+html.parser   the same records read by warcio, links by html.parser
  warcio+selectolax    warcio records, the same lexbor extraction (isolates the reader)
MB/s is of the WARC file as stored (and of its uncompressed size for .gz), per
CPU second of this process (the wall clock, printed beside it, counts the time
other jobs on a shared machine hold the cores).

    python bench/bench_warc.py [--mb 20] [--gz] [--repeat 2]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import tempfile
import time
from html.parser import HTMLParser

sys.path.insert(0, os.path.dirname(__file__))

from warcgen import write_warc  # noqa: E402

from seenstore.integrations.warc import WarcReport, iter_link_buffers, iter_links, page_links  # noqa: E402

TAGS = {"a": "href", "area": "href", "link": "href", "iframe": "src"}


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.out = []

    def handle_starttag(self, tag, attrs):
        attr = TAGS.get(tag)
        if attr:
            v = dict(attrs).get(attr)
            if v:
                self.out.append(v)


def warcio_records(path):
    from warcio.archiveiterator import ArchiveIterator

    with open(path, "rb") as f:
        for r in ArchiveIterator(f):
            if r.rec_type == "response" and (r.http_headers.get_header("Content-Type") or "") \
                    .startswith("text/html"):
                yield r.rec_headers.get_header("WARC-Target-URI"), r.content_stream().read()


def run_links(path):
    return sum(1 for _ in iter_links([path]))


def run_add(path):
    from seenstore.url.fastpath import normalise_buffer
    from seenstore.store import SeenStore

    d = tempfile.mkdtemp(dir=os.path.dirname(path))
    try:
        n = 0
        with SeenStore.open(os.path.join(d, "s"), create=True, sync=False) as store:
            for ub in iter_link_buffers([path], WarcReport()):
                fb = normalise_buffer(ub, layout=store.layout)
                store.add(fb.keys)
                n += fb.n
        return n
    finally:
        shutil.rmtree(d)


def run_warcio_py(path):
    n = 0
    for _, body in warcio_records(path):
        p = _Links()
        p.feed(body.decode("utf-8", "replace"))
        n += len(p.out)
    return n


def run_warcio_lexbor(path):
    return sum(len(page_links(uri, body)) for uri, body in warcio_records(path))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=20, help="MB of HTML in the WARC")
    ap.add_argument("--gz", action="store_true", help="gzip each record")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", default="scratch")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    path = os.path.join(a.dir, f"bench-{a.mb:g}mb.warc" + (".gz" if a.gz else ""))
    if not os.path.exists(path):
        write_warc(path, int(a.mb * 1e6))
    size = os.path.getsize(path)
    raw = size
    if a.gz:
        with gzip.open(path, "rb") as f:
            raw = sum(len(c) for c in iter(lambda: f.read(1 << 20), b""))
    print(f"{path}: {size / 1e6:.1f} MB stored, {raw / 1e6:.1f} MB uncompressed")
    base = None
    for name, fn in (("links (fastwarc+selectolax)", run_links),
                     ("add --warc (links+normalise+admit)", run_add),
                     ("warcio+selectolax", run_warcio_lexbor),
                     ("warcio+html.parser", run_warcio_py)):
        best, wall, n = float("inf"), 0.0, 0
        for _ in range(a.repeat):
            t, c = time.perf_counter(), time.process_time()
            n = fn(path)
            cpu = time.process_time() - c
            if cpu < best:
                best, wall = cpu, time.perf_counter() - t
        base = base or best
        print(f"{name:36s} {n:8,d} links  CPU {best:6.2f}s (wall {wall:6.2f}s)  "
              f"{size / best / 1e6:6.1f} MB/s stored  {raw / best / 1e6:6.1f} MB/s raw  "
              f"{n / best / 1e3:7.1f} k links/s  {best / base:5.2f}x")


if __name__ == "__main__":
    main()
