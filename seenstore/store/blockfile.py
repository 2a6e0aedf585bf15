"""The frame shared by the store's block-indexed side files (kept-URL files,
kepturls.py; value files, valuefiles.py; docs/format.md): a 64-byte header
(magic, major, minor, then the format's own fields, ending in the xxh3-64 of the
56 bytes before it), blocks (raw DEFLATE, or the format's own packing), and an
index at the end with a row per block (first and last key, offset, size, count,
xxh3-64 of the block's bytes), whose own xxh3-64 the header holds. ``write`` and
``read_index`` handle the frame; a block's bytes come back checked from
``read_block``.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np
import xxhash

from seenstore.errors import CorruptionError, NotSupportedError
from seenstore.store.files import write_replacing

HEADER_BYTES = 64
INDEX = np.dtype([("first", "<u8"), ("last", "<u8"), ("offset", "<u8"),
                  ("size", "<u4"), ("count", "<u4"), ("checksum", "<u8")])


def write(path: str, head: bytes, blocks: list, index: np.ndarray, sync: bool) -> None:
    """Write ``head`` (HEADER_BYTES; its last 8 bytes become its checksum), the
    ``blocks`` and ``index`` (INDEX rows, ``fill_index``) to ``path`` through a
    temp file renamed over it, fsynced with ``sync``."""
    write_replacing(path, [seal(head), *blocks, index.tobytes()], sync)


def fill_index(blocks: list, index: np.ndarray) -> tuple[int, int]:
    """Set ``index``'s offsets, sizes and checksums from ``blocks``; return (the
    index's offset in the file, its checksum)."""
    off = HEADER_BYTES
    for row, block in zip(index, blocks):
        row["offset"], row["size"] = off, len(block)
        row["checksum"] = xxhash.xxh3_64_intdigest(block)
        off += len(block)
    return off, xxhash.xxh3_64_intdigest(index.tobytes())


def seal(head: bytes) -> bytes:
    return head[:-8] + struct.pack("<Q", xxhash.xxh3_64_intdigest(head[:-8]))


def read_index(path: str, header: struct.Struct, magic: bytes, major: int, what: str,
               n_blocks_at: int, index_at: int) -> tuple[tuple, np.ndarray]:
    """Open ``path`` (a ``what`` file: "kept-URL", "value") and check its header
    (``magic``, ``major``, checksum) and index; return (the header's fields, the
    index). The header's fields at ``n_blocks_at`` and ``index_at`` are the block
    count and the index offset, the one after the index offset its checksum.
    Raises CorruptionError / NotSupportedError naming the file."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_BYTES)
            if len(head) != HEADER_BYTES or head[:len(magic)] != magic:
                raise CorruptionError(f"{path}: not a {what} file (bad magic)")
            fields = header.unpack(head)
            if fields[1] != major:
                raise NotSupportedError(f"{path}: {what} format {fields[1]}.{fields[2]} is "
                                        f"not one this seenstore reads ({major}.x)")
            if xxhash.xxh3_64_intdigest(head[:-8]) != fields[-1]:
                raise CorruptionError(f"{path}: {what} header checksum mismatch")
            f.seek(fields[index_at])
            nb = fields[n_blocks_at]
            idx = f.read(nb * INDEX.itemsize)
    except OSError as e:
        raise CorruptionError(f"{path}: cannot read {what} file: {e.strerror}") from e
    if len(idx) != nb * INDEX.itemsize or xxhash.xxh3_64_intdigest(idx) != fields[index_at + 1]:
        raise CorruptionError(f"{path}: {what} index damaged or truncated")
    return fields, np.frombuffer(idx, dtype=INDEX)


def read_block(f, row, path: str, what: str, inflate: bool = True) -> bytes:
    """The bytes of the block of index ``row`` from open file ``f``, its checksum
    checked (CorruptionError naming ``path``), inflated (raw DEFLATE) with
    ``inflate``."""
    f.seek(int(row["offset"]))
    data = f.read(int(row["size"]))
    if xxhash.xxh3_64_intdigest(data) != int(row["checksum"]):
        raise CorruptionError(f"{path}: {what} block at {int(row['offset'])} is damaged")
    if not inflate:
        return data
    try:
        return zlib.decompress(data, -15)
    except zlib.error as e:
        raise CorruptionError(f"{path}: {what} block undecodable") from e


def blocks_meeting(index: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """Indices of the blocks whose key range holds one of ``sorted_keys``."""
    if not len(index) or not len(sorted_keys):
        return np.zeros(0, dtype=np.int64)
    b = np.searchsorted(index["first"], sorted_keys, side="right") - 1
    ok = b >= 0
    b = b[ok]
    return np.unique(b[sorted_keys[ok] <= index["last"][b]])
