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
from conftest import FIXTURES
from naive import union

RUNNER = r"""
import sys
from seenstore.cli import main
import seenstore.kernels.merge, seenstore.kernels.batch  # load JIT caches before 'go'
sys.stdout.write("ready\n"); sys.stdout.flush()
sys.stdin.readline()
main(sys.argv[1:])
"""


def stored(path):
    with SeenStore.open(path, readonly=True) as s:
        s.verify()
        parts = [r.keys for r in s._all_readers()]
        return np.sort(np.concatenate(parts)) if parts else np.empty(0, np.uint64)


def spawn(args, env=None):
    """A CLI command in a subprocess, started up and waiting for 'go' on stdin."""
    p = subprocess.Popen([sys.executable, "-c", RUNNER, *args],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, **(env or {})})
    assert p.stdout.readline() == b"ready\n"
    return p


def start(batch, store, env=None):
    return spawn(["merge", batch, "--store", store, "--no-create", "--json"], env)


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
    post = union(pre, batch)
    yield d, pristine, batch_path, pre, post
    shutil.rmtree(d, ignore_errors=True)  # ~55 MB of stores (issue 11.7)


def fresh_copy(world, name):
    """A copy of the world's pristine store (``world[1]``) under ``world[0]``."""
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
    trials = 4  # the last 3 aim at a side not yet seen
    for trial in range(trials):
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
        # On a loaded machine the measured window can be far from this trial's, and
        # every kill may land on one side; the last trials then aim at the missing
        # side (at once for pre, well past the window for post), so the spread is
        # shown whatever the load. Either way the store must be pre or post.
        if trial >= trials - 3 and outcomes["pre"] == 0:
            delay = 0.0
        elif trial >= trials - 3 and outcomes["post"] == 0:
            delay = window * 4.0
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


# ----------------------------------------- a batch bigger than memory: spill kill points
# merge --memory 16M: chunks of 419,430 keys (1.2e6 keys: 3 spill writes), slices of
# 524,288 keys (each of the 4 shards' ~300,000 keys is one slice)
SPILL_POINTS = [("spill-write@1", "pre"), ("spill-write@3", "pre"), ("spill-sorted@1", "pre"),
                ("spill-sorted@4", "pre"), ("before-manifest", "pre"), ("after-manifest", "post")]


@pytest.mark.parametrize("point,want", SPILL_POINTS)
def test_sigkill_inside_a_spilled_merge(world, point, want):
    d, pristine, batch, pre, post = world
    target = fresh_copy(world, f"spill-{point}")
    p = spawn(["merge", batch, "--store", target, "--no-create", "--json", "--memory", "16M"],
              {"SEENSTORE_FAULT": point})
    p.stdin.write(b"go\n")
    p.stdin.flush()
    assert p.wait(60) == -signal.SIGKILL
    assert any(n.startswith("spill.tmp.") for n in os.listdir(target))  # killed mid-batch
    assert np.array_equal(stored(target), pre if want == "pre" else post)
    with SeenStore.open(target) as s:  # a writer's open removes runs and the spill folder
        live = {r["file"] for r in s._doc["runs"]}
    left = set(os.listdir(target))
    assert {n for n in left if n.endswith(".run")} == live
    assert not any(n.startswith("spill.tmp.") for n in left)


# ------------------------------------------------- compaction and upgrade kill points

def run_killable(args, env=None):
    p = spawn(args, env)
    p.stdin.write(b"go\n")
    p.stdin.flush()
    return p


def shard_runs(path):
    with SeenStore.open(path, readonly=True) as s:
        return {shard: [r.name for r in rs] for shard, rs in s._runs.items()}


def assert_clean_after_open(path):
    """A writer's open removes every leftover; verify passes."""
    with SeenStore.open(path, bloom=False) as s:
        s.verify()
        live = {r["file"] for r in s._doc["runs"]}
    assert {n for n in os.listdir(path) if n.endswith(".run")} == live
    assert not [n for n in os.listdir(path) if ".tmp" in n]


def _tiered_world(tmp_path_factory, name: str, seed: int, batch: int):
    """A store whose 4 shards hold 5 runs each (5 batches of ``batch`` keys,
    compaction off while it was built), with its keys and runs per shard."""
    d = tmp_path_factory.mktemp(name)
    rng = np.random.default_rng(seed)
    pristine = str(d / "pristine")
    with SeenStore.open(pristine, create=True, shard_bits=2, bloom=False) as s:
        s.compact_between_batches = False
        for _ in range(5):
            s.add_new(rng.integers(0, 2**64, batch, dtype=np.uint64))
    return d, pristine, stored(pristine), shard_runs(pristine)


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    """Runs of 100,000 keys: each shard's compaction is a commit of its own."""
    return _tiered_world(tmp_path_factory, "tiered", 11, 400_000)


# each step at the first shard's merge; the write and the step before the manifest
# also at the last (4 shards: the earlier shards' merges committed), retire at a later file
COMPACT_POINTS = ([f"compact-write@{n}" for n in (1, 4)]
                  + ["compact-written@1"]
                  + [f"compact-before-manifest@{n}" for n in (1, 4)]
                  + ["compact-after-manifest@1"]
                  + [f"compact-retire@{n}" for n in (1, 20)])


@pytest.mark.slow
@pytest.mark.parametrize("point", COMPACT_POINTS)
def test_sigkill_inside_compaction(tiered, point):
    """Each shard's compaction is one commit: after a kill every shard holds its old
    runs or its one merged run, the keys are exactly the same, leftovers go."""
    target, keys, done = _killed_compaction(tiered, "compact-", point)
    n = int(point.split("@")[1])
    step = point.split("@")[0]
    # the n-th shard's job died before its commit, or after it
    want_done = n - 1 if step in ("compact-write", "compact-written",
                                  "compact-before-manifest") else None
    if want_done is not None:
        assert len(done) == want_done, (point, done)
    elif step == "compact-after-manifest":
        assert len(done) == n
    assert_clean_after_open(target)
    r = CliRunner().invoke(main, ["compact", "--store", target, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["runs"] == 4
    assert np.array_equal(stored(target), keys)


def _killed_compaction(world, prefix: str, point: str):
    """``seenstore compact`` on a fresh copy of ``world``'s store, killed at fault
    ``point``: the keys must be exactly the same and every shard changed must hold
    one merged run. Returns (copy's path, keys, shards changed)."""
    d, pristine, keys, before = world
    target = fresh_copy(world, prefix + point.replace("@", "-"))
    p = run_killable(["compact", "--store", target], env={"SEENSTORE_FAULT": point})
    assert p.wait(60) == -signal.SIGKILL, p.stderr.read()
    assert np.array_equal(stored(target), keys)
    now = shard_runs(target)
    done = [s for s in now if now[s] != before[s]]
    assert all(len(now[s]) == 1 for s in done), (point, now)
    return target, keys, done


@pytest.fixture(scope="module")
def tiered_small(tmp_path_factory):
    """Runs of 5,000 keys: the four shards' compaction is one group, one commit."""
    return _tiered_world(tmp_path_factory, "tiered-small", 12, 20_000)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["compact-write@3", "compact-written@1",
                                   "compact-before-manifest@1", "compact-after-manifest@1",
                                   "compact-retire@5"])
def test_sigkill_inside_a_grouped_compaction(tiered_small, point):
    """Small merges of several shards are one commit: killed before it, every shard
    holds its old runs; after it, every shard its one merged run; the keys the same."""
    target, keys, done = _killed_compaction(tiered_small, "group-", point)
    committed = point.split("@")[0] in ("compact-after-manifest", "compact-retire")
    assert len(done) == (4 if committed else 0), (point, done)
    assert_clean_after_open(target)
    assert np.array_equal(stored(target), keys)


@pytest.mark.slow
def test_repeated_interrupted_compactions_never_lose_or_duplicate_keys(tiered):
    d, pristine, keys, before = tiered
    target = fresh_copy(tiered, "compact-repeated")
    t0 = time.monotonic()
    r = CliRunner().invoke(main, ["compact", "--store", fresh_copy(tiered, "compact-timing")])
    assert r.exit_code == 0
    window = time.monotonic() - t0
    rnd = random.Random(14)
    kills = 0
    trials = 6
    for trial in range(trials):
        p = run_killable(["compact", "--store", target])
        time.sleep(rnd.uniform(0.0, window))
        p.send_signal(signal.SIGKILL)
        kills += p.wait(60) == -signal.SIGKILL
        got = stored(target)  # verify runs inside; a key in two runs fails it
        assert np.array_equal(got, keys), f"trial {trial}"
        with SeenStore.open(target, readonly=True) as s:
            assert len(s) == len(keys)
    assert_clean_after_open(target)
    r = CliRunner().invoke(main, ["compact", "--store", target, "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["runs"] == 4
    assert np.array_equal(stored(target), keys)
    print(f"compaction takes {window:.3f}s; {kills} of {trials} runs killed before they ended")


V1_STORE = os.path.join(FIXTURES, "v1-store")


def v1_copy(tmp_path):
    target = str(tmp_path / "v1")
    shutil.copytree(V1_STORE, target)
    return target


@pytest.mark.parametrize("point,major", [("upgrade-before-manifest", 1),
                                         ("upgrade-after-manifest", 2),
                                         ("upgrade-retire@1", 2)])
def test_sigkill_inside_upgrade(tmp_path, point, major):
    from seenstore.store import manifest
    target = v1_copy(tmp_path)
    keys = stored(target)
    p = run_killable(["upgrade", "--store", target], env={"SEENSTORE_FAULT": point})
    assert p.wait(60) == -signal.SIGKILL, p.stderr.read()
    assert manifest.read(target)["major"] == major
    assert np.array_equal(stored(target), keys)
    assert_clean_after_open(target)
    r = CliRunner().invoke(main, ["upgrade", "--store", target, "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["to"] == f"{manifest.MAJOR}.{manifest.MINOR}"
    assert np.array_equal(stored(target), keys)


@pytest.mark.parametrize("point,want", [("before-manifest", "pre"), ("after-manifest", "post"),
                                        ("retire", "post")])
def test_sigkill_in_the_first_write_of_a_format1_store(tmp_path, point, want):
    """The first batch on a format 1 store upgrades it in the same commit."""
    from seenstore.store import manifest
    target = v1_copy(tmp_path)
    pre = stored(target)
    batch = np.array([5, 2**63 + 5, 2**64 - 2], dtype=np.uint64)
    batch_path = str(tmp_path / "b.bin")
    batch.tofile(batch_path)
    p = run_killable(["merge", batch_path, "--store", target, "--no-create", "--no-bloom"],
                     env={"SEENSTORE_FAULT": point})
    assert p.wait(60) == -signal.SIGKILL, p.stderr.read()
    got = stored(target)
    assert np.array_equal(got, pre if want == "pre" else union(pre, batch))
    assert manifest.read(target)["major"] == (1 if want == "pre" else 2)
    assert_clean_after_open(target)
