"""Declared canonicals: ``<link rel="canonical">`` in HTML and the ``Link`` header.

Contract: ``canonical_from_html(body, url)`` and ``canonical_from_link_header(value,
url)`` return the declared canonical URL resolved against ``url`` (the HTML's
``<base href>`` first) and in its safe-rule canonical form, or None: none declared,
several different ones declared (ambiguous), or one without a canonical form. Only
the first 64 KiB of a body are read, up to its ``<body>`` tag; markup inside comments
is ignored. Malformed markup is skipped, never an error; a bad ``url`` raises
``InvalidInputError``.
"""

from __future__ import annotations

import html
import re

from seenstore.url.normalise import URLRejected, check_base, normalise

HEAD_BYTES = 64 * 1024
_COMMENT = re.compile(rb"<!--.*?(?:-->|\Z)", re.S)
_BODY = re.compile(rb"<body[\s>/]", re.I)
_TAG = re.compile(rb"<(link|base)(\s[^<>]*)>", re.I)
_ATTR = re.compile(rb"""([^\s"'<>/=]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+)))?""")
# One link of a Link header: <target> then ;-separated parameters (RFC 8288 3).
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_PARAM = re.compile(r"\s*;\s*([^\s;,=]+)(?:\s*=\s*(" + _QUOTED + r"|[^;,\s]*))?")
_LINK = re.compile(r"\s*<([^>]*)>((?:\s*;\s*[^\s;,=]+(?:\s*=\s*(?:" + _QUOTED
                   + r"|[^;,\s]*))?)*)\s*(?:,|$)")


def _attrs(text: bytes) -> dict[str, str]:
    """Attribute name (lowercase) -> value (character references decoded); the first
    of a repeated name wins, as in HTML. Values that are not UTF-8 are left out."""
    out: dict[str, str] = {}
    for m in _ATTR.finditer(text):
        name = m.group(1).decode("latin-1").lower()
        raw = next((g for g in m.group(2, 3, 4) if g is not None), b"")
        try:
            out.setdefault(name, html.unescape(raw.decode("utf-8")))
        except UnicodeDecodeError:
            continue
    return out


def _resolve(hrefs: list[str], base: str) -> str | None:
    """The one canonical form of ``hrefs`` resolved against ``base``, or None."""
    found = set()
    for href in hrefs:
        try:
            found.add(normalise(href.strip(), base=base))
        except URLRejected:
            continue
    return found.pop() if len(found) == 1 else None


def canonical_from_html(body: bytes, url: str) -> str | None:
    """The ``<link rel="canonical" href>`` of an HTML body (any attribute order,
    quoting or case; ``rel`` may list other types too), resolved against ``url``."""
    check_base(url)
    head = _COMMENT.sub(b" ", bytes(body[:HEAD_BYTES]))
    end = _BODY.search(head)
    if end:
        head = head[:end.start()]
    base, hrefs = url, []
    for m in _TAG.finditer(head):
        attrs = _attrs(m.group(2))
        if m.group(1).lower() == b"base":
            if "href" in attrs and base is url:  # the first <base href> counts
                try:
                    base = normalise(attrs["href"].strip(), base=url)
                except URLRejected:
                    pass
        elif "href" in attrs and "canonical" in attrs.get("rel", "").lower().split():
            hrefs.append(attrs["href"])
    return _resolve(hrefs, base)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def canonical_from_link_header(value: str, url: str) -> str | None:
    """The target of a ``rel="canonical"`` link in a ``Link`` header value (several
    comma-separated links; ``rel`` quoted or not, possibly listing several types),
    resolved against ``url``. A header that does not parse from its start yields None."""
    check_base(url)
    hrefs, pos = [], 0
    while pos < len(value):
        m = _LINK.match(value, pos)
        if not m or m.end() == pos:
            break
        pos = m.end()
        for p in _PARAM.finditer(m.group(2)):
            if p.group(1).lower() == "rel" and p.group(2) is not None:
                if "canonical" in _unquote(p.group(2)).lower().split():
                    hrefs.append(m.group(1))
                break  # RFC 8288: only the first rel parameter counts
    return _resolve(hrefs, url)
