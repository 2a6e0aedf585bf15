"""The evidence a store keeps (store/evidencelog.py): bounded per host by a
reservoir, the latest fetch of a URL winning, durable through its log and
snapshots, a torn log tail dropped, damage refused."""

from __future__ import annotations

import os
from collections import namedtuple

import pytest

from seenstore.errors import CorruptionError
from seenstore.store.evidencelog import FIELDS, LOG_NAME, EvidenceLog

Rec = namedtuple("Rec", FIELDS)


def rec(host: str, i: int, status: int = 200) -> Rec:
    return Rec(f"http://{host}/p/{i}", status, None, None, i * 7919 % 1000, None, host)


def log_for(path, doc=None, per_host=8):
    return EvidenceLog(str(path), doc or {}, lambda v: Rec(*v), per_host=per_host, sync=False)


def test_reservoir_bounds_each_host_and_keeps_the_latest_fetch(tmp_path):
    log = log_for(tmp_path)
    log.record([rec("a.test", i) for i in range(100)] + [rec("b.test", i) for i in range(3)])
    assert len(log.hosts["a.test"]) == 8 and len(log.hosts["b.test"]) == 3
    assert log.seen["a.test"] == 100
    kept = sorted(int(r.url.rsplit("/", 1)[1]) for r in log.hosts["a.test"].values())
    assert kept != list(range(8))  # a reservoir sample, not the first eight
    log.record([rec("b.test", 1, status=404)])  # the latest fetch of a URL wins
    assert log.hosts["b.test"]["http://b.test/p/1"].status == 404
    assert log.seen["b.test"] == 3
    log.close()


def test_log_replays_after_a_crash_and_drops_a_torn_tail(tmp_path):
    log = log_for(tmp_path, per_host=1000)
    log.record([rec("a.test", i) for i in range(10)])
    log.record([rec("a.test", i) for i in range(10, 15)])
    log.close()
    path = os.path.join(tmp_path, LOG_NAME)
    size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(b"\x40\x00\x00\x00garbage")  # a record cut short by a crash
    again = log_for(tmp_path, per_host=1000)
    assert len(again) == 15 and os.path.getsize(path) > size
    again.record([rec("a.test", 99)])  # appends after the valid records
    again.close()
    assert len(log_for(tmp_path, per_host=1000)) == 16


def test_snapshot_is_named_by_the_manifest_and_the_old_log_is_not_replayed(tmp_path):
    log = log_for(tmp_path, per_host=1000)
    log.record([rec("a.test", i) for i in range(20)])
    entry = log.snapshot(3)
    log.committed(entry)
    log.record([rec("c.test", 1)])
    log.close()
    doc = {"evidence": entry}
    back = log_for(tmp_path, doc, per_host=1000)
    assert len(back) == 21 and set(back.hosts) == {"a.test", "c.test"}
    back.close()
    # a crash after a snapshot was written but before the manifest named it: the
    # old snapshot (none) and the log it follows are what the store holds
    stale = log_for(tmp_path, {}, per_host=1000)
    assert len(stale) == 0
    raw = bytearray(open(os.path.join(tmp_path, entry["file"]), "rb").read())
    raw[-3] ^= 0x55
    open(os.path.join(tmp_path, entry["file"]), "wb").write(raw)
    with pytest.raises(CorruptionError, match="damaged"):
        log_for(tmp_path, doc)
