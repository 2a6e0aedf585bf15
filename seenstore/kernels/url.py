"""numba fast-path URL normaliser over a URL buffer (the common case only).

``normalise_batch`` writes, for each URL it can handle with certainty, exactly
what the scalar ``seenstore.url.normalise.try_normalise`` returns (without policy):
WHATWG parse/resolve of absolute http(s) URLs and relative references against
a base, fragment dropped, RFC 3986 escape normalisation. Everything else gets
status ROUTE (the scalar path decides); opaque non-special schemes get SCHEME.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from seenstore.kernels.xxh3 import xxh3_64  # frozen: after editing xxh3.py, clear __pycache__

from seenstore.kernels.status import OK, ROUTE, SCHEME  # noqa: E402

# Byte classes (bit flags), one entry per byte value.
C_ROUTE = 1  # never handled here: controls, DEL, backslash
C_PATH_ENC = 2  # percent-encoded by WHATWG in a path: space " < > ^ ` { } and >= 0x80
C_QUERY_ENC = 4  # percent-encoded by WHATWG in a special URL's query: space " ' < > >= 0x80
C_HOST = 8  # accepted in a host here: A-Z a-z 0-9 - . _
C_HEX = 16
C_UNRESERVED = 32  # RFC 3986: A-Z a-z 0-9 - . _ ~
C_SCHEME = 64  # A-Z a-z 0-9 + - .
C_PATH_END = 128  # / ? #
C_QUERY_END = 256  # '#'
C_HIGH = 512  # >= 0x80: part of a UTF-8 sequence


def _classes() -> np.ndarray:
    t = np.zeros(256, dtype=np.uint16)
    alnum = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    for b in range(256):
        if b < 0x20 or b == 0x7F or b == 0x5C:
            t[b] |= C_ROUTE
        if b >= 0x80:
            t[b] |= C_HIGH | C_PATH_ENC | C_QUERY_ENC
    for ch, flag in ((b' "<>^`{}', C_PATH_ENC), (b" \"'<>", C_QUERY_ENC), (alnum + b"-._", C_HOST),
                     (b"0123456789ABCDEFabcdef", C_HEX), (alnum + b"-._~", C_UNRESERVED),
                     (alnum + b"+-.", C_SCHEME), (b"/?#", C_PATH_END), (b"#", C_QUERY_END)):
        for b in ch:
            t[b] |= flag
    return t


CLS = _classes()

SLASH, QMARK, HASH, COLON, PCT, DOT, AT = 47, 63, 35, 58, 37, 46, 64


# Helpers take raw byte addresses (uintp) instead of arrays: numba increfs and
# decrefs (atomically) every array passed to a helper call, which costs ~10x.
# The arrays are owned by normalise_batch's caller and outlive every helper call.
@intrinsic
def _ld(typingctx, addr, i):
    """The byte at address addr + i."""
    def codegen(context, builder, sig, args):
        ptr = builder.inttoptr(args[0], ir.IntType(8).as_pointer())
        return builder.load(builder.gep(ptr, [args[1]]))
    return types.uint8(types.uintp, types.intp), codegen


@intrinsic
def _ld64(typingctx, addr, i):
    """The 8 bytes at address addr + i as one uint64 (unaligned, native order)."""
    def codegen(context, builder, sig, args):
        ptr = builder.inttoptr(builder.add(args[0], args[1]), ir.IntType(64).as_pointer())
        return builder.load(ptr, align=1)
    return types.uint64(types.uintp, types.intp), codegen


@intrinsic
def _st64(typingctx, addr, i, v):
    """Store the uint64 v at address addr + i (unaligned, native order)."""
    def codegen(context, builder, sig, args):
        ptr = builder.inttoptr(builder.add(args[0], args[1]), ir.IntType(64).as_pointer())
        builder.store(args[2], ptr, align=1)
        return context.get_dummy_value()
    return types.void(types.uintp, types.intp, types.uint64), codegen


@intrinsic
def _st(typingctx, addr, i, v):
    """Store the low byte of v at address addr + i."""
    def codegen(context, builder, sig, args):
        ptr = builder.inttoptr(args[0], ir.IntType(8).as_pointer())
        builder.store(builder.trunc(args[2], ir.IntType(8)), builder.gep(ptr, [args[1]]))
        return context.get_dummy_value()
    return types.void(types.uintp, types.intp, types.intp), codegen


@njit(cache=True, nogil=True)
def _lower(c):
    return c + 32 if 65 <= c <= 90 else c


@njit(cache=True, nogil=True)
def _hexval(c):
    if c <= 57:
        return c - 48
    return (c | 32) - 87


@njit(cache=True, nogil=True)
def _hexdigit(d):
    """Uppercase hex digit (ASCII code) of 0 <= d < 16."""
    return d + 48 if d < 10 else d + 55


@njit(cache=True, nogil=True)
def _is_pct2e(sp, j):
    """True if the bytes at sp[j:j+3] are ``%2e`` in any case."""
    return _ld(sp, j) == PCT and _ld(sp, j + 1) == 50 and (_ld(sp, j + 2) | 32) == 101


@njit(cache=True, nogil=True)
def _dots(sp, a, b):
    """1 if sp[a:b] is a WHATWG single-dot segment, 2 if double-dot, else 0."""
    n = b - a
    if n == 0 or n > 6 or (_ld(sp, a) != DOT and _ld(sp, a) != PCT):
        return 0  # the common case, decided by one well-predicted branch
    if n == 1:
        return 1 if _ld(sp, a) == DOT else 0
    if n == 2:
        return 2 if _ld(sp, a) == DOT and _ld(sp, a + 1) == DOT else 0
    if n == 3:
        return 1 if _is_pct2e(sp, a) else 0
    if n == 4:
        if _ld(sp, a) == DOT and _is_pct2e(sp, a + 1):
            return 2
        return 2 if _is_pct2e(sp, a) and _ld(sp, a + 3) == DOT else 0
    if n == 6:
        return 2 if _is_pct2e(sp, a) and _is_pct2e(sp, a + 3) else 0
    return 0


@njit(cache=True, nogil=True)
def _is_other_special(sp, s, n):
    """True if sp[s:s+n] is ftp, file, ws or wss in any case."""
    if n == 2:
        return _lower(_ld(sp, s)) == 119 and _lower(_ld(sp, s + 1)) == 115
    if n == 3:
        a, b, c = _lower(_ld(sp, s)), _lower(_ld(sp, s + 1)), _lower(_ld(sp, s + 2))
        return (a == 102 and b == 116 and c == 112) or (a == 119 and b == 115 and c == 115)
    if n == 4:
        return (_lower(_ld(sp, s)) == 102 and _lower(_ld(sp, s + 1)) == 105
                and _lower(_ld(sp, s + 2)) == 108 and _lower(_ld(sp, s + 3)) == 101)
    return False


@njit(cache=True, nogil=True)
def _scheme(sp, s, e):
    """Classify the start of sp[s:e]. Returns (kind, j): kind 0 http, 1 https (j =
    index after ``://``), 2 route, 3 opaque non-special scheme, 4 relative reference."""
    k = s
    while k < e:
        c = _ld(sp, k)
        if c == COLON:
            break
        if c == SLASH or c == QMARK or c == HASH:
            return 4, s
        k += 1
    if k == e:
        return 4, s
    n = k - s
    if n == 0 or not 97 <= (_ld(sp, s) | 32) <= 122:
        return 2, s  # "no scheme" parsing with a ':' early on: leave it to the scalar path
    for j in range(s, k):
        if not CLS[_ld(sp, j)] & C_SCHEME:
            return 2, s
    if n == 4 or n == 5:
        h = _lower(_ld(sp, s)) == 104 and _lower(_ld(sp, s + 1)) == 116
        h = h and _lower(_ld(sp, s + 2)) == 116 and _lower(_ld(sp, s + 3)) == 112
        if h and (n == 4 or _lower(_ld(sp, s + 4)) == 115):
            if k + 3 <= e and _ld(sp, k + 1) == SLASH and _ld(sp, k + 2) == SLASH and \
                    (k + 3 == e or _ld(sp, k + 3) != SLASH):
                return n - 4, k + 3
            return 2, s
    if _is_other_special(sp, s, n) or (k + 1 < e and _ld(sp, k + 1) == SLASH):
        return 2, s
    return 3, s


@njit(cache=True, nogil=True)
def _port(sp, j, e, op, o, https):
    """Parse the digits of a port at sp[j:] (after ':'); write ``:port`` at op[o:] unless
    empty or default. Returns (index after the port, new o), or (j, -1) to route."""
    port = 0
    digits = 0
    while j < e:
        c = _ld(sp, j)
        if c == SLASH or c == QMARK or c == HASH:
            break
        if not 48 <= c <= 57:
            return j, -1
        port = port * 10 + (c - 48)
        if port > 65535:
            return j, -1
        digits += 1
        j += 1
    if digits == 0 or port == (443 if https else 80):
        return j, o
    _st(op, o, COLON)
    nd = 1 if port < 10 else 2 if port < 100 else 3 if port < 1000 else 4 if port < 10000 else 5
    p = port
    for d in range(nd, 0, -1):
        _st(op, o + d, 48 + p % 10)
        p //= 10
    return j, o + nd + 1


@njit(cache=True, nogil=True)
def _dotted_quad(sp, a, b):
    """True if sp[a:b] is an IPv4 address the WHATWG parser serialises unchanged:
    four decimal parts 0-255 without leading zeros, no trailing dot."""
    parts = 0
    j = a
    while j < b:
        k = j
        v = 0
        while k < b and 48 <= _ld(sp, k) <= 57 and k - j < 3:
            v = v * 10 + _ld(sp, k) - 48
            k += 1
        if k == j or v > 255 or (_ld(sp, j) == 48 and k - j > 1):
            return False
        parts += 1
        if k == b:
            break
        if _ld(sp, k) != DOT:
            return False
        j = k + 1
        if j == b:
            return False  # trailing dot: the serialisation drops it
    return parts == 4 and j < b


@njit(cache=True, nogil=True)
def _authority(sp, j, e, op, o, https):
    """Parse ``host[:port]`` at sp[j:], write the lowercase host and non-default port
    at op[o:]. Returns (index after the authority, new o), or (j, -1) to route."""
    h0 = j
    last_label = j
    prev = DOT
    while j < e:
        c = _ld(sp, j)
        if c == SLASH or c == QMARK or c == HASH or c == COLON:
            break
        if not CLS[c] & C_HOST:
            return j, -1
        if c == DOT:
            if prev == DOT:
                return j, -1  # empty label
            last_label = j + 1
        elif prev == DOT and (c | 32) == 120 and j + 3 < e and (_ld(sp, j + 1) | 32) == 110 \
                and _ld(sp, j + 2) == 45 and _ld(sp, j + 3) == 45:
            return j, -1  # an "xn--" label: punycode is the scalar path's job
        _st(op, o, _lower(c))
        o += 1
        prev = c
        j += 1
    if j == h0:
        return j, -1
    # WHATWG "ends in a number" (IPv4): route if the last label starts with a digit.
    if last_label == j and j - h0 >= 2:  # trailing dot: look at the label before it
        k = j - 2
        while k > h0 and _ld(sp, k - 1) != DOT:
            k -= 1
        last_label = k
    if last_label < j and 48 <= _ld(sp, last_label) <= 57 and not _dotted_quad(sp, h0, j):
        return j, -1
    if j < e and _ld(sp, j) == COLON:
        return _port(sp, j + 1, e, op, o, https)
    return j, o


@njit(cache=True, nogil=True)
def _emit(sp, j, e, op, o, enc_flag, stop_flag):
    """Copy sp[j:] up to the first byte of class stop_flag (or e) to op[o:],
    percent-encoding bytes of class enc_flag. Returns (index of the stop byte, new o,
    1 if a '%' was written else 0); o = -1 if a byte the fast path refuses was met
    (control, space, non-ASCII, backslash)."""
    pct = 0
    while j < e:
        c = _ld(sp, j)
        f = CLS[c]
        if f & (enc_flag | stop_flag | C_ROUTE):
            if f & stop_flag:
                break
            if f & C_ROUTE:
                return j, -1, 0
            m = _utf8_seq(sp, j, e) if f & C_HIGH else 1
            if m == 0:
                return j, -1, 0
            for t in range(m):
                c = _ld(sp, j + t)
                _st(op, o, PCT)
                _st(op, o + 1, _hexdigit(c >> 4))
                _st(op, o + 2, _hexdigit(c & 15))
                o += 3
            j += m - 1
            pct = 1
        else:
            if c == PCT:
                pct = 1
            _st(op, o, c)
            o += 1
        j += 1
    return j, o, pct


@njit(cache=True, nogil=True)
def _path(sp, j, e, op, o, root):
    """WHATWG path segments of sp[j:] (up to ``? #`` or e) appended at op[o:], which
    ends with '/'; dot segments pop back to ``root`` (index after the path's first
    '/'). Returns (index where the path ended, new o, pct flag); o = -1 to route.
    Dot segments are recognised on the output: encoding never writes '.' or '%2e'."""
    pct = 0
    while True:
        seg = o
        k, o, p = _emit(sp, j, e, op, o, C_PATH_ENC, C_PATH_END)
        if o < 0:
            return k, -1, 0
        pct |= p
        d = _dots(op, seg, o)
        if d != 0:
            o = seg
            if d == 2 and o > root:
                o -= 1
                while o > root and _ld(op, o - 1) != SLASH:
                    o -= 1
        if k < e and _ld(sp, k) == SLASH:
            if d == 0:
                _st(op, o, SLASH)
                o += 1
            j = k + 1
        else:
            return k, o, pct


@njit(cache=True, nogil=True)
def _query(sp, j, e, op, o):
    """If sp[j] is '?', append the query (up to '#' or e), encoded. Returns
    (index after it, o, pct); o = -1 to route."""
    if j >= e or _ld(sp, j) != QMARK:
        return j, o, 0
    _st(op, o, QMARK)
    return _emit(sp, j + 1, e, op, o + 1, C_QUERY_ENC, C_QUERY_END)


@njit(cache=True, nogil=True)
def _escapes(op, lo, hi):
    """RFC 3986 6.2.2 escape normalisation of op[lo:hi] in place, exactly as the
    scalar ``normalise_escapes`` (decode unreserved unless that would complete a
    stray ``%`` into a new escape; uppercase other hex). Requires: op[lo-2:lo]
    holds no '%'. Returns the new end."""
    r = lo
    w = lo
    p1 = 0  # the original bytes before r
    p2 = 0
    while r < hi:
        c = _ld(op, r)
        if c == PCT and r + 2 < hi and CLS[_ld(op, r + 1)] & C_HEX and CLS[_ld(op, r + 2)] & C_HEX:
            h1 = _ld(op, r + 1)
            h2 = _ld(op, r + 2)
            v = _hexval(h1) * 16 + _hexval(h2)
            keep = True
            if CLS[v] & C_UNRESERVED:
                keep = False
                if CLS[v] & C_HEX and (p1 == PCT or (p2 == PCT and CLS[p1] & C_HEX)):
                    keep = True
            if keep:
                _st(op, w, PCT)
                _st(op, w + 1, h1 - 32 if h1 >= 97 else h1)
                _st(op, w + 2, h2 - 32 if h2 >= 97 else h2)
                w += 3
            else:
                _st(op, w, v)
                w += 1
            p2 = h1
            p1 = h2
            r += 3
        else:
            _st(op, w, c)
            w += 1
            p2 = p1
            p1 = c
            r += 1
    return w


@njit(cache=True, nogil=True)
def _clean(sp, s, e):
    """True if sp[s:e] is printable ASCII without backslash (no space, no control)."""
    for j in range(s, e):
        c = _ld(sp, j)
        if c <= 32 or CLS[c] & (C_ROUTE | C_HIGH):
            return False
    return True


@njit(cache=True, nogil=True)
def _utf8_seq(sp, j, e):
    """Length (2-4) of the valid UTF-8 sequence at sp[j:e] (lead byte >= 0x80), or 0
    if invalid (as Python's strict decoder) or a C1 control U+0080-U+009F."""
    b0 = _ld(sp, j)
    if 0xC2 <= b0 <= 0xDF:
        if j + 1 >= e or not 0x80 <= _ld(sp, j + 1) <= 0xBF:
            return 0
        return 0 if b0 == 0xC2 and _ld(sp, j + 1) <= 0x9F else 2
    if 0xE0 <= b0 <= 0xEF:
        n = 3
        lo = 0xA0 if b0 == 0xE0 else 0x80
        hi = 0x9F if b0 == 0xED else 0xBF
    elif 0xF0 <= b0 <= 0xF4:
        n = 4
        lo = 0x90 if b0 == 0xF0 else 0x80
        hi = 0x8F if b0 == 0xF4 else 0xBF
    else:
        return 0
    if j + n > e or not lo <= _ld(sp, j + 1) <= hi:
        return 0
    for t in range(2, n):
        if not 0x80 <= _ld(sp, j + t) <= 0xBF:
            return 0
    return n


@njit(cache=True, nogil=True)
def _fragment_ok(sp, j, e):
    """True if the dropped fragment sp[j:e] holds nothing the scalar path would reject
    or strip (controls, tab/newline, invalid UTF-8, C1 controls) nor a backslash."""
    while j < e:
        c = _ld(sp, j)
        f = CLS[c]
        if f & C_ROUTE:
            return False
        if f & C_HIGH:
            m = _utf8_seq(sp, j, e)
            if m == 0:
                return False
            j += m
        else:
            j += 1
    return True


@njit(cache=True, nogil=True)
def _absolute(sp, s, e, op, o):
    """WHATWG href (fragment dropped, escapes untouched) of the absolute http(s) URL
    sp[s:e] at op[o:]. Returns (status, end, path start, 0, query start, pct); query
    start = end if there is no query (the 0 is a slot kept for the tuple's shape)."""
    kind, j = _scheme(sp, s, e)
    if kind == 3 and _clean(sp, s, e):
        return SCHEME, o, o, o, o, 0
    if kind > 1:
        return ROUTE, o, o, o, o, 0
    return _after_scheme(sp, j, e, op, o, kind == 1)


@njit(cache=True, nogil=True)
def _after_scheme(sp, j, e, op, o, https):
    """The rest of ``_absolute`` from the authority at sp[j] on (scheme written here)."""
    _st(op, o, 104)
    _st(op, o + 1, 116)
    _st(op, o + 2, 116)
    _st(op, o + 3, 112)
    o += 4
    if https:
        _st(op, o, 115)
        o += 1
    _st(op, o, COLON)
    _st(op, o + 1, SLASH)
    _st(op, o + 2, SLASH)
    j, o = _authority(sp, j, e, op, o + 3, https)
    if o < 0:
        return ROUTE, 0, 0, 0, 0, 0
    ps = o
    _st(op, o, SLASH)
    o += 1
    pct = 0
    if j < e and _ld(sp, j) == SLASH:
        j, o, pct = _path(sp, j + 1, e, op, o, ps + 1)
    return _finish(sp, j, e, op, o, ps, pct)


@njit(cache=True, nogil=True)
def _finish(sp, j, e, op, o, ps, pct):
    """Append the query of sp[j:] after the path op[ps:o] and check the fragment;
    the result tuple of _absolute (ROUTE if o < 0 on entry or a refused byte)."""
    if o < 0:
        return ROUTE, 0, 0, 0, 0, 0
    qs = o
    j, o, p = _query(sp, j, e, op, o)
    if o < 0 or not _fragment_ok(sp, j, e):
        return ROUTE, 0, 0, 0, 0, 0
    return OK, o, ps, 0, qs, pct | p


@njit(cache=True, nogil=True)
def _copy(sp, a, b, op, o):
    """Copy sp[a:b] to op[o:] (8 bytes at a time); returns o + b - a."""
    k = 0
    while a + k + 8 <= b:
        _st64(op, o + k, _ld64(sp, a + k))
        k += 8
    while a + k < b:
        _st(op, o + k, _ld(sp, a + k))
        k += 1
    return o + b - a


@njit(cache=True, nogil=True)
def _relative(sp, s, e, bp, b_ps, b_de, b_qs, b_end, b_pct, op, o):
    """Resolve the relative reference sp[s:e] against a parsed base at bp (WHATWG
    href, no fragment: path at [b_ps, b_qs), dir end b_de, query up to b_end;
    b_pct = 1 if it holds a '%')."""
    https = _ld(bp, 4) == 115
    if e - s >= 2 and _ld(sp, s) == SLASH and _ld(sp, s + 1) == SLASH:
        if e - s >= 3 and _ld(sp, s + 2) == SLASH:
            return ROUTE, 0, 0, 0, 0, 0
        return _after_scheme(sp, s + 2, e, op, o, https)
    if s < e and _ld(sp, s) == SLASH:
        o = _copy(bp, 0, b_ps + 1, op, o)
        ps = o - 1
        j, o, pct = _path(sp, s + 1, e, op, o, ps + 1)
        return _finish(sp, j, e, op, o, ps, pct)  # the base's path is not kept
    if s == e or _ld(sp, s) == HASH or _ld(sp, s) == QMARK:
        take = b_end if (s == e or _ld(sp, s) == HASH) else b_qs
        o0 = o
        o = _copy(bp, 0, take, op, o)
        j = s
        qp = 0
        if take == b_qs:
            j, o, qp = _query(sp, s, e, op, o)
        if o < 0 or not _fragment_ok(sp, j, e):
            return ROUTE, 0, 0, 0, 0, 0
        return OK, o, o0 + b_ps, 0, o0 + b_qs, b_pct | qp
    o0 = o
    o = _copy(bp, 0, b_de, op, o)
    j, o, pct = _path(sp, s, e, op, o, o0 + b_ps + 1)
    return _finish(sp, j, e, op, o, o0 + b_ps, pct | b_pct)


@njit(cache=True, nogil=True)
def _exact_http(sp, s, e):
    """True if sp[s:e] starts with exactly ``http://`` or ``https://`` (lowercase)."""
    if e - s < 7 or _ld(sp, s) != 104 or _ld(sp, s + 1) != 116 or _ld(sp, s + 2) != 116 \
            or _ld(sp, s + 3) != 112:
        return False
    k = s + 4
    if _ld(sp, k) == 115:
        k += 1
    return k + 3 <= e and _ld(sp, k) == COLON and _ld(sp, k + 1) == SLASH and \
        _ld(sp, k + 2) == SLASH


@njit(cache=True, nogil=True)
def _same(ap, a0, a1, b0, b1):
    """True if the bytes ap[a0:a1] equal ap[b0:b1]."""
    n = a1 - a0
    if n != b1 - b0:
        return False
    k = 0
    while k + 8 <= n:
        if _ld64(ap, a0 + k) != _ld64(ap, b0 + k):
            return False
        k += 8
    while k < n:
        if _ld(ap, a0 + k) != _ld(ap, b0 + k):
            return False
        k += 1
    return True


@njit(cache=True, nogil=True)
def _one(sp, s, e, has_base, exact_ok, b_ok, bp, b_ps, b_de, b_qs, b_end, b_pct, op, o):
    """Status, end, path start and pct flag of the URL sp[s:e] written at op[o:]
    (before escape normalisation); b_* describe its parsed base if has_base.
    exact_ok: an input starting exactly with http:// or https:// may skip the base
    (false for a respelled input: the scalar path tests the raw one)."""
    if not has_base:
        st, end, ps, _, _, pct = _absolute(sp, s, e, op, o)
        return st, end, ps, pct
    kind, j = _scheme(sp, s, e)
    if kind <= 1 and exact_ok and _exact_http(sp, s, e):
        # the scalar path parses these without looking at the base
        st, end, ps, _, _, pct = _after_scheme(sp, j, e, op, o, kind == 1)
        return st, end, ps, pct
    if kind == 2 or not b_ok:
        return ROUTE, o, 0, 0  # the scalar path decides what a bad base means
    if kind == 3:
        return (SCHEME if _clean(sp, s, e) else ROUTE), o, 0, 0
    if kind <= 1:
        st, end, ps, _, _, pct = _after_scheme(sp, j, e, op, o, kind == 1)
    else:
        st, end, ps, _, _, pct = _relative(sp, s, e, bp, b_ps, b_de, b_qs, b_end, b_pct, op, o)
    return st, end, ps, pct


@njit(cache=True, nogil=True)
def _respell(sp, s, e, tp):
    """Copy sp[s:e] to tp as WHATWG reads it: without tab/LF/CR, with '\\' as '/'
    before the first '?' or '#'. Returns the copy's length, or -1 if it is sp[s:e]."""
    changed = False
    in_path = True
    m = 0
    for j in range(s, e):
        c = _ld(sp, j)
        if c == 9 or c == 10 or c == 13:
            changed = True
            continue
        if in_path:
            if c == 92:
                c = SLASH
                changed = True
            elif c == QMARK or c == HASH:
                in_path = False
        _st(tp, m, c)
        m += 1
    return m if changed else -1


@njit(cache=True, nogil=True)
def normalise_batch(src, offsets, bsrc, boffsets, base_ids, max_length, host_bits, out,
                    out_offsets, status, keys, start, o):
    """Normalise URLs start.. of src/offsets (bases: bsrc/boffsets, base_ids -1 = none)
    into out from byte o; out_offsets[i+1] = end of URL i's output (empty unless OK).

    Writes status[i] (OK / ROUTE / SCHEME) and, for OK, keys[i] = the fingerprint
    of the output with ``host_bits`` top bits from the host (as kernels/fingerprint).
    Stops before a URL whose worst-case output might not fit in out and returns
    (that index, o); else (n, o). Requires: uint8 src, bsrc, out (C-contiguous);
    len(out_offsets) == len(status) + 1 == len(offsets) == len(keys) + 1;
    out_offsets[start] == o; 0 <= host_bits <= 32.
    """
    n = offsets.shape[0] - 1
    low = np.uint64(0xFFFFFFFFFFFFFFFF)
    if host_bits > 0:
        low = (np.uint64(1) << np.uint64(64 - host_bits)) - np.uint64(1)
    high = ~low
    bmax = 0
    for b in range(boffsets.shape[0] - 1):
        bmax = max(bmax, boffsets[b + 1] - boffsets[b])
    umax = 0
    for i in range(start, n):
        umax = max(umax, offsets[i + 1] - offsets[i])
    bh = np.empty(3 * bmax + 32, dtype=np.uint8)
    tmp = np.empty(umax + 1, dtype=np.uint8)
    sp = src.ctypes.data
    op = out.ctypes.data
    bsp = bsrc.ctypes.data
    cap = out.shape[0]
    cached = -1  # base id whose parse bh holds
    b_ok = False
    b_ps = b_de = b_qs = b_end = b_pct = 0
    # A fragment-only href ('#...', a clean fragment) resolves to its base without its
    # fragment, whatever the fragment: the first one's output (at out[fo:fo+fl], key
    # fk) is copied for the next ones of the same base (fo = -1: none yet).
    fo = -1
    fl = 0
    fk = np.uint64(0)
    for i in range(start, n):
        # The scratch arrays' addresses are taken here, inside the loop, not once before
        # it: an array made in this kernel whose last use is ``.ctypes.data`` is freed
        # right there (numba releases it after its last use), and the raw pointer would
        # then write into freed heap memory (a segfault, or glibc's "corrupted size vs.
        # prev_size"). Used in the loop, they live on.
        bp = bh.ctypes.data
        tp = tmp.ctypes.data
        s = offsets[i]
        e = offsets[i + 1]
        bid = base_ids[i]
        if o + 3 * (e - s) + 3 * bmax + 32 > cap:
            return i, o
        if bid >= 0 and bid != cached:
            b0 = boffsets[bid]
            b1 = boffsets[bid + 1]
            if cached < 0 or not _same(bsp, b0, b1, boffsets[cached], boffsets[cached + 1]):
                b_ok = False
                fo = -1
                if _clean(bsp, b0, b1):
                    bst, b_end, b_ps, _, b_qs, b_pct = _absolute(bsp, b0, b1, bp, 0)
                    b_ok = bst == OK
                    b_de = b_qs  # after the last '/' of the base's path
                    # only for a parsed base (its path starts with '/'): a bad one
                    # returns 0s, and the scan walked back off the buffer's start
                    while b_ok and b_de > 0 and _ld(bp, b_de - 1) != SLASH:
                        b_de -= 1
            cached = bid
        frag = bid >= 0 and e - s <= max_length and e > s and _ld(sp, s) == HASH and \
            _ld(sp, e - 1) > 32 and _fragment_ok(sp, s, e)
        if frag and fo >= 0:
            o = _copy(op, fo, fo + fl, op, o)
            status[i] = OK
            keys[i] = fk
            out_offsets[i + 1] = o
            continue
        st = ROUTE
        end = o
        ps = pct = 0
        # WHATWG strips leading/trailing C0 controls and spaces: leave those to the scalar path.
        if e - s <= max_length and (s == e or (_ld(sp, s) > 32 and _ld(sp, e - 1) > 32)):
            st, end, ps, pct = _one(sp, s, e, bid >= 0, True, b_ok, bp, b_ps, b_de, b_qs,
                                    b_end, b_pct, op, o)
            if st == ROUTE:
                m = _respell(sp, s, e, tp)
                if m >= 0:
                    st, end, ps, pct = _one(tp, 0, m, bid >= 0, False, b_ok, bp, b_ps, b_de,
                                            b_qs, b_end, b_pct, op, o)
            if st == OK and pct:
                end = _escapes(op, ps, end)
            if st == OK and end - o > max_length:
                st = ROUTE
        status[i] = st
        if st == OK:
            # The host of an output URL: after "http://" or "https://", to ':' or '/'.
            hs = o + 8 if _ld(op, o + 4) == 115 else o + 7
            he = hs
            while _ld(op, he) != COLON and _ld(op, he) != SLASH:
                he += 1
            keys[i] = (xxh3_64(out, hs, he) & high) | (xxh3_64(out, o, end) & low)
            if frag:  # OK with a clean fragment: the first try, the base's own output
                fo, fl, fk = o, end - o, keys[i]
            o = end
        out_offsets[i + 1] = o
    return n, o


@njit(cache=True, nogil=True)
def gather(out, out_offsets, select, piece_of, pdata, poffsets, newline):
    """The strings i with select[i], in order, as (data, offsets): string i is
    pdata[poffsets[p]:poffsets[p+1]] if p = piece_of[i] >= 0 (a scalar-path result),
    else out[out_offsets[i]:out_offsets[i+1]] (the kernel's); with ``newline`` each
    is followed by '\\n' (inside its offsets span). Requires: int64 offsets,
    select bool and piece_of int64 with one entry per string."""
    n = select.shape[0]
    count = 0
    total = 0
    for i in range(n):
        if select[i]:
            count += 1
            p = piece_of[i]
            if p >= 0:
                total += poffsets[p + 1] - poffsets[p] + newline
            else:
                total += out_offsets[i + 1] - out_offsets[i] + newline
    data = np.empty(total + 8, dtype=np.uint8)
    offsets = np.empty(count + 1, dtype=np.int64)
    offsets[0] = 0
    dp, op, pp = data.ctypes.data, out.ctypes.data, pdata.ctypes.data
    w = 0
    k = 0
    for i in range(n):
        if select[i]:
            p = piece_of[i]
            if p >= 0:
                w = _copy(pp, poffsets[p], poffsets[p + 1], dp, w)
            else:
                w = _copy(op, out_offsets[i], out_offsets[i + 1], dp, w)
            if newline:
                _st(dp, w, 10)
                w += 1
            k += 1
            offsets[k] = w
    return data[:total], offsets
