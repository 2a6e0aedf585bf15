#!/usr/bin/env python3
"""A small asyncio crawler that uses seenstore as its dedup stage.

It serves a test site on 127.0.0.1 (three virtual hosts, alpha.test, beta.test and
gamma.test, all resolved to loopback inside this script; /etc/hosts is not touched)
whose links spell the same pages in many ways: fragments, tracking parameters, the
default port, host and scheme case, dot segments, escaped unreserved characters and
relative references. It crawls the site three times, deduplicating on

  off     the link as written (resolved with urllib.parse.urljoin, nothing else),
  safe    seenstore's canonical URL under the safe rules (policy safe-v1),
  policy  the canonical URL under examples/crawl-policy.toml (tracking parameters off),

each through a fresh SeenStore, and reports fetches, duplicate fetches (a fetch whose
canonical URL or content digest was fetched before) and the duplicate rate.

    python examples/crawl.py [--json] [--workers 4]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import re
import sys
import tempfile
import zlib
from posixpath import dirname, relpath
from urllib.parse import unquote, urljoin, urlsplit

from seenstore.url.fingerprint import fingerprint_many
from seenstore.url.normalise import try_normalise
from seenstore.url.fastpath import normalise_many
from seenstore.url.policy import DEFAULT_POLICY, load_policy
from seenstore.store import SeenStore

HOSTS = ("alpha.test", "beta.test", "gamma.test")
PATHS = ("/", "/about", "/About", "/docs/", "/docs/intro", "/docs/install", "/blog/",
         "/blog/post-1", "/blog/post-2", "/blog/post-3", "/~team",
         "/search?q=seen&page=1", "/search?q=seen&page=2")
POLICY_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crawl-policy.toml")
START = "http://alpha.test/"


# ------------------------------------------------------------------- the site
def remove_dot_segments(path: str) -> str:
    """RFC 3986 5.2.4, as a server resolves a request path (keeps a trailing '/')."""
    out: list[str] = []
    segs = path.split("/")
    for i, seg in enumerate(segs[1:], 1):
        last = i == len(segs) - 1
        if seg == "..":
            if len(out) > 0:
                out.pop()
            if last:
                out.append("")
        elif seg == ".":
            if last:
                out.append("")
        else:
            out.append(seg)
    return "/" + "/".join(out)


def resource(host: str, target: str) -> tuple[str, str] | None:
    """The page a request names: the server ignores host case, the port, escapes of
    unreserved characters, dot segments and utm_* parameters. None = no such page."""
    host = host.split(":")[0].lower()
    path, _, query = target.partition("?")
    path = remove_dot_segments(unquote(path))
    params = [p for p in query.split("&") if p and not p.startswith("utm_")]
    page = path + ("?" + "&".join(params) if params else "")
    return (host, page) if host in HOSTS and page in PATHS else None


def spell(host: str, page: str, here_host: str, here_page: str, rng: random.Random) -> str:
    """One of the many ways a link to http://host/page may be written."""
    path, _, query = page.partition("?")
    if rng.random() < 0.15:
        path = path.replace("~", "%7e").replace("-", "%2D").replace("o", "%6F", 1)
    if rng.random() < 0.15 and path.count("/") > 1:
        head, _, tail = path.rpartition("/")
        path = f"{head}/./../{head.rsplit('/', 1)[-1]}/{tail}" if head else path
    if rng.random() < 0.3:
        extra = "utm_source=feed&utm_medium=rss"
        query = f"{query}&{extra}" if query else extra
    ref = path + ("?" + query if query else "")
    if host == here_host and rng.random() < 0.4:
        if rng.random() < 0.5:  # relative: "../about", "post-2", "./"
            rel = relpath(path, dirname(here_page.partition("?")[0]))
            ref = rel + ("/" if path.endswith("/") else "") + ("?" + query if query else "")
    else:
        shown = rng.choice([host, host, host.upper(), host.capitalize()])
        port = ":80" if rng.random() < 0.25 else ""
        scheme = "HTTP" if rng.random() < 0.1 else "http"
        ref = f"{scheme}://{shown}{port}{ref}"
    if rng.random() < 0.3:
        ref += rng.choice(["#top", "#comments", "#"])
    return ref


def page_links(host: str, page: str) -> list[str]:
    """The links of one page: deterministic, every page reachable from START."""
    rng = random.Random(zlib.crc32(f"{host}{page}".encode()))
    targets = []
    if page == "/":
        targets += [(host, p) for p in PATHS]
        if host == HOSTS[0]:
            targets += [(h, "/") for h in HOSTS]
    targets += [(rng.choice(HOSTS), rng.choice(PATHS)) for _ in range(6)]
    return [spell(h, p, host, page, rng) for h, p in targets]


def render(host: str, page: str) -> bytes:
    links = "\n".join(f'<a href="{ref}">link</a>' for ref in page_links(host, page))
    return f"<html><h1>{host} {page}</h1>\n{links}\n</html>\n".encode()


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        _, target, _ = lines[0].split(" ", 2)
        host = next((ln.split(":", 1)[1].strip() for ln in lines[1:]
                     if ln.lower().startswith("host:")), "")
        page = resource(host, target)
        status, body = ("200 OK", render(*page)) if page else (
            "404 Not Found", f"no page {host}{target}".encode())
        writer.write(f"HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        await writer.drain()
    finally:
        writer.close()


# ---------------------------------------------------------------- the crawler
class Crawl:
    """One crawl. ``key_of`` maps (links, base) to (fetch URLs, dedup URLs); the
    store admits fingerprints of the dedup URLs and says which are new."""

    def __init__(self, mode: str, store: SeenStore, port: int, workers: int):
        self.mode, self.store, self.port, self.workers = mode, store, port, workers
        self.policy = load_policy(POLICY_FILE)  # the yardstick for "same canonical URL"
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.fetches = self.duplicates = self.errors = 0
        self.seen_canonical: set[str] = set()
        self.seen_digest: set[str] = set()

    def dedup_strings(self, links: list[str], base: str | None) -> list[str]:
        if self.mode == "off":
            return [urljoin(base, ln) if base else ln for ln in links]
        policy = self.policy if self.mode == "policy" else DEFAULT_POLICY
        return normalise_many(links, base=base, policy=policy).urls

    def admit(self, links: list[str], base: str | None) -> None:
        """Dedup stage: check and add in one synchronous step (no await in between)."""
        urls = [u for u in self.dedup_strings(links, base) if u.startswith(("http:", "https:"))]
        if not urls:
            return
        new = self.store.add(fingerprint_many(urls, self.store.layout))
        for url, is_new in zip(urls, new.tolist()):
            if is_new:
                self.queue.put_nowait(url)

    async def fetch(self, url: str) -> bytes | None:
        parts = urlsplit(url)
        if not (parts.hostname or "").endswith(".test") or parts.port not in (None, 80):
            return None
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)  # *.test -> loopback
        try:
            writer.write(f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                         "Connection: close\r\n\r\n".encode())
            await writer.drain()
            raw = await asyncio.wait_for(reader.read(), 10)
        finally:
            writer.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        return body if head.split(b" ", 2)[1] == b"200" else None

    async def worker(self) -> None:
        while True:
            url = await self.queue.get()
            try:
                try:
                    body = await self.fetch(url)
                except (TimeoutError, OSError, IndexError):
                    body = None
                self.fetches += 1
                canonical = try_normalise(url, policy=self.policy)
                digest = hashlib.sha256(body or b"").hexdigest()
                if canonical in self.seen_canonical or digest in self.seen_digest:
                    self.duplicates += 1
                self.seen_canonical.add(canonical)
                self.seen_digest.add(digest)
                if body is None:
                    self.errors += 1
                else:
                    self.admit(re.findall(r'href="([^"]*)"', body.decode()), url)
            finally:
                self.queue.task_done()

    async def run(self) -> dict:
        self.admit([START], None)
        tasks = [asyncio.create_task(self.worker()) for _ in range(self.workers)]
        await self.queue.join()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return {"mode": self.mode, "policy": self.store.policy_id, "fetches": self.fetches,
                "pages": len(self.seen_digest - {hashlib.sha256(b"").hexdigest()}),
                "duplicate_fetches": self.duplicates, "errors": self.errors,
                "duplicate_rate": self.duplicates / self.fetches if self.fetches else 0.0}


async def crawl_all(workers: int = 4) -> dict:
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    policy_ids = {"off": "none (raw link strings)", "safe": DEFAULT_POLICY.identity,
                  "policy": load_policy(POLICY_FILE).identity}
    results = []
    async with server:
        for mode in ("off", "safe", "policy"):
            with tempfile.TemporaryDirectory() as d, SeenStore.open(
                    os.path.join(d, "store"), create=True, policy_id=policy_ids[mode],
                    shard_bits=0) as store:
                results.append(await Crawl(mode, store, port, workers).run())
    return {"site": {"hosts": list(HOSTS), "pages": len(HOSTS) * len(PATHS), "port": port},
            "crawls": results}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--workers", type=int, default=4)
    a = ap.parse_args(argv)
    report = asyncio.run(crawl_all(a.workers))
    if a.json:
        print(json.dumps(report, indent=1))
        return 0
    site = report["site"]
    print(f"test site: {', '.join(site['hosts'])} on 127.0.0.1:{site['port']}, "
          f"{site['pages']} pages")
    print(f"{'dedup on':32s} {'fetches':>7s} {'pages':>5s} {'dup fetches':>11s} {'dup rate':>8s}")
    names = {"off": "link as written (no normalise)", "safe": "canonical URL, safe rules",
             "policy": "canonical URL + crawl policy"}
    for r in report["crawls"]:
        print(f"{names[r['mode']]:32s} {r['fetches']:7d} {r['pages']:5d} "
              f"{r['duplicate_fetches']:11d} {r['duplicate_rate']:8.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
