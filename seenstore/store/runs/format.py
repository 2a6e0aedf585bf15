"""Run-file format constants and header codec (docs/format.md, "Run file").

A run file is a 4096-byte header followed by the body: ``count`` sorted, unique,
little-endian uint64 keys. The header carries the magic, format version, key
count, fingerprint layout, shard, policy digest, and xxh3-64 checksums of the
body and of the header itself. Shared by writer.py, reader.py and codec.py (whose
2.x header starts with the same fields, ``RunIdentity``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import xxhash

from seenstore.errors import CorruptionError, NotSupportedError


MAGIC = b"\x89SRF\r\n\x1a\n"  # PNG-style: high bit, name, CRLF, EOF, LF catch mangled transfers
MAJOR = 1
MINOR = 0
HEADER_SIZE = 4096  # body starts page-aligned, so it can be memory-mapped directly
HASH_XXH3_64 = 1
# Sparse index: every SPARSE_STRIDE-th key of a run (one per 4 KiB page of body),
# kept in memory; a point lookup binary-searches it, then one page of the run.
SPARSE_STRIDE = 512

# magic, major, minor, header_size, count, host_bits, hash_id, shard_bits, reserved,
# shard, policy_digest(16), body_checksum
_FIELDS = struct.Struct("<8sHHIQBBBBI16sQ")
_CHECKED = _FIELDS.size  # 56: the header checksum covers bytes [0, 56)
_HEADER_SUM = struct.Struct("<Q")
KEY_DTYPE = "<u8"


def policy_digest(policy_id: str) -> bytes:
    """16-byte digest of a policy identity string, as stored in run headers."""
    return xxhash.xxh3_128_digest(policy_id.encode("utf-8"))


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

    def pack(self) -> bytes:
        fields = _FIELDS.pack(
            MAGIC, self.major, self.minor, HEADER_SIZE, self.count, self.host_bits,
            HASH_XXH3_64, self.shard_bits, 0, self.shard, self.policy_digest,
            self.body_checksum,
        )
        head = fields + _HEADER_SUM.pack(xxhash.xxh3_64_intdigest(fields))
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
        if major != MAJOR:
            raise NotSupportedError(
                f"{name}: run format version {major}.{minor} is "
                f"{'newer than' if major > MAJOR else 'not one'} this seenstore reads "
                f"({MAJOR}.x); upgrade seenstore")
        (want,) = _HEADER_SUM.unpack_from(raw, _CHECKED)
        if xxhash.xxh3_64_intdigest(raw[:_CHECKED]) != want:
            raise CorruptionError(f"{name}: header checksum mismatch")
        if header_size != HEADER_SIZE or hash_id != HASH_XXH3_64:
            raise NotSupportedError(f"{name}: unsupported header size or hash id")
        return cls(count, host_bits, shard_bits, shard, pdigest, body_sum, major, minor)
