"""Kill points of forgetting: a process killed inside ``forget``'s commit, inside a
compaction that drops forgotten keys, or inside a batch that readmits forgotten
keys leaves the store as after its last commit (the keys forgotten or not, all or
none), its tombstone file named by the manifest and no other left behind."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO
from seenstore.store import SeenStore, manifest

KEYS = np.arange(1, 301, dtype=np.uint64) * np.uint64(0x00F123456789ABCD)
FORGET = KEYS[::5]  # forgotten by the setup
MORE = KEYS[1::5]  # forgotten by the killed forget

SCRIPT = r"""
import sys
import numpy as np
from seenstore.store import SeenStore
from seenstore.store.files import arm_fault
path, op, point = sys.argv[1:4]
keys = np.arange(1, 301, dtype=np.uint64) * np.uint64(0x00F123456789ABCD)
store = SeenStore.open(path)
arm_fault(point)
if op == "forget":
    store.forget(keys[1::5])
elif op == "compact":
    store.compact(full=True)
else:  # a batch readmitting forgotten keys beside new ones
    store.add(np.concatenate([keys[::5], keys[-1:] + np.uint64(7)]))
print("finished")
"""

CASES = [("forget", "forget-written"), ("forget", "forget-after-manifest"),
         ("forget", "tombstones-retire"), ("compact", "compact-written"),
         ("compact", "compact-after-manifest"), ("readmit", "before-manifest")]


@pytest.mark.parametrize("op,point", CASES)
def test_a_kill_leaves_the_store_as_after_its_last_commit(tmp_path, op, point):
    path = str(tmp_path / "s")
    with SeenStore.open(path, create=True, shard_bits=1) as store:
        store.add(KEYS)
        store.add(KEYS + np.uint64(1))  # two runs per shard: compaction has work
        store.forget(FORGET)
    r = subprocess.run([sys.executable, "-c", SCRIPT, path, op, point], capture_output=True,
                       text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == -9, r.stderr + r.stdout
    gone = set(FORGET.tolist())
    if op == "forget":
        states = [gone, gone | set(MORE.tolist())]
    elif op == "compact":
        states = [gone]
    else:
        states = [gone, set()]
    with SeenStore.open(path) as store:
        absent = {k for k, c in zip(KEYS.tolist(), store.contains(KEYS).tolist()) if not c}
        assert absent in states
        assert len(store) == 2 * len(KEYS) - len(absent) + int(
            store.contains(KEYS[-1:] + np.uint64(7))[0])
        assert store.verify()["forgotten"] in (len(absent), 0)
        doc = store._doc
        named = manifest.named_files(doc)
        on_disk = {n for n in os.listdir(path) if n.endswith((".tomb", ".run"))}
        assert on_disk == {n for n in named if n.endswith((".tomb", ".run"))}
        # the store goes on: the forgotten keys are new again
        assert store.add(KEYS).sum() == len(absent)
        store.verify()
