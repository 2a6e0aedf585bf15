"""kill -9 during `seenstore merge`: the store is always the pre- or post-batch set.

A subprocess imports seenstore (so start-up is out of the way), waits for a
go signal, then runs the real CLI `merge`. The test kills it with SIGKILL at
random moments over the measured length of the merge (write and commit
phases), and at named commit steps through the SEENSTORE_FAULT seam.
"""

import os
import random
import shutil
import signal
import subprocess
import sys
import time

import json

import numpy as np
import pytest
from click.testing import CliRunner

from seenstore.cli import main
from seenstore.store import SeenStore

RUNNER = r"""
import sys
from seenstore.cli import main
import seenstore.kernels.merge, seenstore.kernels.batch  # load JIT caches before 'go'
sys.stdout.write("ready\n"); sys.stdout.flush()
sys.stdin.readline()
main(["merge", sys.argv[1], "--store", sys.argv[2], "--no-create", "--json"])
"""


def stored(path):
    with SeenStore.open(path, readonly=True) as s:
        s.verify()
        parts = [r.keys for _, r in sorted(s._readers.items())]
        return np.concatenate(parts) if parts else np.empty(0, np.uint64)


def start(batch, store, env=None):
    p = subprocess.Popen([sys.executable, "-c", RUNNER, batch, store],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, **(env or {})})
    assert p.stdout.readline() == b"ready\n"
    return p


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("crash")
    rng = np.random.default_rng(7)
    base = rng.integers(0, 2**64, 2_000_000, dtype=np.uint64)
    pristine = str(d / "pristine")
    with SeenStore.open(pristine, create=True, shard_bits=2) as s:
        s.add(base)
    batch = np.concatenate([base[:300_000], rng.integers(0, 2**64, 900_000, dtype=np.uint64)])
    batch_path = str(d / "batch.bin")
    batch.tofile(batch_path)
    pre = stored(pristine)
    post = np.union1d(pre, batch)
    yield d, pristine, batch_path, pre, post
    shutil.rmtree(d, ignore_errors=True)  # ~55 MB of stores (issue 11.7)


def fresh_copy(world, name):
    d, pristine = world[0], world[1]
    target = str(d / name)
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(pristine, target)
    return target


@pytest.mark.slow
def test_sigkill_at_random_points_keeps_pre_or_post_set(world):
    d, pristine, batch, pre, post = world
    # Measure how long the write and commit phases take. Twice: the first run may
    # compile the numba kernels (cold cache, as in CI), which stretches its merge
    # time (compiling holds the GIL) far beyond what the trials take.
    for _ in range(2):
        target = fresh_copy(world, "timing")
        p = start(batch, target)
        p.stdin.write(b"go\n")
        p.stdin.flush()
        assert p.wait(60) == 0, p.stderr.read()
        t = json.loads(p.stdout.read())
        assert np.array_equal(stored(target), post)

    rnd = random.Random(2026)
    outcomes = {"pre": 0, "post": 0}
    window = t["merge_s"] + t["commit_s"]
    for trial in range(24):
        target = fresh_copy(world, "trial")
        before = set(os.listdir(target))
        p = start(batch, target)
        p.stdin.write(b"go\n")
        p.stdin.flush()
        # Anchor on the write phase: wait until the first new run file appears,
        # then kill at a random moment within the measured write+commit time.
        deadline = time.monotonic() + 30
        while not (set(os.listdir(target)) - before) and p.poll() is None:
            assert time.monotonic() < deadline, "merge never started writing"
            time.sleep(0.0005)
        delay = rnd.uniform(0.0, window * 2.0)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait(60)
        got = stored(target)
        if np.array_equal(got, pre):
            outcomes["pre"] += 1
        else:
            assert np.array_equal(got, post), f"trial {trial} at {delay:.3f}s: neither pre nor post"
            outcomes["post"] += 1
        # Re-running the batch gives the right final set, and cleans leftovers.
        rerun = CliRunner().invoke(main, ["merge", batch, "--store", target, "--no-create"])
        assert rerun.exit_code == 0, rerun.output
        assert np.array_equal(stored(target), post)
        with SeenStore.open(target, bloom=False) as s:
            live = {r["file"] for r in s._doc["runs"]}
        assert {n for n in os.listdir(target) if n.endswith(".run")} == live
    print(f"write+commit takes {window:.3f}s; outcomes {outcomes}")
    # Kills land on both sides of the commit point (the named-step test below
    # pins each side deterministically; this one shows the spread).
    assert outcomes["pre"] > 0 and outcomes["post"] > 0, outcomes


@pytest.mark.parametrize("point,want", [("before-manifest", "pre"), ("after-manifest", "post")])
def test_sigkill_at_named_commit_steps(world, point, want):
    d, pristine, batch, pre, post = world
    target = fresh_copy(world, f"fault-{point}")
    p = start(batch, target, env={"SEENSTORE_FAULT": point})
    p.stdin.write(b"go\n")
    p.stdin.flush()
    assert p.wait(60) == -signal.SIGKILL
    assert np.array_equal(stored(target), pre if want == "pre" else post)
    with SeenStore.open(target) as s:  # a writer's open removes the leftovers
        live = {r["file"] for r in s._doc["runs"]}
    assert {n for n in os.listdir(target) if n.endswith(".run")} == live
