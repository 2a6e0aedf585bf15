"""Fingerprint: the 64-bit key of a canonical URL (the reference implementation).

Contract: ``fingerprint(url, layout) = (xxh3_64(host) & HIGH) | (xxh3_64(url) & LOW)``
where LOW has the low ``64 - H`` bits set, HIGH the top H bits, both hashes seed 0
over UTF-8 bytes, and the host is the one ``host_span`` finds (docs/fingerprint.md).
``fingerprint_many`` returns the same keys as a uint64 array. Any faster kernel must
be bit-identical to these functions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from decimal import Decimal, localcontext

import numpy as np
import xxhash

from seenstore.errors import InvalidInputError
from seenstore.layout import DEFAULT_LAYOUT, Layout
from seenstore.url.normalise import HOST_PATTERN, host_span
from seenstore.runtime.parallel import check_threads, ranges, run_all
from seenstore.url.buffer import join_utf8

_MASK64 = (1 << 64) - 1
_xxh3 = xxhash.xxh3_64_intdigest


def url_host(url: str) -> str:
    """The host a key's top bits come from: lowercase, punycode, no port, no userinfo
    (as written in a canonical URL). Requires: ``url`` is canonical (see normalise)."""
    s, e = host_span(url)
    return url[s:e]


def _masks(layout: Layout) -> tuple[int, int]:
    low = (1 << layout.url_bits) - 1
    return _MASK64 ^ low, low


def _utf8(s: str) -> bytes:
    try:
        return s.encode("utf-8")
    except (UnicodeEncodeError, AttributeError):
        raise InvalidInputError(f"fingerprint needs a URL string, got {s!r:.80}") from None


def fingerprint(canonical_url: str, layout: Layout = DEFAULT_LAYOUT) -> int:
    """The key of ``canonical_url`` as a Python int in [0, 2**64).
    Requires: ``canonical_url`` is the output of ``normalise`` (not re-checked)."""
    high, low = _masks(layout)
    b = _utf8(canonical_url)
    s, e = host_span(canonical_url)
    return (_xxh3(_utf8(canonical_url[s:e])) & high) | (_xxh3(b) & low)


FAST_PATH_MIN = 256  # below this the kernel's fixed costs outweigh its speed


def _fingerprint_kernel(urls: list, layout: Layout, threads: int | None) -> np.ndarray:
    from seenstore.kernels.fingerprint import fingerprint_batch  # numba: loaded on first use

    data, offsets = _encoded(urls)
    spans = ranges(len(urls), check_threads(threads))
    parts = run_all([lambda a=a, b=b: fingerprint_batch(data, offsets[a : b + 1], layout.host_bits)
                     for a, b in spans])
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _encoded(urls: list) -> tuple[np.ndarray, np.ndarray]:
    """The UTF-8 bytes of ``urls`` end to end and their offsets (``join_utf8``: a
    list of strings is encoded at once). Raises InvalidInputError for an item that
    is not a string or not encodable."""
    try:
        raw, offsets = join_utf8(urls)
    except (UnicodeEncodeError, AttributeError):
        bad = next(u for u in urls if not isinstance(u, str) or not _utf8_ok(u))
        raise InvalidInputError(f"fingerprint needs URL strings, got {bad!r:.80}") from None
    return np.frombuffer(raw, dtype=np.uint8), offsets


def _utf8_ok(u: str) -> bool:
    try:
        u.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def fingerprint_many(urls: Iterable[str], layout: Layout = DEFAULT_LAYOUT,
                     threads: int | None = None) -> np.ndarray:
    """Keys of ``urls`` as a uint64 array aligned with the input (same as ``fingerprint``
    on each). Requires: canonical URLs. Raises InvalidInputError for a non-string item.
    A list of FAST_PATH_MIN or more goes through the numba kernel (same keys, tested),
    over chunks on ``threads`` threads (None: the cores; same keys for any count)."""
    if isinstance(urls, list) and len(urls) >= FAST_PATH_MIN:
        return _fingerprint_kernel(urls, layout, threads)
    high, low = _masks(layout)
    host_bits: dict[str, int] = {}
    keys = []
    append, match, xxh3 = keys.append, HOST_PATTERN.match, _xxh3
    try:
        for u in urls:
            b = u.encode("utf-8")
            st = u.find("://")
            s, e = match(u, 0 if st < 0 else st + 3).span(1)  # = host_span(u), inlined
            host = u[s:e]
            hb = host_bits.get(host)
            if hb is None:
                hb = host_bits[host] = xxh3(host.encode("utf-8")) & high
            append(hb | (xxh3(b) & low))
    except (UnicodeEncodeError, AttributeError, TypeError):
        raise InvalidInputError(f"fingerprint needs URL strings, got {u!r:.80}") from None
    return np.array(keys, dtype=np.uint64)


def expected_collisions(n: float, url_bits: int) -> float:
    """Expected number of URLs lost (hashed onto a key already taken) when ``n`` distinct
    URLs share one host prefix and so draw from ``2**url_bits`` values:
    ``n - M * (1 - (1 - 1/M)**n)``, M = 2**url_bits, computed without cancellation."""
    if n < 0 or not 0 <= url_bits <= 64:
        raise InvalidInputError("need n >= 0 and 0 <= url_bits <= 64")
    m = 2 ** url_bits
    if n <= 1:
        return 0.0
    with localcontext() as ctx:
        ctx.prec = 60
        dn, dm = Decimal(n), Decimal(m)
        if m == 1:
            return float(dn - 1)
        occupied = dm * (1 - ((1 - 1 / dm).ln() * dn).exp())
        return float(dn - occupied)


def expected_pairs(n: float, url_bits: int) -> float:
    """Expected number of colliding pairs, C(n, 2) / 2**url_bits (the birthday bound)."""
    return n * (n - 1) / 2 / math.ldexp(1.0, url_bits)
