"""The fault seam for reads (issue 41): random single-byte damages of every kind of
store file, every read path on each damaged copy; each outcome must be the right
answer or a clear error naming the file (tests/faults.py; the 1,000-damage table:
tools/fault_table.py)."""

import os
import random

import faults
import numpy as np
import pytest

from seenstore.store.runs.reader import RunReader

DAMAGES = int(os.environ.get("SEENSTORE_FAULT_DAMAGES", "42"))  # 7 per kind, ~4 s here


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    return faults.Stores(str(tmp_path_factory.mktemp("faults")), keys=6000)


def test_random_damages_of_every_file_kind_never_give_a_wrong_answer(stores, capsys):
    counts, per_kind, wrong = faults.run(stores, DAMAGES, seed=41)
    with capsys.disabled():
        print(f"\n{DAMAGES} damages: {per_kind}\n{faults.table(counts)}")
    assert not wrong, [(os.path.basename(d.file), d.offset, d.op, p, why)
                       for d, p, why in wrong[:10]]
    for kind in faults.KINDS:  # the seam damages what readers read: each kind is noticed
        errors = sum(counts[(kind, p)].get("error", 0) for p in faults.PATHS
                     if (kind, p) in counts)
        assert errors or kind == "BLOOM", kind  # the filter is derived: rebuilt, never an error


def test_a_body_byte_of_a_run_fails_every_path_that_reads_it_naming_file_and_page(stores):
    store, files = stores.files("run 1.1")
    run = files[0]
    d = faults.Damage("run 1.1", run, 4096 + 8 * 700 + 3, "flip", 0, 0x20)  # page 1
    with faults.damaged(d):
        got = stores.answers(store.path, file=run)
    name = os.path.basename(run)
    for path in ("contains (read-only)", "check", "export", "verify", "merge", "compact"):
        kind, why = faults.outcome(got[path], store.answers[path], d)
        assert kind == "error" and f"{name}: page 1 (keys 512..1023) checksum mismatch" in why, \
            (path, why)
    assert faults.outcome(got["check"], None, d)[1].startswith("seenstore: error: ")


def test_keys_of_sound_pages_stay_answerable_beside_a_damaged_page(stores):
    from seenstore.store import SeenStore

    store, files = stores.files("run 1.1")
    run = files[0]
    r = RunReader(run)
    keys, shard = np.array(r.keys), r.header.shard
    r.close()
    d = faults.Damage("run 1.1", run, 4096 + 8 * 5, "zero")  # page 0 of that run
    with faults.damaged(d), SeenStore.open(store.path, readonly=True) as s:
        with pytest.raises(Exception, match="page 0"):
            s.contains(keys[:3])
        assert s.contains(keys[600:700]).all()  # page 1 of the same run
        other = store.stored[(store.stored >> np.uint64(62)) != np.uint64(shard)]
        assert s.contains(other).all()  # the other shards


def test_the_seam_reports_a_reader_that_skips_its_checks(stores, monkeypatch):
    """The harness itself: with the page checks turned off, damaged keys come back
    as wrong answers, and the harness says so."""
    from seenstore.store.runs.pages import PageIndex

    monkeypatch.setattr(PageIndex, "check", lambda self, *a, **k: None)
    rng = random.Random(3)
    seen = 0
    for _ in range(40):
        store, files = stores.files("run 1.1")
        run = rng.choice(files)
        size = os.path.getsize(run)
        r = RunReader(run)
        body_end = 4096 + 8 * r.count
        r.close()
        d = faults.Damage("run 1.1", run, rng.randrange(4096, body_end), "flip", 0, 0x01)
        with faults.damaged(d):
            got = stores.answers(store.path, file=run, only=("contains (read-only)",))
        kind, _ = faults.outcome(got["contains (read-only)"],
                                 store.answers["contains (read-only)"], d)
        seen += kind == "wrong"
        assert size == os.path.getsize(run)
    assert seen >= 30
