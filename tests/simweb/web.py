"""The simulated web: hosts, their behaviours, their answers and the ground truth.

Owns: which hosts exist (``Web.hosts``, each with a ``Behaviour`` and a ``kind``
label), the pages each serves and the link spellings on them (fixed by the seed),
what any request gets (``Web.respond(url, clock)``: status, headers, body, the page
served, the links it carries) and the ground truth a crawl is judged by:
``page_id(url)`` (the distinct page a URL leads to, following redirects; None for a
404) and ``reachable()`` (the pages reachable from ``seeds`` through links,
canonicals and redirects). Pure: no I/O, no clock, no seenstore import (the ground
truth must not depend on the code it judges); ``server.py`` serves it.

Hosts where a risky rule holds (the server ignores a parameter, the query order,
the path case, a trailing slash or ``www.``, serves index documents as their
directory, declares canonicals, stamps the time into every body) sit beside hosts
where the same rule would be wrong (``?id=7`` and ``?id=07``, ``/news/2024/05``
and ``/news/2024/05/``, order-sensitive queries, case-sensitive paths, parameters
that look like tracking but select content, ``www.`` and the bare name as two
sites, an index document that is not its directory). Links spell pages many ways,
so a crawler that folds only the safe spellings fetches many duplicates.
"""

from __future__ import annotations

import datetime
import hashlib
import html
import random
from collections import deque
from dataclasses import dataclass, field
from urllib.parse import urldefrag, urljoin, urlsplit

SEED = 38
HUB = "hub.test"
P_CANONICAL = 0.4         # share of links spelled as the page's own URL
TOKENS = 3                # values of an ignored parameter a page's links use
MAX_HOPS = 5              # redirects followed by page_id
WORDS = 160               # words of a page's text (timestamped pages: TS_WORDS)
TS_WORDS = 700
EPOCH = datetime.datetime(2024, 5, 1, tzinfo=datetime.timezone.utc)
VIEW_VALUES = {"view": ("print", "amp"), "from": ("rss", "mail"), "print": ("1",)}


@dataclass(frozen=True)
class Behaviour:
    """What a host's server does with the spellings of its pages."""

    ignored: tuple[str, ...] = ()   # query parameters the server ignores (same body)
    views: tuple[str, ...] = ()     # parameters that change the template, not the page
    canonical: str = ""             # "html" | "header": every answer declares the page's URL
    any_order: bool = False         # the query's parameter order is ignored
    slash: str = "exact"            # "exact" | "add" (301 /a -> /a/) | "remove" (301 /a/ -> /a)
    #                                 | "either" (both spellings serve the page)
    www: str = ""                   # "" | "to_bare" (301 www.h -> h) | "to_www" (301 h -> www.h)
    any_case: bool = False          # the path's case is ignored
    index: tuple[str, ...] = ()     # default documents served as their directory
    timestamp: bool = False         # every answer carries the time it was made


@dataclass
class Page:
    """One distinct page: its own URL (``id``) and the links it carries."""

    id: str
    host: str                       # the host name it lives on
    path: str
    query: tuple[str, ...]          # "name=value" pairs, in the page's own order
    links: list[str] = field(default_factory=list)   # as written in the HTML
    targets: list[str] = field(default_factory=list)  # page ids the links lead to


@dataclass(frozen=True)
class Response:
    """A server's answer. ``page``: the page served (200), else None. ``links``:
    absolute URLs (fragment dropped) of its anchors, canonicals and Location."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    page: str | None
    links: tuple[str, ...]


def _hash(*parts: object) -> int:
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest(), "big")


def _key_path(path: str, b: Behaviour) -> str:
    return path.lower() if b.any_case else path


def _key_query(query, b: Behaviour) -> tuple[str, ...]:
    """The query as the server looks it up: sorted by name (stable) if order is ignored."""
    return tuple(sorted(query, key=lambda p: p.split("=", 1)[0]) if b.any_order else query)


def page_url(host: str, path: str, query) -> str:
    return f"http://{host}{path}" + (("?" + "&".join(query)) if query else "")


def absolute(link: str, base: str) -> str:
    """``link`` resolved against ``base`` as the server reads it: no fragment, host
    lowercased, default port dropped (the safe rules a server cannot see)."""
    url = urldefrag(urljoin(base, link))[0]
    s = urlsplit(url)
    host = (s.hostname or "").rstrip(".")
    if s.port not in (None, 80):
        host = f"{host}:{s.port}"
    return f"http://{host}{s.path or '/'}" + (f"?{s.query}" if "?" in url else "")


class Host:
    """A site: its names, behaviour, pages (``pages``: lookup key -> Page) and the
    spellings its links use. ``wrong``: the risky rules that would merge two of
    its pages (documentation, and the bench's labels)."""

    def __init__(self, name: str, kind: str, behaviour: Behaviour, wrong: tuple[str, ...] = ()):
        self.name = name
        self.kind = kind
        self.b = behaviour
        self.wrong = wrong
        self.alias = ""
        if behaviour.www == "to_bare":
            self.alias = "www." + name
        elif behaviour.www == "to_www":
            self.alias = name.removeprefix("www.")
        self.names = {name} | ({self.alias} if self.alias else set())
        self.pages: dict[tuple, Page] = {}
        self.order: list[Page] = []
        self.extra: dict[str, list[tuple[str, str, tuple]]] = {}  # page id -> other keys

    def add(self, host: str, path: str, query=(), *, also=()) -> Page:
        """A page at ``host`` + ``path`` + ``query``; ``also``: (host, path, query)
        spellings no rule of the policy vocabulary folds that serve it too."""
        page = Page(page_url(host, path, query), host, path, tuple(query))
        self.pages[(host, _key_path(path, self.b), _key_query(query, self.b))] = page
        for h, p, q in also:
            self.pages[(h, _key_path(p, self.b), _key_query(q, self.b))] = page
            self.extra.setdefault(page.id, []).append((h, p, tuple(q)))
        self.order.append(page)
        return page

    # ------------------------------------------------------------ answering
    def answer(self, host: str, path: str, query: str | None):
        """(status, Location or None, Page or None, view pair or None)."""
        b = self.b
        target = path + (f"?{query}" if query is not None else "")
        if host == self.alias and b.www in ("to_bare", "to_www"):
            return 301, f"http://{self.name}{target}", None, None
        kept, view = [], None
        for pair in (query.split("&") if query else []):
            name = pair.split("=", 1)[0]
            if name in b.ignored:
                continue
            if name in b.views:
                view = pair
                continue
            kept.append(pair)
        kept = _key_query(kept, b)
        key_path = _key_path(path, b)
        last = key_path.rsplit("/", 1)[1]
        if last and last in {d.lower() if b.any_case else d for d in b.index}:
            key_path = key_path[: -len(last)]
        page = self.pages.get((host, key_path, kept))
        if page is not None:
            return 200, None, page, view
        if b.slash != "exact" and key_path != "/":
            other = key_path[:-1] if key_path.endswith("/") else key_path + "/"
            page = self.pages.get((host, other, kept))
            if page is not None:
                if b.slash == "either":
                    return 200, None, page, view
                rest = f"?{query}" if query is not None else ""
                if b.slash == "add" and not path.endswith("/"):
                    return 301, self._relative_or_not(path + "/" + rest), None, None
                if b.slash == "remove" and path.endswith("/"):
                    return 301, self._relative_or_not(path.rstrip("/") + rest), None, None
        return 404, None, None, None

    def _relative_or_not(self, target: str) -> str:
        # some servers send a relative Location (RFC 9110 allows it)
        return target if _hash(self.name, target) % 2 else f"http://{self.name}{target}"

    # ------------------------------------------------------------ spelling
    def spell(self, page: Page, rnd: random.Random) -> tuple[str, str, list[str]]:
        """A spelling of ``page`` a link uses: (host, path, query pairs). Finite per
        page: ignored parameters take one of TOKENS values, views a fixed value."""
        host, path, query = page.host, page.path, list(page.query)
        extra = self.extra.get(page.id, [])
        if rnd.random() < P_CANONICAL:
            return host, path, query
        b = self.b
        ops = [f"ignored:{n}" for n in b.ignored] + [f"view:{n}" for n in b.views]
        ops += ["order"] if b.any_order and len(query) >= 2 else []
        ops += ["slash"] if b.slash != "exact" and path != "/" else []
        ops += ["www"] if b.www and host == self.name else []
        ops += ["case"] if b.any_case and path != "/" else []
        ops += ["index"] if b.index and path.endswith("/") else []
        ops += ["extra"] if extra else []
        if not ops:
            return host, path, query
        chosen = set(rnd.sample(ops, min(len(ops), 1 + (rnd.random() < 0.3))))
        if "extra" in chosen:
            host, path, q = rnd.choice(extra)
            query = list(q)
        if "www" in chosen:
            host = self.alias
        if "case" in chosen:
            path = rnd.choice([path.upper(), path.lower(), path.swapcase()])
        if "index" in chosen:
            path += rnd.choice(b.index)
        elif "slash" in chosen:
            path = path[:-1] if path.endswith("/") else path + "/"
        for op in sorted(chosen):
            kind, _, name = op.partition(":")
            if kind == "ignored":
                value = f"{_hash(page.id, name, rnd.randrange(TOKENS)) % 16**8:08x}"
                query.insert(rnd.randrange(len(query) + 1), f"{name}={value}")
            elif kind == "view":
                query.append(f"{name}={rnd.choice(VIEW_VALUES[name])}")
        if "order" in chosen or (b.any_order and len(query) >= 2 and rnd.random() < 0.5):
            query = query[1:] + query[:1]
        return host, path, query


# ---------------------------------------------------------------- catalogue
_SYL = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "gu", "fe", "hi",
        "ba", "co", "ly", "mo", "nu", "qui", "ra", "se", "to", "ve", "wa", "xi", "yo")
_SECTIONS = ("news", "guide", "shop", "blog", "docs", "team")


def _word(rnd: random.Random) -> str:
    return "".join(rnd.choice(_SYL) for _ in range(rnd.randint(2, 4)))


def _articles(h: Host, n: int, rnd: random.Random, *, dirs=False, camel=False) -> None:
    """A home page and n - 1 pages /section/word-i (dirs: ending in /; camel:
    /Section/Word-i)."""
    h.add(h.name, "/")
    for i in range(1, n):
        sec, word = rnd.choice(_SECTIONS), _word(rnd)
        path = f"/{sec}/{word}-{i}" + ("/" if dirs else "")
        h.add(h.name, path.title() if camel else path)


def _queries(h: Host, n: int, rnd: random.Random, *, dirs=False) -> None:
    """A home page and n - 1 listing pages /list?... with two or three parameters
    (dirs: /list/?...)."""
    h.add(h.name, "/")
    for i in range(1, n):
        q = [f"cat={rnd.choice(_SECTIONS)}", f"page={i}"]
        if i % 3 == 0:
            q.append(f"sort={rnd.choice(('new', 'top', 'old'))}")
        rnd.shuffle(q)
        h.add(h.name, "/list/" if dirs else "/list", q)


def _pairs(h: Host, n: int, make) -> None:
    """A home page and pairs of distinct pages whose URLs differ in one respect
    (``make(i)`` -> two (host, path, query))."""
    h.add(h.name, "/")
    for i in range(1, n // 2 + 1):
        for spec in make(i):
            h.add(*spec)


def _catalogue(n: int, rnd: random.Random) -> list[Host]:
    """Every host of the web; ``n`` pages per rule host (counter hosts ~n, plain n/3)."""
    B = Behaviour
    hosts: list[Host] = []

    def host(name, kind, b, layout, wrong=(), pages=n, **kw):
        h = Host(name, kind, b, wrong)
        if layout is not None:
            layout(h, pages, rnd, **kw)
        hosts.append(h)
        return h

    # -- where a risky rule holds (a learner should find it) --
    host("sess-a.test", "ignored session parameter xsess", B(ignored=("xsess",)), _articles)
    host("sess-b.test", "ignored session parameter zsid", B(ignored=("zsid",)), _articles)
    host("track-c.test", "ignored tracking parameter ref_tag", B(ignored=("ref_tag",)),
         _articles)
    host("track-d.test", "ignored src_cmp and clk", B(ignored=("src_cmp", "clk")), _articles)
    host("order-e.test", "query order ignored", B(any_order=True), _queries)
    host("order-f.test", "query order ignored, _trk ignored",
         B(any_order=True, ignored=("_trk",)), _queries)
    host("slash-add-g.test", "301 /a -> /a/", B(slash="add"), _articles, dirs=True)
    host("slash-rm-h.test", "301 /a/ -> /a", B(slash="remove"), _articles)
    host("slash-either-i.test", "/a and /a/ one page", B(slash="either"), _articles)
    host("bare-j.test", "301 www. -> bare", B(www="to_bare"), _articles)
    host("www.k-site.test", "301 bare -> www.", B(www="to_www"), _articles)
    host("case-l.test", "path case ignored", B(any_case=True), _articles, camel=True)
    host("iis-m.test", "path case ignored, Default.aspx, 301 /a -> /a/",
         B(any_case=True, index=("Default.aspx",), slash="add"), _articles, dirs=True,
         camel=True)
    host("index-n.test", "index.html is its directory, 301 /a -> /a/",
         B(index=("index.html",), slash="add"), _articles, dirs=True)
    host("index-o.test", "index.php is its directory, xsess ignored, /a is 404",
         B(index=("index.php",), ignored=("xsess",)), _articles, ("trailing slash remove",),
         dirs=True)
    host("canon-p.test", "view=print|amp, <link rel=canonical>",
         B(views=("view",), canonical="html"), _articles)
    host("canon-q.test", "from=rss|mail, <link rel=canonical>",
         B(views=("from",), canonical="html"), _articles)
    host("linkhdr-r.test", "print=1, Link: rel=canonical",
         B(views=("print",), canonical="header"), _articles)
    host("ts-s.test", "timestamped bodies, visit ignored",
         B(timestamp=True, ignored=("visit",)), _articles)
    host("ts-t.test", "timestamped bodies, query order ignored",
         B(timestamp=True, any_order=True), _queries)
    host("mix-u.test", "xsess ignored, order ignored, 301 /a -> /a/",
         B(ignored=("xsess",), any_order=True, slash="add"), _queries, dirs=True)
    host("mix-v.test", "301 www. -> bare, ref_tag ignored",
         B(www="to_bare", ignored=("ref_tag",)), _articles)

    # -- where a risky rule would be wrong (pairs of distinct pages) --
    def pairs(name, kind, wrong, make, b=B()):
        _pairs(host(name, kind, b, None, wrong), n, make)

    pairs("ids-w.test", "?id=7 vs ?id=07 distinct, xsess ignored", ("leading zeros",),
          lambda i: [("ids-w.test", "/item", (f"id={i}",)),
                     ("ids-w.test", "/item", (f"id=0{i}",))], B(ignored=("xsess",)))
    pairs("news-x.test", "/news/2024/05 vs /news/2024/05/ distinct", ("trailing slash",),
          lambda i: [("news-x.test", f"/news/{2000 + i}/05", ()),
                     ("news-x.test", f"/news/{2000 + i}/05/", ())])
    pairs("news-y.test", "/a vs /a/ distinct, ref_tag ignored", ("trailing slash",),
          lambda i: [("news-y.test", f"/archive/{i}", ()), ("news-y.test", f"/archive/{i}/", ())],
          B(ignored=("ref_tag",)))
    pairs("calc-z.test", "query order selects the page", ("sort query",),
          lambda i: [("calc-z.test", "/calc", (f"x={i}", "y=2")),
                     ("calc-z.test", "/calc", ("y=2", f"x={i}"))])
    pairs("filters-aa.test", "filter order selects the page, zsid ignored", ("sort query",),
          lambda i: [("filters-aa.test", "/f", (f"size={i}", "color=red")),
                     ("filters-aa.test", "/f", ("color=red", f"size={i}"))],
          B(ignored=("zsid",)))
    pairs("wiki-ab.test", "/wiki/Apple vs /wiki/apple distinct", ("lowercase path",),
          lambda i: [("wiki-ab.test", f"/wiki/Topic{i}", ()),
                     ("wiki-ab.test", f"/wiki/topic{i}", ())])
    pairs("short-ac.test", "short codes are case-sensitive", ("lowercase path",),
          lambda i: [("short-ac.test", f"/s/aB{i}", ()), ("short-ac.test", f"/s/Ab{i}", ())])
    pairs("promo-ad.test", "utm_campaign and ref_tag select the page",
          ("strip tracking", "strip ref_tag"),
          lambda i: [("promo-ad.test", "/landing", (f"utm_campaign=c{i}",)),
                     ("promo-ad.test", "/deals", (f"ref_tag=t{i}",))])
    pairs("forum-ae.test", "sid and src_cmp select the page", ("strip sid", "strip src_cmp"),
          lambda i: [("forum-ae.test", "/board", (f"sid={i}",)),
                     ("forum-ae.test", "/board", (f"src_cmp={i}",))])
    pairs("twin-af.test", "www. and the bare name are two sites", ("strip www",),
          lambda i: [("twin-af.test", f"/p{i}", ()), ("www.twin-af.test", f"/p{i}", ())])
    pairs("files-ag.test", "/d/ vs /d/index.html distinct, /d is 404",
          ("index documents", "trailing slash remove"),
          lambda i: [("files-ag.test", f"/d{i}/", ()), ("files-ag.test", f"/d{i}/index.html", ())])
    # DUST no rule of the vocabulary explains: /story_N is /story?id=N
    legacy = host("legacy-ah.test", "/story_N is /story?id=N (no rule explains it)", B(), None)
    legacy.add(legacy.name, "/")
    for i in range(1, n // 3):
        legacy.add(legacy.name, f"/story_{i}", also=[(legacy.name, "/story", (f"id={i}",))])

    # -- plain hosts: no duplicates --
    for j in range(6):
        host(f"plain-{j}.test", "plain", B(), _articles, pages=max(3, n // 3))
    return hosts


class Web:
    """The simulated web of ``seed``; ``pages_per_host`` scales it (30: ~3,000 fetches
    for a crawler with the safe rules only)."""

    def __init__(self, seed: int = SEED, pages_per_host: int = 30):
        self.seed = seed
        self.pages_per_host = pages_per_host
        rnd = random.Random(f"simweb:{seed}")
        self.hosts = _catalogue(pages_per_host, rnd)
        self.by_name = {nm: h for h in self.hosts for nm in h.names}
        self.by_name.update({p.host: h for h in self.hosts for p in h.order})
        self.hub = Host(HUB, "hub", Behaviour())
        hub = self.hub.add(HUB, "/")
        self.by_name[HUB] = self.hub
        self.seeds = [hub.id]
        self.pages = {p.id: (h, p) for h in self.hosts + [self.hub] for p in h.order}
        self._texts: dict[str, str] = {}
        self._link(rnd)

    def _link(self, rnd: random.Random) -> None:
        """Links of every page: the next page of its host (so every page is
        reachable from the host's home), random pages of the host, a page of another
        host; the hub links to every host's homes; each link spelled by its target's
        host."""
        others = [h for h in self.hosts]
        for h in self.hosts:
            for i, page in enumerate(h.order):
                r = random.Random(f"{self.seed}:{page.id}")
                targets = h.order[i + 1:i + 2] + r.sample(h.order, min(len(h.order), 4))
                if i == 0:
                    targets += r.sample(h.order, min(len(h.order), 8))
                for _ in range(1 + (r.random() < 0.5)):
                    t = r.choice(others)
                    targets.append(r.choice(t.order))
                for t in targets:
                    if t is not page:
                        self._add_link(page, t, r)
        r = random.Random(f"{self.seed}:hub")
        for h in self.hosts:
            for home in [p for p in h.order if p.path == "/"]:
                self._add_link(self.hub.order[0], home, r)

    def _add_link(self, page: Page, target: Page, r: random.Random) -> None:
        th = self.by_name[target.host]
        host, path, query = th.spell(target, r)
        q = ("?" + "&".join(query)) if query else ""
        if host == page.host and r.random() < 0.5:
            link = path + q                                  # relative to the host
        else:
            shown = host.upper() if r.random() < 0.1 else host
            port = ":80" if r.random() < 0.1 else ""
            link = f"{'HTTP' if r.random() < 0.1 else 'http'}://{shown}{port}{path}{q}"
        if r.random() < 0.15:
            link += f"#s{r.randrange(3)}"                    # a fragment: safe rules drop it
        page.links.append(link)
        page.targets.append(target.id)

    # ------------------------------------------------------------ answers
    def respond(self, url: str, clock: int = 0, body: bool = True) -> Response:
        """What the server answers a GET of ``url`` (absolute; fragment ignored) at
        request number ``clock`` (the time stamped into timestamped bodies).
        ``body=False``: an empty body (the ground truth needs no HTML)."""
        s = urlsplit(urldefrag(url)[0])
        host = (s.hostname or "").rstrip(".")
        query = s.query if "?" in url.split("#")[0] else None
        h = self.by_name.get(host)
        if h is None:
            return Response(404, (("Content-Type", "text/plain"),), b"no such host\n", None, ())
        status, location, page, view = h.answer(host, s.path or "/", query)
        if status == 301:
            return Response(301, (("Location", location), ("Content-Length", "0")), b"",
                            None, (absolute(location, url),))
        if page is None:
            return Response(404, (("Content-Type", "text/plain"),), b"not found\n", None, ())
        headers = [("Content-Type", "text/html; charset=utf-8")]
        links = [absolute(x, url) for x in page.links]
        if h.b.canonical == "header":
            headers.append(("Link", f'<{page.id}>; rel="canonical"'))
            links.append(page.id)
        elif h.b.canonical == "html":
            links.append(page.id)
        content = self._body(h, page, view, clock) if body else b""
        return Response(200, tuple(headers), content, page.id, tuple(links))

    def _body(self, h: Host, page: Page, view: str | None, clock: int) -> bytes:
        text = self._texts.get(page.id)
        if text is None:
            r = random.Random(f"{self.seed}:text:{page.id}")
            words = TS_WORDS if h.b.timestamp else WORDS
            text = self._texts[page.id] = " ".join(_word(r) for _ in range(words))
        title = f"{h.name} {page.path}"
        head = f"<title>{html.escape(title)}</title>"
        if h.b.canonical == "html":
            head += f'\n<link rel="canonical" href="{html.escape(page.id)}">'
        parts = [f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">{head}</head>",
                 f'<body class="{"print" if view else "page"}">']
        if view:
            parts.append(f"<p class=\"banner\">{html.escape(view)} view of this page: "
                         "layout for another reader</p>")
        parts.append(f"<h1>{html.escape(title)}</h1>\n<p>{text}</p>")
        if h.b.timestamp:
            stamp = EPOCH + datetime.timedelta(seconds=7 * clock)
            parts.append(f"<p class=\"generated\">Generated {stamp:%Y-%m-%d %H:%M:%S}</p>")
        parts.append("<ul>")
        for link in page.links:
            parts.append(f'<li><a href="{html.escape(link)}">link</a></li>')
        parts.append("</ul></body></html>\n")
        return "\n".join(parts).encode()

    # ------------------------------------------------------------ ground truth
    def page_id(self, url: str) -> str | None:
        """The distinct page ``url`` leads to (following up to MAX_HOPS redirects);
        None for a 404 or a redirect loop."""
        for _ in range(MAX_HOPS + 1):
            r = self.respond(url, body=False)
            if r.status != 301:
                return r.page
            url = r.links[0]
        return None

    def all_pages(self) -> set[str]:
        return set(self.pages)

    def reachable(self) -> set[str]:
        """Page ids reachable from ``seeds`` by anchors, declared canonicals and
        redirects (a set-based BFS over the URLs as the server reads them)."""
        seen = {absolute(u, u) for u in self.seeds}
        todo = deque(seen)
        pages = set()
        while todo:
            r = self.respond(todo.popleft(), body=False)
            if r.page is not None:
                pages.add(r.page)
            for u in r.links:
                if u not in seen:
                    seen.add(u)
                    todo.append(u)
        return pages

    def oracle_toml(self, extended: bool = True) -> str:
        """The per-host policy the ground truth implies: for each host, the rules that
        hold there (what a perfect learner would find), as a policy file.
        ``extended``: with ``lowercase_path`` and ``index_documents`` (issue 38's new
        keys)."""
        out = ['version = "simweb-oracle"']
        for h in self.hosts:
            b, rule = h.b, []
            params = sorted(b.ignored + b.views)
            if params:
                rule.append(f"strip_params = {params!r}".replace("'", '"'))
            if b.any_order:
                rule.append("sort_query = true")
            if b.slash != "exact" and (extended or not b.index):  # add: /d/index.html/
                rule.append(f'trailing_slash = "{"add" if b.slash == "add" else "remove"}"')
            if b.www:
                rule.append("strip_www = true")
            if extended and b.any_case:
                rule.append("lowercase_path = true")
            if extended and b.index:
                rule.append(f"index_documents = {list(b.index)!r}".replace("'", '"'))
            if rule:
                out += ["", "[[rule]]", f'hosts = ["{h.name.removeprefix("www.")}"]'] + rule
        return "\n".join(out) + "\n"

    def host_of_page(self, page_id: str) -> Host:
        return self.pages[page_id][0]


__all__ = ["Behaviour", "Host", "Page", "Response", "Web", "absolute", "page_url"]
