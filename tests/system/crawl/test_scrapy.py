"""A real Scrapy crawl (a subprocess running ``scrapy runspider``) against a local
site whose pages link to each other under many spellings. The server sits behind
a proxy setting, so URLs may name host ``site.test`` with any case and ``:80``;
it counts every fetch by page. seenstore's dupefilter fetches each page once,
also across a stop (CLOSESPIDER_PAGECOUNT or a real SIGINT) and a resume with the
same JOBDIR; Scrapy's RFPDupeFilter lets the spelling variants through."""

from __future__ import annotations

import contextlib
import os
import posixpath
import signal
import subprocess
import sys
import time
import urllib.parse
from collections import Counter

import pytest

pytest.importorskip("scrapy")

from localsite import HtmlHandler, serve  # noqa: E402

PAGES = ["/", "/a", "/b", "/c/", "/c/d", "/~e/", "/~e/f", "/g?x=1"]


def _spellings(page: str) -> list[str]:
    """Ways to write ``page``'s URL that are the same resource for seenstore."""
    path, _, query = page.partition("?")
    q = f"?{query}" if query else ""
    tilde = path.replace("~", "%7e")
    dotted = path.rsplit("/", 1)[0] + "/./" + path.rsplit("/", 1)[1]
    return [f"http://site.test{page}", f"http://SITE.test{page}",
            f"http://site.test:80{page}", f"http://Site.Test:80{tilde}{q}",
            f"http://site.test{page}#part", f"http://site.test{dotted}{q}",
            f"HTTP://site.test{tilde}{q}#top"]


def _page_of(target: str) -> str:
    """The page a proxied request line names (how the site itself sees it)."""
    u = urllib.parse.urlsplit(target)
    path = posixpath.normpath(urllib.parse.unquote(u.path))
    if u.path.endswith("/") and path != "/":
        path += "/"
    return path + (f"?{u.query}" if u.query else "")


class _Site(HtmlHandler):
    fetched: Counter
    delay = 0.0  # seconds each answer waits after the fetch is counted

    def do_GET(self):  # noqa: N802 (http.server's name)
        page = _page_of(self.path)
        self.fetched[page] += 1
        time.sleep(self.delay)
        if page not in PAGES:
            self.send_error(404)
            return
        links = "".join(f'<a href="{s}">x</a>\n' for p in PAGES for s in _spellings(p))
        body = f"<html><body>{links}</body></html>".encode()
        self.send_html(body)


@contextlib.contextmanager
def _serve(delay: float = 0.0):
    """Serve the site on 127.0.0.1; yields (proxy URL, fetch counts by page)."""
    counts: Counter = Counter()
    with serve(_Site, fetched=counts, delay=delay) as url:
        yield url, counts


@pytest.fixture
def site():
    with _serve() as s:
        yield s


@pytest.fixture
def slow_site():
    """The site answering each fetch 80 ms late, so a crawl is still running
    when the test interrupts it."""
    with _serve(delay=0.08) as s:
        yield s


SPIDER = '''
import scrapy

class Site(scrapy.Spider):
    name = "site"

    async def start(self):
        yield scrapy.Request("http://site.test/")

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, self.parse)
'''


def _crawler(tmp_path, proxy: str, *settings: str, spider_code: str = SPIDER) -> subprocess.Popen:
    """Start ``scrapy runspider`` on ``spider_code`` in ``tmp_path``, through ``proxy``."""
    spider = tmp_path / "spider.py"
    spider.write_text(spider_code)
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["http_proxy"] = proxy
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), *sys.path])
    args = [sys.executable, "-m", "scrapy.cmdline", "runspider", str(spider),
            "-s", "CONCURRENT_REQUESTS=1", "-s", "ROBOTSTXT_OBEY=False",
            "-s", "TELNETCONSOLE_ENABLED=False", "-s", "LOG_LEVEL=INFO",
            "-s", "RETRY_ENABLED=False"]
    for s in settings:
        args += ["-s", s]
    return subprocess.Popen(args, env=env, stderr=subprocess.PIPE, text=True, cwd=tmp_path)


def _finish(proc: subprocess.Popen) -> str:
    """Wait for a crawl to end; its log (stderr), after checking it exited 0."""
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    return err


def _crawl(tmp_path, proxy: str, *settings: str, spider_code: str = SPIDER) -> str:
    return _finish(_crawler(tmp_path, proxy, *settings, spider_code=spider_code))


SEENSTORE = "DUPEFILTER_CLASS=seenstore.scrapy.SeenStoreDupeFilter"


def _filtered(log: str) -> int:
    for line in log.splitlines():
        if "'dupefilter/filtered'" in line:
            return int(line.split(":")[-1].strip(" ,}"))
    return 0


def test_every_page_fetched_once_and_rfp_lets_duplicates_through(tmp_path, site):
    proxy, counts = site
    log = _crawl(tmp_path, proxy, SEENSTORE, f"SEENSTORE_DIR={tmp_path / 'store'}")
    ours = dict(counts)
    assert ours == dict.fromkeys(PAGES, 1)
    assert _filtered(log) == len(PAGES) * (len(PAGES) * 7) - (len(PAGES) - 1)
    counts.clear()
    (tmp_path / "rfp").mkdir()
    _crawl(tmp_path / "rfp", proxy)  # Scrapy's default RFPDupeFilter
    theirs = dict(counts)
    assert set(theirs) == set(PAGES)
    assert sum(theirs.values()) > sum(ours.values())
    print(f"fetches: seenstore {sum(ours.values())}, RFPDupeFilter {sum(theirs.values())}")


def test_stopped_and_resumed_crawl_fetches_nothing_twice(tmp_path, site):
    proxy, counts = site
    job = tmp_path / "job"
    first = _crawl(tmp_path, proxy, SEENSTORE, f"JOBDIR={job}", "CLOSESPIDER_PAGECOUNT=3")
    assert "closespider_pagecount" in first
    after_first = sum(counts.values())
    assert 3 <= after_first < len(PAGES)
    assert (job / "seenstore" / "MANIFEST").exists() or any((job / "seenstore").iterdir())
    _crawl(tmp_path, proxy, SEENSTORE, f"JOBDIR={job}")
    assert sum(counts.values()) > after_first  # the resumed crawl did go on
    assert max(counts.values()) == 1, counts  # and fetched nothing twice


def test_sigint_mid_crawl_then_resume_fetches_each_page_once(tmp_path, slow_site):
    """One Ctrl-C: Scrapy's graceful shutdown saves the JOBDIR queue and closes
    the filter; the resumed crawl fetches the rest and nothing twice."""
    proxy, counts = slow_site
    job = tmp_path / "job"
    first = _crawler(tmp_path, proxy, SEENSTORE, f"JOBDIR={job}")
    deadline = time.monotonic() + 30
    while sum(counts.values()) < 3 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    first.send_signal(signal.SIGINT)
    log = _finish(first)
    assert "Received SIGINT, shutting down gracefully" in log, log[-3000:]
    assert "Spider closed (shutdown)" in log, log[-3000:]
    after_first = dict(counts)
    assert 3 <= sum(after_first.values()) < len(PAGES), after_first  # really cut short
    _crawl(tmp_path, proxy, SEENSTORE, f"JOBDIR={job}")
    assert dict(counts) == dict.fromkeys(PAGES, 1), (after_first, counts)


def test_non_get_requests_keep_scrapy_semantics(tmp_path):
    from scrapy import Request

    from seenstore.scrapy import SeenStoreDupeFilter

    df = SeenStoreDupeFilter(str(tmp_path / "s"))
    try:
        assert not df.request_seen(Request("http://x.test/a"))
        assert df.request_seen(Request("HTTP://X.test:80/a#f"))
        post = Request("http://x.test/a", method="POST", body=b"q=1")
        assert not df.request_seen(post)  # a POST is not its URL's GET
        assert df.request_seen(Request("http://x.test/a", method="POST", body=b"q=1"))
        assert not df.request_seen(Request("http://x.test/a", method="POST", body=b"q=2"))
        assert not df.request_seen(Request("http://x.test/a", method="HEAD"))
    finally:
        df.close("finished")
    df = SeenStoreDupeFilter(str(tmp_path / "s"))  # durable after close
    try:
        assert df.request_seen(Request("http://x.test/a"))
        assert df.request_seen(Request("http://x.test/a", method="POST", body=b"q=2"))
        assert not df.request_seen(Request("http://x.test/b"))
    finally:
        df.close("finished")


@pytest.mark.parametrize("debug", [False, True])
def test_log_and_stats_like_rfpdupefilter(tmp_path, caplog, debug):
    from scrapy import Request, Spider
    from scrapy.utils.test import get_crawler

    from seenstore.scrapy import SeenStoreDupeFilter

    crawler = get_crawler(Spider, {"DUPEFILTER_DEBUG": debug, "JOBDIR": str(tmp_path / "job")})
    spider = crawler._create_spider("s")
    crawler.spider = spider
    df = SeenStoreDupeFilter.from_crawler(crawler)
    try:
        assert df.path == str(tmp_path / "job" / "seenstore")  # default under JOBDIR
        caplog.set_level("DEBUG", logger="seenstore.integrations.scrapy")
        for _ in range(3):
            r = Request("http://x.test/a", headers={"Referer": "http://x.test/"})
            if df.request_seen(r):
                df.log(r, spider)
    finally:
        df.close("finished")
    assert crawler.stats.get_value("dupefilter/filtered") == 2
    msgs = [rec.getMessage() for rec in caplog.records]
    if debug:
        assert msgs == ["Filtered duplicate request: <GET http://x.test/a> "
                        "(referer: http://x.test/)"] * 2
    else:
        assert len(msgs) == 1 and "no more duplicates will be shown" in msgs[0]
