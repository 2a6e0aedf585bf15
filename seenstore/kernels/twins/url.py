"""numpy twin of kernels/url.py ``gather``: the selected lines' bytes end to end,
with the same outputs, for small inputs (below dispatch.SMALL URLs) and as the
kernel tests' oracle."""

from __future__ import annotations

import numpy as np

_U = np.uint64


def gather(out, out_offsets, select, piece_of, pdata, poffsets, newline):
    end = b"\n" if newline else b""
    parts = []
    for i in np.flatnonzero(select).tolist():
        p = int(piece_of[i])
        src, a, b = (pdata, poffsets[p], poffsets[p + 1]) if p >= 0 else \
            (out, out_offsets[i], out_offsets[i + 1])
        parts.append(src[a:b].tobytes() + end)
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in parts], out=offsets[1:])
    return np.frombuffer(bytearray(b"".join(parts)), dtype=np.uint8), offsets
