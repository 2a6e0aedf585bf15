"""Write a WARC of real HTML found on this machine (bench input; never committed).

Usage: python3 bench/warcgen.py OUT.warc[.gz] [MAX_MB]. HTML files are taken from
--roots (default: Python package docs, /usr/share/doc, the Rust toolchain docs),
each as one HTTP response record with a made-up target URI under http://docs.test/.
Written with warcio (gzip per record when OUT ends in .gz), so every reader
measured reads the same standard file.
"""

from __future__ import annotations

import io
import os


ROOTS = [os.path.expanduser("~/.rustup"), "/usr/share/doc",
         os.path.dirname(os.__file__) + "/site-packages"]


def html_files(roots=ROOTS, min_bytes=2048, max_bytes=2 << 20):
    """HTML files of 2 KiB .. 2 MiB (web-page sizes; a 14 MB licence page would
    dominate every timing)."""
    for root in roots:
        for dirpath, _, names in os.walk(root):
            for n in sorted(names):
                if n.endswith((".html", ".htm")):
                    p = os.path.join(dirpath, n)
                    try:
                        if min_bytes <= os.path.getsize(p) <= max_bytes:
                            yield p
                    except OSError:
                        pass


def write_warc(out: str, max_bytes: int, roots=ROOTS) -> tuple[int, int]:
    """Write records until ``max_bytes`` of HTML; return (records, html bytes)."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    n = total = 0
    with open(out, "wb") as f:
        w = WARCWriter(f, gzip=out.endswith(".gz"))
        for p in html_files(roots):
            with open(p, "rb") as h:
                body = h.read()
            rel = os.path.relpath(p, "/").replace(os.sep, "/")
            headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")],
                                       protocol="HTTP/1.1")
            w.write_record(w.create_warc_record(f"http://docs.test/{rel}", "response",
                                                payload=io.BytesIO(body), http_headers=headers))
            n, total = n + 1, total + len(body)
            if total >= max_bytes:
                break
    return n, total


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", metavar="OUT.warc[.gz]", help="the WARC file to write")
    ap.add_argument("max_mb", nargs="?", type=float, default=20.0,
                    help="stop after about this many MB of HTML (default 20)")
    args = ap.parse_args()
    print(write_warc(args.out, int(args.max_mb * 1e6)))


if __name__ == "__main__":
    main()
