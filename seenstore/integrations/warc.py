"""Outlinks of the HTML responses in WARC files (extra ``[warc]``: FastWARC + selectolax).

``iter_links(paths, report)`` yields ``Link(base, href, nofollow)`` for every
``a``/``area``/``link`` ``href`` and ``iframe`` ``src`` of every HTML response
record, in file order. ``base`` is the record's ``WARC-Target-URI`` resolved with
the page's first ``<base href>``; ``nofollow`` is set by ``rel=nofollow`` on the
element or ``<meta name=robots content=nofollow>`` on the page. Records that are
not HTML responses are counted and skipped; a truncated record (block shorter
than its Content-Length, or no target URI) is counted and skipped; a damaged one
(unparsable headers, bad compression) is counted and reading resumes at the next
record start found after it. ``report`` (a ``WarcReport``) holds the counts.
Neither parser is ours: FastWARC reads the records, selectolax (lexbor) the HTML.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from seenstore.errors import InvalidInputError, StoreNotFoundError
from seenstore.url.buffer import URLBuffer

HTML_TYPES = ("text/html", "application/xhtml+xml")
LINK_SELECTOR = "a[href], area[href], link[href], iframe[src], base[href], meta[name]"
_GZIP_MAGIC = b"\x1f\x8b\x08"
_WARC_MAGIC = b"WARC/1."


def _clean(url: str) -> str:
    """``url`` without ASCII tab, CR and LF (the URL standard drops them from any URL)."""
    if "\t" in url or "\n" in url or "\r" in url:
        return url.replace("\t", "").replace("\n", "").replace("\r", "")
    return url


class Link(NamedTuple):
    base: str
    href: str
    nofollow: bool


@dataclass
class WarcReport:
    """What ``iter_links`` found (all counts are records unless named otherwise)."""

    files: int = 0
    bytes: int = 0            # size of the WARC files read (as stored, compressed or not)
    records: int = 0          # every record read, of any type
    html: int = 0             # HTML response records whose links were extracted
    skipped: int = 0          # other records: not a response, or not HTML
    truncated: int = 0
    damaged: int = 0
    links: int = 0
    nofollow: int = 0
    problems: list[str] = field(default_factory=list)  # "FILE: what" for the first few

    def problem(self, path: str, what: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(f"{path}: {what}")

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}

    def summary(self) -> str:
        return (f"{self.files} WARC files, {self.records} records: {self.html} HTML pages, "
                f"{self.skipped} skipped, {self.truncated} truncated, {self.damaged} damaged; "
                f"{self.links} links ({self.nofollow} nofollow)")


def _require():
    try:
        from fastwarc.warc import ArchiveIterator  # noqa: F401
        from selectolax.lexbor import LexborHTMLParser  # noqa: F401
    except ImportError as e:
        raise InvalidInputError(
            f"WARC input needs the [warc] extra (pip install 'seenstore[warc]'): {e}") from None


def _next_start(path: str, after: int, gz: bool) -> int | None:
    """Offset of the next record start (a gzip member, or a line 'WARC/1.') after
    ``after``, or None."""
    magic = _GZIP_MAGIC if gz else b"\n" + _WARC_MAGIC
    with open(path, "rb") as f:
        f.seek(after)
        pos, tail = after, b""
        while chunk := f.read(1 << 20):
            buf = tail + chunk
            i = buf.find(magic)
            if i >= 0:
                return pos - len(tail) + i + (0 if gz else 1)
            tail = buf[-(len(magic) - 1):]
            pos += len(chunk)
    return None


def _records(path: str, report: WarcReport, pick=None) -> Iterator:
    """``pick(record, WarcRecordType)`` of each record it keeps (None: skip it, counted;
    False: truncated, counted and reported), resuming after a damaged record at the
    next record start. ``pick`` defaults to ``_page``: (target URI, HTML payload,
    charset) of each whole HTML response record."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    pick = pick or _page
    with open(path, "rb") as f:
        gz = f.read(3) == _GZIP_MAGIC
    start = 0
    while True:
        last = start
        try:
            with open(path, "rb") as f:
                f.seek(start)
                for r in ArchiveIterator(f, parse_http=True, fsspec_args=False):
                    last = start + r.stream_pos
                    report.records += 1
                    page = pick(r, WarcRecordType)
                    if page is None:
                        report.skipped += 1
                    elif page is False:
                        report.truncated += 1
                        report.problem(path, f"truncated record at byte {last}")
                    else:
                        report.html += 1
                        yield page
            return
        except (OSError, ValueError, UnicodeDecodeError) as e:
            report.damaged += 1
            report.problem(path, f"damaged record after byte {last}: {e}")
            nxt = _next_start(path, last + 1, gz)
            if nxt is None:
                return
            start = nxt


def _page(r, types):
    """(uri, body, charset) for a whole HTML response, None for another record,
    False for a truncated one."""
    if r.record_type != types.response or not r.is_http:
        return None
    uri = r.headers.get("WARC-Target-URI")
    length = r.content_length  # after parse_http: the payload's length
    body = r.reader.read()
    if uri is None or len(body) < length:
        return False
    if not (r.http_content_type or "").lower().startswith(HTML_TYPES):
        return None
    return uri.strip("<>"), body, r.http_charset


def page_links(uri: str, body: bytes, charset: str | None = None) -> list[Link]:
    """The outlinks of one HTML page fetched from ``uri`` (see module doc)."""
    from selectolax.lexbor import LexborHTMLParser

    if charset and charset.replace("-", "").replace("_", "") not in ("utf8", "usascii", "ascii"):
        try:
            html = body.decode(charset, "replace")
        except LookupError:
            html = body
    else:
        html = body
    tree = LexborHTMLParser(html)
    base, page_nofollow, found = uri, False, []
    saw_base = False
    for el in tree.css(LINK_SELECTOR):
        tag, attrs = el.tag, el.attributes
        if tag == "meta":
            if (attrs.get("name") or "").strip().lower() == "robots":
                tokens = (attrs.get("content") or "").lower().replace(",", " ").split()
                page_nofollow |= "nofollow" in tokens or "none" in tokens
            continue
        value = attrs.get("src" if tag == "iframe" else "href")
        if value is None:
            continue
        value = _clean(value.strip())
        if tag == "base":
            if not saw_base and value:
                base = urllib.parse.urljoin(uri, value)
                saw_base = True
            continue
        if not value:
            continue
        rel = (attrs.get("rel") or "").lower().split()
        found.append((value, "nofollow" in rel))
    base = _clean(base)
    return [Link(base, href, nf or page_nofollow) for href, nf in found]


def iter_links(paths: Iterable[str], report: WarcReport | None = None) -> Iterator[Link]:
    """Every outlink of every HTML response record of ``paths`` (plain or gzipped
    WARC). Raises StoreNotFoundError for a missing file and InvalidInputError for a
    file that is not a WARC at all (no record in it); per-record problems only
    count in ``report``."""
    _require()
    report = report if report is not None else WarcReport()
    for path in paths:
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise StoreNotFoundError(f"no such file: {path}")
        report.files += 1
        report.bytes += os.path.getsize(path)
        before = report.records
        for uri, body, charset in _records(path, report):
            links = page_links(uri, body, charset)
            report.links += len(links)
            report.nofollow += sum(1 for link in links if link.nofollow)
            yield from links
        if report.records == before and os.path.getsize(path):
            raise InvalidInputError(f"{path}: not a WARC file (no record could be read)")


def iter_link_buffers(paths: Iterable[str], report: WarcReport | None = None, *,
                      chunk_urls: int = 1_000_000, follow_only: bool = False
                      ) -> Iterator[URLBuffer]:
    """URLBuffers of up to ``chunk_urls`` links each, every href carrying its page's
    base: what the fast path (url/fastpath.py ``normalise_buffer``) consumes.
    ``follow_only``: leave out nofollow links."""
    hrefs: list[str] = []
    bases: list[str] = []
    for link in iter_links(paths, report):
        if follow_only and link.nofollow:
            continue
        hrefs.append(link.href)
        bases.append(link.base)
        if len(hrefs) >= chunk_urls:
            yield URLBuffer.from_pairs(hrefs, bases)
            hrefs, bases = [], []
    if hrefs:
        yield URLBuffer.from_pairs(hrefs, bases)


__all__ = ["Link", "WarcReport", "iter_links", "iter_link_buffers", "page_links"]
