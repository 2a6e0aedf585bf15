"""Fingerprint layout: how a 64-bit key is split into host bits and URL bits.

A key is ``host_hash[top H bits] || url_hash[low 64-H bits]`` (see
docs/fingerprint.md). The layout is fixed for the life of a store and recorded
in its manifest and in every run-file header; opening with another is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from seenstore.errors import InvalidInputError

DEFAULT_HOST_BITS = 20
HASH_NAME = "xxh3_64"


@dataclass(frozen=True)
class Layout:
    """``host_bits`` = H, the number of top key bits taken from the host hash."""

    host_bits: int = DEFAULT_HOST_BITS
    hash: str = HASH_NAME

    def __post_init__(self) -> None:
        if not 0 <= self.host_bits <= 32:
            raise InvalidInputError(f"host_bits must be in 0..32, got {self.host_bits}")
        if self.hash != HASH_NAME:
            raise InvalidInputError(f"unknown fingerprint hash {self.hash!r}")

    @property
    def url_bits(self) -> int:
        return 64 - self.host_bits

    def to_dict(self) -> dict:
        return {"host_bits": self.host_bits, "hash": self.hash}

    @classmethod
    def from_dict(cls, d: dict) -> "Layout":
        return cls(host_bits=int(d["host_bits"]), hash=str(d["hash"]))

    def describe(self) -> str:
        return f"{self.hash} host{self.host_bits}|url{self.url_bits}"


DEFAULT_LAYOUT = Layout()
