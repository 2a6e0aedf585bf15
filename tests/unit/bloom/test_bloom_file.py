"""The Bloom filter file (docs/bloom.md): round trip, atomic save, refusal of bad files.

Files are damaged on purpose (truncated, padded, flipped, foreign, future
versions) and writes are failed through os.fsync: every failure is a typed
error and a failed save leaves the previous file in place.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct

import numpy as np
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seenstore.bloom import file as bloom_mod
from seenstore.bloom import HEADER_LEN, MAGIC, BloomFilter
from seenstore.errors import (
    CorruptionError,
    DiskFullError,
    NotSupportedError,
    StoreIOError,
    StoreNotFoundError,
)


def filled_filter(seed: int = 1) -> BloomFilter:
    bf = BloomFilter.for_capacity(3000, 0.01)
    bf.add(np.random.default_rng(seed).integers(0, 2**64, 2000, np.uint64, endpoint=False))
    return bf


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "bloom.bin"
    bf = filled_filter()
    bf.save(path, generation=41)
    return path, bf


def rewrite_header(path, offset: int, fmt: str, value) -> None:
    """Change one header field and re-seal the header checksum, as a newer writer would."""
    raw = bytearray(path.read_bytes())
    struct.pack_into(fmt, raw, offset, value)
    (header_len,) = struct.unpack_from("<I", raw, 12)
    struct.pack_into("<Q", raw, header_len - 8, xxhash.xxh3_64_intdigest(raw[: header_len - 8]))
    path.write_bytes(bytes(raw))


def test_round_trip_keeps_every_bit_and_figure(saved):
    path, bf = saved
    loaded, generation = BloomFilter.load(path)
    assert generation == 41
    assert np.array_equal(loaded.words, bf.words)
    assert (loaded.n_hashes, loaded.n_added, loaded.capacity, loaded.target_fpr) == (
        bf.n_hashes, bf.n_added, bf.capacity, bf.target_fpr)
    assert loaded.words.dtype == np.uint64
    probes = np.arange(5000, dtype=np.uint64)
    assert np.array_equal(loaded.query(probes), bf.query(probes))
    assert os.path.getsize(path) == HEADER_LEN + bf.nbytes
    assert path.read_bytes()[:8] == MAGIC


@pytest.mark.parametrize("generation", [0, 2**63, 2**64 - 1])
def test_generation_extremes_round_trip_and_overwrite(tmp_path, generation):
    path = tmp_path / "b"
    BloomFilter(1, 1).save(path, generation=5)
    filled_filter().save(str(path), generation=generation)
    assert BloomFilter.load(str(path))[1] == generation
    assert os.listdir(tmp_path) == ["b"]  # no temp file left behind


@pytest.mark.parametrize("generation", [-1, 2**64, 1.5])
def test_bad_generation_is_refused(tmp_path, generation):
    from seenstore.errors import InvalidInputError
    with pytest.raises(InvalidInputError):
        BloomFilter(1, 1).save(tmp_path / "b", generation=generation)


def test_missing_file_is_store_not_found(tmp_path):
    with pytest.raises(StoreNotFoundError) as e:
        BloomFilter.load(tmp_path / "nope")
    assert isinstance(e.value, FileNotFoundError)


@pytest.mark.parametrize("cut", [0, 3, 8, 15, 16, 100, HEADER_LEN, HEADER_LEN + 8, -1])
def test_truncated_file_is_corruption(saved, cut):
    path, _ = saved
    raw = path.read_bytes()
    path.write_bytes(raw[:cut])
    with pytest.raises(CorruptionError):
        BloomFilter.load(path)


def test_trailing_bytes_are_corruption(saved):
    path, _ = saved
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(CorruptionError, match="trailing"):
        BloomFilter.load(path)


@pytest.mark.parametrize("where", ["header", "body"])
def test_flipped_bit_is_corruption(saved, where):
    path, _ = saved
    raw = bytearray(path.read_bytes())
    raw[40 if where == "header" else HEADER_LEN + 777] ^= 0x10
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptionError, match="checksum"):
        BloomFilter.load(path)


@pytest.mark.parametrize("content", [b"hello world, not a filter",
                                     b"\x89SRF\r\n\x1a\n" + b"\0" * 200, b"\x89SBX"])
def test_foreign_file_is_not_supported(tmp_path, content):
    path = tmp_path / "f"
    path.write_bytes(content)
    with pytest.raises(NotSupportedError):
        BloomFilter.load(path)


def test_future_major_is_not_supported_and_future_minor_is_read(saved):
    path, bf = saved
    rewrite_header(path, 10, "<H", 9)  # minor 9: unknown fields would sit in reserved bytes
    loaded, generation = BloomFilter.load(path)
    assert generation == 41 and np.array_equal(loaded.words, bf.words)
    rewrite_header(path, 8, "<H", 2)
    with pytest.raises(NotSupportedError, match="version 2.9"):
        BloomFilter.load(path)


@pytest.mark.parametrize("offset, fmt, value", [(16, "<I", 1), (20, "<I", 2), (24, "<I", 256)])
def test_unknown_variant_is_not_supported(saved, offset, fmt, value):
    path, _ = saved
    rewrite_header(path, offset, fmt, value)  # flags, scheme, block bits
    with pytest.raises(NotSupportedError):
        BloomFilter.load(path)


@pytest.mark.parametrize("offset, fmt, value", [(28, "<I", 0), (32, "<Q", 0), (72, "<Q", 64),
                                                (12, "<I", 96)])
def test_inconsistent_fields_are_corruption(saved, offset, fmt, value):
    path, _ = saved
    rewrite_header(path, offset, fmt, value)  # n_hashes, n_blocks, body_len, header_len
    with pytest.raises(CorruptionError):
        BloomFilter.load(path)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_single_byte_change_is_refused_with_a_typed_error(saved, data):
    path, _ = saved
    raw = bytearray(path.read_bytes())
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] ^= data.draw(st.integers(1, 255))
    damaged = path.with_name("damaged")
    damaged.write_bytes(bytes(raw))
    with pytest.raises((CorruptionError, NotSupportedError)):
        BloomFilter.load(damaged)


@pytest.mark.parametrize("err, kind", [(errno.ENOSPC, DiskFullError), (errno.EIO, StoreIOError)])
def test_failed_save_leaves_old_file_and_no_temp(saved, monkeypatch, err, kind):
    path, _ = saved
    before = path.read_bytes()

    def failing_fsync(fd):
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(bloom_mod.os, "fsync", failing_fsync)
    other = filled_filter(seed=2)
    with pytest.raises(kind):
        other.save(path, generation=42)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(os.listdir(path.parent)) == ["bloom.bin"]
    assert BloomFilter.load(path)[1] == 41


def large_filter() -> BloomFilter:
    """A filter of DIRECT_MIN_BYTES or more (the O_DIRECT save) whose body length is
    not a multiple of 4096 (a tail written through the page cache)."""
    n_blocks = bloom_mod.DIRECT_MIN_BYTES // 64 + 3
    bf = BloomFilter(n_blocks, 8)
    bf.add(np.random.default_rng(5).integers(0, 2**64, 50_000, np.uint64, endpoint=False))
    return bf


@pytest.mark.parametrize("refuse", [None, "flag", "transfer"])
def test_large_filter_saves_behind_a_block_header_and_loads_the_same(tmp_path, monkeypatch,
                                                                    refuse):
    """Large filters are written with O_DIRECT behind a 4096-byte header; a file system
    refusing the flag, or accepting it and refusing the transfer (EINVAL), gets the
    same file through the page cache. Every 1.x reader takes that header length."""
    if refuse == "flag":
        monkeypatch.setattr(bloom_mod, "set_direct", lambda fd, on: False)
    elif refuse == "transfer":
        real_write = bloom_mod.os.write

        def refusing_write(fd, data):
            if os.O_DIRECT & fcntl.fcntl(fd, fcntl.F_GETFL):
                raise OSError(errno.EINVAL, "refused")
            return real_write(fd, data)

        monkeypatch.setattr(bloom_mod.os, "write", refusing_write)
    bf = large_filter()
    assert bf.nbytes % 4096 and bf.words.ctypes.data % 4096 == 0
    path = tmp_path / "big"
    bf.save(path, generation=7)
    raw = path.read_bytes()
    assert struct.unpack_from("<I", raw, 12)[0] == 4096
    assert len(raw) == 4096 + bf.nbytes
    loaded, gen = BloomFilter.load(path)
    assert gen == 7 and np.array_equal(loaded.words, bf.words)
    assert loaded.n_added == bf.n_added
    assert sorted(os.listdir(tmp_path)) == ["big"]
