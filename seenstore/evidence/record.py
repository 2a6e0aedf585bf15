"""A fetch's evidence: the record ``learn`` reads, built from what a crawler saw.

Contract: ``make_fetch(url, status, ...)`` returns a ``Fetch`` whose URLs are in their
safe-rule canonical form (``normalise`` without a policy; location and canonical
resolved against ``url``), whose ``host`` is the ``host_key`` of the URL's host, and
whose digests are computed from ``body`` when it is given. It raises
``InvalidInputError`` for a URL without a canonical form, a status outside 100-599,
or a digest that is not a uint64; a location or canonical without a canonical form is
dropped (None), never an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from seenstore.errors import InvalidInputError
from seenstore.evidence.digest import page_digest, page_simhash
from seenstore.evidence.extract import canonical_from_html, canonical_from_link_header
from seenstore.url.normalise import URLRejected, host_span, normalise
from seenstore.url.policy import host_key

_U64 = 1 << 64


@dataclass(frozen=True, slots=True)
class Fetch:
    """What one fetch revealed about ``url`` (docs/evidence.md)."""

    url: str                 # safe-rule canonical form (normalise(url), no policy)
    status: int
    location: str | None     # safe-rule canonical, resolved against url
    canonical: str | None    # safe-rule canonical, resolved against url
    digest: int | None       # page_digest, uint64 (None: not known)
    simhash: int | None
    host: str                # policy.host_key of url's host (the grouping key)


def url_host(url: str) -> str:
    """The ``host_key`` of a canonical URL's host (what fetches are grouped by)."""
    s, e = host_span(url)
    return host_key(url[s:e])


def _optional_url(value: object, base: str) -> str | None:
    if value is None or value == "":
        return None
    try:
        return normalise(value, base=base)
    except URLRejected:
        return None


def _uint64(value: object, what: str) -> int | None:
    if value is None:
        return None
    try:
        v = int(value)
    except (TypeError, ValueError):
        v = -1
    if isinstance(value, (bool, float, str)) or not 0 <= v < _U64:
        raise InvalidInputError(f"fetch {what} must be an integer in [0, 2**64), got {value!r}")
    return v


def make_fetch(url, status, *, location=None, canonical=None, digest=None, body=None,
               simhash=None, link_header=None) -> Fetch:
    """The ``Fetch`` for one response. ``body`` (bytes) given: the digest and SimHash
    are computed from it (``digest``/``simhash`` are used only without a body) and,
    when ``canonical`` is not given, the canonical comes from ``link_header`` and the
    HTML; if those two disagree there is none."""
    canon_url = normalise(url)  # URLRejected is an InvalidInputError
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        raise InvalidInputError(f"fetch status must be an HTTP status 100-599, got {status!r}")
    digest, simhash = _uint64(digest, "digest"), _uint64(simhash, "simhash")
    if body is not None:
        if not isinstance(body, (bytes, bytearray, memoryview)):
            raise InvalidInputError(f"fetch body must be bytes, got {type(body).__name__}")
        body = bytes(body)
        digest, simhash = page_digest(body), page_simhash(body)
    if canonical is not None:
        canon = _optional_url(canonical, canon_url)
    else:
        found = {c for c in (
            canonical_from_link_header(link_header, canon_url) if link_header else None,
            canonical_from_html(body, canon_url) if body is not None else None,
        ) if c is not None}
        canon = found.pop() if len(found) == 1 else None
    return Fetch(canon_url, status, _optional_url(location, canon_url), canon,
                 digest, simhash, url_host(canon_url))
