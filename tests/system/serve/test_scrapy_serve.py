"""Two real Scrapy processes (``scrapy runspider``) crawl one local site through one
``seenstore serve``: no page is fetched twice, also when the server is killed
with SIGKILL mid-crawl and restarted (the clients retry with their batch ids).
Without ``SEENSTORE_URL``, a second process on a held ``SEENSTORE_DIR`` logs one
line naming ``seenstore serve`` and no traceback."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
import urllib.parse
from collections import Counter

import pytest

pytest.importorskip("scrapy")
pytest.importorskip("aiohttp")

from localsite import HtmlHandler, serve  # noqa: E402
from serveproc import ServerProc, env, wait_until  # noqa: E402

N_PAGES = 60


class _Site(HtmlHandler):
    """Page i links to pages 2i+1 and 2i+2 (a tree) and, under other spellings, to its
    parent and page 0, so both crawlers meet every page many times."""

    fetched: Counter
    delay = 0.0

    def do_GET(self):  # noqa: N802
        path = urllib.parse.urlsplit(self.path).path
        self.fetched[path] += 1
        time.sleep(self.delay)
        try:
            i = int(path.strip("/").split("/")[-1] or 0)
        except ValueError:
            self.send_error(404)
            return
        if path.startswith("/s/"):  # a crawler's own start page
            links = [f"http://site.test/p/{i}", "http://site.test/p/0"]
        else:
            links = [f"http://site.test/p/{j}" for j in (2 * i + 1, 2 * i + 2) if j < N_PAGES]
            links += [f"http://SITE.test:80/p/{(i - 1) // 2 if i else 0}",
                      "http://site.test/p/0"]
        body = "".join(f'<a href="{u}">x</a>' for u in links).encode()
        self.send_html(body)


@contextlib.contextmanager
def _site(delay: float):
    counts: Counter = Counter()
    with serve(_Site, fetched=counts, delay=delay) as url:
        yield url, counts


SPIDER = '''
import scrapy

class Site(scrapy.Spider):
    name = "site"

    async def start(self):
        yield scrapy.Request(f"http://site.test/s/{getattr(self, 'first', 0)}")

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, self.parse)
'''


def _crawler(tmp_path, proxy: str, name: str, *settings: str,
             first: str = "0") -> subprocess.Popen:
    spider = tmp_path / "spider.py"
    spider.write_text(SPIDER)
    e = {k: v for k, v in env().items() if "proxy" not in k.lower()}
    e["http_proxy"] = proxy
    args = [sys.executable, "-m", "scrapy.cmdline", "runspider", str(spider),
            "-s", "CONCURRENT_REQUESTS=2", "-s", "ROBOTSTXT_OBEY=False",
            "-s", "TELNETCONSOLE_ENABLED=False", "-s", "LOG_LEVEL=INFO",
            "-s", "RETRY_ENABLED=False",
            "-s", "DUPEFILTER_CLASS=seenstore.scrapy.SeenStoreDupeFilter", "-a", f"first={first}"]
    for s in settings:
        args += ["-s", s]
    work = tmp_path / name
    work.mkdir()
    return subprocess.Popen(args, env=e, stderr=subprocess.PIPE, text=True, cwd=work)


def _finish(proc: subprocess.Popen) -> str:
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    return err


def test_two_scrapy_processes_share_one_server_and_survive_its_sigkill(tmp_path):
    store = tmp_path / "store"
    with _site(delay=0.03) as (proxy, counts):
        server = ServerProc(store, "--max-delay", "2").start()
        port = server.port
        try:
            crawlers = [_crawler(tmp_path, proxy, f"c{i}", f"SEENSTORE_URL={server.url}",
                                 first=str(i + 1)) for i in range(2)]
            assert wait_until(lambda: sum(counts.values()) >= 10, 60)
            server.stop(signal.SIGKILL)  # mid-crawl
            time.sleep(0.3)
            server = ServerProc(store, "--max-delay", "2", port=port).start()
            logs = [_finish(c) for c in crawlers]
        finally:
            server.stop(signal.SIGKILL)
    pages = {f"/p/{i}" for i in range(N_PAGES)} | {"/s/1", "/s/2"}
    assert set(counts) == pages, sorted(set(counts) ^ pages)
    assert max(counts.values()) == 1, [p for p, c in counts.items() if c > 1]
    both = [int(log.split("'downloader/response_count': ")[1].split(",")[0]) for log in logs]
    assert sum(both) == len(pages) and min(both) > 0, both  # both crawlers did fetch
    assert any("were sent again (same batch id)" in log for log in logs)  # through the kill


def test_second_process_on_a_held_store_gets_one_line_naming_serve(tmp_path):
    from seenstore import SeenStore

    store = tmp_path / "store"
    with _site(delay=0.0) as (proxy, counts), SeenStore.open(str(store), create=True):
        log = _finish(_crawler(tmp_path, proxy, "c", f"SEENSTORE_DIR={store}"))
    lines = [ln for ln in log.splitlines() if "seenstore serve" in ln]
    assert len(lines) == 1 and "ERROR" in lines[0], log[-3000:]
    assert "Engine slot not assigned" not in log
    assert "seenstore_store_locked" in log
    assert not counts  # nothing fetched
