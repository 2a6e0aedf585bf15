"""Value files: per-key records beside a store's keys (docs/format.md, "Value files").

One file per commit that set values (``v-qSSSSSSSSSS.val``; a merge of consecutive
files ``v-qLLLLLLLLLL-HHHHHHHHHH.val``), named in the manifest's ``value_files`` in
commit order. A file holds entries sorted by key, one per key: the key, a field
mask (bit i set: the entry sets field ``FIELDS[i]``) and a whole record (fields not
in the mask are 0 and mean nothing). Entries are cut into blocks of at most
``BLOCK_ENTRIES``; each block is raw DEFLATE of its columns (key deltas, masks,
records), with its first and last key, offset, size, count and xxh3-64 in the index
at the end. ``write_file`` writes and fsyncs a file before the manifest names it;
``ValueFile`` opens and checks one (CorruptionError naming it when damaged,
NotSupportedError for another major version) and decodes the blocks asked for.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
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
BLOCK_ENTRIES = 1 << 14
LEVEL = 1  # zlib level: the columns are mostly zeros and repeats (docs/format.md)
NAME_RE = re.compile(r"^v-q(\d{10})(-\d{10})?\.val(\.tmp)?$")


def file_name(seq_lo: int, seq_hi: int | None = None) -> str:
    """The file of commit ``seq_lo`` (``seq_hi``: a merge of ``seq_lo..seq_hi``)."""
    return f"v-q{seq_lo:010d}" + ("" if seq_hi is None else f"-{seq_hi:010d}") + ".val"


def _encode(keys: np.ndarray, masks: np.ndarray, recs: np.ndarray) -> bytes:
    deltas = np.empty_like(keys)
    deltas[0] = keys[0]
    np.subtract(keys[1:], keys[:-1], out=deltas[1:])
    return zlib.compress(deltas.tobytes() + masks.tobytes() + recs.tobytes(), LEVEL, -15)


def write_file(path: str, keys: np.ndarray, masks: np.ndarray, recs: np.ndarray,
               seq_lo: int, seq_hi: int, sync: bool = True, threads: int = 1) -> dict:
    """Write entries (``keys`` uint64 sorted ascending and unique, ``masks`` uint8,
    ``recs`` VALUE_DTYPE, aligned) to ``path``, fsynced; return the manifest entry
    ``{file, count, checksum, seq: [lo, hi], bytes}``. Blocks are compressed on
    ``threads`` threads (zlib lets go of the GIL)."""
    n = len(keys)
    cuts = list(range(0, n, BLOCK_ENTRIES)) + [n]
    spans = list(zip(cuts, cuts[1:]))

    def enc(span):
        i, j = span
        return _encode(keys[i:j], masks[i:j], recs[i:j])

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

    def read_blocks(self, blocks=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(keys, masks, records) of ``blocks`` (indices; None: all), in key order,
        each block's checksum checked (CorruptionError naming the file)."""
        rows = self.index if blocks is None else self.index[np.asarray(blocks, dtype=np.int64)]
        n = int(rows["count"].sum())
        keys = np.empty(n, dtype=np.uint64)
        masks = np.empty(n, dtype=np.uint8)
        recs = np.empty(n, dtype=VALUE_DTYPE)
        at = 0
        try:
            f = open(self.path, "rb")
        except OSError as e:
            raise CorruptionError(f"{self.path}: cannot read value file: {e.strerror}") from e
        with f:
            for r in rows:
                raw = blockfile.read_block(f, r, self.path, "value")
                c = int(r["count"])
                if len(raw) != c * (9 + VALUE_DTYPE.itemsize):
                    raise CorruptionError(f"{self.path}: value block size mismatch")
                np.cumsum(np.frombuffer(raw, dtype="<u8", count=c), out=keys[at:at + c])
                masks[at:at + c] = np.frombuffer(raw, dtype=np.uint8, count=c, offset=8 * c)
                recs[at:at + c] = np.frombuffer(raw, dtype=VALUE_DTYPE, count=c, offset=9 * c)
                if c and (keys[at] != r["first"] or keys[at + c - 1] != r["last"]):
                    raise CorruptionError(f"{self.path}: value block keys do not match index")
                at += c
        return keys, masks, recs


def open_all(store_path: str, doc: dict) -> list[ValueFile]:
    """The value files manifest ``doc`` names, oldest commit first, opened and checked."""
    return [ValueFile(os.path.join(store_path, e["file"]), e)
            for e in doc.get("value_files", [])]
