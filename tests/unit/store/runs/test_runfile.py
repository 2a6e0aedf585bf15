"""Run files: round trip, and refusal of everything that cannot be trusted."""

import os
import struct

import numpy as np
import pytest

from seenstore.errors import CorruptionError, NotSupportedError
from seenstore.store.runs.format import HEADER_SIZE, MAGIC, policy_digest
from seenstore.store.runs.reader import RunReader
from seenstore.store.runs.writer import RunWriter


def write_run(path, keys, shard=0, shard_bits=0):
    w = RunWriter(str(path), 20, shard_bits, shard, policy_digest("safe-v1"))
    w.write(np.asarray(keys, dtype=np.uint64))
    return w.finish()


def test_round_trip(tmp_path):
    keys = np.array([0, 7, 2**63, 2**64 - 1], dtype=np.uint64)
    h = write_run(tmp_path / "r.run", keys)
    r = RunReader(str(tmp_path / "r.run"))
    assert r.header == h and r.count == 4
    assert r.keys.tolist() == keys.tolist()
    r.verify()
    assert os.path.getsize(tmp_path / "r.run") == HEADER_SIZE + 32 + 16  # one page's entry


def test_empty_run(tmp_path):
    write_run(tmp_path / "r.run", [])
    r = RunReader(str(tmp_path / "r.run"))
    assert r.count == 0 and len(r.keys) == 0
    r.verify()


def test_body_is_little_endian_uint64(tmp_path):
    write_run(tmp_path / "r.run", [1, 258])
    raw = (tmp_path / "r.run").read_bytes()
    assert raw[:8] == MAGIC
    assert raw[HEADER_SIZE:HEADER_SIZE + 16] == struct.pack("<QQ", 1, 258)


def corrupt(path, offset, value: bytes):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(value)


def test_foreign_file_wrong_magic(tmp_path):
    p = tmp_path / "r.run"
    p.write_bytes(b"PK\x03\x04" + b"\0" * 5000)
    with pytest.raises(NotSupportedError, match="bad magic"):
        RunReader(str(p))


@pytest.mark.parametrize("size", [0, 5, 40])
def test_truncated_header(tmp_path, size):
    p = tmp_path / "r.run"
    write_run(p, [1, 2, 3])
    p.write_bytes(p.read_bytes()[:size])
    with pytest.raises(CorruptionError):
        RunReader(str(p))


def test_truncated_body(tmp_path):
    p = tmp_path / "r.run"
    write_run(p, [1, 2, 3])
    p.write_bytes(p.read_bytes()[:-4])
    with pytest.raises(CorruptionError, match="truncated"):
        RunReader(str(p))


def test_trailing_bytes(tmp_path):
    p = tmp_path / "r.run"
    write_run(p, [1, 2, 3])
    with open(p, "ab") as f:
        f.write(b"\0" * 8)
    with pytest.raises(CorruptionError, match="trailing"):
        RunReader(str(p))


def test_future_major_version_refused(tmp_path):
    p = tmp_path / "r.run"
    write_run(p, [1])
    corrupt(p, 8, struct.pack("<H", 2))
    with pytest.raises(NotSupportedError, match="newer"):
        RunReader(str(p))


def test_header_bit_flip_detected(tmp_path):
    p = tmp_path / "r.run"
    write_run(p, [1, 2])
    corrupt(p, 24, b"\x15")  # host_bits
    with pytest.raises(CorruptionError, match="header checksum"):
        RunReader(str(p))


def test_body_bit_flip_detected_by_verify(tmp_path):
    p = tmp_path / "r.run"
    write_run(p, [0x100, 0x200, 0x300])
    corrupt(p, HEADER_SIZE + 8, b"\x01")  # 0x200 -> 0x201: still sorted, wrong checksum
    r = RunReader(str(p))  # header is fine
    with pytest.raises(CorruptionError, match="checksum"):
        r.verify()


def test_unsorted_body_detected_even_with_valid_checksum(tmp_path):
    p = tmp_path / "r.run"
    write_run(p, [3, 2, 1])  # the writer trusts its caller; verify does not
    with pytest.raises(CorruptionError, match="sorted"):
        RunReader(str(p)).verify(chunk_keys=2)


# -- O_DIRECT writes and reads ----------------------------------------------

from seenstore.store.runs import writer as RWmod  # noqa: E402
from seenstore.runtime.aligned import aligned_empty  # noqa: E402
from seenstore.store.runs.writer import BUF_KEYS  # noqa: E402


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("n", [0, 1, 511, 512, 513, BUF_KEYS - 1, BUF_KEYS, BUF_KEYS + 1,
                               2 * BUF_KEYS + 777])
def test_round_trip_through_the_aligned_buffer(tmp_path, direct, n):
    """Any length (whole blocks, a padded last block, several buffers), written in
    uneven pieces, with and without O_DIRECT: exact file length, same keys back
    through a memory map, an aligned (direct) and an unaligned (buffered) stream."""
    keys = np.arange(n, dtype=np.uint64) * np.uint64(3)
    w = RunWriter(str(tmp_path / "r.run"), 20, 0, 0, policy_digest("safe-v1"), direct=direct)
    cuts = [0, n // 3, n // 3 + 1, n]
    for a, b in zip(cuts, cuts[1:]):
        w.write(keys[a:b])
    h = w.finish()
    assert not direct and not w.direct or direct
    assert os.path.getsize(tmp_path / "r.run") == HEADER_SIZE + 8 * n + 16 * -(-n // 512)
    r = RunReader(str(tmp_path / "r.run"))
    assert r.header == h and np.array_equal(r.keys, keys)
    for buf in (aligned_empty(4096), np.empty(1000, np.uint64)[1:]):
        for check_pages in (False, True):
            got, at = [], 0
            for m in r.chunks(buf, check_pages):
                got.append(buf[:m].copy())
                at += m
            assert at == n and (not got or np.array_equal(np.concatenate(got), keys))
    r.verify()


def test_short_direct_write_falls_back_to_buffered(tmp_path, monkeypatch):
    """A write cut short mid-block leaves the offset unaligned: the writer drops
    O_DIRECT and finishes the file through the page cache, intact."""
    real = os.write
    calls = {"n": 0}

    def short_once(fd, data):
        calls["n"] += 1
        if calls["n"] == 3:  # the second body write: return 100 bytes short
            return real(fd, bytes(memoryview(data)[: len(data) - 100]))
        return real(fd, data)

    monkeypatch.setattr(RWmod.os, "write", short_once)
    keys = np.arange(3 * BUF_KEYS // 2, dtype=np.uint64)
    w = RunWriter(str(tmp_path / "r.run"), 20, 0, 0, policy_digest("safe-v1"))
    w.write(keys)
    w.finish()
    assert not w.direct
    r = RunReader(str(tmp_path / "r.run"))
    assert np.array_equal(r.keys, keys)
    r.verify()


def test_small_runs_go_through_the_page_cache(tmp_path):
    """new_writer's ``keys`` hint: a raw run below DIRECT_MIN_KEYS is written without
    O_DIRECT (one device round trip, at the fsync), a larger or unsized one as
    before; the file is the same either way."""
    from seenstore.store.runs import live as runs
    pd = policy_digest("safe-v1")
    probe = RunWriter(str(tmp_path / "probe.run"), 20, 0, 0, pd)
    can_direct = probe.direct  # what this file system allows
    probe.abort()
    keys = np.arange(1000, dtype=np.uint64) * np.uint64(7)
    made = {}
    for name, hint in (("small", 1000), ("edge", runs.DIRECT_MIN_KEYS),
                       ("unsized", None)):
        w = runs.new_writer(str(tmp_path / f"{name}.run"), 20, 0, 0, pd, 1, keys=hint)
        made[name] = w.direct
        w.write(keys)
        w.finish()
    assert made == {"small": False, "edge": can_direct, "unsized": can_direct}
    bodies = {(tmp_path / f"{n}.run").read_bytes() for n in made}
    assert len(bodies) == 1


def test_store_writes_a_small_batch_runs_buffered_and_compacts_them(tmp_path, monkeypatch):
    """The store passes each run's size: a small batch's runs and their compaction are
    written through the page cache, with DIRECT_MIN_KEYS at 0 O_DIRECT is asked."""
    from seenstore.store import SeenStore
    from seenstore.store.runs import live as runs
    asked = []

    class Spy(RunWriter):
        def __init__(self, *a, direct=True, **k):
            asked.append(direct)
            super().__init__(*a, direct=direct, **k)

    monkeypatch.setattr(runs, "RunWriter", Spy)
    rng = np.random.default_rng(3)
    with SeenStore.open(str(tmp_path / "s"), create=True, bloom=False) as st:
        for _ in range(5):  # FANOUT batches: a compaction of tier 0 follows
            st.add(rng.integers(0, 2**64, 2000, dtype=np.uint64))
        st.compact()
        assert asked and not any(asked)
        monkeypatch.setattr(runs, "DIRECT_MIN_KEYS", 0)
        n = len(asked)
        st.add(rng.integers(0, 2**64, 2000, dtype=np.uint64))
        assert asked[n:] and all(asked[n:])
        assert st.stats()["keys"] >= 12000


@pytest.mark.parametrize("counts", [[1000, 3, 2500, 1], [0, 700], [5000], [600, 600, 600]])
@pytest.mark.parametrize("buffer_bytes", [4096, 1 << 16, 64 << 20])
def test_merge_of_small_runs_asks_for_small_buffers(tmp_path, monkeypatch, counts, buffer_bytes):
    """merged_chunks' rows hold no more than the largest run (fresh memory is faulted
    in, 2 MiB at a time with transparent huge pages), nor more than the budget's
    share; its output buffer no more than the runs hold. The union is exact at any
    row size, refilled or not."""
    from seenstore.store.runs import live as runs
    rng = np.random.default_rng(sum(counts) + buffer_bytes)
    pool = np.unique(rng.integers(0, 2**64, 4 * sum(counts) + 10, dtype=np.uint64))
    rng.shuffle(pool)
    parts, at = [], 0
    readers = []
    for i, n in enumerate(counts):
        part = np.sort(pool[at:at + n])
        at += n
        parts.append(part)
        write_run(tmp_path / f"r{i}.run", part)
        readers.append(RunReader(str(tmp_path / f"r{i}.run")))
    asked = []
    real = runs.aligned_empty
    monkeypatch.setattr(runs, "aligned_empty", lambda n, *a, **k: asked.append(n) or real(n, *a, **k))
    real_lots = runs._kway_lots
    outs = []
    monkeypatch.setattr(runs, "_kway_lots",
                        lambda *a: outs.append(a[-1]) or real_lots(*a))  # its out_keys
    got = np.concatenate([c.copy() for c in runs.merged_chunks(readers, buffer_bytes=buffer_bytes)]
                         + [np.empty(0, np.uint64)])
    monkeypatch.undo()
    assert np.array_equal(got, np.sort(np.concatenate(parts)))
    k, most = len(counts), max(counts)
    row_cap = max(512, -(-most // 512) * 512)
    assert asked == [k * min(row_cap, max(512, (buffer_bytes // 8 // k) // 512 * 512))]
    assert outs == [max(1, min(1 << 20, sum(counts)))]


def test_a_small_compaction_run_gets_a_buffer_of_its_size(tmp_path):
    """new_writer with a known small ``keys``: the raw writer's block buffer is that
    size (whole blocks), not BUF_KEYS; unknown or large: BUF_KEYS."""
    from seenstore.store.runs import live as runs
    pd = policy_digest("safe-v1")
    sizes = {}
    for name, hint in (("small", 1000), ("unsized", None), ("large", BUF_KEYS + 1)):
        w = runs.new_writer(str(tmp_path / f"{name}.run"), 20, 0, 0, pd, 1, keys=hint)
        sizes[name] = len(w._buf)
        w.write(np.arange(1000, dtype=np.uint64))
        w.finish()
        assert np.array_equal(RunReader(str(tmp_path / f"{name}.run")).keys,
                              np.arange(1000, dtype=np.uint64))
    assert sizes == {"small": 1024, "unsized": BUF_KEYS, "large": BUF_KEYS}
