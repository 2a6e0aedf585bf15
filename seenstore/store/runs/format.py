"""Run-file format constants and header codec (docs/format.md, "Run file").

A run file is a 4096-byte header, the body (``count`` sorted, unique, little-endian
uint64 keys) and, since 1.1, the page index: per page of PAGE_KEYS keys (4 KiB of
body), the page's first key and the xxh3-64 of its bytes, so a reader checks the
one page a point lookup reads. The header carries the magic, format version, key
count, fingerprint layout, shard, policy digest, xxh3-64 checksums of the body and
of the header itself and (1.1) the page index's size and checksum. Shared by
writer.py, reader.py and codec.py (whose 2.x header starts with the same fields,
``RunIdentity``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import xxhash

from seenstore.errors import CorruptionError, NotSupportedError


MAGIC = b"\x89SRF\r\n\x1a\n"  # PNG-style: high bit, name, CRLF, EOF, LF catch mangled transfers
MAJOR = 1
MINOR = 1  # 1.1: the page index after the body (one checksum per 4 KiB page)
# The compressed run's version (codec.py; here so that naming it needs no numba)
COMPRESSED_MAJOR = 2
COMPRESSED_MINOR = 0
HEADER_SIZE = 4096  # body starts page-aligned, so it can be memory-mapped directly
HASH_XXH3_64 = 1
# Sparse index: every SPARSE_STRIDE-th key of a run (one per 4 KiB page of body),
# kept in memory; a point lookup binary-searches it, then one page of the run.
SPARSE_STRIDE = 512
# Keys per checked page (1.1): a 4 KiB page, what a point lookup reads anyway (one
# page of the memory map) and what the sparse index names. Its index entry costs
# 16 bytes (0.4 % of the body, 0.03 B/key); checking it hashes 4 KiB (~0.1 us of
# xxh3 plus a Python call, ~0.3 us in all) per page a call reads.
PAGE_KEYS = SPARSE_STRIDE
MAX_PAGE_KEYS = 1 << 20  # what a reader takes (the writer writes PAGE_KEYS)
PAGE_ENTRY = 16  # bytes of the page index per page: first key, checksum (u64 each)

# magic, major, minor, header_size, count, host_bits, hash_id, shard_bits, reserved,
# shard, policy_digest(16), body_checksum
_FIELDS = struct.Struct("<8sHHIQBBBBI16sQ")
_CHECKED = _FIELDS.size  # 56: the header checksum covers bytes [0, 56)
_HEADER_SUM = struct.Struct("<Q")
# 1.1, bytes [64, 88): page_keys, reserved, pages, page index checksum; then at 88
# the xxh3-64 of bytes [64, 88)
_PAGES_AT = _CHECKED + _HEADER_SUM.size  # 64
_PAGES = struct.Struct("<IIQQ")
_PAGES_SUM_AT = _PAGES_AT + _PAGES.size  # 88
KEY_DTYPE = "<u8"


def policy_digest(policy_id: str) -> bytes:
    """16-byte digest of a policy identity string, as stored in run headers."""
    return xxhash.xxh3_128_digest(policy_id.encode("utf-8"))


def page_count(count: int, page_keys: int = PAGE_KEYS) -> int:
    """Pages of a body of ``count`` keys (the last one may be partial)."""
    return -(-count // page_keys)


@dataclass(frozen=True)
class RunIdentity:
    """The fields every run header version starts with (1.x raw and 2.x compressed,
    codec.py ``CodecHeader``): what the run holds and which store, layout and shard it
    belongs to. Each version packs them in its own byte layout (docs/format.md)."""

    count: int
    host_bits: int
    shard_bits: int
    shard: int
    policy_digest: bytes
    body_checksum: int


@dataclass(frozen=True)
class RunHeader(RunIdentity):
    major: int = MAJOR
    minor: int = MINOR
    # 1.1: keys per checked page and the xxh3-64 of the page index (0 in 1.0)
    page_keys: int = 0
    index_checksum: int = 0

    @property
    def paged(self) -> bool:
        """True when the file carries a page index (1.1 and later minors)."""
        return self.minor >= 1

    @property
    def pages(self) -> int:
        return page_count(self.count, self.page_keys) if self.paged else 0

    @property
    def file_size(self) -> int:
        """The file's length: header, body and (1.1) page index."""
        return HEADER_SIZE + 8 * self.count + PAGE_ENTRY * self.pages

    def pack(self) -> bytes:
        fields = _FIELDS.pack(
            MAGIC, self.major, self.minor, HEADER_SIZE, self.count, self.host_bits,
            HASH_XXH3_64, self.shard_bits, 0, self.shard, self.policy_digest,
            self.body_checksum,
        )
        head = fields + _HEADER_SUM.pack(xxhash.xxh3_64_intdigest(fields))
        if self.paged:
            pages = _PAGES.pack(self.page_keys, 0, self.pages, self.index_checksum)
            head += pages + _HEADER_SUM.pack(xxhash.xxh3_64_intdigest(pages))
        return head + b"\0" * (HEADER_SIZE - len(head))

    @classmethod
    def unpack(cls, raw: bytes, name: str) -> "RunHeader":
        """Decode and check a header. Raises NotSupportedError for a foreign file or
        a future major version, CorruptionError for a damaged header."""
        if not MAGIC.startswith(raw[:8]):
            raise NotSupportedError(f"{name}: not a seenstore run file (bad magic)")
        if len(raw) < _CHECKED + _HEADER_SUM.size:
            raise CorruptionError(f"{name}: truncated header ({len(raw)} bytes)")
        (_, major, minor, header_size, count, host_bits, hash_id, shard_bits, _,
         shard, pdigest, body_sum) = _FIELDS.unpack_from(raw)
        (want,) = _HEADER_SUM.unpack_from(raw, _CHECKED)
        ok = xxhash.xxh3_64_intdigest(raw[:_CHECKED]) == want
        if major != MAJOR:
            raise NotSupportedError(
                f"{name}: run format version {major}.{minor} is "
                f"{'newer than' if major > MAJOR else 'not one'} this seenstore reads "
                f"({MAJOR}.x); upgrade seenstore"
                + ("" if ok else " (or the header is damaged: its checksum does not match)"))
        if not ok:
            raise CorruptionError(f"{name}: header checksum mismatch")
        if header_size != HEADER_SIZE or hash_id != HASH_XXH3_64:
            raise NotSupportedError(f"{name}: unsupported header size or hash id")
        page_keys = index_sum = 0
        if minor >= 1:
            if len(raw) < _PAGES_SUM_AT + _HEADER_SUM.size:
                raise CorruptionError(f"{name}: truncated header ({len(raw)} bytes)")
            (want,) = _HEADER_SUM.unpack_from(raw, _PAGES_SUM_AT)
            if xxhash.xxh3_64_intdigest(raw[_PAGES_AT:_PAGES_SUM_AT]) != want:
                raise CorruptionError(f"{name}: header checksum mismatch (page fields)")
            page_keys, _, pages, index_sum = _PAGES.unpack_from(raw, _PAGES_AT)
            if not 1 <= page_keys <= MAX_PAGE_KEYS or pages != page_count(count, page_keys):
                raise CorruptionError(f"{name}: header page fields disagree")
        return cls(count, host_bits, shard_bits, shard, pdigest, body_sum, major, minor,
                   page_keys, index_sum)
