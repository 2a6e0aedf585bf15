"""numba line splitter: URL lines (plain or ``base<TAB>href``) of a byte block into
the URL buffer's arrays, in one pass, with no Python object per line.

``split_lines`` consumes the whole lines of ``buf[:n]`` (and the unterminated last
one when ``final``), so a caller streams a file through a fixed buffer, carrying
the unconsumed tail into the next call. Rules (docs/fastpath.md):
  - a line ends at ``\\n``; one ``\\r`` before it is dropped; blank lines are skipped;
  - a UTF-8 BOM (EF BB BF) at the very start of the stream (``at_start``) is skipped;
  - ``pairs``: a line is split at its first TAB into base and href; consecutive equal
    bases are stored once; a line without TAB gets base ``gbase_id`` (-1 = none);
  - a line longer than ``max_line`` bytes (without its terminator) is not copied: it
    becomes an empty URL with base -1 whose index goes to ``too_long``; a caller that
    finds one longer than its buffer passes ``skip`` = 1 to the next call, which drops
    bytes up to and including the next ``\\n``.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

# Raw byte access by address (no array refcounting in helper calls): kernels/url.py.
from seenstore.kernels.url import _ld, _ld64, _st, _st64

NL, CR, TAB = 10, 13, 9
# counts[]: how many entries of each output array are used (in and out)
N_URLS, N_DATA, N_BASES, N_BDATA, N_TOO_LONG = 0, 1, 2, 3, 4


ONES = np.uint64(0x0101010101010101)
HIGHS = np.uint64(0x8080808080808080)
NLS = np.uint64(0x0A0A0A0A0A0A0A0A)
TABS = np.uint64(0x0909090909090909)


@njit(cache=True, nogil=True)
def _stop(bp, j, n, tabs):
    """The first index >= j of a '\\n' (or, with ``tabs``, a TAB) in the n bytes at
    bp, else n; 8 bytes per step (the lowest zero byte of v ^ pattern is exact)."""
    while j + 8 <= n:
        v = _ld64(bp, j)
        x = v ^ NLS
        m = (x - ONES) & ~x & HIGHS
        if tabs:
            y = v ^ TABS
            m |= (y - ONES) & ~y & HIGHS
        if m:
            return j + (trailing_zeros(m) >> 3)
        j += 8
    while j < n:
        c = _ld(bp, j)
        if c == NL or (tabs and c == TAB):
            return j
        j += 1
    return n


@njit(cache=True, nogil=True)
def _copy(sp, a, b, dp, o):
    """Copy the bytes sp[a:b] to dp[o:]; return o + b - a."""
    while a + 8 <= b:
        _st64(dp, o, _ld64(sp, a))
        a += 8
        o += 8
    while a < b:
        _st(dp, o, _ld(sp, a))
        a += 1
        o += 1
    return o


@njit(cache=True, nogil=True)
def _equal(ap, a, bp, b, k):
    """Whether the k bytes at ap + a equal the k bytes at bp + b."""
    while k >= 8:
        if _ld64(ap, a) != _ld64(bp, b):
            return False
        a += 8
        b += 8
        k -= 8
    for t in range(k):
        if _ld(ap, a + t) != _ld(bp, b + t):
            return False
    return True


@njit(cache=True, nogil=True)
def split_lines(buf, n, final, pairs, max_line, skip, at_start, gbase_id, limit,
                data, offsets, bdata, boffsets, base_ids, too_long, counts):
    """Split the lines of buf[:n] until the outputs hold ``limit`` URLs; return
    (consumed, skip).

    ``consumed``: bytes of buf fully handled (the caller keeps buf[consumed:n] for
    the next call); ``skip``: 1 while inside an over-long line whose end is not yet
    in the buffer. Appends to the output arrays at the positions ``counts`` holds
    and advances ``counts``. Requires: buf uint8 C-contiguous; free room in data
    and bdata >= n; offsets, base_ids and too_long hold >= limit URLs (offsets
    limit + 1), boffsets >= counts[2] + limit + 1 (a base per URL at most);
    offsets[counts[0]] and boffsets[counts[2]] set; counts[0] <= limit.
    """
    i = 0
    if skip:
        i = _stop(buf.ctypes.data, 0, n, False)
        if i == n:
            return n, (0 if final else 1)
        i += 1
        skip = 0
    if at_start and i == 0:
        if n < 3 and not final:
            return 0, 0
        if n >= 3 and buf[0] == 0xEF and buf[1] == 0xBB and buf[2] == 0xBF:
            i = 3
    nu, nd, nb, nbd, nt = counts[0], counts[1], counts[2], counts[3], counts[4]
    bp, dp, bdp = buf.ctypes.data, data.ctypes.data, bdata.ctypes.data
    consumed = i
    while i < n and nu < limit:
        tab = -1
        same = False  # the line starts with the last base of a line, then a TAB
        if pairs and nb and nb - 1 != gbase_id:  # such a base holds no TAB, no '\n'
            k = boffsets[nb] - boffsets[nb - 1]
            same = i + k < n and buf[i + k] == TAB and _equal(bp, i, bdp, boffsets[nb - 1], k)
        if same:
            tab = i + k
            j = _stop(bp, tab + 1, n, False)
        else:
            j = _stop(bp, i, n, pairs)
            if pairs and j < n and buf[j] == TAB:
                tab = j
                j = _stop(bp, j + 1, n, False)
        if j == n and not final:  # an incomplete line: wait for more, or reject it now
            if j - i > max_line + 1:  # too long even if its last byte is a '\r'
                too_long[nt] = nu
                nt += 1
                base_ids[nu] = -1
                nu += 1
                offsets[nu] = nd
                consumed = n
                skip = 1
            break
        e = j
        if e > i and buf[e - 1] == CR:
            e -= 1
        if e > i:
            if e - i > max_line:
                too_long[nt] = nu
                nt += 1
                base_ids[nu] = -1
            else:
                s = i
                if tab >= 0:
                    if same:
                        base_ids[nu] = nb - 1
                    else:
                        nbd = _copy(bp, i, tab, bdp, nbd)
                        nb += 1
                        boffsets[nb] = nbd
                        base_ids[nu] = nb - 1
                    s = tab + 1
                else:
                    base_ids[nu] = gbase_id
                nd = _copy(bp, s, e, dp, nd)
            nu += 1
            offsets[nu] = nd
        i = j + 1
        consumed = min(i, n)
    counts[0], counts[1], counts[2], counts[3], counts[4] = nu, nd, nb, nbd, nt
    return consumed, skip
