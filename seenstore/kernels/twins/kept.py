"""numpy twin of kernels/kept.py ``order_lines``: the same contract and outputs, for
small inputs (below dispatch.SMALL lines while the kernel is not live) and as the
kernel tests' oracle."""

from __future__ import annotations

import numpy as np


def order_lines(text, order, out, ends):
    """kernels.kept.order_lines with numpy (same contract, same outputs)."""
    size, n = len(text), len(order)
    if size and text[size - 1] != 10:
        return -1
    nl = np.flatnonzero(text == 10)
    if len(nl) != n:
        return len(nl)
    starts = np.zeros(n, dtype=np.int64)
    starts[1:] = nl[:-1] + 1
    lens = nl + 1 - starts
    olens = lens[order]
    oends = np.cumsum(olens)
    # byte t of out comes from starts[order[k]] + (t - (oends[k] - olens[k]))
    src = np.repeat(starts[order] - (oends - olens), olens) + np.arange(size, dtype=np.int64)
    out[:size] = text[src]
    ends[:n] = oends
    return n
