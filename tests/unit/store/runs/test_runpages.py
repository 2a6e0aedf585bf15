"""Raw run format 1.1: the page index (first key and xxh3-64 of every 4 KiB page),
checked by every read that uses a page before its keys are used; 1.0 runs still
read; a later minor's extra bytes accepted."""

import os
import struct

import numpy as np
import pytest
import xxhash

from seenstore.errors import CorruptionError
from seenstore.store.runs import live as runs
from seenstore.store.runs.format import HEADER_SIZE, PAGE_KEYS, RunHeader, policy_digest
from seenstore.store.runs.reader import RunReader
from seenstore.store.runs.writer import RunWriter

PD = policy_digest("safe-v1")


def write_run(path, keys, minor=None, **kw):
    w = RunWriter(str(path), 20, 0, 0, PD, **({} if minor is None else {"minor": minor}), **kw)
    w.write(np.asarray(keys, dtype=np.uint64))
    return w.finish()


def keys_of(n, seed=1):
    rng = np.random.default_rng(seed)
    return np.unique(rng.integers(0, 2**64, int(n * 1.01) + 10, dtype=np.uint64))[:n]


def flip(path, offset, xor=0x10):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ xor]))


@pytest.mark.parametrize("n", [0, 1, 511, 512, 513, 5000])
def test_layout_page_index_after_the_body(tmp_path, n):
    keys = keys_of(n)
    p = tmp_path / "r.run"
    h = write_run(p, keys)
    raw = p.read_bytes()
    pages = -(-n // PAGE_KEYS)
    assert (h.major, h.minor, h.page_keys, h.pages) == (1, 1, PAGE_KEYS, pages)
    assert len(raw) == HEADER_SIZE + 8 * n + 16 * pages == h.file_size
    assert struct.unpack_from("<HH", raw, 8) == (1, 1)
    body = raw[HEADER_SIZE:HEADER_SIZE + 8 * n]
    assert body == keys.astype("<u8").tobytes()
    index = np.frombuffer(raw[HEADER_SIZE + 8 * n:], "<u8").reshape(-1, 2)
    assert index[:, 0].tolist() == keys[::PAGE_KEYS].tolist()
    assert index[:, 1].tolist() == [xxhash.xxh3_64_intdigest(body[a:a + 4096])
                                    for a in range(0, len(body), 4096)]
    assert h.index_checksum == xxhash.xxh3_64_intdigest(index.tobytes())
    assert h.body_checksum == xxhash.xxh3_64_intdigest(body)  # as 1.0: the manifest's
    assert RunHeader.unpack(raw[:HEADER_SIZE], "r.run") == h
    r = RunReader(str(p))
    assert r.paged and np.array_equal(r.keys, keys) and np.array_equal(r.sparse, keys[::512])
    r.verify()


def test_a_1_0_run_reads_as_before(tmp_path):
    keys = keys_of(3000)
    p = tmp_path / "old.run"
    h = write_run(p, keys, minor=0)
    assert (h.minor, h.pages) == (0, 0) and os.path.getsize(p) == HEADER_SIZE + 8 * 3000
    r = runs.open_reader(str(p))
    assert not r.paged and runs.old_minor(r)
    found = np.zeros(6, bool)
    runs.lookup(r, np.sort(np.concatenate([keys[[3, 700, 2999]], keys[[3, 700, 2999]] + 1])),
                found)
    assert found.sum() == 3
    r.verify()
    assert runs.count_formats([r]) == {"1.0": 1}


def test_lookup_checks_the_pages_it_reads_and_only_those(tmp_path):
    keys = keys_of(5 * PAGE_KEYS)
    p = tmp_path / "r.run"
    write_run(p, keys)
    flip(p, HEADER_SIZE + 8 * (2 * PAGE_KEYS + 17) + 3)  # a key of page 2
    r = runs.open_reader(str(p))
    elsewhere = np.sort(keys[[5, PAGE_KEYS + 9, 4 * PAGE_KEYS + 1]])
    found = np.zeros(len(elsewhere), bool)
    runs.lookup(r, elsewhere, found)
    assert found.all()  # pages 0, 1 and 4 are sound
    for probe in (keys[2 * PAGE_KEYS + 17], keys[2 * PAGE_KEYS], keys[3 * PAGE_KEYS - 1] - 1):
        found = np.zeros(1, bool)
        with pytest.raises(CorruptionError, match=r"r\.run: page 2 .*checksum mismatch"):
            runs.lookup(r, np.array([probe], np.uint64), found)
        assert not found.any()
    with pytest.raises(CorruptionError, match="page 2"):
        r.verify()


def test_damaged_page_index_or_page_fields_are_refused(tmp_path):
    keys = keys_of(2000)
    p = tmp_path / "r.run"
    write_run(p, keys)
    q = tmp_path / "q.run"
    q.write_bytes(p.read_bytes())
    flip(q, HEADER_SIZE + 8 * 2000 + 20)  # the index
    r = runs.open_reader(str(q))
    with pytest.raises(CorruptionError, match="page index checksum"):
        runs.lookup(r, keys[:3], np.zeros(3, bool))
    with pytest.raises(CorruptionError, match="page index"):
        r.verify()
    for at in (64, 72, 80, 88):  # page keys, page count, index checksum, their checksum
        q.write_bytes(p.read_bytes())
        flip(q, at)
        with pytest.raises(CorruptionError, match="header"):
            runs.open_reader(str(q))


def test_streams_check_pages_before_a_chunk_is_yielded(tmp_path):
    keys = keys_of(6 * PAGE_KEYS)
    p = tmp_path / "r.run"
    write_run(p, keys)
    flip(p, HEADER_SIZE + 8 * (4 * PAGE_KEYS + 3))
    r = runs.open_reader(str(p))
    buf = np.empty(2 * PAGE_KEYS, np.uint64)
    got = []
    with pytest.raises(CorruptionError, match="page 4"):
        for n in r.chunks(buf, check_pages=True):
            got.append(buf[:n].copy())
    assert np.array_equal(np.concatenate(got), keys[:4 * PAGE_KEYS])  # pages 0-3 only
    # without: the body checksum at the end, the bad page then named
    with pytest.raises(CorruptionError, match="page 4"):
        for _ in r.chunks(buf):
            pass
    found = np.zeros(3, bool)
    with pytest.raises(CorruptionError, match="page 4"):
        runs.sweep(r, keys[[1, 2, 3]], found, np.empty(1 << 12, np.uint64))
    with pytest.raises(CorruptionError, match="page 4"):
        list(runs.iter_keys([r], 1 << 20))
    with pytest.raises(CorruptionError, match="page 4"):
        list(runs.iter_range({0: [r]}))
    assert [len(c) for c in runs.iter_range({0: [r]}, 0, int(keys[PAGE_KEYS]))] == [PAGE_KEYS]


def test_a_later_minor_may_add_bytes_after_the_index(tmp_path):
    keys = keys_of(700)
    p = tmp_path / "r.run"
    h = write_run(p, keys)
    raw = bytearray(p.read_bytes())
    with open(p, "ab") as f:
        f.write(b"\0" * 24)
    with pytest.raises(CorruptionError, match="trailing"):
        RunReader(str(p))
    later = RunHeader(h.count, h.host_bits, h.shard_bits, h.shard, h.policy_digest,
                      h.body_checksum, 1, 2, h.page_keys, h.index_checksum)
    raw[:HEADER_SIZE] = later.pack()
    p.write_bytes(bytes(raw) + b"future!!")
    r = RunReader(str(p))
    assert r.header.minor == 2 and np.array_equal(r.keys, keys)
    r.verify()


def test_search_and_first_last_use_checked_pages(tmp_path):
    keys = keys_of(3 * PAGE_KEYS + 7)
    p = tmp_path / "r.run"
    write_run(p, keys)
    r = runs.open_reader(str(p))
    for x in (0, int(keys[0]), int(keys[600]), int(keys[600]) + 1, int(keys[-1]), 2**64 - 1):
        for side in ("left", "right"):
            assert r.search(x, side) == int(np.searchsorted(keys, np.uint64(x), side))
    assert runs.first_last(r) == (int(keys[0]), int(keys[-1]))
    flip(p, HEADER_SIZE + 8 * len(keys) - 2)  # the last key, in page 3
    r = runs.open_reader(str(p))
    with pytest.raises(CorruptionError, match="page 3"):
        runs.first_last(r)


def test_a_dense_lookup_checks_the_whole_body_as_it_searches(tmp_path, monkeypatch):
    """Needles in at least half of the pages: one pass hashes the body (a stretch of
    pages at a time) and searches it; the same answers as a plain search, at every
    stretch size. A failed body checksum falls back to the pages the call needs: a
    bad page it does not need leaves it answered, one it needs is named."""
    keys = keys_of(8 * PAGE_KEYS + 100)
    p = tmp_path / "r.run"
    write_run(p, keys)
    rng = np.random.default_rng(5)
    needles = np.unique(np.concatenate([keys[rng.integers(0, len(keys), 3000)],
                                        rng.integers(0, 2**64, 3000, dtype=np.uint64),
                                        [0, 2**64 - 1], keys[[0, -1]]]))
    want = np.isin(needles, keys)
    for stretch in (1, 3, 256):
        monkeypatch.setattr(runs, "STRETCH_PAGES", stretch)
        found = np.zeros(len(needles), bool)
        runs.lookup(runs.open_reader(str(p)), needles, found)
        assert np.array_equal(found, want)
    flip(p, HEADER_SIZE + 8 * (8 * PAGE_KEYS + 50))  # page 8, the last
    r = runs.open_reader(str(p))
    sound = needles[needles < keys[8 * PAGE_KEYS]]  # pages 0-7: 8 of 9
    found = np.zeros(len(sound), bool)
    runs.lookup(r, sound, found)
    assert np.array_equal(found, np.isin(sound, keys))
    with pytest.raises(CorruptionError, match="page 8"):
        runs.lookup(r, needles, np.zeros(len(needles), bool))
