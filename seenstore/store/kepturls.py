"""Kept URLs: the URLs a store admitted, in their safe-rule form, so a host can be
rebuilt under a new policy (docs/format.md, "Kept URL files").

One file per batch that admitted URLs (``u-gGGGGGGGGGG.url``, named in the
manifest's ``url_files``), merged into one by ``merge_files`` when they pile up.
Its URLs are sorted by their safe-rule key (host hash in the top bits), so one
host's URLs sit in a few neighbouring blocks; each block is raw DEFLATE of the
URLs joined by newlines, with its first and last key, size, count and xxh3-64 in
the index at the end. ``write_file`` writes and fsyncs a file before the manifest
names it; ``KeptUrls.read_range`` reads the blocks of a key range, checking each
block's checksum (CorruptionError on a mismatch), ``iter_all`` every URL.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from collections.abc import Iterator

import numpy as np
import xxhash

from seenstore.errors import CorruptionError, NotSupportedError
from seenstore.store.files import write_replacing
from seenstore.kernels.dispatch import kept as _kernels  # numpy twin below dispatch.SMALL

MAGIC = b"SEENURLS"
MAJOR, MINOR = 1, 0
HEADER = struct.Struct("<8sHHIQQQ16xQ")  # magic, major, minor, n_blocks, n_urls,
# index_offset, index_checksum, (reserved), header_checksum over the 56 bytes before it
assert HEADER.size == 64
INDEX = np.dtype([("first", "<u8"), ("last", "<u8"), ("offset", "<u8"),
                  ("size", "<u4"), ("count", "<u4"), ("checksum", "<u8")])
BLOCK_BYTES = 64 << 10  # URL text per block before compression
LEVEL = 1  # zlib level: 6 saves ~8 % more bytes at ~3x the time (docs/format.md)
NAME_RE = re.compile(r"^u-g(\d{10})(-m[0-9a-f]+)?\.url(\.tmp)?$")  # -m: merged


def file_name(generation: int, merged: str = "") -> str:
    """A batch's file (``merged``: a token naming a merge of several)."""
    return f"u-g{generation:010d}" + (f"-m{merged}" if merged else "") + ".url"


def _deflate(data) -> bytes:
    # one call (not compressobj's compress + flush, the same bytes): each call takes
    # the GIL back once more, which can wait on a busy thread's switch interval
    return zlib.compress(data, LEVEL, -15)


def write_file(path: str, keys: np.ndarray, urls, sync: bool = True) -> dict:
    """Write ``urls`` with their safe-rule ``keys`` to ``path``, sorted by key,
    fsynced; return the manifest entry ``{file, count, checksum}``. ``urls``: a list
    of URLs (UTF-8 bytes, no newline), or one bytes-like object of them each ending
    in a newline (what a batch prints: no Python object per URL is made).
    Requires: as many URLs as ``keys``; the keys need not be sorted or unique.
    Raises ValueError when the URLs and keys do not pair up (a URL holding a newline)."""
    if isinstance(urls, list):
        urls = b"\n".join(urls) + b"\n" if urls else b""
    text = np.frombuffer(urls, dtype=np.uint8)
    n = len(keys)
    order = np.argsort(keys, kind="stable")
    skeys = keys[order]
    ordered = np.empty(len(text), dtype=np.uint8)
    ends = np.empty(n, dtype=np.int64)  # ends[k]: after the newline of URL k in key order
    got = _kernels.order_lines(text, order, ordered, ends)
    if got != n:
        raise ValueError(f"{path}: {n} keys but "
                         f"{'unterminated URL text' if got < 0 else f'{got} URLs'}")
    # block j holds URLs [cuts[j], cuts[j+1]): each starts a new block once the URLs
    # before it in the block reach BLOCK_BYTES of text
    cuts = [0]
    while cuts[-1] < n:
        start = ends[cuts[-1] - 1] if cuts[-1] else 0
        cuts.append(max(cuts[-1] + 1, int(np.searchsorted(ends, start + BLOCK_BYTES)) + 1))
        cuts[-1] = min(cuts[-1], n)
    view = memoryview(ordered)
    index = []
    body = bytearray()
    for i, j in zip(cuts, cuts[1:]):
        lo = int(ends[i - 1]) if i else 0
        block = _deflate(view[lo:int(ends[j - 1]) - 1])  # its URLs without the last newline
        index.append((int(skeys[i]), int(skeys[j - 1]), HEADER.size + len(body), len(block),
                      j - i, xxhash.xxh3_64_intdigest(block)))
        body += block
    idx = np.array(index, dtype=INDEX).tobytes()
    idx_sum = xxhash.xxh3_64_intdigest(idx)
    head = HEADER.pack(MAGIC, MAJOR, MINOR, len(index), n, HEADER.size + len(body), idx_sum, 0)
    head = head[:-8] + struct.pack("<Q", xxhash.xxh3_64_intdigest(head[:56]))
    write_replacing(path, (head, body, idx), sync)
    return {"file": os.path.basename(path), "count": n, "checksum": f"{idx_sum:016x}"}


class KeptUrls:
    """One kept-URL file, opened and checked (header and index) against its
    manifest entry ``entry`` (None: not checked against one)."""

    def __init__(self, path: str, entry: dict | None = None):
        self.path = path
        try:
            with open(path, "rb") as f:
                head = f.read(HEADER.size)
                magic, major, minor, nb, n, ioff, isum, hsum = HEADER.unpack(head) \
                    if len(head) == HEADER.size else (b"",) + (0,) * 7
                if magic != MAGIC:
                    raise CorruptionError(f"{path}: not a kept-URL file (bad magic)")
                if major != MAJOR:
                    raise NotSupportedError(f"{path}: kept-URL format {major}.{minor} is not "
                                            f"one this seenstore reads ({MAJOR}.x)")
                if xxhash.xxh3_64_intdigest(head[:56]) != hsum:
                    raise CorruptionError(f"{path}: kept-URL header checksum mismatch")
                f.seek(ioff)
                idx = f.read(nb * INDEX.itemsize)
        except OSError as e:
            raise CorruptionError(f"{path}: cannot read kept-URL file: {e.strerror}") from e
        if len(idx) != nb * INDEX.itemsize or xxhash.xxh3_64_intdigest(idx) != isum:
            raise CorruptionError(f"{path}: kept-URL index damaged or truncated")
        if entry is not None and (entry["count"] != n or entry["checksum"] != f"{isum:016x}"):
            raise CorruptionError(f"{path}: kept-URL file does not match the manifest")
        self.count = n
        self.index = np.frombuffer(idx, dtype=INDEX)

    def _blocks(self, rows) -> Iterator[list[bytes]]:
        with open(self.path, "rb") as f:
            for r in rows:
                f.seek(int(r["offset"]))
                data = f.read(int(r["size"]))
                if xxhash.xxh3_64_intdigest(data) != int(r["checksum"]):
                    raise CorruptionError(
                        f"{self.path}: kept-URL block at {int(r['offset'])} is damaged")
                try:
                    text = zlib.decompress(data, -15)
                except zlib.error as e:
                    raise CorruptionError(f"{self.path}: kept-URL block undecodable") from e
                lines = text.split(b"\n")
                if len(lines) != int(r["count"]):
                    raise CorruptionError(f"{self.path}: kept-URL block count mismatch")
                yield lines

    def read_range(self, lo: int, hi: int) -> list[bytes]:
        """The URLs of every block whose keys meet ``[lo, hi]`` (a superset of the
        URLs with keys in it: callers filter by host)."""
        ix = self.index
        sel = ix[(ix["last"] >= np.uint64(lo)) & (ix["first"] <= np.uint64(hi))]
        out: list[bytes] = []
        for lines in self._blocks(sel):
            out.extend(lines)
        return out

    def iter_all(self) -> Iterator[list[bytes]]:
        """Every URL, block by block, in key order."""
        yield from self._blocks(self.index)


def open_all(store_path: str, doc: dict) -> list[KeptUrls]:
    """The kept-URL files manifest ``doc`` names, opened and checked."""
    return [KeptUrls(os.path.join(store_path, e["file"]), e) for e in doc.get("url_files", [])]
