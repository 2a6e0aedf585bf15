"""Batch normalise + fingerprint with no Python work per common-case URL.

Contract: ``normalise_buffer(ub, policy, layout, max_length)`` returns a
``FastBatch`` equal, URL for URL, to the scalar ``normalise_many`` +
``fingerprint_many``: the numba kernel (kernels/url.py) handles the common case,
every URL it marks uncertain (and every URL of a host with a policy rule) goes
through the scalar ``try_normalise``, and the results are merged in input order.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from seenstore.errors import InvalidInputError
from seenstore.kernels import dispatch
from seenstore.kernels.dispatch import fingerprint as _fp_kernels, url as _url_kernels
from seenstore.kernels.status import OK, ROUTE, SCHEME
from seenstore.layout import DEFAULT_LAYOUT, Layout
from seenstore.url.normalise import (DEFAULT_MAX_LENGTH, FAST_PATH_MIN, NormalisedBatch, Rejection,
                                     all_strs_or_bytes, check_base, count_reasons, host_span,
                                     try_normalise)
from seenstore.runtime.parallel import check_threads, ranges, run_all
from seenstore.url.policy import DEFAULT_POLICY, Policy
from seenstore.url.buffer import URLBuffer

_NO_BASE = np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.int64)
# numpy/Python twins below dispatch.SMALL URLs (no JIT on a first run's small input)
fingerprint_batch, gather = _fp_kernels.fingerprint_batch, _url_kernels.gather


@dataclass
class FastBatch:
    """``canonical[k]`` (with key ``keys[k]``) is the canonical form of input
    ``positions[k]`` (increasing); ``rejected`` lists (input index, reason) for
    every other input; ``routed`` counts inputs the scalar path handled.
    The canonical bytes stay where the kernel and the scalar path wrote them
    (``parts``) until ``canonical`` or ``lines`` asks for them."""

    positions: np.ndarray
    keys: np.ndarray
    rejected: list[tuple[int, Rejection]]
    routed: int
    n: int  # how many input URLs
    parts: tuple = field(repr=False)  # (out, out_offsets, accepted, piece_of, pdata, poffsets)
    seconds: dict[str, float] = field(default_factory=dict)  # kernel / scalar / merge time

    @cached_property
    def canonical(self) -> URLBuffer:
        """The accepted URLs' canonical forms in one buffer (Arrow layout)."""
        out, out_offsets, accepted, piece_of, pdata, poffs = self.parts
        if not self.routed:  # the kernel's output is already compact: non-OK wrote nothing
            offsets = np.zeros(len(self.positions) + 1, dtype=np.int64)
            offsets[1:] = out_offsets[self.positions + 1]
            return URLBuffer(out[: out_offsets[-1]], offsets)
        return URLBuffer(*gather(out, out_offsets, accepted, piece_of, pdata, poffs, 0))

    @property
    def urls(self) -> list[str]:
        return self.canonical.tolist()

    def lines(self, select: np.ndarray) -> bytes:
        """The canonical URLs k with select[k] (bool, aligned with ``keys``), one per
        line, each ending in a newline: what ``seenstore add`` prints."""
        out, out_offsets, _, piece_of, pdata, poffs = self.parts
        chosen = np.zeros(self.n, dtype=bool)
        chosen[self.positions[np.asarray(select, dtype=bool)]] = True
        return gather(out, out_offsets, chosen, piece_of, pdata, poffs, 1)[0].tobytes()

    def reason_counts(self) -> dict[str, int]:
        return count_reasons(self.rejected)


def normalise_urls(
    urls: Sequence[str | bytes],
    base: str | None = None,
    policy: Policy | None = None,
    layout: Layout = DEFAULT_LAYOUT,
    max_length: int = DEFAULT_MAX_LENGTH,
    threads: int | None = None,
) -> FastBatch:
    """``normalise_buffer`` over a list of str (or bytes lines, decoded as the scalar
    path does). Raises InvalidInputError for a bad ``base``, like ``normalise_many``."""
    check_base(base)
    return normalise_buffer(URLBuffer.from_strs(urls, base=base), policy, layout, max_length,
                            threads)


def iter_batches(
    source,
    *,
    base: str | None = None,
    policy: Policy | None = None,
    layout: Layout = DEFAULT_LAYOUT,
    max_length: int = DEFAULT_MAX_LENGTH,
    batch_lines: int = 1_000_000,
    pairs: bool = False,
    threads: int | None = None,
    max_line: int | None = None,
) -> Iterator[FastBatch]:
    """FastBatches of ``batch_lines`` non-blank lines each (the last may be shorter)
    of a path or binary stream, read in blocks (``URLBuffer.iter_file``; ``pairs``:
    ``base<TAB>href`` lines; a line over ``max_line`` bytes, default ``line_cap``, is
    rejected ``too-long``).
    Memory is bounded by the batch, not the input. ``threads``: see ``run_kernel``.
    Raises InvalidInputError for a bad ``base``, like ``normalise_many``."""
    check_base(base)
    threads = check_threads(threads)
    read = 0
    for ub in URLBuffer.iter_file(source, pairs=pairs, base=base, chunk_urls=batch_lines,
                                  max_line=line_cap(max_length, pairs) if max_line is None
                                  else max_line):
        yield normalise_buffer(ub, policy, layout, max_length, threads, stream_urls=read)
        read += len(ub)


def line_cap(max_length: int, pairs: bool = False) -> int:
    """Bytes kept of an input line: enough to see that a longer one is too long (a
    ``BASE<TAB>HREF`` line holds two URLs); the rest of the line is never held."""
    return (2 * max_length + 1 if pairs else max_length) + 1


def _kernel_loaded() -> bool:
    """True when normalise_batch already runs in this process (loaded or compiled):
    calling it on a small input then costs nothing more than the twin would."""
    module = sys.modules.get("seenstore.kernels.url")
    return module is not None and bool(module.normalise_batch.signatures)


def run_kernel(ub: URLBuffer, max_length: int = DEFAULT_MAX_LENGTH, host_bits: int = 20,
               threads: int | None = None, *, stream_urls: int = 0):
    """The kernel alone: (out bytes, out offsets, status int8, keys uint64) for every
    URL of ``ub``; URL i's output is out[offsets[i]:offsets[i+1]], empty and without
    a key unless status[i] == OK. With ``threads`` > 1 (None: the cores), contiguous
    chunks of URLs run on that many threads, each into its own output buffer, and
    the buffers are joined in input order (same result as one thread, tested).
    Below ``dispatch.SMALL`` URLs (``ub``'s plus ``stream_urls``, those already read
    from the stream ``ub`` comes from) the twin runs, ROUTE for every URL, unless the
    kernel is already loaded in this process."""
    n = len(ub)
    if ub.bases is None:
        (bdata, boffs), ids = _NO_BASE, np.full(n, -1, dtype=np.int64)
    else:
        bdata, boffs, ids = ub.bases.data, ub.bases.offsets, ub.base_ids
    status = np.empty(n, dtype=np.int8)
    keys = np.zeros(n, dtype=np.uint64)
    out_offsets = np.empty(n + 1, dtype=np.int64)
    out_offsets[0] = 0
    if not n or (n + stream_urls < dispatch.SMALL and not _kernel_loaded()):  # the twin
        status[:] = ROUTE
        out_offsets[:] = 0
        return np.zeros(0, dtype=np.uint8), out_offsets, status, keys
    normalise_batch = _url_kernels.kernel("normalise_batch")
    dispatch.announce(normalise_batch)

    # bytes of each base (0 for none, id -1): a relative href's output holds its base
    blen = np.append(np.diff(boffs), 0) if ub.bases is not None else np.zeros(1, np.int64)
    # the kernel stops before a URL whose worst case (3x the URL and its base) might not
    # fit: room for one such URL beyond the expected total spares a resize (a copy)
    worst = 3 * int(blen.max() + np.diff(ub.offsets).max(initial=0)) + 64

    def chunk(a: int, b: int) -> tuple[np.ndarray, int]:
        """URLs a..b-1 into a fresh buffer; out_offsets[a+1..b] relative to it."""
        size = int(ub.offsets[b] - ub.offsets[a])
        if ub.bases is not None:
            size += int(blen[ids[a:b]].sum())
        out = np.empty(size + size // 4 + 8 * (b - a) + worst + 4096, dtype=np.uint8)
        i, o = a, 0
        while True:
            i, o = normalise_batch(ub.data, ub.offsets[: b + 1], bdata, boffs, ids[:b],
                                   max_length, host_bits, out, out_offsets[: b + 1],
                                   status[:b], keys[:b], i, o)
            if i == b:
                return out, o
            out.resize(max(2 * len(out), 4096 + 3 * len(out) // 2), refcheck=False)

    spans = ranges(n, check_threads(threads))
    parts = run_all([lambda a=a, b=b: chunk(a, b) for a, b in spans])
    if len(parts) == 1:
        return parts[0][0], out_offsets, status, keys
    out = np.empty(sum(o for _, o in parts) + 8, dtype=np.uint8)
    shift = 0
    for (a, b), (part, o) in zip(spans, parts):
        out[shift : shift + o] = part[:o]
        out_offsets[a + 1 : b + 1] += shift
        shift += o
    return out, out_offsets, status, keys


def _route_policy_hosts(out, out_offsets, status, policy: Policy) -> None:
    """Mark ROUTE every kernel-normalised URL whose host has a policy rule."""
    ok = np.flatnonzero(status == OK)
    if not len(ok):
        return
    hh = _fp_kernels.kernel("host_hashes")(out, out_offsets, ok)  # only after the kernel ran
    # the hosts grouped by sorting (np.unique with an inverse hashes on numpy 2.4: 1.5x slower)
    order = np.argsort(hh)
    sorted_hh = hh[order]
    head = np.empty(len(hh), dtype=bool)  # the first URL of each host, in sorted order
    head[0] = True
    np.not_equal(sorted_hh[1:], sorted_hh[:-1], out=head[1:])
    risky = np.zeros(int(head.sum()), dtype=bool)
    for u, j in enumerate(order[head].tolist()):
        url = out[out_offsets[ok[j]] : out_offsets[ok[j] + 1]].tobytes().decode("ascii")
        risky[u] = _rule_applies(url, policy)
    status[ok[order[risky[np.cumsum(head) - 1]]]] = ROUTE


def _rule_applies(canonical: str, policy: Policy) -> bool:
    s, e = host_span(canonical)
    return policy.rule_for(canonical[s:e]) is not None


def normalise_buffer(
    ub: URLBuffer,
    policy: Policy | None = None,
    layout: Layout = DEFAULT_LAYOUT,
    max_length: int = DEFAULT_MAX_LENGTH,
    threads: int | None = None,
    *,
    stream_urls: int = 0,
) -> FastBatch:
    """Canonical URLs, keys and rejections of every URL of ``ub`` (see module doc).
    Per-URL bases are ``ub.base(i)``; a base that does not parse rejects its URLs
    (``unparsable``) as the scalar ``try_normalise`` does; a URL in ``ub.too_long``
    (a line over the reader's limit) is rejected ``too-long``. Never raises per URL.
    ``threads``, ``stream_urls``: see ``run_kernel``; the result depends on neither."""
    t0 = time.perf_counter()
    ran = run_kernel(ub, max_length, layout.host_bits, threads, stream_urls=stream_urls)
    return finish_buffer(ub, ran, policy, layout, max_length,
                         kernel_seconds=time.perf_counter() - t0)


def finish_buffer(
    ub: URLBuffer,
    ran: tuple,
    policy: Policy | None = None,
    layout: Layout = DEFAULT_LAYOUT,
    max_length: int = DEFAULT_MAX_LENGTH,
    *,
    kernel_seconds: float = 0.0,
) -> FastBatch:
    """``normalise_buffer``'s work after the kernel: ``ran`` is what ``run_kernel(ub,
    max_length, layout.host_bits)`` returned (run elsewhere, e.g. on a helper thread;
    its arrays are taken over). Routes the policy's hosts and the too-long lines to
    the scalar path, runs it, and joins the results in input order."""
    policy = policy or DEFAULT_POLICY
    t0 = time.perf_counter() - kernel_seconds
    out, out_offsets, status, keys = ran
    if policy.rules:
        _route_policy_hosts(out, out_offsets, status, policy)
    if ub.too_long is not None:
        status[ub.too_long] = ROUTE  # the fallback rejects them without reading them
    t1 = time.perf_counter()
    rejected: list[tuple[int, Rejection]] = [(int(i), Rejection.SCHEME)
                                             for i in np.flatnonzero(status == SCHEME)]
    routed = np.flatnonzero(status == ROUTE)
    accepted = status == OK
    piece_of = np.full(len(ub), -1, dtype=np.int64)
    pieces = _scalar_fallback(ub, routed, policy, max_length, accepted, piece_of, rejected)
    rejected.sort()
    t2 = time.perf_counter()
    positions = np.flatnonzero(accepted)
    pdata, poffs = _join(pieces)
    if pieces:  # keys of the scalar path's results, by the same kernel as fingerprint()
        keys[piece_of >= 0] = fingerprint_batch(pdata, poffs, layout.host_bits)
    fb = FastBatch(positions, keys[accepted], rejected, len(routed), len(ub),
                   (out, out_offsets, accepted, piece_of, pdata, poffs))
    fb.seconds = {"kernel": t1 - t0, "scalar": t2 - t1, "merge": time.perf_counter() - t2}
    return fb


def _scalar_fallback(ub, routed, policy, max_length, accepted, piece_of, rejected) -> list[bytes]:
    """Run the scalar path on the URLs ``routed``: set accepted[i] and piece_of[i] (index
    into the returned UTF-8 results) for each one it accepts, append (i, reason) to
    ``rejected`` for the others."""
    pieces: list[bytes] = []
    usable: dict[str, bool] = {}
    bases: dict[int, str] = {}
    mv = memoryview(ub.data)
    if ub.too_long is not None:
        rejected.extend((int(i), Rejection.TOO_LONG) for i in ub.too_long)
        routed = np.setdiff1d(routed, ub.too_long, assume_unique=True)
    starts, ends = ub.offsets[routed].tolist(), ub.offsets[routed + 1].tolist()
    bids = [-1] * len(routed) if ub.base_ids is None else ub.base_ids[routed].tolist()
    for i, a, b, bid in zip(routed.tolist(), starts, ends, bids):
        item = ub.strs[i] if ub.strs is not None else bytes(mv[a:b])
        base = None
        if bid >= 0:
            base = bases.get(bid)
            if base is None:
                base = bases[bid] = ub.bases[bid]
        r = scalar_one(item, base, policy, max_length, usable)
        if isinstance(r, Rejection):
            rejected.append((i, r))
        else:
            accepted[i] = True
            piece_of[i] = len(pieces)
            pieces.append(r.encode("utf-8"))
    return pieces


def _join(pieces: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    poffs = np.zeros(len(pieces) + 1, dtype=np.int64)
    if pieces:
        np.cumsum(np.fromiter(map(len, pieces), np.int64, len(pieces)), out=poffs[1:])
    return np.frombuffer(bytearray(b"".join(pieces)), dtype=np.uint8), poffs


def scalar_one(item, base: str | None, policy: Policy, max_length: int,
               usable: dict[str, bool] | None = None) -> str | Rejection:
    """The scalar result for one URL with a per-URL base (``try_normalise``). A base
    that ``check_base`` refuses (e.g. bytes that are not UTF-8 in a ``base<TAB>href``
    line) is unusable: the URL is rejected ``unparsable`` unless it starts with
    ``http://`` or ``https://`` (which the scalar path parses without its base)."""
    if base is not None:
        ok = usable.get(base) if usable is not None else None
        if ok is None:
            try:
                check_base(base)
                ok = True
            except InvalidInputError:
                ok = False
            if usable is not None:
                usable[base] = ok
        if not ok:
            absolute = (b"http://", b"https://") if isinstance(item, bytes) else ("http://", "https://")
            if not (isinstance(item, (str, bytes)) and item.startswith(absolute)):
                return Rejection.UNPARSABLE
            base = None
    return try_normalise(item, base, policy, max_length)


def normalise_many(
    urls: Iterable[object],
    base: str | None = None,
    policy: Policy | None = None,
    max_length: int = DEFAULT_MAX_LENGTH,
    fast: bool | None = None,
    threads: int | None = None,
) -> NormalisedBatch:
    """Normalise every item; a bad item becomes a rejection, never an exception.
    Raises InvalidInputError only for a bad ``base`` (it would fail every item).

    A list of at least FAST_PATH_MIN str/bytes items goes through the batch fast
    path (``normalise_urls``: same results, tested); ``fast=False`` forces the scalar
    reference path, ``fast=True`` the batch path for any list of str/bytes. ``threads``:
    the fast path's kernel threads (None: the cores); results do not depend on it."""
    check_base(base)
    policy = policy or DEFAULT_POLICY
    if fast is not False and isinstance(urls, list) and (fast or len(urls) >= FAST_PATH_MIN) \
            and all_strs_or_bytes(urls):
        fb = normalise_urls(urls, base, policy, max_length=max_length, threads=threads)
        return NormalisedBatch(fb.urls, fb.positions.tolist(), fb.rejected)
    return NormalisedBatch.of(try_normalise(u, base, policy, max_length) for u in urls)
