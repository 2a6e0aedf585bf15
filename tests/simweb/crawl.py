"""A crawler loop over the simulated web through a ``DedupStage``, and its score.

Owns: the crawl (``crawl``: frontier, HTTP fetches, link extraction, the stage's
offers and evidence, an optional WARC of every exchange) and the score against the
web's ground truth (``score``). The crawler fetches over real HTTP/1.1
(``http.client`` to 127.0.0.1:port with the simulated Host header) and never
follows a redirect by itself: a Location is a link like any other, offered to the
stage. One exception, so that no policy loses a page by its own fold: a redirect
whose target has the requested URL's own canonical form under the policy in force
(e.g. ``strip_www`` on a host that redirects to ``www.``) is fetched at once, since
the stage would never hand it out.

The frontier holds discovered links in one FIFO queue per host, and hosts take
turns (one fetch a turn, as a polite crawler spreads its load). A host's links are
offered to the stage when it has nothing handed out left to fetch, so what the
stage hands out is fetched soon, under the policy in force at that time.
After every fetch the evidence goes to ``stage.record_fetch`` when the stage has it
(``learning_supported()``: ``DedupStage.open(..., learn=True)`` and
``stage.record_fetch``).
"""

from __future__ import annotations

import html
import http.client
import inspect
import io
import re
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from seenstore.errors import PolicyError
from seenstore.stage import DedupStage
from seenstore.url.normalise import try_normalise
from seenstore.url.policy import DEFAULT_POLICY, Policy, parse_policy

from .web import Web

USER_AGENT = "seenstore-simweb-crawler/1"
MAX_SAME_KEY_HOPS = 5
OFFER_BATCH = 8      # discovered links of one host offered at a time
# The global rules of the domain documents (strip trailing slash, sort query, ...), on every host.
AGGRESSIVE_TOML = """\
version = "aggressive-global"
[[rule]]
hosts = ["*"]
strip_tracking = true
sort_query = true
trailing_slash = "remove"
strip_www = true
"""
CONFIGS = ("safe", "learn", "aggressive", "oracle")
_LINK_CANONICAL = re.compile(r'<([^>]*)>\s*;[^,]*?\brel\s*=\s*"?canonical\b', re.I)


def learning_supported() -> bool:
    """True when the stage learns online: ``DedupStage.open(..., learn=True)`` and
    ``DedupStage.record_fetch`` exist."""
    return (hasattr(DedupStage, "record_fetch")
            and "learn" in inspect.signature(DedupStage.open).parameters)


@dataclass
class Fetch:
    """One HTTP exchange of the crawl (``followed``: a same-key redirect's target,
    fetched at once)."""

    url: str
    status: int
    followed: bool = False


@dataclass
class CrawlResult:
    fetches: list[Fetch]
    seconds: float
    offers: int
    stats: dict
    policy_toml: str | None = None      # the stage's policy at the end, when it can say
    findings: list = field(default_factory=list)


_ANCHOR = re.compile(r"<a\s[^>]*?\bhref\s*=\s*\"([^\"]*)\"", re.I)
_LINK_TAG = re.compile(r"<link\s[^>]*>", re.I)
_HREF = re.compile(r"\bhref\s*=\s*\"([^\"]*)\"", re.I)
_REL_CANONICAL = re.compile(r"\brel\s*=\s*\"?[^\">]*\bcanonical\b", re.I)


def links_of(body: bytes, link_header: str | None) -> tuple[list[str], str | None]:
    """(the links of an HTML body: ``<a href>``, ``<link rel=canonical href>``, then a
    Link-header canonical; the header's canonical). Double-quoted attributes only
    (what the simulated web writes)."""
    text = body.decode("utf-8", "replace")
    links = [html.unescape(h) for h in _ANCHOR.findall(text)]
    for tag in _LINK_TAG.findall(text[:text.find("</head>")]):
        href = _HREF.search(tag)
        if href and _REL_CANONICAL.search(tag):
            links.append(html.unescape(href.group(1)))
    m = _LINK_CANONICAL.search(link_header or "")
    header_canonical = m.group(1) if m else None
    return links + ([header_canonical] if header_canonical else []), header_canonical


class _Http:
    """One persistent HTTP/1.1 connection to the simulated web's server."""

    def __init__(self, port: int):
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def get(self, url: str):
        """GET ``url`` (a canonical http URL) -> (status, reason, headers, body)."""
        host, target = url.split("/", 3)[2], "/" + url.split("/", 3)[3]
        headers = {"Host": host, "User-Agent": USER_AGENT, "Accept": "text/html"}
        for attempt in (0, 1):
            try:
                self.conn.request("GET", target, headers=headers)
                r = self.conn.getresponse()
                return r.status, r.reason, r.getheaders(), r.read()
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()  # the server dropped the kept-alive connection: once more
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()


class _Warc:
    """Request and response records of every exchange (warcio, gzip)."""

    def __init__(self, path: str):
        from warcio.warcwriter import WARCWriter
        self.file = open(path, "wb")
        self.writer = WARCWriter(self.file, gzip=True)

    def write(self, url, status, reason, headers, body) -> None:
        from warcio.statusandheaders import StatusAndHeaders
        host, target = url.split("/", 3)[2], "/" + url.split("/", 3)[3]
        w = self.writer
        resp = w.create_warc_record(
            url, "response", payload=io.BytesIO(body),
            http_headers=StatusAndHeaders(f"{status} {reason}", headers, protocol="HTTP/1.1"))
        req = w.create_warc_record(
            url, "request", http_headers=StatusAndHeaders(
                f"GET {target} HTTP/1.1", [("Host", host), ("User-Agent", USER_AGENT),
                                           ("Accept", "text/html")], is_http_request=True),
            warc_headers_dict={"WARC-Concurrent-To": resp.rec_headers["WARC-Record-ID"]})
        w.write_record(resp)
        w.write_record(req)

    def close(self) -> None:
        self.file.close()


def _policy_now(stage: DedupStage) -> Policy:
    """The policy the stage answers under now (the store's, once it holds one)."""
    p = getattr(stage.store, "policy", None)
    return p if isinstance(p, Policy) else (stage.policy or DEFAULT_POLICY)


class _Frontier:
    """Discovered links in one FIFO queue per host and, beside each, the URLs the
    stage handed out for that host and not fetched yet (at most one offer's worth:
    admission happens just before the fetch, under the policy in force then).
    Hosts take turns, one fetch a turn (a polite crawler's round robin)."""

    def __init__(self):
        self.links: dict[str, deque[str]] = {}
        self.ready: dict[str, deque[tuple[str, int]]] = {}
        self.ring: deque[str] = deque()

    def _host(self, url: str) -> str:
        host = url.split("/", 3)[2]
        if host not in self.links:
            self.links[host], self.ready[host] = deque(), deque()
            self.ring.append(host)
        return host

    def discover(self, urls) -> None:
        for u in urls:
            self.links[self._host(u)].append(u)

    def admit(self, res, front: bool = False) -> None:
        """URLs the stage handed out (payload: the canonical URL), to their host's turn."""
        for _, u in res:
            q = self.ready[self._host(u)]
            q.appendleft((u, 0)) if front else q.append((u, 0))

    def follow(self, url: str, hops: int) -> None:
        self.ready[self._host(url)].appendleft((url, hops))


def crawl(web: Web, port: int, store_dir: str, *, policy: Policy | None = None,
          learn: bool = False, stage_options: dict | None = None, warc: str | None = None,
          max_fetches: int = 100_000) -> CrawlResult:
    """Crawl ``web`` (served on 127.0.0.1:``port``) from its seeds until the stage
    hands out nothing more, with a new store at ``store_dir``. ``policy``: the
    stage's URL policy (None: the safe rules). ``learn``: open the stage with
    ``learn=True`` (NotImplementedError when ``learning_supported()`` is False).
    ``stage_options``: more ``DedupStage.open`` arguments. ``warc``: write every
    exchange there.

    A turn of host h: if the stage handed out none of h's URLs yet, offer h's next
    discovered links (OFFER_BATCH at a time) until it does or they run out; fetch
    one. A redirect's Location is offered at once, before its evidence is recorded
    (so a rule learned from that very record cannot fold the target into the
    source's key before it is handed out). When no host has anything left, flush
    the stage: held URLs a merge found new come back."""
    opts = {"create": True, "wal_sync": "never", "sync": False, **(stage_options or {})}
    if policy is not None:
        opts["policy"] = policy
    if learn:
        if not learning_supported():
            raise NotImplementedError(
                "this seenstore's DedupStage does not learn: it has no open(..., learn=True) "
                "and record_fetch (issue 38)")
        opts["learn"] = True
    stage = DedupStage.open(store_dir, **opts)
    record = getattr(stage, "record_fetch", None)
    record_params = inspect.signature(record).parameters if record else {}
    http_ = _Http(port)
    warc_out = _Warc(warc) if warc else None
    fetches: list[Fetch] = []
    frontier = _Frontier()
    frontier.discover(_safe(web.seeds, None))
    offers = 0
    t0 = time.perf_counter()
    try:
        while len(fetches) < max_fetches:
            if not frontier.ring:
                res = stage.flush()
                if not len(res):
                    break
                frontier.admit(res)
                continue
            host = frontier.ring.popleft()
            links, ready = frontier.links[host], frontier.ready[host]
            while not ready and links:
                batch = [links.popleft() for _ in range(min(OFFER_BATCH, len(links)))]
                frontier.admit(stage.offer(batch))
                offers += 1
            if not ready:
                if links:
                    frontier.ring.append(host)
                else:
                    del frontier.links[host], frontier.ready[host]
                continue
            frontier.ring.append(host)
            url, hops = ready.popleft()
            status, reason, headers, body = http_.get(url)
            fetches.append(Fetch(url, status, hops > 0))
            if warc_out:
                warc_out.write(url, status, reason, headers, body)
            hdr = {k.lower(): v for k, v in headers}
            location = hdr.get("location")
            loc = try_normalise(location, base=url) if location else None
            loc = loc if isinstance(loc, str) else None
            if loc is not None and 300 <= status < 400:
                p = _policy_now(stage)
                if hops < MAX_SAME_KEY_HOPS and (try_normalise(loc, policy=p)
                                                 == try_normalise(url, policy=p)):
                    frontier.follow(loc, hops + 1)  # its own spelling: the stage never would
                else:
                    frontier.admit(stage.offer([loc]), front=True)
                    offers += 1
            if record is not None:
                kw = {"location": loc, "body": body if 200 <= status < 300 else None}
                if "link_header" in record_params:
                    kw["link_header"] = hdr.get("link")
                elif hdr.get("link"):
                    kw["canonical"] = links_of(b"", hdr["link"])[1]
                record(url, status, **kw)
            if 200 <= status < 300 and "html" in hdr.get("content-type", ""):
                frontier.discover(_safe(links_of(body, hdr.get("link"))[0], url))
        seconds = time.perf_counter() - t0
        stats = stage.stats()
        toml, findings = _learned(stage)
    finally:
        http_.close()
        if warc_out:
            warc_out.close()
        stage.close()
    return CrawlResult(fetches, seconds, offers, stats, toml, findings)


def _safe(links, base: str | None) -> list[str]:
    """``links`` resolved against ``base`` in their safe-rule form (what has none is
    dropped): the frontier files a link under its host."""
    out = []
    for link in links:
        u = try_normalise(link, base=base)
        if isinstance(u, str):
            out.append(u)
    return out


def aggressive_policy() -> Policy:
    return parse_policy(AGGRESSIVE_TOML, "simweb aggressive policy")


def oracle_policy(web: Web) -> tuple[Policy, bool]:
    """(the per-host policy the ground truth implies, whether it has the new keys
    ``lowercase_path`` / ``index_documents``: dropped when this seenstore refuses them)."""
    try:
        return parse_policy(web.oracle_toml(), "simweb oracle policy"), True
    except PolicyError:
        return parse_policy(web.oracle_toml(extended=False), "simweb oracle policy"), False


def crawl_config(name: str, web: Web, port: int, store_dir: str, **kw) -> CrawlResult:
    """``crawl`` under one of CONFIGS: "safe" (the safe rules only), "learn" (online
    learning), "aggressive" (AGGRESSIVE_TOML), "oracle" (``oracle_policy``: the rules
    of each host known from the start, the ceiling of what learning can cut)."""
    if name == "safe":
        return crawl(web, port, store_dir, **kw)
    if name == "learn":
        return crawl(web, port, store_dir, learn=True, **kw)
    if name == "aggressive":
        return crawl(web, port, store_dir, policy=aggressive_policy(), **kw)
    if name == "oracle":
        return crawl(web, port, store_dir, policy=oracle_policy(web)[0], **kw)
    raise ValueError(f"unknown config {name!r}; one of {CONFIGS}")


def _learned(stage: DedupStage) -> tuple[str | None, list]:
    """The stage's policy as TOML and its findings, where this seenstore can say."""
    p = _policy_now(stage)
    toml = p.to_toml() if hasattr(p, "to_toml") and p is not DEFAULT_POLICY else None
    findings = list(getattr(stage, "findings", None) or [])
    return toml, findings


def score(result: CrawlResult, web: Web, reachable: set[str] | None = None) -> dict:
    """The crawl against the ground truth. ``duplicate_fetches``: 2xx fetches of a page
    already fetched; ``redirects``, ``not_found``: fetches of no page;
    ``wrong_merges``: reachable pages never fetched (``missed``: some of them)."""
    reachable = web.reachable() if reachable is None else reachable
    seen: set[str] = set()
    dup, dup_hosts, status = 0, Counter(), Counter()
    for f in result.fetches:
        status[f.status // 100] += 1
        if 200 <= f.status < 300:
            page = web.respond(f.url, body=False).page
            if page in seen:
                dup += 1
                dup_hosts[web.host_of_page(page).name] += 1
            seen.add(page)
    missed = reachable - seen
    missed_hosts = Counter(web.host_of_page(p).name for p in missed)
    return {
        "fetches": len(result.fetches),
        "page_fetches": status[2],
        "duplicate_fetches": dup,
        "redirects": status[3],
        "same_key_redirects": sum(f.followed for f in result.fetches),
        "not_found": status[4],
        "pages_fetched": len(seen & reachable),
        "reachable": len(reachable),
        "wrong_merges": len(missed),
        "missed": sorted(missed)[:10],
        "missed_hosts": dict(missed_hosts.most_common()),
        "duplicate_hosts": dict(dup_hosts.most_common()),
        "seconds": round(result.seconds, 2),
        "fetches_per_s": round(len(result.fetches) / result.seconds) if result.seconds else None,
    }


__all__ = ["AGGRESSIVE_TOML", "CONFIGS", "CrawlResult", "Fetch", "aggressive_policy", "crawl",
           "crawl_config", "learning_supported", "links_of", "oracle_policy", "score"]
