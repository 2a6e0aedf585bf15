"""kill -9 of a process feeding a DedupStage, between offer and merge.

The child offers random keys (repeats included), prints every key it was handed
(stdout flushed after each offer), and is killed with SIGKILL. After reopening
(WAL replay): every printed key is in the store (no acknowledged key lost), and
offering every key again never hands out a printed key a second time.
"""

import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import EDGE_KEYS

from seenstore.store import wal
from seenstore.stage import DedupStage
from seenstore.store import SeenStore

UNIVERSE = np.concatenate([np.arange(20_000, dtype=np.uint64), np.array(EDGE_KEYS, np.uint64)])

CHILD = r"""
import sys
import numpy as np
from seenstore.stage import DedupStage
path, seed, budget, fpr = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
universe = np.concatenate([np.arange(20_000, dtype=np.uint64),
                           np.array([int(x) for x in sys.argv[5:]], dtype=np.uint64)])
stage = DedupStage.open(path, create=True, budget_bytes=budget, cache_keys=256,
                        bloom_fpr=fpr, bloom_capacity=4096, sync=True, wal_sync="always")
out = sys.stdout
out.write("ready\n"); out.flush()
rng = np.random.default_rng(seed)
while True:
    res = stage.offer(rng.choice(universe, 300))
    res2 = stage.poll()
    out.write("got " + " ".join(map(str, res.keys.tolist() + res2.keys.tolist())) + "\n")
    out.flush()
"""


@pytest.mark.parametrize("seed,budget,fpr,lines", [
    (1, 1 << 20, 1e-3, 25),   # no merge before the kill: everything handed out is in the WAL
    (2, 8 * 400, 1e-3, 30),   # merges in flight in the background
    (3, 8 * 400, 0.3, 30),    # many Bloom positives held across merges
])
def test_sigkill_between_offer_and_merge(tmp_path, seed, budget, fpr, lines):
    path = str(tmp_path / "s")
    got = []
    with subprocess.Popen([sys.executable, "-c", CHILD, path, str(seed), str(budget), str(fpr),
                           *map(str, EDGE_KEYS)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as p:
        try:
            assert p.stdout.readline() == b"ready\n", p.stderr.read().decode()
            for _ in range(lines):
                line = p.stdout.readline()
                assert line.startswith(b"got"), p.stderr.read().decode()
                got.append(line)
            time.sleep(random.Random(seed).random() * 0.01)  # land anywhere in the next offer
            p.send_signal(signal.SIGKILL)
            tail = p.stdout.read()
        finally:
            p.kill()
    assert p.returncode == -signal.SIGKILL
    # complete lines only: a line cut by the kill was never acknowledged
    got += [ln for ln in tail.split(b"\n")[:-1] if ln.startswith(b"got")]
    handed = [int(x) for line in got for x in line.split()[1:]]
    assert len(handed) == len(set(handed)) > 0

    unmerged = 0  # keys in the WAL not yet in the store: the kill came before their merge
    with SeenStore.open(path, readonly=True) as ro:
        stored = np.concatenate([np.empty(0, np.uint64)] + [r.keys for r in ro._all_readers()])
        wal_keys = [wal.read_segment(seg)[0] for _, seg in wal.list_segments(path)]
        for keys in wal_keys:
            unmerged += int((~np.isin(keys, stored)).sum())
        if wal_keys:  # a reader counts the WAL's keys as present
            assert ro.contains(np.concatenate(wal_keys)).all()
    if budget == 1 << 20:
        assert unmerged > 0

    with DedupStage.open(path, sync=False, wal_sync=wal.SYNC_NEVER) as stage:
        assert stage.replay["merged_new"] == unmerged
        # no acknowledged key lost: every key handed out is in the store after replay
        assert stage.store.contains(np.array(handed, dtype=np.uint64)).all()
        again = stage.offer(UNIVERSE).keys.tolist() + stage.flush().keys.tolist()
        assert not set(again) & set(handed)  # none handed out a second time
        assert len(again) == len(set(again))
        assert stage.stats()["anomalies"] == 0
        assert stage.store.contains(UNIVERSE).all()
