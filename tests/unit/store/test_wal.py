"""The stage's write-ahead log: round trip, torn tails ignored, damage and foreign files refused."""

import os
import struct
import threading

import numpy as np
import pytest
from conftest import EDGE_KEYS
from hypothesis import given, settings
from hypothesis import strategies as st

from seenstore.store import wal
from seenstore.errors import CorruptionError, InvalidInputError, NotSupportedError


def write_segment(directory, records, sync=wal.SYNC_NEVER, seq=1):
    w = wal.WalWriter(str(directory), seq, sync)
    for r in records:
        w.append(np.array(r, dtype=np.uint64))
    done = w.close()
    return os.path.join(str(directory), wal.segment_name(done)) if done is not None else None


def offsets(records):
    """End offset of every record in a segment holding ``records``."""
    out, pos = [], wal.HEADER_LEN
    for r in records:
        pos += wal.RECORD.size + 8 * len(r)
        out.append(pos)
    return out


key_lists = st.lists(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=20),
                     min_size=1, max_size=6)


def test_round_trip_edge_keys_in_order(tmp_path):
    records = [EDGE_KEYS, [5, 5, 3], [2**64 - 1]]
    path = write_segment(tmp_path, records)
    keys, info = wal.read_segment(path)
    assert keys.dtype == np.uint64
    assert keys.tolist() == [k for r in records for k in r]
    assert info == {"seq": 1, "records": 3, "torn_bytes": 0}
    assert os.path.getsize(path) == offsets(records)[-1]


@settings(max_examples=40, deadline=None)
@given(records=key_lists, data=st.data())
def test_any_truncation_keeps_exactly_the_whole_records(tmp_path_factory, records, data):
    path = write_segment(tmp_path_factory.mktemp("w"), records)
    size = os.path.getsize(path)
    cut = data.draw(st.integers(0, size))
    with open(path, "r+b") as f:
        f.truncate(cut)
    keys, info = wal.read_segment(path)
    whole = [r for r, end in zip(records, offsets(records)) if end <= cut]
    assert keys.tolist() == [k for r in whole for k in r]
    assert info["records"] == len(whole)


nonzero_key_lists = st.lists(st.lists(st.integers(1, 2**64 - 1), min_size=1, max_size=80),
                             min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(records=nonzero_key_lists, data=st.data())
def test_unwritten_sector_of_the_last_record_is_a_torn_tail(tmp_path_factory, records, data):
    """A crash after the file grew leaves a sector (or the last record's share of
    one) of its body unwritten, reading as zero bytes: a torn tail, ignored."""
    path = write_segment(tmp_path_factory.mktemp("w"), records)
    ends = offsets(records)
    start = ends[-2] if len(ends) > 1 else wal.HEADER_LEN
    body = start + wal.RECORD.size
    bounds = list(range(body + -body % wal.SECTOR, ends[-1], wal.SECTOR))
    if bounds:  # a sector of the body (or its share of the last one) never written
        a = data.draw(st.sampled_from(bounds))
        b = min(ends[-1], a + wal.SECTOR)
    else:  # the record within one sector: none of it written (zero fill from there)
        a, b = start, ends[-1]
    with open(path, "r+b") as f:
        f.seek(a)
        f.write(b"\0" * (b - a))
    keys, info = wal.read_segment(path)
    assert keys.tolist() == [k for r in records[:-1] for k in r]
    assert info["torn_bytes"] == ends[-1] - start


@settings(max_examples=40, deadline=None)
@given(records=nonzero_key_lists, data=st.data(), zero=st.booleans())
def test_damaged_last_record_is_corruption(tmp_path_factory, records, data, zero):
    """One byte of the last record changed (flipped, or zeroed) without a sector of
    zeros is damage, not a torn write: refused, never read as fewer keys."""
    path = write_segment(tmp_path_factory.mktemp("w"), records)
    ends = offsets(records)
    start = ends[-2] if len(ends) > 1 else wal.HEADER_LEN
    at = data.draw(st.integers(start, ends[-1] - 1))
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([0 if zero else b[0] ^ 0x40]))
    if zero and b == b"\0":
        assert wal.read_segment(path)[0].tolist() == [k for r in records for k in r]
        return
    with pytest.raises(CorruptionError, match="fails its checksum"):
        wal.read_segment(path)


def test_zero_fill_after_records_is_a_torn_tail(tmp_path):
    path = write_segment(tmp_path, [[1, 2], [3]])
    with open(path, "ab") as f:
        f.write(b"\0" * 100)
    keys, _ = wal.read_segment(path)
    assert keys.tolist() == [1, 2, 3]


@pytest.mark.parametrize("where", ["body", "header"])
def test_damage_before_more_records_is_corruption(tmp_path, where):
    records = [[1, 2, 3], [4, 5]]
    path = write_segment(tmp_path, records)
    at = wal.HEADER_LEN + (wal.RECORD.size + 4 if where == "body" else 2)
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 1]))
    with pytest.raises(CorruptionError, match="offset 32"):
        wal.read_segment(path)


def test_header_refusals(tmp_path):
    path = write_segment(tmp_path, [[9]])
    with open(path, "rb") as f:
        raw = f.read()
    cases = {
        "foreign": (b"NOTAWAL!" + raw[8:], NotSupportedError, "bad magic"),
        "future major": (raw[:8] + struct.pack("<H", 2) + raw[10:], NotSupportedError, "upgrade"),
        "bad header sum": (raw[:16] + b"\x07" + raw[17:], CorruptionError, "header checksum"),
    }
    for name, (data, err, msg) in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(err, match=msg):
            wal.read_segment(str(p))


def test_segment_torn_at_creation_holds_nothing(tmp_path):
    path = write_segment(tmp_path, [[9]])
    with open(path, "rb") as f:
        raw = f.read()
    for data in (raw[:10], b"\0" * 200):
        p = tmp_path / "torn"
        p.write_bytes(data)
        keys, info = wal.read_segment(str(p))
        assert len(keys) == 0 and info["records"] == 0 and info["torn_bytes"] == len(data)


def test_newer_minor_version_and_unknown_record_kind_are_read(tmp_path):
    head = wal.HEADER.pack(wal.MAGIC, wal.MAJOR, wal.MINOR + 1, wal.HEADER_LEN + 8, 4)
    head += struct.pack("<Q", wal._xxh3(head)) + b"extra!!!"
    unknown = wal.pack_record(np.array([77], dtype=np.uint64), kind=9)
    p = tmp_path / wal.segment_name(4)
    p.write_bytes(head + unknown + wal.pack_record(np.array([1, 2], dtype=np.uint64)))
    keys, info = wal.read_segment(str(p))
    assert keys.tolist() == [1, 2] and info["records"] == 2 and info["seq"] == 4


def test_large_arrays_are_split_into_records(tmp_path, monkeypatch):
    monkeypatch.setattr(wal, "MAX_RECORD_KEYS", 3)
    path = write_segment(tmp_path, [list(range(10))])
    keys, info = wal.read_segment(path)
    assert keys.tolist() == list(range(10)) and info["records"] == 4


def test_rotate_remove_and_listing(tmp_path):
    w = wal.WalWriter(str(tmp_path), 7, wal.SYNC_NEVER)
    assert w.rotate() is None  # nothing written: no segment created
    w.append(np.array([1], dtype=np.uint64))
    assert w.rotate() == 7
    w.append(np.array([2, 3], dtype=np.uint64))
    assert [s for s, _ in wal.list_segments(str(tmp_path))] == [7, 8]
    assert w.live_bytes == 2 * wal.HEADER_LEN + 2 * wal.RECORD.size + 24
    w.remove(7)
    assert w.close() == 8
    assert [s for s, _ in wal.list_segments(str(tmp_path))] == [8]
    assert wal.read_segment(wal.list_segments(str(tmp_path))[0][1])[0].tolist() == [2, 3]


def test_sync_policy_validation(tmp_path):
    for bad in ("sometimes", 0, -1.0, True):
        with pytest.raises(InvalidInputError):
            wal.WalWriter(str(tmp_path), 1, bad)


def test_group_commit_one_fsync_serves_waiting_threads(tmp_path, monkeypatch):
    w = wal.WalWriter(str(tmp_path), 1, wal.SYNC_ALWAYS)
    w.append(np.array([0], dtype=np.uint64))
    base = w.fsyncs  # creating the segment synced it
    gate, real = threading.Event(), os.fsync

    def slow_fsync(fd):
        gate.wait(5)
        real(fd)

    monkeypatch.setattr(wal.os, "fsync", slow_fsync)
    lsns = [w.append(np.array([i], dtype=np.uint64)) for i in range(1, 9)]
    threads = [threading.Thread(target=w.sync_upto, args=(lsn,)) for lsn in lsns]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(5)
    assert not any(t.is_alive() for t in threads)
    assert w.fsyncs - base == 1  # the first syncer covered every record written before it
    w.close()


def test_interval_policy_syncs_in_the_background(tmp_path):
    w = wal.WalWriter(str(tmp_path), 1, 0.01)
    w.append(np.array([1], dtype=np.uint64))  # the segment's creation is synced at once
    base = w.fsyncs
    w.append(np.array([2], dtype=np.uint64))
    for _ in range(1000):  # up to 10 s: an fsync can take seconds while the disk is busy
        if w.fsyncs > base:
            break
        threading.Event().wait(0.01)
    assert w.fsyncs > base
    w.close()
