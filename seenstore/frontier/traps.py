"""Trap shapes: URL spaces that generate without limit, recognised per host by the
shape of their URLs, not only by how many there are (docs/frontier.md).

A URL's **template** is its path split into segments, each with its numbers, dates
and ids replaced by typed placeholders, plus its query as the sorted parameter
names, each value replaced by its type (``template``). The vocabulary:

- ``{n}``: a run of digits (``page-12`` -> ``page-{n}``, ``123`` -> ``{n}``);
- ``{yyyy}/{mm}/{dd}``: a 4-digit year 1900-2199 followed by a month segment (1-12)
  and optionally a day segment (1-31); a year alone is a number (a product id 2031
  is not a date);
- ``{date}``: ``YYYY-MM-DD`` / ``YYYY_MM_DD`` (and ``YYYYMMDD`` under a date-named
  parameter), ``{ym}``: ``YYYY-MM``;
- ``{hex}``: 16 or more hex digits with a letter and a digit, ``{b64}``: 20 or more
  of ``[A-Za-z0-9_-]`` with a digit, a lowercase and an uppercase letter;
- ``{sid}``: a session id: a cookieless ASP.NET segment (``(S(...))``, ``(X(..)F(..))``,
  ``s(...)``), a path parameter ``;jsessionid=`` / ``;phpsessid=`` / ``;sid=`` /
  ``;sessionid=``, or the value of such a query parameter;
- query values: the types above where they match (a number under a date-named
  parameter ``year``/``month``/``day``/``date``/... is a date part), else ``{n}``
  for digits and ``{v}`` for anything else.
A file extension stays literal (``2024-05-01.html`` -> ``{date}.html``).

**Shapes** (each gives a *pattern* per host, the set of URLs it bounds):

- ``repeat``: a unit of 1-4 literal path segments repeated consecutively (three
  times for one segment, twice for longer units): ``/a/b/a/b/``; pattern: the
  template up to the run, the run folded, then anything: ``/(a/b)+/…`` (the run
  covering most segments; ties: the shorter unit, the earlier start). Shown by
  the URL itself.
- ``deep``: runs of one placeholder segment whose length keeps growing,
  ``/f/{n}/{n}/{n}``; pattern ``/f/({n})+``, shown once ``deep_steps`` different
  depths were seen; or any path deeper than ``max_depth`` segments (pattern: its
  first two segments' template and ``/…``).
- ``calendar``: a template with date parts where a URL's date lies after
  ``now + calendar_ahead_days`` or before ``calendar_from_year`` (a calendar's
  "next month" link runs into years no site has content for); pattern: the template.
- ``session``: a template with ``{sid}`` (shown by the URL itself), or with a
  ``{hex}``/``{b64}`` segment that is not the last one and has taken
  ``session_variants`` values while the rest of the URL stayed; pattern: the
  template; its bound counts per *rest* (the URL with the id blanked): at most
  ``session_limit`` spellings of each page.
- ``params``: every URL with a query on one path template (pattern ``path?…``),
  shown when its parameter-name sets reach ``facet_sets`` (filters combined without
  end) or, from fetches (``observe_fetch``), when at least ``content_repeats``
  fetched URLs and ``repeat_share`` of them served a digest already served under
  another URL of the pattern (values growing while the page stays the same).

**Contract.** ``check(urls)`` (safe-rule canonical URLs, as the stage makes them)
returns per URL None (let through and counted) or the label of the pattern that
refuses it. A URL is refused when one of its patterns is detected and already
holds its bound of URLs let through: ``limit_per_template`` (``per_host``
overrides it per host), for sessions ``session_limit`` per rest. Counts include the
URLs let through before the pattern was detected, so a pattern holds at most
max(bound, URLs let through before its shape showed). A template only a number,
date or id makes distinct, with distinct content (``/product/{n}`` with 10^5
products) is none of these shapes and is never refused. Memory: at most
``max_patterns`` tracked patterns per host (past that a new candidate pattern is
not tracked unless its URL shows its shape by itself), each at most
``TRACK_CAP`` digests, fetched URLs and rests.
``record()`` / ``load()`` carry the detected patterns and their counts (the stage
keeps them in the store's manifest, field ``traps``); nothing else persists.
Not thread-safe: the stage calls it under its lock.
"""

from __future__ import annotations

import datetime
import heapq
import re
from dataclasses import dataclass

from seenstore.url.normalise import host_span
from seenstore.url.policy import host_key

MANIFEST_FIELD = "traps"
SHAPES = ("repeat", "deep", "calendar", "session", "params")
TRACK_CAP = 1 << 14        # digests, fetched URLs, rests kept per pattern
# patterns not detected (yet) are recorded with their counts too, most URLs first,
# so a reopened stage goes on counting them: a template detected after a restart
# is bounded by every URL it let through, not only by those since the restart
RECORD_TRACKED = 1024
_CACHE_CAP = 1 << 16       # segment -> typed segment
_DATE_TYPES = ("{yyyy}", "{mm}", "{dd}", "{date}", "{ym}")
_DATE_NAMES = frozenset(("date", "day", "month", "year", "week", "y", "m", "d", "ym", "ymd",
                         "period", "from", "to", "start", "end", "cal", "calendar", "mon",
                         "yyyy", "mm", "dd", "yr"))
_SESSION_NAMES = frozenset(("jsessionid", "phpsessid", "sid", "sessionid", "session_id",
                            "aspsessionid", "cfid", "cftoken", "sess"))

_SID_SEG = re.compile(r"^(?:\((?:[A-Za-z]\([^()/]*\))+\)|[sS]\([A-Za-z0-9_-]{6,}\))$")
_EXT = re.compile(r"^(.*?)(\.[A-Za-z][A-Za-z0-9]{0,4})$")
_DATE = re.compile(r"^((?:19|20|21)\d\d)([-_])(0?[1-9]|1[0-2])\2(0?[1-9]|[12]\d|3[01])$")
_DATE8 = re.compile(r"^((?:19|20|21)\d\d)(0[1-9]|1[0-2])(0[1-9]|[12]\d|3[01])$")
_YM = re.compile(r"^((?:19|20|21)\d\d)[-_](0?[1-9]|1[0-2])$")
_HEX = re.compile(r"^(?=[0-9a-fA-F]*[a-fA-F])(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{16,}$")
_B64 = re.compile(r"^(?=[\w-]*\d)(?=[\w-]*[a-z])(?=[\w-]*[A-Z])[A-Za-z0-9_-]{20,}={0,2}$")
_DIGITS = re.compile(r"\d+")
_SID_PARAM = re.compile(r"(?i)(;(?:" + "|".join(sorted(_SESSION_NAMES)) + r")=)[^;]*")


@dataclass
class Trap:
    """A detected pattern: ``host`` (its ``host_key``), ``shape`` (one of SHAPES),
    ``pattern`` (a template, folded for repeat/deep, ``path?…`` for params),
    ``count`` (URLs let through), ``refused``, ``bound`` (the limit in force)."""

    host: str
    shape: str
    pattern: str
    count: int
    refused: int
    bound: int

    @property
    def label(self) -> str:
        return f"{self.shape} {self.host}{self.pattern}"


class _Pat:
    """A tracked pattern of one host."""

    __slots__ = ("shape", "count", "refused", "detected", "depths", "names", "rests",
                 "digests", "urls", "fetched", "repeats")

    def __init__(self, shape: str):
        self.shape = shape
        self.count = self.refused = self.fetched = self.repeats = 0
        self.detected = False
        self.depths = self.names = self.digests = self.urls = None
        self.rests = None  # rest -> set of ids (before detection) or count (after)


# ------------------------------------------------------------------ templates
_seg_cache: dict[str, str] = {}


def _type_value(v: str) -> str:
    if not v:
        return ""
    if v.isdigit():
        return "{n}"
    if _DATE.match(v):
        return "{date}"
    if _YM.match(v):
        return "{ym}"
    if _HEX.match(v):
        return "{hex}"
    if _B64.match(v):
        return "{b64}"
    return "{v}"


def _type_seg(seg: str) -> str:
    """A path segment's template (cached: most segments repeat across URLs)."""
    t = _seg_cache.get(seg)
    if t is not None:
        return t
    if "(" in seg and _SID_SEG.match(seg):
        t = "{sid}"
    elif ";" in seg:
        base, *params = seg.split(";")
        out = [_type_seg(base)]
        for p in params:
            name, eq, value = p.partition("=")
            out.append(name + eq + ("{sid}" if name.lower() in _SESSION_NAMES
                                    else _type_value(value)))
        t = ";".join(out)
    else:
        m = _EXT.match(seg)
        stem, ext = (m.group(1), m.group(2)) if m else (seg, "")
        if _DATE.match(stem):
            t = "{date}" + ext
        elif _YM.match(stem):
            t = "{ym}" + ext
        elif len(stem) >= 16 and _HEX.match(stem):
            t = "{hex}" + ext
        elif len(stem) >= 20 and _B64.match(stem):
            t = "{b64}" + ext
        else:
            t = _DIGITS.sub("{n}", stem) + ext if any(c.isdigit() for c in stem) else seg
    if len(_seg_cache) >= _CACHE_CAP:
        _seg_cache.clear()
    _seg_cache[seg] = t
    return t


def _is_month(s: str) -> bool:
    return 1 <= len(s) <= 2 and s.isdigit() and 1 <= int(s) <= 12


def _is_day(s: str) -> bool:
    return 1 <= len(s) <= 2 and s.isdigit() and 1 <= int(s) <= 31


class _Url:
    """One canonical URL taken apart: host, literal segments, their templates, the
    typed query, the dates it names."""

    __slots__ = ("host", "segs", "tsegs", "query", "tquery", "names", "dates", "sid_q")

    def __init__(self, url: str):
        s, e = host_span(url)
        self.host = host_key(url[s:e])
        slash = url.find("/", e)
        target = url[slash:] if slash >= 0 else "/"
        q = target.find("?")
        path, query = (target[:q], target[q + 1:]) if q >= 0 else (target, None)
        self.segs = segs = path.split("/")[1:]
        self.tsegs = tsegs = [_type_seg(x) for x in segs]
        self.dates: list[tuple[int, int, int]] = []
        for i, t in enumerate(tsegs):
            if t == "{n}" and len(segs[i]) == 4 and 1900 <= int(segs[i]) <= 2199 \
                    and i + 1 < len(segs) and _is_month(segs[i + 1]):
                tsegs[i], tsegs[i + 1] = "{yyyy}", "{mm}"
                day = 1
                if i + 2 < len(segs) and _is_day(segs[i + 2]):
                    tsegs[i + 2], day = "{dd}", int(segs[i + 2])
                self.dates.append((int(segs[i]), int(segs[i + 1]), day))
            elif t.startswith("{date}") or t.startswith("{ym}"):
                m = _DATE.match(segs[i].split(".")[0]) or _YM.match(segs[i].split(".")[0])
                self.dates.append((int(m.group(1)), int(m.group(3 if m.re is _DATE else 2)),
                                   int(m.group(4)) if m.re is _DATE else 1))
        self.query = query
        self.tquery = None
        self.names = ()
        self.sid_q = False
        if query is not None:
            self._type_query(query)

    def _type_query(self, query: str) -> None:
        typed, names, parts = [], [], {}
        for pair in query.split("&"):
            name, _, value = pair.partition("=")
            low = name.lower()
            names.append(name)
            if low in _SESSION_NAMES:
                t, self.sid_q = "{sid}", True
            elif low in _DATE_NAMES and value:
                t = self._date_value(low, value, parts)
            else:
                t = _type_value(value)
                if t in ("{date}", "{ym}"):
                    t = self._date_value("date", value, parts)
            typed.append(f"{name}={t}")
        if "year" in parts:
            self.dates.append((parts["year"], parts.get("month", 1), parts.get("day", 1)))
        self.tquery = "&".join(sorted(typed))
        self.names = tuple(sorted(set(names)))

    def _date_value(self, name: str, v: str, parts: dict) -> str:
        m = _DATE.match(v) or _DATE8.match(v)
        if m:
            day = int(m.group(4) if m.re is _DATE else m.group(3))
            month = int(m.group(3) if m.re is _DATE else m.group(2))
            self.dates.append((int(m.group(1)), month, day))
            return "{date}"
        m = _YM.match(v)
        if m:
            self.dates.append((int(m.group(1)), int(m.group(2)), 1))
            return "{ym}"
        if v.isdigit():
            n = int(v)
            if len(v) == 4 and 1900 <= n <= 2199 and name in ("year", "y", "yyyy", "yr"):
                parts["year"] = n
                return "{yyyy}"
            if name in ("month", "m", "mm", "mon") and 1 <= n <= 12:
                parts["month"] = n
                return "{mm}"
            if name in ("day", "d", "dd") and 1 <= n <= 31:
                parts["day"] = n
                return "{dd}"
            return "{n}"
        return _type_value(v)

    @property
    def path_template(self) -> str:
        return "/" + "/".join(self.tsegs)

    @property
    def template(self) -> str:
        t = self.path_template
        return t if self.tquery is None else f"{t}?{self.tquery}"


def template(url: str) -> str:
    """The template of a canonical URL (the module docstring's vocabulary), host excluded."""
    return _Url(url).template


def _repeat_run(segs: list[str]) -> tuple[int, int, int] | None:
    """(start, unit length, repetitions) of the consecutive repetition of a unit of
    1-4 segments (three times for one segment, twice for longer) covering most
    segments (ties: the shorter unit, then the earlier start), or None. The choice
    depends on the run, not on how often it repeats, so every depth of one trap
    folds to the same pattern."""
    n, best, key = len(segs), None, None
    for k in range(1, 5):
        need = 3 if k == 1 else 2
        for i in range(0, n - need * k + 1):
            unit = segs[i:i + k]
            if not all(unit) or segs[i + k:i + 2 * k] != unit:
                continue
            r = 2
            while segs[i + r * k:i + (r + 1) * k] == unit:
                r += 1
            if r >= need and (key is None or (k * r, -k, -i) > key):
                best, key = (i, k, r), (k * r, -k, -i)
    return best


def _fold_runs(tsegs: list[str]) -> tuple[str, bool]:
    """The path template with each run of two or more equal placeholder segments
    folded to ``({t})+``; whether any was folded."""
    out, folded, i = [], False, 0
    while i < len(tsegs):
        j = i
        while j + 1 < len(tsegs) and tsegs[j + 1] == tsegs[i]:
            j += 1
        if j > i and "{" in tsegs[i]:
            out.append(f"({tsegs[i]})+")
            folded = True
        else:
            out.extend(tsegs[i:j + 1])
        i = j + 1
    return "/" + "/".join(out), folded


# ---------------------------------------------------------------------- guard
class TrapGuard:
    """Counts URLs per (host, pattern), detects trap shapes, refuses what a detected
    pattern holds beyond its bound (the module docstring)."""

    def __init__(self, limit_per_template: int = 100, *, per_host: dict | None = None,
                 session_limit: int = 1, session_variants: int = 3, deep_steps: int = 4,
                 max_depth: int = 16, facet_sets: int = 16, content_repeats: int = 20,
                 repeat_share: float = 0.8, calendar_ahead_days: int = 366,
                 calendar_from_year: int = 1970, now: datetime.date | None = None,
                 max_patterns: int = 4096):
        for name, v in (("limit_per_template", limit_per_template),
                        ("session_limit", session_limit), ("session_variants", session_variants),
                        ("deep_steps", deep_steps), ("max_depth", max_depth),
                        ("facet_sets", facet_sets), ("content_repeats", content_repeats),
                        ("max_patterns", max_patterns)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        self.limit = limit_per_template
        self.per_host = {host_key(h.lower()): int(v) for h, v in (per_host or {}).items()}
        self.session_limit = session_limit
        self.session_variants = session_variants
        self.deep_steps = deep_steps
        self.max_depth = max_depth
        self.facet_sets = facet_sets
        self.content_repeats = content_repeats
        self.repeat_share = float(repeat_share)
        now = now or datetime.date.today()
        ahead = now + datetime.timedelta(days=calendar_ahead_days)
        self._ahead = (ahead.year, ahead.month, ahead.day)
        self._from = (calendar_from_year, 1, 1)
        self.max_patterns = max_patterns
        self.hosts: dict[str, dict[str, _Pat]] = {}
        self.changed = False   # a detection or a count of a detected pattern since record()
        self.checked = self.refused = 0

    # ------------------------------------------------------------- checking
    def check(self, urls) -> list:
        """Per URL (canonical str), None (let through, counted) or the label of the
        pattern refusing it."""
        out = []
        for url in urls:
            out.append(self._check_one(url))
        self.checked += len(out)
        return out

    def _bound(self, host: str) -> int:
        return self.per_host.get(host, self.limit)

    def _pat(self, pats: dict, key: str, shape: str, force: bool) -> _Pat | None:
        p = pats.get(key)
        if p is None and (force or len(pats) < self.max_patterns):
            p = pats[key] = _Pat(shape)
        return p

    def _candidates(self, u: _Url, pats: dict) -> list:
        """(pattern key, _Pat, rest or None) of every pattern ``u`` belongs to, their
        evidence updated by ``u``."""
        found = []
        segs, tsegs = u.segs, u.tsegs
        if len(segs) > 2 and len(set(segs)) < len(segs):
            run = _repeat_run(segs)
            if run is not None:
                i, k, _ = run
                key = "repeat /" + "/".join(tsegs[:i] + ["(" + "/".join(tsegs[i:i + k]) + ")+",
                                                         "…"])
                p = self._pat(pats, key, "repeat", True)
                p.detected = True
                found.append((key, p, None))
        depth = len(segs) - (segs[-1] == "")
        folded, any_fold = _fold_runs(tsegs) if depth > 2 else ("", False)
        if depth > self.max_depth and not any_fold:
            key = "deep /" + "/".join(tsegs[:2]) + "/…"
            p = self._pat(pats, key, "deep", True)
            p.detected = True
            found.append((key, p, None))
        else:
            if any_fold:
                key = "deep " + folded
                p = self._pat(pats, key, "deep", False)
                if p is not None:
                    if p.depths is None:
                        p.depths = set()
                    if len(p.depths) < self.deep_steps:
                        p.depths.add(depth)
                    p.detected = p.detected or len(p.depths) >= self.deep_steps
                    found.append((key, p, None))
        tpl = None
        if u.dates:
            tpl = u.template
            key = "calendar " + tpl
            out = any(d > self._ahead or d < self._from for d in u.dates)
            p = self._pat(pats, key, "calendar", out)
            if p is not None:
                p.detected = p.detected or out
                found.append((key, p, None))
        sid = u.sid_q or any("{sid}" in t for t in tsegs)
        ids = [i for i, t in enumerate(tsegs[:-1]) if t in ("{hex}", "{b64}")]
        if sid or ids:
            tpl = tpl or u.template
            key = "session " + tpl
            p = self._pat(pats, key, "session", sid)
            if p is not None:
                rest, value = self._rest(u, ids if not sid else [])
                if p.rests is None:
                    p.rests = {}
                if sid:
                    p.detected = True
                elif not p.detected:
                    vals = p.rests.get(rest)
                    if vals is None and len(p.rests) < TRACK_CAP:
                        vals = p.rests[rest] = set()
                    if vals is not None:
                        vals.add(value)
                        if len(vals) >= self.session_variants:
                            p.detected = True
                            p.rests = {r: len(v) for r, v in p.rests.items()}
                found.append((key, p, rest))
        if u.query is not None:
            key = "params " + u.path_template + "?…"
            p = self._pat(pats, key, "params", False)
            if p is not None:
                if p.names is None:
                    p.names = set()
                if len(p.names) < self.facet_sets:
                    p.names.add(u.names)
                    p.detected = p.detected or len(p.names) >= self.facet_sets
                found.append((key, p, None))
        return found

    def _rest(self, u: _Url, ids: list) -> tuple[str, str]:
        """The URL with its session ids blanked (the page they are ids of), and the ids."""
        segs, value = list(u.segs), []
        for i, t in enumerate(u.tsegs):
            if i in ids or t == "{sid}":
                value.append(segs[i])
                segs[i] = t
            elif "{sid}" in t:  # a path parameter: blank its value only
                value.append(segs[i])
                segs[i] = _SID_PARAM.sub(r"\1", segs[i])
        q = u.query
        if q is not None and u.sid_q:
            q = "&".join(x for x in q.split("&")
                         if x.partition("=")[0].lower() not in _SESSION_NAMES)
        rest = u.host + "/" + "/".join(segs) + ("" if q is None else "?" + q)
        return rest, "/".join(value)

    def _check_one(self, url: str) -> str | None:
        try:
            u = _Url(url)
        except (ValueError, IndexError, AttributeError):
            return None  # not a URL this guard can read: the stage's checks decide
        pats = self.hosts.get(u.host)
        if pats is None:
            pats = {}
        found = self._candidates(u, pats)
        if not found:
            return None
        if u.host not in self.hosts:
            self.hosts[u.host] = pats
        bound = self._bound(u.host)
        for key, p, rest in found:
            if not p.detected:
                continue
            if p.shape == "session":
                over = p.rests.get(rest, 0) >= self.session_limit
            else:
                over = p.count >= bound
            if over:
                p.refused += 1
                self.refused += 1
                self.changed = True
                return f"{key.split(' ', 1)[0]} {u.host}{key.split(' ', 1)[1]}"
        for key, p, rest in found:
            p.count += 1
            if p.shape == "session" and p.detected and (rest in p.rests
                                                        or len(p.rests) < TRACK_CAP):
                p.rests[rest] = p.rests.get(rest, 0) + 1
        self.changed = True  # a count moved: recorded with the next commit
        return None

    # ------------------------------------------------------------- fetches
    def observe_fetch(self, url: str, status: int, digest: int | None) -> None:
        """What fetching ``url`` (canonical) gave: feeds the ``params`` shape's content
        evidence (a 2xx digest already served under another URL of the pattern)."""
        if digest is None or not 200 <= status < 300 or "?" not in url:
            return
        try:
            u = _Url(url)
        except (ValueError, IndexError, AttributeError):
            return
        pats = self.hosts.setdefault(u.host, {})
        key = "params " + u.path_template + "?…"
        p = self._pat(pats, key, "params", False)
        if p is None:
            return
        if p.urls is None:
            p.urls, p.digests = set(), set()
        if url in p.urls or len(p.urls) >= TRACK_CAP:
            return
        p.urls.add(url)
        p.fetched += 1
        if digest in p.digests:
            p.repeats += 1
        elif len(p.digests) < TRACK_CAP:
            p.digests.add(digest)
        if (not p.detected and p.repeats >= self.content_repeats
                and p.repeats >= self.repeat_share * p.fetched):
            p.detected = self.changed = True

    # -------------------------------------------------------------- report
    def traps(self) -> list[Trap]:
        """The detected patterns, most URLs let through first."""
        out = []
        for host, pats in self.hosts.items():
            bound = self._bound(host)
            for key, p in pats.items():
                if p.detected and (p.count or p.refused):
                    shape, pattern = key.split(" ", 1)
                    out.append(Trap(host, shape, pattern, p.count, p.refused,
                                    self.session_limit if shape == "session" else bound))
        out.sort(key=lambda t: (-t.count, t.host, t.pattern))
        return out

    def record(self) -> list[dict]:
        """The detected patterns as manifest entries (``load`` reads them back)."""
        self.changed = False
        out = [{"host": t.host, "shape": t.shape, "pattern": t.pattern, "count": t.count,
                "refused": t.refused, "bound": t.bound} for t in self.traps()]
        # the RECORD_TRACKED largest without sorting them all (the caller holds the
        # stage's lock; a long crawl tracks ~1e6 patterns: 1.3 s sorted, 0.04 s so)
        tracked = heapq.nlargest(RECORD_TRACKED, (
            (p.count, host, key) for host, pats in self.hosts.items()
            for key, p in pats.items() if not p.detected and p.count > 1))
        for count, host, key in tracked:
            shape, pattern = key.split(" ", 1)
            out.append({"host": host, "shape": shape, "pattern": pattern, "count": count,
                        "detected": False})
        return out

    def load(self, entries) -> None:
        """Take detected patterns from ``record()`` entries (a reopened stage keeps
        refusing them; a session pattern's per-page counts start again at zero), and
        the counts of patterns not detected yet (``"detected": false``)."""
        for e in entries or ():
            shape = e.get("shape")
            if shape not in SHAPES:
                continue
            pats = self.hosts.setdefault(e["host"], {})
            p = pats.get(f"{shape} {e['pattern']}")
            if p is None:
                p = pats[f"{shape} {e['pattern']}"] = _Pat(shape)
            if e.get("detected", True) is False:
                p.count = max(p.count, int(e.get("count", 0)))
                continue
            p.detected = True
            p.count = max(p.count, int(e.get("count", 0)))
            p.refused = max(p.refused, int(e.get("refused", 0)))
            if shape == "session" and not isinstance(p.rests, dict):
                p.rests = {}
            elif shape == "session":
                p.rests = {r: (len(v) if isinstance(v, set) else v) for r, v in p.rests.items()}


__all__ = ["MANIFEST_FIELD", "SHAPES", "Trap", "TrapGuard", "template"]
