"""A real Scrapy crawl with ``SEENSTORE_LEARN = True`` against a local site whose
pages link to each other with a session parameter the site ignores (``psid``) and
one it does not (``v``, a version that selects the page): the dupefilter records
every response's evidence, learns ``strip_params = ["psid"]`` for the host during
the crawl, and the rest of the crawl stops fetching the session variants; ``v``
is never stripped, every page is fetched."""

from __future__ import annotations

import contextlib
import urllib.parse
from collections import Counter

import pytest

pytest.importorskip("scrapy")

from localsite import HtmlHandler, serve  # noqa: E402
from seenstore.store import SeenStore  # noqa: E402
from test_scrapy import SEENSTORE, SPIDER, _crawl  # noqa: E402

N = 40


def _page(path_qs: str) -> tuple[str, str | None]:
    """(page id, None) of a request target, the site's own view: psid ignored."""
    u = urllib.parse.urlsplit(path_qs)
    q = [(k, v) for k, v in urllib.parse.parse_qsl(u.query) if k != "psid"]
    return u.path + ("?" + urllib.parse.urlencode(q) if q else ""), None


class _Site(HtmlHandler):
    fetched: Counter  # by request target (spelling)
    pages: Counter  # by page

    def do_GET(self):  # noqa: N802
        target = urllib.parse.urlsplit(self.path)
        target = target.path + ("?" + target.query if target.query else "")
        page, _ = _page(target)
        self.fetched[target] += 1
        self.pages[page] += 1
        path = urllib.parse.urlsplit(page).path
        if not path.startswith("/p/"):
            self.send_error(404)
            return
        n = int(path[3:])
        links = []
        for k in (1, 2, 3, 5, 7):
            m = (n + k) % N
            links.append(f"/p/{m}?psid=s{n}x{k}")  # the same page under a session id
            links.append(f"/p/{m}")
        links.append(f"/p/{n}?v=2")  # another page: v selects content
        version = urllib.parse.parse_qs(urllib.parse.urlsplit(page).query).get("v", ["1"])[0]
        body = ("<html><head><title>page %d</title></head><body><p>Article %d version %s "
                "with enough words to be a page of its own, number %d of the site.</p>%s"
                "</body></html>" % (n, n, version, n,
                                    "".join(f'<a href="{u}">l</a>' for u in links))).encode()
        self.send_html(body)


@contextlib.contextmanager
def _serve():
    fetched, pages = Counter(), Counter()
    with serve(_Site, fetched=fetched, pages=pages) as url:
        yield url, fetched, pages


START = SPIDER.replace('"http://site.test/"', '"http://site.test/p/0"')


def test_scrapy_learns_the_ignored_session_parameter_during_the_crawl(tmp_path):
    results = {}
    for learn in (False, True):
        with _serve() as (proxy, fetched, pages):
            d = tmp_path / f"learn{learn}"
            d.mkdir()
            _crawl(d, proxy, SEENSTORE, f"SEENSTORE_DIR={d / 'store'}",
                   f"SEENSTORE_LEARN={learn}", "SEENSTORE_LEARN_EVERY=20", spider_code=START)
            results[learn] = (sum(fetched.values()), dict(pages))
    plain, learned = results[False], results[True]
    every = {f"/p/{n}" for n in range(N)} | {f"/p/{n}?v=2" for n in range(N)}
    assert set(plain[1]) == every and set(learned[1]) == every  # every page fetched
    print(f"fetches: plain {plain[0]}, learning {learned[0]}")
    assert learned[0] < 0.6 * plain[0], (learned[0], plain[0])
    with SeenStore.open(str(tmp_path / "learnTrue" / "store"), readonly=True) as store:
        toml = store.policy.to_toml()
        assert 'hosts = ["site.test"]' in toml and '"psid"' in toml and '"v"' not in toml
        assert store.policy_version >= 1
    with SeenStore.open(str(tmp_path / "learnFalse" / "store"), readonly=True) as store:
        assert store.policy_version == 0
