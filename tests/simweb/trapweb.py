"""A simulated web of crawler traps beside a large legitimate catalogue (issue 40),
answered in process (no HTTP: the trap tests measure what is handed out, not the
wire), and the ground truth a trap-bounded crawl is judged by.

Owns: the hosts and what any URL gets (``TrapWeb.respond(url)``: status, absolute
links, a content digest), which pages are legitimate (``legit_page(url)``: the
distinct page a URL serves when it is not a trap's, else None; ``legit``: every
legitimate page) and which trap a URL belongs to (``trap_of(url)``). Pure: no
seenstore import (the ground truth must not depend on the code it judges).

- ``shop.test``: ``n_products`` products ``/product/{i}`` with distinct content,
  reached from listing pages ``/catalogue?page={k}`` (50 products each, and the
  next page), all legitimate;
- ``cal.test``: a calendar ``/calendar/{yyyy}/{mm}/`` from this month, each month
  linking the previous and the next without end (trap "calendar"), beside event
  pages ``/events/e{i}`` (legitimate);
- ``loop.test``: a relative link ``a/b/`` on every page under ``/a/``, so
  ``/a/b/a/b/...`` answers forever with the same page (trap "repeat"), beside
  ``/page-{i}`` (legitimate);
- ``sess.test``: pages ``/(S(<id>))/page-{p}.aspx`` whose links carry a fresh
  session id each time (trap "session": infinitely many spellings of a few
  pages; each page is legitimate, under any spelling);
- ``facet.test``: ``/shop?<filters>``, each page linking to itself with one more
  filter and with the next ``page``, without end, all serving the same "no
  results" page (trap "facets"), beside ``/``.
"""

from __future__ import annotations

import datetime
import hashlib
from urllib.parse import urljoin, urlsplit

FILTERS = ("color", "size", "brand", "price", "material", "sort")
VALUES = ("1", "2", "3")
PER_LISTING = 50


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


class TrapWeb:
    """The web (see the module docstring). ``today``: the calendar's first month."""

    def __init__(self, n_products: int = 3000, n_events: int = 40, n_loop_pages: int = 20,
                 n_session_pages: int = 25, today: datetime.date | None = None):
        self.n_products = n_products
        self.n_events = n_events
        self.n_loop_pages = n_loop_pages
        self.n_session_pages = n_session_pages
        self.today = today or datetime.date.today()
        self._sid = 0
        self.seeds = ["http://shop.test/", "http://cal.test/", "http://loop.test/a/",
                      "http://sess.test/", "http://facet.test/"]

    @property
    def listings(self) -> int:
        return (self.n_products + PER_LISTING - 1) // PER_LISTING

    def legit(self) -> set[str]:
        """Every legitimate page (its ``legit_page`` name)."""
        out = {"shop.test/"} | {f"shop.test/product/{i}" for i in range(self.n_products)}
        out |= {f"shop.test/catalogue?page={k}" for k in range(self.listings)}
        out |= {"cal.test/"} | {f"cal.test/events/e{i}" for i in range(self.n_events)}
        out |= {"loop.test/a/"} | {f"loop.test/page-{i}" for i in range(self.n_loop_pages)}
        out |= {"sess.test/"} | {f"sess.test/page-{p}" for p in range(self.n_session_pages)}
        out |= {"facet.test/"}
        return out

    # ------------------------------------------------------------ pages
    def _page(self, host: str, path: str, query: str) -> tuple[str, list[str]] | None:
        """(content name, links as written) of a URL, or None for a 404."""
        base = f"http://{host}"
        if host == "shop.test":
            if path == "/" and not query:
                return "shop home", ["/catalogue?page=0"]
            if path == "/catalogue" and query.startswith("page=") and query[5:].isdigit():
                k = int(query[5:])
                if k >= self.listings:
                    return None
                first = k * PER_LISTING
                links = [f"/product/{i}"
                         for i in range(first, min(first + PER_LISTING, self.n_products))]
                if k + 1 < self.listings:
                    links.append(f"/catalogue?page={k + 1}")
                return f"listing {k}", links
            if path.startswith("/product/") and path[9:].isdigit():
                i = int(path[9:])
                if i < self.n_products:
                    return f"product {i}", [f"/product/{(i * 7 + 1) % self.n_products}", "/"]
            return None
        if host == "cal.test":
            this = self.today.year * 12 + self.today.month - 1
            if path == "/" and not query:
                return "cal home", [f"/calendar/{this // 12}/{this % 12 + 1:02d}/"] + [
                    f"/events/e{i}" for i in range(self.n_events)]
            parts = path.strip("/").split("/")
            if len(parts) == 3 and parts[0] == "calendar" and all(p.isdigit() for p in parts[1:]):
                m = int(parts[1]) * 12 + int(parts[2]) - 1
                ev = [f"/events/e{(m - this) % self.n_events}"] if abs(m - this) < 6 else []
                return (f"month {m}", [f"/calendar/{(m + d) // 12}/{(m + d) % 12 + 1:02d}/"
                                       for d in (1, -1)] + ev)
            if path.startswith("/events/e") and path[9:].isdigit() and \
                    int(path[9:]) < self.n_events:
                return f"event {path}", ["/"]
            return None
        if host == "loop.test":
            if path.startswith("/a/") and path.endswith("/") and \
                    set(path.strip("/").split("/")) <= {"a", "b"}:
                links = ["a/b/"] if path != "/a/" else ["b/a/b/"]
                if path == "/a/":
                    links += [f"/page-{i}" for i in range(self.n_loop_pages)]
                return "loop page", links  # the same page at every depth
            if path.startswith("/page-") and path[6:].isdigit() and \
                    int(path[6:]) < self.n_loop_pages:
                return f"loop {path}", ["/a/"]
            return None
        if host == "sess.test":
            pages = [f"/(S({self._new_sid()}))/page-{p}.aspx" for p in range(self.n_session_pages)]
            if path == "/" and not query:
                return "sess home", pages[:3]
            seg = path.split("/")
            if len(seg) == 3 and seg[1].startswith("(S(") and seg[2].startswith("page-"):
                p = seg[2][5:].removesuffix(".aspx")
                if p.isdigit() and int(p) < self.n_session_pages:
                    k = int(p)
                    return f"sess page {k}", [pages[(k + d) % len(pages)] for d in (1, 2, 5)]
            return None
        if host == "facet.test":
            if path == "/" and not query:
                return "facet home", ["/shop?color=1"]
            if path == "/shop":
                have = dict(x.split("=", 1) for x in query.split("&") if "=" in x)
                page = int(have.get("page", "0")) if have.get("page", "0").isdigit() else 0
                adds = [dict(have, **{f: VALUES[len(have) % len(VALUES)]})
                        for f in FILTERS if f not in have]
                adds.append(dict(have, page=str(page + 1)))
                return "no results", ["/shop?" + "&".join(f"{n}={q[n]}" for n in sorted(q))
                                      for q in adds]
            return None
        return None

    def _new_sid(self) -> str:
        self._sid += 1
        return hashlib.blake2b(str(self._sid).encode(), digest_size=8).hexdigest()

    def respond(self, url: str) -> tuple[int, list[str], int | None]:
        """(status, absolute links, content digest or None) of a GET of ``url``."""
        s = urlsplit(url)
        got = self._page(s.hostname or "", s.path or "/", s.query)
        if got is None:
            return 404, [], None
        name, links = got
        return 200, [urljoin(url, x) for x in links], _digest(name)

    # ------------------------------------------------------------ ground truth
    def legit_page(self, url: str) -> str | None:
        """The legitimate page ``url`` serves (a name in ``legit()``), else None."""
        s = urlsplit(url)
        host, path, query = s.hostname or "", s.path or "/", s.query
        if self._page_exists(host, path, query) is False or self.trap_of(url) not in (
                None, "session"):
            return None
        if host == "sess.test" and path != "/":
            return f"sess.test/{path.rsplit('/', 1)[1].removesuffix('.aspx')}"
        return f"{host}{path}" + (f"?{query}" if query else "")

    def _page_exists(self, host, path, query) -> bool:
        sid = self._sid
        try:
            return self._page(host, path, query) is not None
        finally:
            self._sid = sid

    def trap_of(self, url: str) -> str | None:
        """Which trap ``url`` is in: "calendar", "repeat", "session", "facets" or None."""
        s = urlsplit(url)
        host, path = s.hostname or "", s.path or "/"
        if host == "cal.test" and path.startswith("/calendar/"):
            return "calendar"
        if host == "loop.test" and path.startswith("/a/") and path != "/a/":
            return "repeat"
        if host == "sess.test" and path != "/":
            return "session"
        if host == "facet.test" and path == "/shop":
            return "facets"
        return None


__all__ = ["TrapWeb"]
