"""A static binary fuse filter over a fixed set of keys (kernels/fuse.py): no false
negative for a key built in, false positives at about 2^-bits, about 1.125 x bits
bits per key from ~1e6 keys (docs/bloom.md, "Static filters").

``FuseFilter.build(keys, bits)`` sizes and builds it; ``query(keys)`` answers. It
cannot take keys after its build, so in a store it could only cover immutable runs;
the store keeps its layered Bloom filter instead, for costs measured in docs/bloom.md
("Why the store keeps the Bloom filter"). ``bench/bench_bloom.py --fuse`` measures
it against the blocked Bloom filter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from seenstore.errors import InvalidInputError

MAX_SEGMENT = 1 << 18  # the reference's cap on the segment length


@dataclass(frozen=True)
class FuseShape:
    """Sizes of a filter of ``n`` keys (the reference's formulas, arity 3)."""

    n: int
    seg_len: int  # slots per segment, a power of two
    seg_count: int  # segments a key's first slot may start in
    array_length: int  # slots: (seg_count + 2) x seg_len

    @property
    def scl(self) -> int:
        return self.seg_count * self.seg_len


def shape_for(n: int) -> FuseShape:
    """The reference's sizes (xor_singleheader ``binary_fuse8_allocate``, arity 3)."""
    seg_len = 4 if n <= 1 else 1 << int(math.floor(math.log(n) / math.log(3.33) + 2.25))
    seg_len = min(seg_len, MAX_SEGMENT)
    factor = 0.0 if n <= 1 else max(1.125, 0.875 + 0.25 * math.log(1e6) / math.log(n))
    capacity = 0 if n <= 1 else int(round(n * factor))
    init = (capacity + seg_len - 1) // seg_len - 2
    length = (init + 2) * seg_len
    count = (length + seg_len - 1) // seg_len
    count = 1 if count <= 2 else count - 2
    return FuseShape(n, seg_len, count, (count + 2) * seg_len)


def words_for(shape: FuseShape, bits: int) -> int:
    """uint64 words holding ``array_length`` fingerprints of ``bits`` bits, plus one
    (a fingerprint read across a word boundary reads the next word)."""
    return (shape.array_length * bits + 63) // 64 + 1


class FuseFilter:
    """A built filter: ``words`` (packed fingerprints), ``seed``, ``shape``, ``bits``."""

    def __init__(self, words: np.ndarray, seed: int, shape: FuseShape, bits: int) -> None:
        self.words, self.seed, self.shape, self.bits = words, seed, shape, bits

    @classmethod
    def build(cls, keys: np.ndarray, bits: int = 8) -> "FuseFilter":
        """The filter of ``keys`` (1-D uint64, distinct) with ``bits``-bit
        fingerprints (1..16). Raises InvalidInputError for other arguments, and when
        no seed builds it (repeated keys)."""
        from seenstore.kernels.fuse import fuse_build

        keys = np.ascontiguousarray(keys)
        if keys.dtype != np.uint64 or keys.ndim != 1:
            raise InvalidInputError("keys must be a 1-D uint64 array")
        if not 1 <= bits <= 16:
            raise InvalidInputError(f"bits must be in 1..16, got {bits}")
        shape = shape_for(len(keys))
        words = np.zeros(words_for(shape, bits), np.uint64)
        seed, tries = fuse_build(keys, shape.seg_len, shape.scl, shape.array_length, bits, words)
        if tries < 0:
            raise InvalidInputError("no seed built the filter: are the keys distinct?")
        return cls(words, int(seed), shape, bits)

    def query(self, keys: np.ndarray) -> np.ndarray:
        """True = maybe built in, False = certainly not (1-D uint64 ``keys``)."""
        from seenstore.kernels.fuse import fuse_query

        out = np.empty(len(keys), np.bool_)
        fuse_query(self.words, np.ascontiguousarray(keys, np.uint64), np.uint64(self.seed),
                   self.shape.seg_len, self.shape.scl, self.bits, out)
        return out

    @property
    def nbytes(self) -> int:
        return self.words.nbytes

    @property
    def bits_per_key(self) -> float:
        return 8 * self.nbytes / max(self.shape.n, 1)
