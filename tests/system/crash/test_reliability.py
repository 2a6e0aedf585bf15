"""Issue 12 (store, stage, Bloom, WAL) and issue 11 items 5-6: one regression test per
defect, each failing on the code before its fix (named in the closing note)."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import xxhash

from seenstore.store import manifest, wal
from seenstore.bloom import BloomFilter
from seenstore.bloom import LayeredBloom
from seenstore.errors import (ClosedError, CorruptionError, InvalidInputError,
                              NotSupportedError, SeenStoreError)
from seenstore.stage import DedupStage
from seenstore.store import BLOOM_NAME, SeenStore
from conftest import REPO

ROOT = REPO


def child_env():
    """The environment of a child process: this checkout's seenstore unless
    PYTHONPATH names one (as the project's test command does)."""
    return dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH") or ROOT)


def keys_of(*xs):
    return np.array(xs, dtype=np.uint64)


def leave_wal(path, keys):
    """A stage hands ``keys`` out and stops without merging them (they stay in its WAL)."""
    st = DedupStage.open(path, create=True, sync=False)
    assert len(st.offer(keys)) == len(keys)
    st.close(flush=False)
    assert wal.list_segments(path)


# ---------------------------------------------------------------- item 1: the WAL
def test_writer_open_replays_the_stage_wal_before_admitting(store_dir):
    leave_wal(store_dir, keys_of(7, 8, 9))
    with SeenStore.open(store_dir, sync=False) as s:  # what `add` and `merge` open
        assert s.add(keys_of(7, 10)).tolist() == [False, True]  # 7 was handed out
        assert s.wal_replay["keys"] == 3
        assert wal.list_segments(store_dir) == []


def test_readonly_contains_counts_wal_keys(store_dir):
    leave_wal(store_dir, keys_of(7, 8))
    with SeenStore.open(store_dir, readonly=True) as ro:
        assert ro.contains(keys_of(7, 8, 9)).tolist() == [True, True, False]


def test_writer_open_refuses_a_damaged_wal_naming_it(store_dir):
    leave_wal(store_dir, keys_of(1, 2))
    leave_wal(store_dir, keys_of(3, 4))
    _, first = wal.list_segments(store_dir)[0]
    with open(first, "r+b") as f:  # a damaged record with another record after it
        f.seek(wal.HEADER_LEN + 2)
        f.write(b"\xff")
    with open(first, "ab") as f:
        f.write(wal.pack_record(keys_of(5)))
    with pytest.raises(CorruptionError, match=os.path.basename(first)):
        SeenStore.open(store_dir, sync=False)
    with SeenStore.open(store_dir, readonly=True) as ro:  # item 8: verify says so too
        with pytest.raises(CorruptionError, match=os.path.basename(first)):
            ro.verify()


# ------------------------------------------------------- item 2: Bloom bound to store
def two_stores(tmp_path, n=1000):
    rng = np.random.default_rng(5)
    paths, keys = [], []
    for name in "ab":
        p = str(tmp_path / name)
        k = rng.integers(0, 2**64, n, dtype=np.uint64)
        with SeenStore.open(p, create=True, sync=False) as s:
            s.add(k)
            assert s.generation == 1
        paths.append(p)
        keys.append(k)
    return paths, keys


def test_another_stores_bloom_of_the_same_generation_is_rebuilt(tmp_path):
    (a, b), (_, kb) = two_stores(tmp_path)
    shutil.copy(os.path.join(a, BLOOM_NAME), os.path.join(b, BLOOM_NAME))
    with SeenStore.open(b, sync=False) as s:
        assert s._bloom_state.startswith("rebuilt")
        assert s.contains(kb).all()
    with DedupStage.open(b, sync=False) as st:
        assert len(st.offer(kb)) == 0 and len(st.flush()) == 0  # none handed out again


def test_zeroed_bloom_with_valid_checksums_is_rebuilt(tmp_path):
    (_, b), (_, kb) = two_stores(tmp_path)
    path = os.path.join(b, BLOOM_NAME)
    bf, gen = BloomFilter.load(path)
    zero = BloomFilter(bf.n_blocks, bf.n_hashes, capacity=bf.capacity,
                       target_fpr=bf.target_fpr, n_added=bf.n_added)
    zero.save(path, gen, *([bf.binding] if hasattr(bf, "binding") else []))  # as the real one
    with SeenStore.open(b, sync=False) as s:
        assert s._bloom_state == "rebuilt (file answered a stored key absent)"
        assert s.contains(kb).all()


def test_a_manifest_without_store_id_gets_one_with_its_next_commit(store_dir):
    with SeenStore.open(store_dir, create=True, sync=False) as s:
        s.add(keys_of(1))
        sid = s._doc["store_id"]
    assert len(sid) == 32
    doc = manifest.read(store_dir)
    del doc["store_id"]
    manifest.write(store_dir, doc, sync=False)  # a store made before manifest 1.1
    with SeenStore.open(store_dir, sync=False) as s:
        assert s.contains(keys_of(1)).all()
        s.add(keys_of(2))
    assert len(manifest.read(store_dir)["store_id"]) == 32


def test_stage_stops_when_a_merge_finds_a_handed_out_key_stored(store_dir):
    with SeenStore.open(store_dir, create=True, sync=False) as s:
        s.add(keys_of(1, 2, 3))
    st = DedupStage.open(store_dir, sync=False)
    bf = st.store.bloom.layers[0]  # a forged filter that passed every check: answers all absent
    st.store.bloom = LayeredBloom([BloomFilter(bf.n_blocks, bf.n_hashes, capacity=bf.capacity,
                                               target_fpr=bf.target_fpr)],
                                  st.store.bloom.target_fpr)
    st.offer(keys_of(1, 2, 3))
    with pytest.raises(CorruptionError, match="already stored"):
        st.flush()
    st.close()
    assert not os.path.exists(os.path.join(store_dir, BLOOM_NAME))  # rebuilt on next open


# ------------------------------------------------------------- item 4: closed objects
def test_every_call_on_a_closed_store_raises_closed_error(store_dir):
    s = SeenStore.open(store_dir, create=True, sync=False)
    s.add(keys_of(1))
    s.close()
    s.close()  # closing again is a no-op
    for call in (lambda: s.contains([1]), lambda: s.add([2]), lambda: s.add_new([2]),
                 lambda: s.add_sorted(keys_of(2)), s.stats, s.verify, s.checkpoint,
                 lambda: len(s)):
        with pytest.raises(ClosedError):
            call()
    ro = SeenStore.open(store_dir, readonly=True)
    ro.close()
    with pytest.raises(ClosedError):
        ro.contains([1])


def test_every_call_on_a_closed_stage_raises_closed_error(store_dir):
    st = DedupStage.open(store_dir, create=True, sync=False)
    st.close()
    for call in (lambda: st.offer([1]), st.poll, st.flush, st.stats):
        with pytest.raises(ClosedError):
            call()
    assert issubclass(ClosedError, SeenStoreError)


# ------------------------------------------------------------------ item 5: inputs
@pytest.mark.parametrize("bad, item", [([1.5, 2.7], "item 0 is float"),
                                       ([True, False], "item 0 is bool"),
                                       ([1, 2, 3.0], "item 2 is float"),
                                       ([1, "x"], "item 1 is str")])
def test_lists_of_floats_or_bools_are_refused_naming_the_item(store_dir, bad, item):
    with SeenStore.open(store_dir, create=True, sync=False) as s:
        with pytest.raises(InvalidInputError, match=item):
            s.add(bad)
        assert len(s) == 0
    with DedupStage.open(store_dir, sync=False) as st:
        with pytest.raises(InvalidInputError, match=item):
            st.offer(bad)


def test_stage_offer_takes_any_iterable_and_refuses_a_dict(store_dir):
    with DedupStage.open(store_dir, create=True, sync=False) as st:
        with pytest.raises(InvalidInputError, match="dict"):
            st.offer({"a": 1})
        assert st.offer(k for k in (5, 6, 5)).keys.tolist() == [5, 6]
        urls = (f"http://a.test/{i}" for i in range(3))
        assert len(st.offer(urls)) == 3
        st.flush()


def test_a_list_mixing_a_url_and_an_int_says_what_is_wrong(store_dir):
    with DedupStage.open(store_dir, create=True, sync=False) as st:
        with pytest.raises(InvalidInputError, match="mixes URLs.*item 1 is int"):
            st.offer(["http://a.test/", 5])
        with pytest.raises(InvalidInputError, match="item 1 is str"):
            st.offer([5, "http://a.test/"])


# ------------------------------------------------------- item 6: a failed WAL write
def test_stage_does_not_hang_when_a_wal_write_fails(tmp_path):
    """RLIMIT_FSIZE in a child: the WAL record passes the limit (EFBIG)."""
    code = textwrap.dedent(f"""
        import resource, numpy as np
        from seenstore.errors import DiskFullError
        from seenstore.stage import DedupStage
        st = DedupStage.open({str(tmp_path / 'ul.db')!r}, create=True, sync=False)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, resource.RLIM_INFINITY))
        try:
            st.offer(np.arange(1, 200001, dtype=np.uint64))
        except DiskFullError as e:
            print("typed", type(e).__name__)
        try:
            st.offer(np.arange(300000, 300010, dtype=np.uint64))
        except DiskFullError:
            print("stopped")  # the stage stays stopped: every call raises the error
        st.close()
        print("closed")
    """)
    env = child_env()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.stdout.split() == ["typed", "DiskFullError", "stopped", "closed"], p.stderr
    # the torn record is ignored on reopen, nothing was handed out
    with DedupStage.open(str(tmp_path / "ul.db"), sync=False) as st:
        assert st.replay["keys"] == 0


# ----------------------------------------------------- item 8: errors and the WAL
def test_add_sorted_with_unsorted_keys_is_invalid_input(store_dir):
    with SeenStore.open(store_dir, create=True, sync=False, shard_bits=0) as s:
        s.add(keys_of(1, 5))
        with pytest.raises(InvalidInputError, match="sorted"):
            s.add_sorted(keys_of(9, 3))
        with pytest.raises(InvalidInputError, match="sorted"):
            s.add_sorted(keys_of(3, 3))
        s.verify()


def test_verify_checks_wal_segments(store_dir):
    leave_wal(store_dir, keys_of(1, 2))
    _, seg = wal.list_segments(store_dir)[0]
    with open(seg, "r+b") as f:
        f.seek(20)
        f.write(b"\x00\x01")  # header checksum now fails
    with SeenStore.open(store_dir, readonly=True) as ro:
        with pytest.raises(CorruptionError, match="WAL header"):
            ro.verify()


def test_a_short_foreign_file_named_like_a_wal_segment_is_refused(store_dir):
    with SeenStore.open(store_dir, create=True, sync=False):
        pass
    foreign = os.path.join(store_dir, wal.segment_name(1))
    with open(foreign, "wb") as f:
        f.write(b"hello\n")
    with pytest.raises(NotSupportedError, match="not a seenstore WAL"):
        SeenStore.open(store_dir, sync=False)
    assert os.path.exists(foreign)  # kept, not deleted as "torn at creation"


# --------------------------------------------------- item 9: checkpoint beside add
def test_checkpoint_beside_add_never_writes_a_bad_or_stale_bloom(store_dir):
    rng = np.random.default_rng(9)
    batches = [rng.integers(0, 2**64, 100_000, dtype=np.uint64) for _ in range(30)]
    s = SeenStore.open(store_dir, create=True, sync=False, bloom_capacity=4_000_000)
    s.compact_between_batches = False  # generation n = the first n batches
    done = threading.Event()
    errors = []

    def add_all():
        try:
            for b in batches:
                s.add(b)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            done.set()

    t = threading.Thread(target=add_all)
    t.start()
    checks = 0
    path = os.path.join(store_dir, BLOOM_NAME)
    while not done.is_set() or checks < 3:
        s.checkpoint()
        s._bloom_dirty = True  # save again next time, as a batch would make it
        if os.path.exists(path):
            bf, gen = LayeredBloom.load(path)  # checksums hold
            stored = np.concatenate([np.empty(0, np.uint64)] + batches[:gen])
            assert bf.query(stored).all()  # not stale: holds every key of its generation
            checks += 1
    t.join()
    assert not errors
    s.close()


# ------------------------------------------------------- issue 11 item 5: figures
def test_first_large_add_sizes_the_bloom_filter_from_the_batch(store_dir):
    n = 3_000_000  # 3x the default 2^20 capacity
    keys = np.random.default_rng(3).integers(0, 2**64, n, dtype=np.uint64)
    with SeenStore.open(store_dir, create=True, sync=False) as s:
        s.add_new(keys)
        t = s.last_timings
        assert s.bloom.capacity >= n
        assert t["bloom_negative"] > 0.99 * n  # answered by a filter sized for the batch
        assert s.bloom.n_added <= s.bloom.capacity  # no rebuild after the batch either


def test_stats_count_every_batch_and_bytes_per_key_with_and_without_bloom(store_dir):
    with SeenStore.open(store_dir, create=True, sync=False) as s:
        s.add(keys_of(1, 2))
        s.add(keys_of(1, 2))  # nothing new
        s.add_sorted(keys_of(1))  # nothing new
        s.add(keys_of(3))
    with SeenStore.open(store_dir, readonly=True) as ro:
        st = ro.stats()
    assert st["counters"]["batches"] == 4
    assert st["bloom_file_bytes"] > 0
    assert st["bytes_per_key_with_bloom"] == pytest.approx(
        st["bytes_per_key"] + st["bloom_file_bytes"] / 3)


# --------------------------------------------------------- item 7: readers vs writer
def test_readers_see_one_generation_while_a_writer_commits(tmp_path):
    """The bounded soak (tools/soak_readers.py, 2 minutes by hand): zero errors."""
    env = child_env()
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "soak_readers.py"),
                        "--seconds", "4", "--dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0 and "errors 0" in p.stdout, p.stdout + p.stderr[-3000:]


def test_verify_and_stats_beside_commits_in_the_same_process(store_dir):
    s = SeenStore.open(store_dir, create=True, sync=False, shard_bits=1)
    ro = SeenStore.open(store_dir, readonly=True)
    rng = np.random.default_rng(2)
    stop, errors = threading.Event(), []

    def read():
        while not stop.is_set():
            try:
                ro.verify()
                s.verify()
                ro.stats()
            except Exception as e:
                errors.append(e)

    t = threading.Thread(target=read)
    t.start()
    try:
        for _ in range(40):
            s.add(rng.integers(0, 2**64, 5000, dtype=np.uint64))
    finally:
        stop.set()
        t.join()
        s.close()
        ro.close()
    assert not errors, errors[:3]


def test_cli_add_and_merge_after_a_stage_left_its_wal(tmp_path):
    """Every other writer after a stage that stopped without merging (issue 12 item 1)."""
    store = str(tmp_path / "nf.db")
    st = DedupStage.open(store, create=True, sync=False)
    handed = st.offer(["http://a.test/page1"]).keys
    st.offer(keys_of(11, 12))
    st.close(flush=False)
    run = [sys.executable, "-m", "seenstore.cli"]
    p = subprocess.run(run + ["add", "-", "--store", store], input="http://a.test/page1\n",
                       capture_output=True, text=True, timeout=120, env=child_env())
    assert p.returncode == 0 and p.stdout == "", p.stderr  # not printed again
    assert wal.list_segments(store) == []
    leave_wal(store, keys_of(21, 22))
    batch, out = tmp_path / "k.bin", tmp_path / "new.bin"
    keys_of(11, 21, 23).astype("<u8").tofile(batch)
    p = subprocess.run(run + ["merge", str(batch), "--store", store, "--new-out", str(out)],
                       capture_output=True, text=True, timeout=120, env=child_env())
    assert p.returncode == 0, p.stderr
    assert np.fromfile(out, dtype="<u8").tolist() == [23]
    with SeenStore.open(store, readonly=True) as ro:
        assert ro.contains(np.concatenate([handed, keys_of(11, 12, 21, 22, 23)])).all()


def test_unknown_major_versions_are_refused_not_only_newer_ones(store_dir):
    """docs/format.md: a reader refuses any major it does not know (0 included)."""
    with SeenStore.open(store_dir, create=True, sync=False):
        pass
    path = os.path.join(store_dir, manifest.NAME)
    with open(path) as f:
        body = json.load(f)
    body.pop("checksum")
    body["major"] = 0  # resealed: only the version is wrong
    body["checksum"] = xxhash.xxh3_64_hexdigest(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    with open(path, "w") as f:
        json.dump(body, f)
    with pytest.raises(NotSupportedError, match="manifest version 0"):
        SeenStore.open(store_dir, readonly=True)


def test_manifest_file_is_its_canonical_json_with_one_run_per_line(store_dir):
    """docs/format.md "Manifest": the file parses as JSON; its checksum is xxh3-64 of
    the canonical encoding of every other field; each run is on a line of its own;
    a store written so reopens with its keys, and a changed byte is refused."""
    keys = np.random.default_rng(5).integers(0, 2**64, 50_000, dtype=np.uint64)
    with SeenStore.open(store_dir, create=True, sync=False, bloom=False) as s:
        s.add_new(keys)
    path = os.path.join(store_dir, manifest.NAME)
    raw = open(path, "rb").read()
    body = json.loads(raw)
    want = body.pop("checksum")
    assert want == xxhash.xxh3_64_hexdigest(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    lines = raw.decode().splitlines()
    runs = [ln for ln in lines if '"file":"s' in ln]
    assert len(body["runs"]) > 1 and len(runs) == len(body["runs"])
    assert all(ln.count('"file":') == 1 for ln in runs)
    with SeenStore.open(store_dir, readonly=True) as ro:
        assert ro.contains(keys).all() and len(ro) == len(np.unique(keys))
    damaged = raw.replace(b'"count":', b'"count":1', 1)
    open(path, "wb").write(damaged)
    with pytest.raises(CorruptionError, match="checksum"):
        SeenStore.open(store_dir, readonly=True)
