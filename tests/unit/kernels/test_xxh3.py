"""The numba XXH3-64 kernel equals the ``xxhash`` package on every code path.

Oracle: ``xxhash.xxh3_64_intdigest``. Covers every length 0..300 (all short,
mid and long paths), block boundaries of the long path, multi-KB inputs,
slices inside a larger buffer, and the 128-bit fold on extreme operands.
"""

from __future__ import annotations

import numpy as np
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from seenstore.kernels.xxh3 import _mul128_fold64, xxh3_64, xxh3_64_batch

MASK64 = (1 << 64) - 1
EXTREMES = [0, 1, 2, 0xFFFFFFFF, 1 << 32, (1 << 32) + 1, 1 << 63, (1 << 63) + 1, MASK64 - 1, MASK64]


def _oracle(b: bytes) -> int:
    return xxhash.xxh3_64_intdigest(b)


def _kernel(b: bytes, pad_before: int = 0, pad_after: int = 0, fill: int = 0xAB) -> int:
    buf = np.full(pad_before + len(b) + pad_after, fill, dtype=np.uint8)
    buf[pad_before : pad_before + len(b)] = np.frombuffer(b, dtype=np.uint8)
    return int(xxh3_64(buf, pad_before, pad_before + len(b)))


def test_every_length_0_to_300_random_bytes():
    rng = np.random.default_rng(20240501)
    for n in range(301):
        for _ in range(4):
            b = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
            assert _kernel(b) == _oracle(b), n


def test_every_length_0_to_300_constant_bytes():
    # All-zero and all-0xFF inputs drive the 128-bit multiply to its carry extremes.
    for n in range(301):
        for fill in (0x00, 0xFF):
            b = bytes([fill]) * n
            assert _kernel(b) == _oracle(b), (n, fill)


def test_long_path_block_boundaries_and_multi_kb():
    rng = np.random.default_rng(7)
    lengths = [1023, 1024, 1025, 1087, 1088, 1089, 2047, 2048, 2049, 3000, 4096, 8191, 16385, 65537]
    for n in lengths:
        b = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert _kernel(b) == _oracle(b), n


def test_slices_ignore_neighbouring_bytes():
    # The kernel hashes buf[start:end] only: garbage on either side never leaks in.
    rng = np.random.default_rng(3)
    for n in list(range(70)) + [127, 128, 129, 239, 240, 241, 300, 1500]:
        b = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        for pad_before, pad_after, fill in ((0, 0, 0), (5, 0, 0xFF), (13, 17, 0x11), (1, 64, 0xFF)):
            assert _kernel(b, pad_before, pad_after, fill) == _oracle(b), (n, pad_before)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=600), st.integers(0, 9), st.integers(0, 9))
def test_hypothesis_random_binary(b, pad_before, pad_after):
    assert _kernel(b, pad_before, pad_after) == _oracle(b)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=40))
def test_batch_matches_per_string(strings):
    buf = np.frombuffer(b"".join(strings), dtype=np.uint8) if strings else np.zeros(0, np.uint8)
    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(s) for s in strings])
    got = xxh3_64_batch(buf, offsets)
    assert got.dtype == np.uint64
    assert [int(x) for x in got] == [_oracle(s) for s in strings]


def _fold_oracle(a: int, b: int) -> int:
    p = a * b
    return (p & MASK64) ^ (p >> 64)


def test_mul128_fold_extremes():
    for a in EXTREMES:
        for b in EXTREMES:
            assert int(_mul128_fold64(np.uint64(a), np.uint64(b))) == _fold_oracle(a, b), (a, b)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, MASK64), st.integers(0, MASK64))
def test_mul128_fold_random(a, b):
    assert int(_mul128_fold64(np.uint64(a), np.uint64(b))) == _fold_oracle(a, b)
