"""numba fingerprint kernel: host || url keys of canonical URLs held in one buffer.

``fingerprint_batch(buf, offsets, host_bits)`` returns uint64 keys equal to
``seenstore.url.fingerprint.fingerprint`` (the oracle) for each URL
``buf[offsets[i]:offsets[i+1]]``: top ``host_bits`` bits from xxh3_64(host),
the rest from xxh3_64(url). The host span is ``host_span_at``'s, on bytes.
Depends on kernels/xxh3.py (frozen algorithm): after editing it, clear __pycache__.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from seenstore.kernels.url import _ld
from seenstore.kernels.xxh3 import xxh3_64


# bytes that end or split an authority: / ? # @ : ]
_SPECIAL = np.zeros(256, dtype=np.bool_)
for _c in b"/?#@:]":
    _SPECIAL[_c] = True


@njit(cache=True, nogil=True)
def host_span_at(p, s, e):
    """(start, end) of the host of the URL in the bytes [s, e) at address ``p``,
    exactly as the scalar ``normalise.host_span``: after the first ``://`` (else from
    s), up to the first ``/ ? #``, after the last ``@``, up to ``:`` or through ``]``
    for ``[`` hosts. An address, not an array: a helper given an array costs two
    reference counts per call (kernels/url.py). A URL starting
    ``http://`` or ``https://`` (every canonical one) skips the search for ``://``,
    and only the bytes that can end or split an authority take the branches
    (about 30% fewer ns per canonical URL for ``fingerprint_batch``, docs/fastpath.md)."""
    start = -1
    if e - s >= 7 and _ld(p, s) == 104 and _ld(p, s + 1) == 116 and _ld(p, s + 2) == 116 \
            and _ld(p, s + 3) == 112:  # "http"
        k = s + 5 if _ld(p, s + 4) == 115 else s + 4  # "s"
        if k + 3 <= e and _ld(p, k) == 58 and _ld(p, k + 1) == 47 and _ld(p, k + 2) == 47:
            start = k + 3  # the first "://" is this one
    if start < 0:
        start = s
        for j in range(s, e - 2):
            if _ld(p, j) == 58 and _ld(p, j + 1) == 47 and _ld(p, j + 2) == 47:  # "://"
                start = j + 3
                break
    # One pass over the authority: the last '@' and the first ':' and ']' after it.
    colon = close = -1
    end = e
    for j in range(start, e):
        c = _ld(p, j)
        if not _SPECIAL[c]:
            continue
        if c == 47 or c == 63 or c == 35:  # / ? #
            end = j
            break
        if c == 64:  # @
            start = j + 1
            colon = close = -1
        elif c == 58 and colon < 0:
            colon = j
        elif c == 93 and close < 0:
            close = j
    if start < end and _ld(p, start) == 91:  # [
        return start, (end if close < 0 else close + 1)
    return start, (end if colon < 0 else colon)


@njit(cache=True, nogil=True)
def fingerprint_batch(buf, offsets, host_bits):
    """Keys of the URLs buf[offsets[i]:offsets[i+1]]; uint64[len(offsets)-1].

    Requires: buf uint8, offsets int64 non-decreasing, 0 <= host_bits <= 32.
    """
    n = offsets.shape[0] - 1
    out = np.empty(n, dtype=np.uint64)
    low = np.uint64(0xFFFFFFFFFFFFFFFF)
    if host_bits > 0:
        low = (np.uint64(1) << np.uint64(64 - host_bits)) - np.uint64(1)
    high = ~low
    for i in range(n):
        s = offsets[i]
        e = offsets[i + 1]
        hs, he = host_span_at(buf.ctypes.data, s, e)  # buf stays live: hashed below
        out[i] = (xxh3_64(buf, hs, he) & high) | (xxh3_64(buf, s, e) & low)
    return out


@njit(cache=True, nogil=True)
def host_hashes(buf, offsets, idx):
    """Full xxh3_64 of the host (``host_span_at``) of URL idx[k], for each k; uint64.

    Requires: idx int64 indices into the URLs of buf/offsets.
    """
    out = np.empty(idx.shape[0], dtype=np.uint64)
    for k in range(idx.shape[0]):
        i = idx[k]
        hs, he = host_span_at(buf.ctypes.data, offsets[i], offsets[i + 1])
        out[k] = xxh3_64(buf, hs, he)
    return out
