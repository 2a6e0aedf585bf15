"""numba gather of newline-terminated lines into a given order (kept-URL files,
store/kepturls.py), with no Python object per line.

``order_lines(text, order, out, ends)``: ``text`` (uint8) holds lines, each ending
in ``\\n``; line ``order[k]`` goes to ``out`` as the k-th line, with its ``\\n``, and
``ends[k]`` is the end of that line in ``out`` (exclusive, after the ``\\n``). Returns
how many lines ``text`` holds (an unterminated tail counts as one); ``out`` and
``ends`` are written only when that is ``len(order)`` and ``text`` is empty or ends in
``\\n`` (else -1 for a missing final ``\\n``). Requires: ``order`` a permutation of
``range(len(order))`` (int64), ``len(out) >= len(text)``, ``len(ends) >= len(order)``.
Twin: kernels/twins/kept.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from seenstore.kernels.lines import _copy, _stop

NL = 10


@njit(cache=True, nogil=True)
def order_lines(text, order, out, ends):
    """See the module docstring."""
    size = text.shape[0]
    n = order.shape[0]
    if size and text[size - 1] != NL:
        return -1
    tp = text.ctypes.data
    # starts[i]: where line i begins; one pass, 8 bytes per step (lines._stop)
    starts = np.empty(n + 1, dtype=np.int64)
    count = 0
    j = 0
    while j < size:
        e = _stop(tp, j, size, False)
        if count < n:
            starts[count] = j
        count += 1
        j = e + 1
    if count != n:
        return count
    starts[n] = size
    op = out.ctypes.data
    w = 0
    for k in range(n):
        i = order[k]
        w = _copy(tp, starts[i], starts[i + 1], op, w)
        ends[k] = w
    return n
