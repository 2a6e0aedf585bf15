"""A Scrapy dupefilter backed by a seenstore store (``DUPEFILTER_CLASS``).

``SeenStoreDupeFilter`` follows Scrapy's dupefilter interface (``from_crawler``,
``request_seen``, ``open``, ``close(reason)``, ``log``) and answers every
``request_seen`` at once: keys admitted since the last commit sit in an exact
in-memory set; anything else is a ``SeenStore.contains`` lookup (a Bloom negative
costs no disk read). New keys are committed to the store every
``SEENSTORE_FLUSH_KEYS`` keys and on ``close``, so a crawl paused and resumed with
the same ``JOBDIR`` never re-fetches what it already scheduled.

What makes two requests the same: a GET without a body is its canonical URL
(seenstore's normalise + fingerprint, so ``HTTP://Host:80/./a#x`` and
``http://host/a`` are one page); any other request (a method other than GET, a
body, or a URL seenstore rejects) is Scrapy's own request fingerprint (method,
canonical URL, body), kept in a second store so the two key spaces never mix.
``dont_filter`` is Scrapy's scheduler's business: it never calls the filter then.

With the ``SEENSTORE_URL`` setting (a ``seenstore serve`` address) the filter is
a ``seenstore.Client`` of that server instead (``RemoteSet``), so any number of
Scrapy processes share one store: a GET's URL goes to ``add_urls`` (the server
normalises it under the store's policy), any other request's Scrapy fingerprint
to ``add`` as a raw key in the same store. Without it, a second process on a
``SEENSTORE_DIR`` another one holds logs one error line naming ``seenstore serve``
and closes its spider at once (reason ``seenstore_store_locked``), no traceback.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

import numpy as np

from seenstore.errors import LockedError
from seenstore.url.normalise import Rejection, try_normalise
from seenstore.url.policy import load_policy
from seenstore.store import SeenStore

DEFAULT_FLUSH_KEYS = 1000
DEFAULT_LEARN_EVERY = 200  # SEENSTORE_LEARN_EVERY: responses between learning rounds
NONGET_SUFFIX = ".requests"  # the non-GET set: a sibling store "<SEENSTORE_DIR>.requests"


class LiveSet:
    """A writable store plus the keys admitted since its last commit.

    ``seen(key)`` answers at once and claims the key if it was new; ``seen_url``
    does it for a URL under the store's policy, keeping its spelling (safe-rule
    form) for the store's kept URLs; ``commit()`` makes every claimed key durable
    (one store batch)."""

    def __init__(self, path: str, policy, mode: str, flush_keys: int,
                 keep_urls: bool | None = None):
        self.store = SeenStore.open(path, create=True, policy=policy, mode=mode,
                                    keep_urls=keep_urls)
        self.approximate = mode == "approximate"
        self.flush_keys = max(1, flush_keys)
        self.pending: set[int] = set()
        self.spellings: dict[int, str] = {}  # claimed key -> its URL (safe-rule form)

    def seen_url(self, url: str) -> bool | None:
        """``seen`` for a URL's key under the store's policy; None when the URL has no
        canonical form (the caller keys the request another way)."""
        from seenstore.store.urls import normalised

        nz = normalised([url], None, self.store.policy, self.store.layout, 1)
        if not len(nz.keys):
            return None
        key = int(nz.keys[0])
        seen = self.seen(key, commit=False)
        if not seen and self.store.keep_urls is not False:
            self.spellings[key] = nz.safe[0]
        if len(self.pending) >= self.flush_keys:
            self.commit()
        return seen

    def seen(self, key: int, commit: bool = True) -> bool:
        if key in self.pending:
            return True
        one = np.array([key], dtype=np.uint64)
        if self.approximate and self.store.bloom is not None:
            if self.store.bloom.query(one)[0]:  # a Bloom positive counts as seen
                return True
        elif self.store.contains(one)[0]:
            return True
        self.pending.add(key)
        if commit and len(self.pending) >= self.flush_keys:
            self.commit()
        return False

    def commit(self) -> None:
        if not self.pending:
            return
        if self.spellings:
            from seenstore.store.urls import keep_new

            got = self.spellings

            def keep(new_keys, gen):  # the new keys' URLs go to the batch's kept file
                urls = [got[k] for k in new_keys.tolist() if k in got]
                if urls:
                    keep_new(self.store, urls, gen)
            self.store._on_new = keep
        try:
            self.store.add(np.fromiter(self.pending, dtype=np.uint64, count=len(self.pending)))
        finally:
            self.store._on_new = None
        self.pending.clear()
        self.spellings = {}

    def close(self) -> None:
        try:
            self.commit()
        finally:
            self.store.close()


def _location(response) -> str | None:
    if 300 <= response.status < 400:
        loc = response.headers.get(b"Location")
        if loc:
            return response.urljoin(loc.decode("latin-1"))
    return None


class RemoteSet:
    """The filter's set on a ``seenstore serve`` server: one ``Client`` call per
    request (its answer is durable on the server when it returns)."""

    def __init__(self, url: str, token: str | None):
        from seenstore.serve.client import Client

        self.client = Client(url, token)

    def seen_url(self, url: str) -> bool:
        return not bool(self.client.add_urls([url])[0])

    def seen(self, key: int) -> bool:
        return not bool(self.client.add(np.array([key], dtype=np.uint64))[0])

    def close(self) -> None:
        if self.client.retries:
            logging.getLogger(__name__).info(
                "seenstore: %d calls to %s were sent again (same batch id) after a failure",
                self.client.retries, self.client.url)
        self.client.close()


def _token(settings) -> str | None:
    token = settings.get("SEENSTORE_TOKEN")
    path = settings.get("SEENSTORE_TOKEN_FILE")
    if not token and path:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    return token or None


class SeenStoreDupeFilter:
    """Scrapy settings: ``SEENSTORE_DIR`` (default ``JOBDIR/seenstore`` when JOBDIR
    is set, else a temporary store removed on close, like Scrapy's in-memory
    filter), ``SEENSTORE_POLICY`` (a policy TOML file for a new store; default the
    policy the store holds, the safe rules for a new one), ``SEENSTORE_LEARN``
    (record every response's evidence and learn per-host rules online, every
    ``SEENSTORE_LEARN_EVERY`` responses, default 200; docs/evidence.md),
    ``SEENSTORE_MODE`` ("exact" or "approximate"), ``SEENSTORE_FLUSH_KEYS``
    (commit every this many new keys, default 1000), ``DUPEFILTER_DEBUG``;
    ``SEENSTORE_URL`` (a ``seenstore serve`` address: use it instead of a local
    store) with ``SEENSTORE_TOKEN`` or ``SEENSTORE_TOKEN_FILE`` (its bearer token)."""

    def __init__(self, path: str | None = None, debug: bool = False, *, policy_file=None,
                 mode: str = "exact", flush_keys: int = DEFAULT_FLUSH_KEYS,
                 fingerprinter=None, server_url: str | None = None,
                 token: str | None = None) -> None:
        from scrapy.utils.request import RequestFingerprinter

        self._tmp = None
        if path is None:
            self._tmp = tempfile.mkdtemp(prefix="seenstore-scrapy-")
            path = os.path.join(self._tmp, "seenstore")
        self.path = path
        self.debug = debug
        self.logdupes = True
        self.logger = logging.getLogger(__name__)
        self.fingerprinter = fingerprinter or RequestFingerprinter()
        self.policy = load_policy(policy_file) if policy_file else None  # None: the store's
        self.learn_every = 0  # SEENSTORE_LEARN: learn every this many responses (0: off)
        self._recorded = 0
        self.mode = mode
        self.flush_keys = flush_keys
        self.layout = None
        self._get: LiveSet | None = None
        self._other: LiveSet | None = None
        self._remote: RemoteSet | None = None
        self.locked_by_another = False
        if server_url:
            self._remote = RemoteSet(server_url, token)
        else:
            self._open()

    @classmethod
    def from_crawler(cls, crawler):
        s = crawler.settings
        path = s.get("SEENSTORE_DIR")
        if not path and s.get("JOBDIR"):
            from scrapy.utils.job import job_dir

            path = os.path.join(job_dir(s), "seenstore")
        df = cls(path, s.getbool("DUPEFILTER_DEBUG"), policy_file=s.get("SEENSTORE_POLICY"),
                 mode=s.get("SEENSTORE_MODE", "exact"),
                 flush_keys=s.getint("SEENSTORE_FLUSH_KEYS", DEFAULT_FLUSH_KEYS),
                 fingerprinter=getattr(crawler, "request_fingerprinter", None),
                 server_url=s.get("SEENSTORE_URL"), token=_token(s))
        df._crawler = crawler
        if s.getbool("SEENSTORE_LEARN") and df._get is not None:
            from scrapy import signals

            df.learn_every = s.getint("SEENSTORE_LEARN_EVERY", DEFAULT_LEARN_EVERY)
            crawler.signals.connect(df.response_received, signal=signals.response_received)
        return df

    # ------------------------------------------------------------- learning
    def response_received(self, response, request, spider) -> None:
        """``SEENSTORE_LEARN``: record what the response revealed (its status, body
        and Link header; each redirect Scrapy followed to reach it, from
        ``redirect_urls``/``redirect_reasons``) as store evidence, and every
        ``SEENSTORE_LEARN_EVERY`` responses commit and learn (the store's
        ``learn(apply=True)``): later requests are keyed under the learned rules."""
        if self._get is None:
            return
        store = self._get.store
        hops = list(request.meta.get("redirect_urls") or ()) + [response.url]
        reasons = list(request.meta.get("redirect_reasons") or ())
        for url, nxt, code in zip(hops, hops[1:], reasons):
            if isinstance(code, int):
                self._record(store.record_fetch, url, code, location=nxt)
        link = response.headers.get(b"Link")
        body = response.body if 200 <= response.status < 300 else None
        self._record(store.record_fetch, response.url, response.status, body=body,
                     link_header=link.decode("latin-1") if link else None,
                     location=_location(response))
        if self._recorded >= self.learn_every:
            self._recorded = 0
            self._get.commit()
            before = store.policy_id
            findings = store.learn(apply=True)
            if store.policy_id != before:
                self.logger.info("seenstore: learned rules for %d host(s): policy %s",
                                 len({f.host for f in findings if f.status == "adopted"}),
                                 store.policy_id)

    def _record(self, fn, *args, **kw) -> None:
        from seenstore.errors import SeenStoreError

        try:
            fn(*args, **kw)
            self._recorded += 1
        except SeenStoreError:
            pass  # a URL with no canonical form tells nothing

    def _open(self) -> None:
        try:
            self._get = LiveSet(self.path, self.policy, self.mode, self.flush_keys)
        except LockedError as e:
            self.locked_by_another = True
            self.logger.error(
                "seenstore: %s. One process writes a store: to share it among several "
                "Scrapy processes, run `seenstore serve --store %s --listen 127.0.0.1:PORT` "
                "and set SEENSTORE_URL=http://127.0.0.1:PORT in each.", e, self.path)
            return
        self.layout = self._get.store.layout

    # ------------------------------------------------------------ the interface
    def open(self) -> None:
        """Scrapy calls this when the spider opens (the store is open already). When
        another process holds the store, the spider is closed at once (reason
        ``seenstore_store_locked``; the error line was logged when the store refused)."""
        crawler = getattr(self, "_crawler", None)
        if self.locked_by_another and crawler is not None:
            from twisted.internet import reactor

            def close() -> None:
                if crawler.engine is not None and crawler.engine.spider is not None:
                    crawler.engine.close_spider(crawler.engine.spider, "seenstore_store_locked")

            reactor.callLater(0, close)

    def request_seen(self, request) -> bool:
        """True when an equivalent request was seen before (and so is dropped);
        otherwise remember it and return False."""
        if self.locked_by_another:
            return True  # the spider is being closed: schedule nothing
        if self._remote is not None:
            return self._remote_seen(request)
        if request.method == "GET" and not request.body:
            seen = self._get.seen_url(request.url)
            if seen is not None:
                return seen
        if self._other is None:
            self._other = LiveSet(self.path + NONGET_SUFFIX, None, self.mode, self.flush_keys)
        fp = self.fingerprinter.fingerprint(request)
        return self._other.seen(int.from_bytes(fp[:8], "little"))

    def _remote_seen(self, request) -> bool:
        if request.method == "GET" and not request.body and not isinstance(
                try_normalise(request.url), Rejection):
            return self._remote.seen_url(request.url)
        fp = self.fingerprinter.fingerprint(request)
        return self._remote.seen(int.from_bytes(fp[:8], "little"))


    def close(self, reason: str) -> None:
        """Commit every key claimed and close the stores (removing a temporary one)."""
        try:
            for live in (self._get, self._other, self._remote):
                if live is not None:
                    live.close()
        finally:
            self._get = self._other = self._remote = None
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)

    def log(self, request, spider) -> None:
        """Log a filtered request as Scrapy's RFPDupeFilter does, and count it in
        the ``dupefilter/filtered`` stat."""
        from scrapy.utils.request import referer_str

        if self.debug:
            msg = "Filtered duplicate request: %(request)s (referer: %(referer)s)"
            args = {"request": request, "referer": referer_str(request)}
            self.logger.debug(msg, args, extra={"spider": spider})
        elif self.logdupes:
            msg = ("Filtered duplicate request: %(request)s - no more duplicates will be shown"
                   " (see DUPEFILTER_DEBUG to show all duplicates)")
            self.logger.debug(msg, {"request": request}, extra={"spider": spider})
            self.logdupes = False
        spider.crawler.stats.inc_value("dupefilter/filtered")


__all__ = ["SeenStoreDupeFilter", "LiveSet", "RemoteSet"]
