"""Value files: per-key records beside a store's keys (docs/format.md, "Value files").

One file per commit that set values (``v-qSSSSSSSSSS.val``; a merge of consecutive
files ``v-qLLLLLLLLLL-HHHHHHHHHH.val``), named in the manifest's ``value_files`` in
commit order. A file holds entries sorted by key, one per key: the key, a field
mask (bit i set: the entry sets field ``FIELDS[i]``) and a whole record (fields not
in the mask are 0 and mean nothing). Entries are cut into blocks of at most
``BLOCK_ENTRIES``; each block holds its columns (key deltas, masks, each record
field) one after the other, each packed to the bytes its range needs (frame of
reference: the column's smallest value, then each value minus it), with its first
and last key, offset, size, count and xxh3-64 in the index at the end. Not
DEFLATE: at level 1 it cost 200-345 ns per entry to write (byte-shuffled or
not), packing ~40 (and ~40 to read), for about the same bytes on crawl-like
columns (9.0 B/entry packed, 8.0-10.1 deflated; docs/format.md).
``write_file`` writes and fsyncs a file before the manifest names it; ``ValueFile``
opens and checks one (CorruptionError naming it when damaged, NotSupportedError
for another major version) and decodes the blocks asked for.
"""

from __future__ import annotations

import os
import re
import struct
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from seenstore.errors import CorruptionError
from seenstore.store import blockfile

MAGIC = b"SEENVALS"
MAJOR, MINOR = 1, 0
HEADER = struct.Struct("<8sHHIQQQQQQ")  # magic, major, minor, n_blocks, n_entries,
# seq_lo, seq_hi, index_offset, index_checksum, header_checksum (blockfile.py)
assert HEADER.size == blockfile.HEADER_BYTES
# the record: its field order is its mask bit order (bit 0: state)
VALUE_DTYPE = np.dtype([("state", "u1"), ("retries", "u1"), ("status", "<u2"),
                        ("fetched_at", "<i8"), ("next_due", "<i8"), ("digest", "<u8")])
FIELDS = VALUE_DTYPE.names
FULL_MASK = (1 << len(FIELDS)) - 1
# SeenStore.get's answer: whether the key is stored, then its record
GET_DTYPE = np.dtype([("present", np.bool_)] + [(f, VALUE_DTYPE[f]) for f in FIELDS])
BLOCK_ENTRIES = 1 << 14
NAME_RE = re.compile(r"^v-q(\d{10})(-\d{10})?\.val(\.tmp)?$")


def file_name(seq_lo: int, seq_hi: int | None = None) -> str:
    """The file of commit ``seq_lo`` (``seq_hi``: a merge of ``seq_lo..seq_hi``)."""
    return f"v-q{seq_lo:010d}" + ("" if seq_hi is None else f"-{seq_hi:010d}") + ".val"


# a block's columns, in order: key deltas, masks, then the record's fields
COLUMNS = ("key_delta", "mask") + FIELDS
COLUMN = struct.Struct("<BQ")  # per column: width in bytes (0: every value is base), base


def _pack(col: np.ndarray) -> tuple[bytes, bytes]:
    """(column header, bytes) of one column: each value minus the column's
    smallest, little-endian, in as many bytes as the largest difference needs."""
    signed = col.dtype.kind == "i"
    if col.ndim == 0:  # one value for every entry
        return COLUMN.pack(0, int(col) & 0xFFFFFFFFFFFFFFFF), b""
    lo, hi = (int(col.min()), int(col.max())) if len(col) else (0, 0)
    width = ((hi - lo).bit_length() + 7) // 8
    base = lo & 0xFFFFFFFFFFFFFFFF
    if not width:
        return COLUMN.pack(0, base), b""
    v = col.astype(np.int64 if signed else np.uint64).view(np.uint64) - np.uint64(base)
    return COLUMN.pack(width, base), v.view(np.uint8).reshape(-1, 8)[:, :width].tobytes()


def _unpack(raw: bytes, head: int, at: int, n: int, dtype) -> tuple[np.ndarray, int]:
    """The column of ``n`` values of ``dtype`` whose header is at ``head`` in
    ``raw`` and whose bytes start at ``at``; returns it and the offset after them."""
    width, base = COLUMN.unpack_from(raw, head)
    if width > 8:
        raise ValueError("column width")
    v = np.full(n, base, dtype=np.uint64)
    if width:
        b = np.zeros((n, 8), dtype=np.uint8)
        b[:, :width] = np.frombuffer(raw, dtype=np.uint8, count=n * width,
                                     offset=at).reshape(n, width)
        v += b.view(np.uint64).ravel()
    signed = np.dtype(dtype).kind == "i"
    return (v.view(np.int64) if signed else v).astype(dtype), at + n * width


def _encode(keys: np.ndarray, masks: np.ndarray, cols: dict) -> bytes:
    deltas = np.zeros(len(keys), dtype=np.uint64)  # the first key is in the index
    np.subtract(keys[1:], keys[:-1], out=deltas[1:])
    parts = [_pack(deltas), _pack(masks)] + [_pack(cols[f]) for f in FIELDS]
    return b"".join(h for h, _ in parts) + b"".join(b for _, b in parts)


def _decode(raw: bytes, first: int, c: int, keys, masks, recs, fields=FIELDS) -> None:
    """Fill ``keys``, ``masks`` and the ``fields`` of ``recs`` (``c`` entries each)
    from block ``raw`` (its first key ``first``). Raises ValueError when the bytes
    do not hold them."""
    widths = [COLUMN.unpack_from(raw, i * COLUMN.size)[0] for i in range(len(COLUMNS))]
    at = len(COLUMNS) * COLUMN.size
    if at + c * sum(widths) != len(raw):
        raise ValueError("block size")
    d, at = _unpack(raw, 0, at, c, np.uint64)
    d[0] = first
    np.cumsum(d, out=keys)
    masks[:], at = _unpack(raw, COLUMN.size, at, c, np.uint8)
    for i, f in enumerate(FIELDS):
        if f in fields:
            recs[f], at = _unpack(raw, (i + 2) * COLUMN.size, at, c, VALUE_DTYPE[f])
        else:
            at += c * widths[i + 2]


def columns(recs: np.ndarray) -> dict:
    """The columns ``write_file`` takes, of records ``recs`` (VALUE_DTYPE)."""
    return {f: recs[f] for f in FIELDS}


def write_file(path: str, keys: np.ndarray, masks: np.ndarray, cols: dict,
               seq_lo: int, seq_hi: int, sync: bool = True, threads: int = 1) -> dict:
    """Write entries (``keys`` uint64 sorted ascending and unique; ``masks`` uint8
    and ``cols``, field -> its dtype, each an array aligned with ``keys`` or a 0-d
    array: one value for all) to ``path``, fsynced; return the manifest entry
    ``{file, count, checksum, seq: [lo, hi], bytes}``. Blocks are packed on
    ``threads`` threads."""
    n = len(keys)
    cuts = list(range(0, n, BLOCK_ENTRIES)) + [n]
    spans = list(zip(cuts, cuts[1:]))

    def enc(span):
        i, j = span
        return _encode(keys[i:j], masks if masks.ndim == 0 else masks[i:j],
                       {f: c if c.ndim == 0 else c[i:j] for f, c in cols.items()})

    if threads > 1 and len(spans) > 1:
        with ThreadPoolExecutor(threads) as pool:
            blocks = list(pool.map(enc, spans))
    else:
        blocks = [enc(s) for s in spans]
    index = np.zeros(len(blocks), dtype=blockfile.INDEX)
    for row, (i, j) in zip(index, spans):
        row["first"], row["last"], row["count"] = keys[i], keys[j - 1], j - i
    off, idx_sum = blockfile.fill_index(blocks, index)
    head = HEADER.pack(MAGIC, MAJOR, MINOR, len(blocks), n, seq_lo, seq_hi, off, idx_sum, 0)
    blockfile.write(path, head, blocks, index, sync)
    return {"file": os.path.basename(path), "count": n, "checksum": f"{idx_sum:016x}",
            "seq": [seq_lo, seq_hi], "bytes": off + index.nbytes}


class ValueFile:
    """One value file, opened and checked (header, index) against its manifest entry
    ``entry`` (None: not checked against one). ``index``: a row per block."""

    def __init__(self, path: str, entry: dict | None = None):
        self.path = path
        fields, self.index = blockfile.read_index(path, HEADER, MAGIC, MAJOR, "value", 3, 7)
        n, lo, hi, isum = fields[4], fields[5], fields[6], fields[8]
        if entry is not None and (entry["count"] != n or entry["checksum"] != f"{isum:016x}"
                                  or list(entry["seq"]) != [lo, hi]):
            raise CorruptionError(f"{path}: value file does not match the manifest")
        self.count, self.seq = n, (lo, hi)

    def blocks_meeting(self, sorted_keys: np.ndarray) -> np.ndarray:
        """Indices of the blocks whose key range holds one of ``sorted_keys``."""
        return blockfile.blocks_meeting(self.index, sorted_keys)

    def iter_blocks(self, blocks=None, fields=FIELDS):
        """(keys, masks, records) of each of ``blocks`` (indices; None: all) in
        order, each block's checksum, size and keys checked (CorruptionError naming
        the file). Only ``fields`` of the records are decoded (the others hold
        nothing meaningful)."""
        rows = self.index if blocks is None else self.index[np.asarray(blocks, dtype=np.int64)]
        try:
            f = open(self.path, "rb")
        except OSError as e:
            raise CorruptionError(f"{self.path}: cannot read value file: {e.strerror}") from e
        with f:
            for r in rows:
                raw = blockfile.read_block(f, r, self.path, "value", inflate=False)
                c = int(r["count"])
                keys = np.empty(c, dtype=np.uint64)
                masks = np.empty(c, dtype=np.uint8)
                recs = np.empty(c, dtype=VALUE_DTYPE)
                try:
                    _decode(raw, int(r["first"]), c, keys, masks, recs, fields)
                except (ValueError, struct.error) as e:
                    raise CorruptionError(f"{self.path}: value block size mismatch") from e
                if c and keys[-1] != r["last"]:
                    raise CorruptionError(f"{self.path}: value block keys do not match index")
                yield keys, masks, recs

    def read_blocks(self, blocks=None, fields=FIELDS) -> tuple:
        """``iter_blocks`` joined: (keys, masks, records) in key order."""
        parts = list(self.iter_blocks(blocks, fields))
        if not parts:
            return np.zeros(0, np.uint64), np.zeros(0, np.uint8), np.zeros(0, VALUE_DTYPE)
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))


def open_all(store_path: str, doc: dict) -> list[ValueFile]:
    """The value files manifest ``doc`` names, oldest commit first, opened and checked."""
    return [ValueFile(os.path.join(store_path, e["file"]), e)
            for e in doc.get("value_files", [])]
