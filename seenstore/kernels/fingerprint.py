"""numba fingerprint kernel: host || url keys of canonical URLs held in one buffer.

``fingerprint_batch(buf, offsets, host_bits)`` returns uint64 keys equal to
``seenstore.fingerprint.fingerprint`` (the oracle) for each URL
``buf[offsets[i]:offsets[i+1]]``: top ``host_bits`` bits from xxh3_64(host),
the rest from xxh3_64(url). The host span is ``host_span``'s, on bytes.
Depends on kernels/xxh3.py (frozen algorithm): after editing it, clear __pycache__.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .xxh3 import xxh3_64


@njit(cache=True, nogil=True)
def host_span(buf, s, e):
    """(start, end) of the host of the URL buf[s:e], exactly as the scalar
    ``normalise.host_span``: after the first ``://`` (else from s), up to the first
    ``/ ? #``, after the last ``@``, up to ``:`` or through ``]`` for ``[`` hosts."""
    start = s
    for j in range(s, e - 2):
        if buf[j] == 58 and buf[j + 1] == 47 and buf[j + 2] == 47:  # "://"
            start = j + 3
            break
    # One pass over the authority: the last '@' and the first ':' and ']' after it.
    colon = close = -1
    end = e
    for j in range(start, e):
        c = buf[j]
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
    if start < end and buf[start] == 91:  # [
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
        hs, he = host_span(buf, s, e)
        out[i] = (xxh3_64(buf, hs, he) & high) | (xxh3_64(buf, s, e) & low)
    return out


@njit(cache=True, nogil=True)
def host_hashes(buf, offsets, idx):
    """Full xxh3_64 of the host (``host_span``) of URL idx[k], for each k; uint64.

    Requires: idx int64 indices into the URLs of buf/offsets.
    """
    out = np.empty(idx.shape[0], dtype=np.uint64)
    for k in range(idx.shape[0]):
        i = idx[k]
        hs, he = host_span(buf, offsets[i], offsets[i + 1])
        out[k] = xxh3_64(buf, hs, he)
    return out
