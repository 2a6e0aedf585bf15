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

NL, CR, TAB = 10, 13, 9
# counts[]: how many entries of each output array are used (in and out)
N_URLS, N_DATA, N_BASES, N_BDATA, N_TOO_LONG = 0, 1, 2, 3, 4


@njit(cache=True, nogil=True)
def _same_as_last(buf, a, b, bdata, boffsets, nb):
    """Whether buf[a:b] equals base nb-1 (bdata[boffsets[nb-1]:boffsets[nb]])."""
    if nb == 0:
        return False
    s, e = boffsets[nb - 1], boffsets[nb]
    if e - s != b - a:
        return False
    for k in range(b - a):
        if bdata[s + k] != buf[a + k]:
            return False
    return True


@njit(cache=True, nogil=True)
def split_lines(buf, n, final, pairs, max_line, skip, at_start, gbase_id,
                data, offsets, bdata, boffsets, base_ids, too_long, counts):
    """Split the lines of buf[:n]; return (consumed, skip).

    ``consumed``: bytes of buf fully handled (the caller keeps buf[consumed:n] for
    the next call); ``skip``: 1 while inside an over-long line whose end is not yet
    in the buffer. Appends to the output arrays at the positions ``counts`` holds,
    and advances ``counts``. Requires: capacities data >= n, bdata >= n plus what it
    holds, offsets/boffsets >= n // 2 + 2 plus what they hold, base_ids/too_long
    >= n // 2 + 1 plus what they hold (a nonblank line takes >= 2 bytes of buf but
    the unterminated last one); offsets[counts[0]] and boffsets[counts[2]] set.
    """
    i = 0
    if skip:
        while i < n and buf[i] != NL:
            i += 1
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
    consumed = i
    while i < n:
        j = i
        tab = -1
        if pairs:
            while j < n:
                c = buf[j]
                if c == NL:
                    break
                if c == TAB and tab < 0:
                    tab = j
                j += 1
        else:
            while j < n and buf[j] != NL:
                j += 1
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
                if tab >= 0 and tab < e:
                    if _same_as_last(buf, i, tab, bdata, boffsets, nb):
                        base_ids[nu] = nb - 1
                    else:
                        for k in range(i, tab):
                            bdata[nbd] = buf[k]
                            nbd += 1
                        nb += 1
                        boffsets[nb] = nbd
                        base_ids[nu] = nb - 1
                    s = tab + 1
                else:
                    base_ids[nu] = gbase_id
                for k in range(s, e):
                    data[nd] = buf[k]
                    nd += 1
            nu += 1
            offsets[nu] = nd
        i = j + 1
        consumed = min(i, n)
    counts[0], counts[1], counts[2], counts[3], counts[4] = nu, nd, nb, nbd, nt
    return consumed, skip
