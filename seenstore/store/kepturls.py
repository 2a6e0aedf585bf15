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

from seenstore.errors import CorruptionError
from seenstore.kernels.dispatch import kept as _kernels  # numpy twin below dispatch.SMALL
from seenstore.store import blockfile

MAGIC = b"SEENURLS"
MAJOR, MINOR = 1, 0
HEADER = struct.Struct("<8sHHIQQQ16xQ")  # magic, major, minor, n_blocks, n_urls,
# index_offset, index_checksum, (reserved), header_checksum (blockfile.py)
assert HEADER.size == blockfile.HEADER_BYTES
INDEX = blockfile.INDEX
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
    spans = list(zip(cuts, cuts[1:]))
    index = np.zeros(len(spans), dtype=INDEX)
    blocks = []
    for row, (i, j) in zip(index, spans):
        lo = int(ends[i - 1]) if i else 0
        blocks.append(_deflate(view[lo:int(ends[j - 1]) - 1]))  # without the last newline
        row["first"], row["last"], row["count"] = skeys[i], skeys[j - 1], j - i
    off, idx_sum = blockfile.fill_index(blocks, index)
    head = HEADER.pack(MAGIC, MAJOR, MINOR, len(index), n, off, idx_sum, 0)
    blockfile.write(path, head, blocks, index, sync)
    return {"file": os.path.basename(path), "count": n, "checksum": f"{idx_sum:016x}"}


class KeptUrls:
    """One kept-URL file, opened and checked (header and index) against its
    manifest entry ``entry`` (None: not checked against one)."""

    def __init__(self, path: str, entry: dict | None = None):
        self.path = path
        fields, self.index = blockfile.read_index(path, HEADER, MAGIC, MAJOR, "kept-URL", 3, 5)
        n, isum = fields[4], fields[6]
        if entry is not None and (entry["count"] != n or entry["checksum"] != f"{isum:016x}"):
            raise CorruptionError(f"{path}: kept-URL file does not match the manifest")
        self.count = n

    def _blocks(self, rows) -> Iterator[list[bytes]]:
        with open(self.path, "rb") as f:
            for r in rows:
                text = blockfile.read_block(f, r, self.path, "kept-URL")
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

    def blocks_holding(self, sorted_keys: np.ndarray) -> Iterator[list[bytes]]:
        """The URLs of each block whose key range holds one of ``sorted_keys``
        (sorted uint64), block by block (a superset: callers match the keys)."""
        yield from self._blocks(self.index[blockfile.blocks_meeting(self.index, sorted_keys)])

    def iter_all(self) -> Iterator[list[bytes]]:
        """Every URL, block by block, in key order."""
        yield from self._blocks(self.index)


def open_all(store_path: str, doc: dict) -> list[KeptUrls]:
    """The kept-URL files manifest ``doc`` names, opened and checked."""
    return [KeptUrls(os.path.join(store_path, e["file"]), e) for e in doc.get("url_files", [])]
