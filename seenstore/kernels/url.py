"""numba fast-path URL normaliser over a URL buffer (the common case only).

``normalise_batch`` writes, for each URL it can handle with certainty, exactly
what the scalar ``seenstore.normalise.try_normalise`` returns (without policy):
WHATWG parse/resolve of absolute http(s) URLs and relative references against
a base, fragment dropped, RFC 3986 escape normalisation. Everything else gets
status ROUTE (the scalar path decides); opaque non-special schemes get SCHEME.
"""

from __future__ import annotations

import numpy as np
from numba import njit

OK, ROUTE, SCHEME = 0, 1, 2

# Byte classes (bit flags), one entry per byte value.
C_ROUTE = 1  # never handled here: controls, space, non-ASCII, backslash
C_PATH_ENC = 2  # percent-encoded by WHATWG in a path: " < > ^ ` { }
C_QUERY_ENC = 4  # percent-encoded by WHATWG in a special URL's query: " ' < >
C_HOST = 8  # accepted in a host here: A-Z a-z 0-9 - . _
C_HEX = 16
C_UNRESERVED = 32  # RFC 3986: A-Z a-z 0-9 - . _ ~
C_SCHEME = 64  # A-Z a-z 0-9 + - .


def _classes() -> np.ndarray:
    t = np.zeros(256, dtype=np.uint8)
    alnum = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    for b in range(256):
        if b <= 0x20 or b >= 0x7F or b == 0x5C:
            t[b] |= C_ROUTE
    for ch, flag in ((b'"<>^`{}', C_PATH_ENC), (b"\"'<>", C_QUERY_ENC), (alnum + b"-._", C_HOST),
                     (b"0123456789ABCDEFabcdef", C_HEX), (alnum + b"-._~", C_UNRESERVED),
                     (alnum + b"+-.", C_SCHEME)):
        for b in ch:
            t[b] |= flag
    return t


CLS = _classes()
UPHEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8).copy()
# Special schemes other than http(s), lowercase, space-padded to 5 bytes.
OTHER_SPECIAL = np.frombuffer(b"ftp  file ws   wss  ", dtype=np.uint8).copy()

SLASH, QMARK, HASH, COLON, PCT, DOT, AT = 47, 63, 35, 58, 37, 46, 64


@njit(cache=True, nogil=True)
def _lower(c):
    return c + 32 if 65 <= c <= 90 else c


@njit(cache=True, nogil=True)
def _hexval(c):
    if c <= 57:
        return c - 48
    return (c | 32) - 87


@njit(cache=True, nogil=True)
def _is_pct2e(src, j):
    """True if src[j:j+3] is ``%2e`` in any case."""
    return src[j] == PCT and src[j + 1] == 50 and (src[j + 2] | 32) == 101


@njit(cache=True, nogil=True)
def _dots(src, a, b):
    """1 if src[a:b] is a WHATWG single-dot segment, 2 if double-dot, else 0."""
    n = b - a
    if n == 1:
        return 1 if src[a] == DOT else 0
    if n == 2:
        return 2 if src[a] == DOT and src[a + 1] == DOT else 0
    if n == 3:
        return 1 if _is_pct2e(src, a) else 0
    if n == 4:
        if src[a] == DOT and _is_pct2e(src, a + 1):
            return 2
        return 2 if _is_pct2e(src, a) and src[a + 3] == DOT else 0
    if n == 6:
        return 2 if _is_pct2e(src, a) and _is_pct2e(src, a + 3) else 0
    return 0


@njit(cache=True, nogil=True)
def _scheme(src, s, e):
    """Classify the start of src[s:e]. Returns (kind, j): kind 0 http, 1 https (j =
    index after ``://``), 2 route, 3 opaque non-special scheme, 4 relative reference."""
    k = s
    while k < e:
        c = src[k]
        if c == COLON:
            break
        if c == SLASH or c == QMARK or c == HASH:
            return 4, s
        k += 1
    if k == e:
        return 4, s
    n = k - s
    if n == 0 or not (65 <= (src[s] | 32) - 32 <= 90):
        return 2, s  # "no scheme" parsing with a ':' early on: leave it to the scalar path
    for j in range(s, k):
        if not CLS[src[j]] & C_SCHEME:
            return 2, s
    if n == 4 or n == 5:
        h = _lower(src[s]) == 104 and _lower(src[s + 1]) == 116
        h = h and _lower(src[s + 2]) == 116 and _lower(src[s + 3]) == 112
        if h and (n == 4 or _lower(src[s + 4]) == 115):
            if k + 3 <= e and src[k + 1] == SLASH and src[k + 2] == SLASH and \
                    (k + 3 == e or src[k + 3] != SLASH):
                return n - 4, k + 3
            return 2, s
    if n <= 5:
        for t in range(4):
            same = True
            for j in range(5):
                c = _lower(src[s + j]) if j < n else 32
                if c != OTHER_SPECIAL[5 * t + j]:
                    same = False
                    break
            if same:
                return 2, s
    if k + 1 < e and src[k + 1] == SLASH:
        return 2, s
    return 3, s


@njit(cache=True, nogil=True)
def _authority(src, j, e, out, o, https):
    """Parse ``host[:port]`` at src[j:], write the lowercase host and non-default port
    at out[o:]. Returns (index after the authority, new o), or (j, -1) to route."""
    h0 = j
    last_label = j
    prev = 0
    while j < e:
        c = src[j]
        if c == SLASH or c == QMARK or c == HASH or c == COLON:
            break
        if not CLS[c] & C_HOST:
            return j, -1
        if c == DOT:
            if prev == DOT or j == h0:
                return j, -1  # empty label
            last_label = j + 1
        elif (prev == DOT or j == h0) and (c | 32) == 120 and j + 3 < e and \
                (src[j + 1] | 32) == 110 and src[j + 2] == 45 and src[j + 3] == 45:
            return j, -1  # an "xn--" label: punycode is the scalar path's job
        out[o] = _lower(c)
        o += 1
        prev = c
        j += 1
    if j == h0:
        return j, -1
    # WHATWG "ends in a number" (IPv4): route if the last label starts with a digit.
    if last_label == j and j - h0 >= 2:  # trailing dot: look at the label before it
        k = j - 2
        while k > h0 and src[k - 1] != DOT:
            k -= 1
        last_label = k
    if last_label < j and 48 <= src[last_label] <= 57:
        return j, -1
    if j < e and src[j] == COLON:
        j += 1
        port = 0
        digits = 0
        while j < e and src[j] != SLASH and src[j] != QMARK and src[j] != HASH:
            c = src[j]
            if not 48 <= c <= 57:
                return j, -1
            port = port * 10 + (c - 48)
            if port > 65535:
                return j, -1
            digits += 1
            j += 1
        if digits > 0 and port != (443 if https else 80):
            out[o] = COLON
            o += 1
            if port == 0:
                out[o] = 48
                o += 1
            else:
                p = port
                nd = 0
                while p > 0:
                    nd += 1
                    p //= 10
                p = port
                for d in range(nd - 1, -1, -1):
                    out[o + d] = 48 + p % 10
                    p //= 10
                o += nd
    return j, o


@njit(cache=True, nogil=True)
def _emit(src, a, b, out, o, enc_flag):
    """Copy src[a:b] to out[o:], percent-encoding bytes whose class has enc_flag.
    Returns (new o, 1 if a '%' was written else 0)."""
    pct = 0
    for j in range(a, b):
        c = src[j]
        if CLS[c] & enc_flag:
            out[o] = PCT
            out[o + 1] = UPHEX[c >> 4]
            out[o + 2] = UPHEX[c & 15]
            o += 3
            pct = 1
        else:
            if c == PCT:
                pct = 1
            out[o] = c
            o += 1
    return o, pct


@njit(cache=True, nogil=True)
def _path(src, j, e, out, o, root):
    """WHATWG path segments of src[j:] (up to ``? #`` or e) appended at out[o:],
    which ends with '/'; dot segments pop back to ``root`` (index after the path's
    first '/'). Returns (index where the path ended, new o, pct flag)."""
    pct = 0
    while True:
        k = j
        while k < e:
            c = src[k]
            if c == SLASH or c == QMARK or c == HASH:
                break
            k += 1
        d = _dots(src, j, k)
        if d == 2:
            if o > root:
                o -= 1
                while o > root and out[o - 1] != SLASH:
                    o -= 1
        elif d == 0:
            o, p = _emit(src, j, k, out, o, C_PATH_ENC)
            pct |= p
            if k < e and src[k] == SLASH:
                out[o] = SLASH
                o += 1
        if k < e and src[k] == SLASH:
            j = k + 1
        else:
            return k, o, pct


@njit(cache=True, nogil=True)
def _query(src, j, e, out, o):
    """If src[j] is '?', append the query (up to '#' or e), encoded. Returns (o, pct)."""
    if j >= e or src[j] != QMARK:
        return o, 0
    k = j + 1
    while k < e and src[k] != HASH:
        k += 1
    return _emit(src, j, k, out, o, C_QUERY_ENC)


@njit(cache=True, nogil=True)
def _escapes(out, lo, hi):
    """RFC 3986 6.2.2 escape normalisation of out[lo:hi] in place, exactly as the
    scalar ``normalise_escapes`` (decode unreserved unless that would complete a
    stray ``%`` into a new escape; uppercase other hex). Requires: out[lo-2:lo]
    holds no '%'. Returns the new end."""
    r = lo
    w = lo
    p1 = 0  # the original bytes before r
    p2 = 0
    while r < hi:
        c = out[r]
        if c == PCT and r + 2 < hi and CLS[out[r + 1]] & C_HEX and CLS[out[r + 2]] & C_HEX:
            h1 = out[r + 1]
            h2 = out[r + 2]
            v = _hexval(h1) * 16 + _hexval(h2)
            keep = True
            if CLS[v] & C_UNRESERVED:
                keep = False
                if CLS[v] & C_HEX and (p1 == PCT or (p2 == PCT and CLS[p1] & C_HEX)):
                    keep = True
            if keep:
                out[w] = PCT
                out[w + 1] = h1 - 32 if h1 >= 97 else h1
                out[w + 2] = h2 - 32 if h2 >= 97 else h2
                w += 3
            else:
                out[w] = v
                w += 1
            p2 = h1
            p1 = h2
            r += 3
        else:
            out[w] = c
            w += 1
            p2 = p1
            p1 = c
            r += 1
    return w


@njit(cache=True, nogil=True)
def _clean(src, s, e):
    """True if src[s:e] has no byte the fast path refuses (control, space, non-ASCII, \\)."""
    for j in range(s, e):
        if CLS[src[j]] & C_ROUTE:
            return False
    return True


@njit(cache=True, nogil=True)
def _absolute(src, s, e, out, o):
    """WHATWG href (fragment dropped, escapes untouched) of the absolute http(s) URL
    src[s:e] at out[o:]. Returns (status, end, path start, dir end, query start, pct);
    dir end is after the path's last '/', query start = end if there is no query."""
    kind, j = _scheme(src, s, e)
    if kind == 3:
        return SCHEME, o, o, o, o, 0
    if kind > 1:
        return ROUTE, o, o, o, o, 0
    return _after_scheme(src, j, e, out, o, kind == 1)


@njit(cache=True, nogil=True)
def _after_scheme(src, j, e, out, o, https):
    """The rest of ``_absolute`` from the authority at src[j] on (scheme written here)."""
    for c in (104, 116, 116, 112):
        out[o] = c
        o += 1
    if https:
        out[o] = 115
        o += 1
    out[o] = COLON
    out[o + 1] = SLASH
    out[o + 2] = SLASH
    o += 3
    j, o = _authority(src, j, e, out, o, https)
    if o < 0:
        return ROUTE, 0, 0, 0, 0, 0
    ps = o
    out[o] = SLASH
    o += 1
    pct = 0
    if j < e and src[j] == SLASH:
        j, o, pct = _path(src, j + 1, e, out, o, ps + 1)
    return _finish(src, j, e, out, o, ps, pct)


@njit(cache=True, nogil=True)
def _finish(src, j, e, out, o, ps, pct):
    """Append the query of src[j:] after the path out[ps:o]; the result tuple of _absolute."""
    de = o
    while out[de - 1] != SLASH:
        de -= 1
    qs = o
    o, p = _query(src, j, e, out, o)
    return OK, o, ps, de, qs, pct | p


@njit(cache=True, nogil=True)
def _copy(src, a, b, out, o):
    for j in range(a, b):
        out[o] = src[j]
        o += 1
    return o


@njit(cache=True, nogil=True)
def _relative(src, s, e, bh, b_ps, b_de, b_qs, b_end, out, o):
    """Resolve the relative reference src[s:e] against a parsed base held in bh
    (WHATWG href, no fragment: path at [b_ps, b_qs), dir end b_de, query to b_end)."""
    https = bh[4] == 115
    if e - s >= 2 and src[s] == SLASH and src[s + 1] == SLASH:
        if e - s >= 3 and src[s + 2] == SLASH:
            return ROUTE, 0, 0, 0, 0, 0
        return _after_scheme(src, s + 2, e, out, o, https)
    if s < e and src[s] == SLASH:
        o = _copy(bh, 0, b_ps + 1, out, o)
        ps = o - 1
        j, o, pct = _path(src, s + 1, e, out, o, ps + 1)
        return _finish(src, j, e, out, o, ps, pct)
    if s == e or src[s] == HASH or src[s] == QMARK:
        take = b_end if (s == e or src[s] == HASH) else b_qs
        o0 = o
        o = _copy(bh, 0, take, out, o)
        pct = 1  # the base may hold escapes
        if take == b_qs:
            o, _ = _query(src, s, e, out, o)
        return OK, o, o0 + b_ps, o0 + b_de, o0 + b_qs, pct
    o0 = o
    o = _copy(bh, 0, b_de, out, o)
    j, o, pct = _path(src, s, e, out, o, o0 + b_ps + 1)
    return _finish(src, j, e, out, o, o0 + b_ps, pct | 1)


@njit(cache=True, nogil=True)
def _exact_http(src, s, e):
    """True if src[s:e] starts with exactly ``http://`` or ``https://`` (lowercase)."""
    if e - s < 7 or src[s] != 104 or src[s + 1] != 116 or src[s + 2] != 116 or src[s + 3] != 112:
        return False
    k = s + 4
    if src[k] == 115:
        k += 1
    return k + 3 <= e and src[k] == COLON and src[k + 1] == SLASH and src[k + 2] == SLASH


@njit(cache=True, nogil=True)
def _same(a, a0, a1, b, b0, b1):
    if a1 - a0 != b1 - b0:
        return False
    for k in range(a1 - a0):
        if a[a0 + k] != b[b0 + k]:
            return False
    return True


@njit(cache=True, nogil=True)
def normalise_batch(src, offsets, bsrc, boffsets, base_ids, max_length, out, out_offsets,
                    status, start, o):
    """Normalise URLs start.. of src/offsets (bases: bsrc/boffsets, base_ids -1 = none)
    into out from byte o; out_offsets[i+1] = end of URL i's output (empty unless OK).

    Writes status[i] (OK / ROUTE / SCHEME). Stops before a URL whose worst-case
    output might not fit in out and returns (that index, o); else (n, o).
    Requires: len(out_offsets) == len(status) + 1 == len(offsets); out_offsets[start] == o.
    """
    n = offsets.shape[0] - 1
    bmax = 0
    for b in range(boffsets.shape[0] - 1):
        bmax = max(bmax, boffsets[b + 1] - boffsets[b])
    bh = np.empty(3 * bmax + 32, dtype=np.uint8)
    cached = -1  # base id whose parse bh holds
    b_ok = False
    b_ps = b_de = b_qs = b_end = 0
    for i in range(start, n):
        s = offsets[i]
        e = offsets[i + 1]
        bid = base_ids[i]
        if o + 3 * (e - s) + 3 * bmax + 32 > out.shape[0]:
            return i, o
        st = ROUTE
        end = o
        ps = pct = 0
        if e - s <= max_length and _clean(src, s, e):
            if bid < 0:
                st, end, ps, _, _, pct = _absolute(src, s, e, out, o)
            else:
                kind, j = _scheme(src, s, e)
                if kind <= 1 and _exact_http(src, s, e):
                    # the scalar path parses these without looking at the base
                    st, end, ps, _, _, pct = _after_scheme(src, j, e, out, o, kind == 1)
                elif kind != 2:
                    if bid != cached:
                        b0 = boffsets[bid]
                        b1 = boffsets[bid + 1]
                        if cached < 0 or not _same(bsrc, b0, b1, bsrc, boffsets[cached],
                                                   boffsets[cached + 1]):
                            b_ok = False
                            if _clean(bsrc, b0, b1):
                                bst, b_end, b_ps, b_de, b_qs, _ = _absolute(bsrc, b0, b1, bh, 0)
                                b_ok = bst == OK
                        cached = bid
                    if not b_ok:
                        st = ROUTE  # the scalar path decides what a bad base means
                    elif kind == 3:
                        st = SCHEME
                    elif kind <= 1:
                        st, end, ps, _, _, pct = _after_scheme(src, j, e, out, o, kind == 1)
                    else:
                        st, end, ps, _, _, pct = _relative(src, s, e, bh, b_ps, b_de, b_qs,
                                                            b_end, out, o)
            if st == OK and pct:
                end = _escapes(out, ps, end)
            if st == OK and end - o > max_length:
                st = ROUTE
        status[i] = st
        if st == OK:
            o = end
        out_offsets[i + 1] = o
    return n, o
