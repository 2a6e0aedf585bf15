"""Canonical spelling of a URL: the one string all equivalent spellings map to.

Contract: ``normalise(url, base=None, policy=None) -> str`` returns the canonical
URL or raises ``URLRejected`` carrying a ``Rejection`` reason. ``normalise_many``
never raises for a bad URL: it returns the accepted URLs beside (index, reason)
pairs. Steps, their order and the differences from WHATWG are in docs/normalise.md.
The result is idempotent: ``normalise(normalise(u)) == normalise(u)``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import ada_url

try:  # ada-url's cffi module: one parse without the per-call dict and GC wrapper
    from ada_url._ada_wrapper import ffi as _ffi
    from ada_url._ada_wrapper import lib as _lib
except ImportError:  # pragma: no cover - other ada-url builds: the public API below
    _lib = None

from seenstore.errors import InvalidInputError
from seenstore.url.policy import DEFAULT_POLICY, Policy

DEFAULT_MAX_LENGTH = 8192  # bytes of UTF-8, checked on the input and on the result

# Cc characters other than TAB, LF, CR (which browsers delete, so we do too).
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
# An escape this step would change: lowercase hex, or an unreserved character
# (2D - 2E . 30-39 digits 41-5A A-Z 5F _ 61-7A a-z 7E ~).
_CHANGES = re.compile(
    r"%(?:[0-9A-Fa-f][a-f]|[a-f][0-9A-Fa-f]|2[DE]|3[0-9]|4[1-9A-F]|5[0-9AF]|6[1-9A-F]|7[0-9AE])")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_HEX = frozenset("0123456789ABCDEFabcdef")


class Rejection(enum.Enum):
    """Why one URL has no canonical form. The value is the stable reason code."""

    ENCODING = "encoding"          # not text: bytes that are not UTF-8, lone surrogates
    TOO_LONG = "too-long"          # input or canonical form over max_length bytes
    CONTROL = "control-char"       # NUL or another control character (not TAB/LF/CR)
    UNPARSABLE = "unparsable"      # the WHATWG parser fails (e.g. bad host, bad port)
    SCHEME = "scheme"              # parses, but the scheme is not http or https

    def __str__(self) -> str:
        return self.value

    def __bool__(self) -> bool:
        """False: ``try_normalise``'s result is truthy only when it is a URL."""
        return False


class URLRejected(InvalidInputError):
    """The scalar API's typed per-URL rejection; ``reason`` is a ``Rejection``."""

    def __init__(self, reason: Rejection, url: object):
        self.reason = reason
        self.url = url
        shown = repr(url) if len(repr(url)) <= 120 else repr(url)[:117] + "..."
        super().__init__(f"URL rejected ({reason.value}): {shown}")


def check_base(base: str | None) -> None:
    """Raise InvalidInputError unless ``base`` is None or a URL the parser accepts.
    A bad base is the caller's error, not a per-URL rejection."""
    if base is None:
        return
    try:
        ok = isinstance(base, str) and not _CONTROL.search(base) and ada_url.check_url(base)
    except UnicodeEncodeError:  # lone surrogates: no UTF-8 spelling
        ok = False
    if not ok:
        raise InvalidInputError(f"invalid base URL: {base!r}")


def normalise_escapes(s: str) -> str:
    """RFC 3986 6.2.2.2 on a parsed URL: decode escapes of unreserved characters,
    uppercase the hex of the others. A stray ``%`` is left as is, and a decoded hex
    digit that would complete a stray ``%`` into a new escape stays encoded."""
    if "%" not in s or not _CHANGES.search(s):
        return s
    return _ESCAPE.sub(_escape, s)


def _escape(m: re.Match) -> str:
    hx = m.group(1)
    c = chr(int(hx, 16))
    if c in _UNRESERVED:
        if c not in _HEX:
            return c
        s, st = m.string, m.start()
        # Output so far ends like the input (a '%' is never produced by decoding),
        # so "% + c" or "%h + c" would form an escape the input did not have.
        if not (st >= 1 and (s[st - 1] == "%"
                             or (st >= 2 and s[st - 2] == "%" and s[st - 1] in _HEX))):
            return c
    return "%" + hx.upper()


# After the scheme: userinfo up to the last '@' of the authority (greedy), then an
# IPv6 literal up to its first ']' (or the authority's end), else up to ':' or the end.
HOST_PATTERN = re.compile(r"(?:[^/?#]*@)?(\[[^\]/?#]*\]?|[^:/?#]*)")


def host_span(url: str) -> tuple[int, int]:
    """(start, end) of the host in a URL: after the first ``://`` (or from 0), up to
    the first ``/ ? #``; after the last ``@`` of that authority; up to the first ``:``,
    or for ``[`` IPv6 hosts up to and including ``]``. docs/fingerprint.md."""
    start = url.find("://")
    return HOST_PATTERN.match(url, 0 if start < 0 else start + 3).span(1)


def _apply_policy(url: str, policy: Policy) -> str:
    hs, he = host_span(url)
    rule = policy.rule_for(url[hs:he])
    if rule is None:
        return url
    ps = url.find("/", he)  # a parsed http(s) URL always has a path starting with '/'
    qs = url.find("?", ps)
    path = url[ps:] if qs < 0 else url[ps:qs]
    query = None if qs < 0 else url[qs + 1:]
    host, path, query = rule.rewrite(url[hs:he], path, query)
    return url[:hs] + host + url[he:ps] + path + ("" if query is None else "?" + query)


def _parse_public(url: str, base: str | None) -> str | None:
    try:
        if base is None:
            return ada_url.parse_url(url, ("href",))["href"]
        return ada_url.join_url(base, url)
    except ValueError:
        return None


def _parse(url: str, base: str | None) -> str | None:
    """WHATWG href of ``url`` resolved against ``base``, or None if it does not parse.
    Requires: ``url`` and ``base`` encode to UTF-8. Same results as ``_parse_public``."""
    if _lib is None:
        return _parse_public(url, base)
    b = url.encode("utf-8")
    if base is None:
        obj = _lib.ada_parse(b, len(b))
    else:
        bb = base.encode("utf-8")
        obj = _lib.ada_parse_with_base(b, len(b), bb, len(bb))
    try:
        if not _lib.ada_is_valid(obj):
            return None
        h = _lib.ada_get_href(obj)
        return _ffi.unpack(h.data, h.length).decode("utf-8")
    finally:
        _lib.ada_free(obj)


def _utf8_len(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-8"))


def try_normalise(
    url: object,
    base: str | None = None,
    policy: Policy | None = None,
    max_length: int = DEFAULT_MAX_LENGTH,
) -> str | Rejection:
    """The canonical URL, or the ``Rejection`` saying why there is none.
    Requires: ``base`` already checked with ``check_base``. Never raises for any ``url``."""
    if isinstance(url, (bytes, bytearray, memoryview)):
        try:
            url = bytes(url).decode("utf-8")
        except UnicodeDecodeError:
            return Rejection.ENCODING
    elif not isinstance(url, str):
        return Rejection.ENCODING
    if len(url) > max_length:
        return Rejection.TOO_LONG
    try:
        if _utf8_len(url) > max_length:
            return Rejection.TOO_LONG
    except UnicodeEncodeError:
        return Rejection.ENCODING
    if not url.isprintable() and _CONTROL.search(url):  # every Cc is non-printable
        return Rejection.CONTROL
    if base is not None and url.startswith(("http://", "https://")):
        base = None  # an absolute http(s) URL ignores the base: skip parsing it
    href = _parse(url, base)
    if href is None:
        return Rejection.UNPARSABLE
    if not href.startswith(("http://", "https://")):
        return Rejection.SCHEME
    hash_at = href.find("#")  # the parser escapes '#' everywhere but the fragment mark
    if hash_at >= 0:
        href = href[:hash_at]
    href = normalise_escapes(href)
    if policy is not None and policy.rules:
        href = _apply_policy(href, policy)
    if _utf8_len(href) > max_length:
        return Rejection.TOO_LONG
    return href


def normalise(
    url: str,
    base: str | None = None,
    policy: Policy | None = None,
    max_length: int = DEFAULT_MAX_LENGTH,
) -> str:
    """The canonical spelling of ``url`` (resolved against ``base`` if relative).
    Raises URLRejected for a URL without one, InvalidInputError for a bad ``base``."""
    check_base(base)
    out = try_normalise(url, base, policy or DEFAULT_POLICY, max_length)
    if isinstance(out, Rejection):
        raise URLRejected(out, url)
    return out


FAST_PATH_MIN = 256  # below this, the batch path's fixed costs outweigh its speed


@dataclass
class NormalisedBatch:
    """``urls[k]`` is the canonical form of input ``positions[k]`` (input order);
    ``rejected`` lists (input index, reason) for every other input."""

    urls: list[str] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    rejected: list[tuple[int, Rejection]] = field(default_factory=list)

    def reason_counts(self) -> dict[str, int]:
        return count_reasons(self.rejected)

    @classmethod
    def of(cls, results: Iterable[str | Rejection]) -> "NormalisedBatch":
        """Collect per-input results (a canonical URL or a Rejection) in input order."""
        out = cls()
        for i, r in enumerate(results):
            if isinstance(r, Rejection):
                out.rejected.append((i, r))
            else:
                out.urls.append(r)
                out.positions.append(i)
        return out


def count_reasons(rejected: Iterable[tuple[int, Rejection]]) -> dict[str, int]:
    """{reason code: how many} over (index, reason) pairs, for summaries."""
    counts: dict[str, int] = {}
    for _, r in rejected:
        counts[r.value] = counts.get(r.value, 0) + 1
    return counts


def all_strs_or_bytes(items) -> bool:
    """True if every item is a str or bytes (their subclasses too); the item types
    collected in C first (a generator of isinstance calls costs ~0.5 us per item)."""
    return set(map(type, items)) <= {str, bytes} or all(isinstance(u, (str, bytes)) for u in items)
