"""Python twin of kernels/fingerprint.py ``fingerprint_batch``: the same keys, from
the ``xxhash`` package, the host found as url/normalise.py ``host_span`` finds it
(docs/fingerprint.md). Requires: each URL is canonical. The tests compare it, the
kernel and url/fingerprint.py's ``fingerprint`` bit for bit."""

from __future__ import annotations

import re

import numpy as np
import xxhash

_HOST = re.compile(rb"(?:[^/?#]*@)?(\[[^\]/?#]*\]?|[^:/?#]*)")  # url/normalise.py HOST_PATTERN
_MASK64 = (1 << 64) - 1


def fingerprint_batch(data, offsets, host_bits):
    low = (1 << (64 - int(host_bits))) - 1
    high = _MASK64 ^ low
    raw = data.tobytes()
    out = np.empty(len(offsets) - 1, dtype=np.uint64)
    for i, (a, b) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist())):
        url = raw[a:b]
        start = url.find(b"://")
        host = _HOST.match(url, 0 if start < 0 else start + 3).group(1)
        out[i] = (xxhash.xxh3_64_intdigest(host) & high) | (xxhash.xxh3_64_intdigest(url) & low)
    return out
