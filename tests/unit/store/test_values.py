"""Values beside keys: the open flag, field checks, a damaged value file refused,
kill points inside a value-file merge, the URL forms, forgetting's seams, and a
store without values left as it was."""

import os
import subprocess
import sys

import numpy as np
import pytest

from seenstore import State
from seenstore.errors import (CorruptionError, InvalidInputError, MismatchError,
                              NotSupportedError)
from seenstore.store import SeenStore, manifest, values

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
KEYS = np.arange(1, 201, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)


def test_values_are_decided_at_creation(tmp_path):
    SeenStore.open(str(tmp_path / "plain"), create=True).close()
    with pytest.raises(MismatchError, match="created without values"):
        SeenStore.open(str(tmp_path / "plain"), values=True)
    with SeenStore.open(str(tmp_path / "plain")) as s:
        with pytest.raises(NotSupportedError, match="values=True"):
            s.check_update(KEYS[:3], state=State.DONE)
    with SeenStore.open(str(tmp_path / "v"), create=True, values=True) as s:
        s.check_update(KEYS[:3], state=State.DONE)
    for flag in (None, False):  # a values store keeps its values
        with SeenStore.open(str(tmp_path / "v"), values=flag) as s:
            assert s.values and s.counts()[State.DONE] == 3


def test_a_state_may_be_given_by_name(tmp_path):
    with SeenStore.open(str(tmp_path / "v"), create=True, values=True, sync=False) as s:
        s.check_update(KEYS[:3], state="in_flight")
        assert s.update(KEYS[:2], state=["DONE", State.FAILED]).all()
        assert s.get(KEYS[:3])["state"].tolist() == [2, 3, 1]


def test_fields_are_checked(tmp_path):
    with SeenStore.open(str(tmp_path / "v"), create=True, values=True, sync=False) as s:
        with pytest.raises(InvalidInputError, match="unknown value field"):
            s.check_update(KEYS[:2], colour=1)
        with pytest.raises(InvalidInputError, match="out of range"):
            s.check_update(KEYS[:2], state=7)
        with pytest.raises(InvalidInputError, match="aligned"):
            s.check_update(KEYS[:2], status=[1, 2, 3])
        with pytest.raises(InvalidInputError, match="at least one field"):
            s.update(KEYS[:2])
        with pytest.raises(InvalidInputError, match="unknown state"):
            s.check_update(KEYS[:2], state="LOST")
        for bad in (float("nan"), [1.0, float("nan")]):  # NaN would cast to 0 (QUEUED)
            with pytest.raises(InvalidInputError, match="finite"):
                s.check_update(KEYS[:2], state=bad)
        assert len(s) == 0


def test_a_plain_add_on_a_values_store_counts_queued_and_writes_no_value_file(tmp_path):
    with SeenStore.open(str(tmp_path / "v"), create=True, values=True, sync=False) as s:
        s.add(KEYS[:10])
        s.check_update(KEYS[5:20])  # no field given: records all zero, no file either
        assert s.counts()[State.QUEUED] == 20 and "value_files" not in s._doc
        s.update(KEYS[:2], state=State.FAILED, retries=1)
        assert s.counts()[State.FAILED] == 2 and s.counts()[State.QUEUED] == 18
        assert values.recount(s) == s.counts()


def test_damaged_value_file_is_refused_naming_it(tmp_path):
    path = str(tmp_path / "v")
    with SeenStore.open(path, create=True, values=True, sync=False) as s:
        s.check_update(KEYS, next_due=np.arange(len(KEYS)), digest=KEYS)
        name = s._doc["value_files"][0]["file"]
    f = os.path.join(path, name)
    data = bytearray(open(f, "rb").read())
    data[80] ^= 0xFF  # inside the first block
    open(f, "wb").write(bytes(data))
    with SeenStore.open(path) as s:
        with pytest.raises(CorruptionError, match=name):
            s.get(KEYS[:3])
        with pytest.raises(CorruptionError, match=name):
            s.due(5)
    data[0:8] = b"NOTVALUE"
    open(f, "wb").write(bytes(data))
    with SeenStore.open(path) as s:
        with pytest.raises(CorruptionError, match="bad magic"):
            s.get(KEYS[:3])


MERGE_SCRIPT = r"""
import sys
import numpy as np
from seenstore.store import SeenStore, values
from seenstore.store.files import arm_fault
path, point = sys.argv[1], sys.argv[2]
keys = np.arange(1, 201, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
with SeenStore.open(path) as store:
    arm_fault(point)
    values.merge_value_files(store)
print("finished")
"""


@pytest.mark.parametrize("point", ["values-merge-written", "values-merge-committed"])
def test_kill_inside_a_value_merge_leaves_the_store_as_after_its_last_commit(tmp_path, point):
    path = str(tmp_path / "v")
    with SeenStore.open(path, create=True, values=True) as s:
        s.check_update(KEYS[:100], state=State.IN_FLIGHT, next_due=5)
        s.update(KEYS[50:150], state=State.DONE, status=200)
        s.check_update(KEYS[100:], state=State.FAILED, retries=np.arange(100))
        before = s.get(KEYS)
        counts = s.counts()
        files = [e["file"] for e in s._doc["value_files"]]
    r = subprocess.run([sys.executable, "-c", MERGE_SCRIPT, path, point], capture_output=True,
                       text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == -9, r.stderr
    with SeenStore.open(path) as s:
        assert (s.get(KEYS) == before).all()
        assert s.counts() == counts == values.recount(s)
        named = [e["file"] for e in s._doc["value_files"]]
        assert named == (files if point == "values-merge-written" else [named[0]])
        on_disk = sorted(n for n in os.listdir(path) if n.endswith(".val"))
        assert on_disk == sorted(named)  # the open removed what the merge left


def test_url_forms_and_due_urls(tmp_path):
    urls = [f"http://a.test/p{i}" for i in range(6)] + ["not a url"]
    with SeenStore.open(str(tmp_path / "v"), create=True, values=True, sync=False) as s:
        mask = s.check_update_urls(urls, next_due=[5, 1, 0, 3, 9, 2, 4],
                                   state=State.QUEUED)
        assert mask.tolist() == [True] * 6 + [False]
        assert s.check_update_urls(["http://a.test/p0", "http://b.test/"],
                                   next_due=1).tolist() == [False, True]
        got = s.update_urls(["http://a.test/p3", "http://c.test/", "x"], state=State.DONE)
        assert got.tolist() == [True, False, False]
        # named states in a list aligned with URLs (re-aligned as an array of names)
        got = s.update_urls(["x", "http://a.test/p0"], state=["LOST", "queued"])
        assert got.tolist() == [False, True]
        rows = s.get_urls(["http://a.test/p3", "http://a.test/p4", "nope"])
        assert rows["present"].tolist() == [True, True, False]
        assert rows["state"].tolist() == [State.DONE, 0, 0] and rows["next_due"][1] == 9
        due = s.due_urls(3)  # next_due 1, 1, 2, 3: the two 1s by key
        assert set(due[:2]) == {"http://a.test/p1", "http://b.test/"}
        assert due[2:] == ["http://a.test/p5", "http://a.test/p3"]
        keys = s.due(3)
        assert keys[0] < keys[1] and s.due_urls(3, limit=1) == due[:1]
        assert s.due(3.9).tolist() == keys.tolist()  # whole seconds
        both, times = s.due(3, times=True)  # next_due 1, 1, 2, 3 beside their keys
        assert both.tolist() == keys.tolist() and times.tolist() == [1, 1, 2, 3]
        assert times.tolist() == s.get(keys)["next_due"].tolist()
        one, first = s.due(3, limit=1, times=True)
        assert one.tolist() == keys[:1].tolist() and first.tolist() == [1]
        for bad in (float("nan"), float("inf"), 1e30, "soon"):
            with pytest.raises(InvalidInputError, match="now"):
                s.due(bad)
        for bad in (-1, 1.5, True):  # -1 would have cut the last key off
            with pytest.raises(InvalidInputError, match="limit"):
                s.select(State.QUEUED, limit=bad)
            with pytest.raises(InvalidInputError, match="limit"):
                s.due(3, limit=bad)
        assert s.select("done").tolist() == s.select(State.DONE).tolist()
        with pytest.raises(InvalidInputError, match="unknown state"):
            s.select(7)
        assert s.select_urls(State.DONE) == ["http://a.test/p3"]
    with SeenStore.open(str(tmp_path / "k"), create=True, values=True, sync=False) as s:
        s.check_update(KEYS[:3], next_due=1)
        with pytest.raises(NotSupportedError, match="keeps no URLs"):
            s.due_urls(5)


def test_forget_seams_reset_records_and_move_counts(tmp_path):
    with SeenStore.open(str(tmp_path / "v"), create=True, values=True, sync=False) as s:
        s.check_update(KEYS[:10], state=State.DONE, next_due=3)
        values.on_forget(s, KEYS[:4])
        values.reset_records(s, KEYS[:4])
        s._live.commit_counters(0, batches=0, fields=s._take_fields())  # the forget's commit
        assert s.get(KEYS[:5])["next_due"].tolist() == [0, 0, 0, 0, 3]
        assert s.counts()[State.DONE] == 6  # the 4 still stored count QUEUED until forgotten


def test_a_store_without_values_never_loads_the_values_code(tmp_path):
    code = ("import sys, numpy as np\nfrom seenstore.store import SeenStore\n"
            f"s = SeenStore.open({str(tmp_path / 'p')!r}, create=True, sync=False)\n"
            "s.add(np.arange(10, dtype=np.uint64)); s.contains(np.arange(3, dtype=np.uint64))\n"
            "s.close()\nprint('seenstore.store.values' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                       env=dict(os.environ, PYTHONPATH=REPO))
    assert r.stdout.strip() == "False", r.stderr
    assert not [n for n in os.listdir(tmp_path / "p") if n.endswith(".val")]
    assert "values" not in manifest.read(str(tmp_path / "p"))


BATCH_SCRIPT = r"""
import sys
import numpy as np
from seenstore.store import SeenStore
from seenstore.store.files import arm_fault
path, point = sys.argv[1], sys.argv[2]
keys = np.arange(1, 201, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
with SeenStore.open(path) as store:
    arm_fault(point)
    store.check_update(keys[100:], state=3, next_due=np.arange(100))
print("finished")
"""


@pytest.mark.parametrize("point", ["before-manifest", "after-manifest"])
def test_kill_inside_a_check_update_batch_keeps_keys_and_values_together(tmp_path, point):
    path = str(tmp_path / "v")
    with SeenStore.open(path, create=True, values=True) as s:
        s.check_update(KEYS[:100], state=State.DONE)
    r = subprocess.run([sys.executable, "-c", BATCH_SCRIPT, path, point], capture_output=True,
                       text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == -9, r.stderr
    with SeenStore.open(path) as s:
        done = point == "after-manifest"
        assert len(s) == (200 if done else 100)
        rows = s.get(KEYS[100:])
        assert rows["present"].all() == done and (rows["state"] == (3 if done else 0)).all()
        assert s.counts() == values.recount(s)
        named = {e["file"] for e in s._doc["value_files"]}
        assert {n for n in os.listdir(path) if n.endswith(".val")} == named


def test_due_urls_under_a_policy_with_rules_map_kept_urls_to_their_keys(tmp_path):
    from seenstore.url.policy import parse_policy
    policy = parse_policy('version = "w"\n[[rule]]\nhosts = ["*"]\nstrip_www = true\n')
    with SeenStore.open(str(tmp_path / "v"), create=True, values=True, sync=False,
                        policy=policy) as s:
        s.check_update_urls(["http://www.a.test/x", "http://a.test/y"], next_due=[2, 1])
        assert not s.check_update_urls(["http://a.test/x"]).any()  # www folded: stored
        assert s.due_urls(5) == ["http://a.test/y", "http://www.a.test/x"]  # kept spelling
        assert s.get_urls(["http://a.test/x"])["next_due"].tolist() == [2]


def test_forget_and_readmit_through_check_update_keep_counts_and_records(tmp_path):
    with SeenStore.open(str(tmp_path / "v"), create=True, values=True, sync=False) as s:
        s.check_update(KEYS[:10], state=State.DONE, next_due=3)
        assert s.forget(KEYS[:4]) == 4
        assert s.counts()[State.DONE] == 6 and len(s) == 6
        rows = s.get(KEYS[:5])
        assert rows["present"].tolist() == [False] * 4 + [True]
        got = s.check_update(KEYS[:6], state=State.FAILED, next_due=7)
        assert got.tolist() == [True] * 4 + [False] * 2  # forgotten keys are new again
        rows = s.get(KEYS[:6])
        assert rows["state"].tolist() == [State.FAILED] * 4 + [State.DONE] * 2
        assert rows["next_due"].tolist() == [7] * 4 + [3] * 2
        assert s.counts() == values.recount(s)
        assert s.counts()[State.FAILED] == 4 and s.counts()[State.DONE] == 6
        s.forget(KEYS[4:6])
        s.add(KEYS[4:6])  # readmitted by a plain add: QUEUED, nothing set
        assert s.get(KEYS[4:6])["next_due"].tolist() == [0, 0]
        assert s.counts() == values.recount(s) and s.counts()[State.QUEUED] == 2
