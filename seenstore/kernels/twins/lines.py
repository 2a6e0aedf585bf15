"""Python twin of kernels/lines.py ``split_lines``: the same contract and outputs,
for a stream's first small reads (below dispatch.SMALL lines while the kernel is not
live) and as the kernel tests' oracle."""

from __future__ import annotations

import numpy as np

_U = np.uint64


def split_lines(buf, n, final, pairs, max_line, skip, at_start, gbase_id, limit,
                 data, offsets, bdata, boffsets, base_ids, too_long, counts):
    """kernels.lines.split_lines in Python (same contract, same outputs)."""
    raw = buf[:n].tobytes()
    i = 0
    if skip:
        nl = raw.find(b"\n")
        if nl < 0:
            return n, (0 if final else 1)
        i, skip = nl + 1, 0
    if at_start and i == 0:
        if n < 3 and not final:
            return 0, 0
        if raw.startswith(b"\xef\xbb\xbf"):
            i = 3
    nu, nd, nb, nbd, nt = (int(x) for x in counts)
    consumed = i
    while i < n and nu < limit:
        j = raw.find(b"\n", i)
        j = n if j < 0 else j
        if j == n and not final:  # incomplete: wait, or reject it now
            if j - i > max_line + 1:
                too_long[nt], base_ids[nu] = nu, -1
                nt, nu = nt + 1, nu + 1
                offsets[nu], consumed, skip = nd, n, 1
            break
        e = j - 1 if j > i and raw[j - 1] == 13 else j
        if e > i:
            if e - i > max_line:
                too_long[nt], base_ids[nu] = nu, -1
                nt += 1
            else:
                s, tab = i, (raw.find(b"\t", i, e) if pairs else -1)
                if tab < 0:
                    base_ids[nu] = gbase_id
                elif nb and raw[i:tab] == bdata[boffsets[nb - 1]:boffsets[nb]].tobytes():
                    base_ids[nu], s = nb - 1, tab + 1
                else:
                    bdata[nbd : nbd + tab - i] = buf[i:tab]
                    nbd, nb = nbd + tab - i, nb + 1
                    boffsets[nb], base_ids[nu], s = nbd, nb - 1, tab + 1
                data[nd : nd + e - s] = buf[s:e]
                nd += e - s
            nu += 1
            offsets[nu] = nd
        i = j + 1
        consumed = min(i, n)
    counts[:] = (nu, nd, nb, nbd, nt)
    return consumed, skip
