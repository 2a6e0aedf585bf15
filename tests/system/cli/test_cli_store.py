"""`seenstore merge / stats / verify`: results, and one-line errors on bad input."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from seenstore.cli import main
from seenstore.store import SeenStore


def run(*args, **kw):
    r = CliRunner().invoke(main, list(args), **kw)
    return r.exit_code, r.stdout, r.stderr


def cli(*args, env=None):
    """Run the real console entry point in a subprocess."""
    return subprocess.run([sys.executable, "-m", "seenstore.cli", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})})


def one_line_error(stderr):
    # the one-time JIT notice of a cold numba cache is not part of the error
    lines = [ln for ln in stderr.strip().splitlines() if "compiling kernels" not in ln]
    return (len(lines) == 1 and lines[0].startswith("seenstore: error: ")
            and "Traceback" not in stderr)


@pytest.fixture
def batch(tmp_path):
    keys = np.array([5, 3, 5, 2**64 - 1, 0, 3], dtype="<u8")
    p = tmp_path / "b.bin"
    keys.tofile(p)
    return str(p)


def test_merge_counts_json_and_new_out(tmp_path, batch, store_dir):
    code, out, _ = run("merge", batch, "--store", store_dir, "--json")
    assert code == 0
    r = json.loads(out)
    assert (r["offered"], r["unique"], r["new"], r["already_seen"]) == (6, 4, 4, 0)
    newfile = tmp_path / "new.bin"
    more = tmp_path / "more.bin"
    np.array([7, 5, 7, 8], dtype="<u8").tofile(more)
    code, out, _ = run("merge", str(more), "--store", store_dir, "--new-out", str(newfile))
    assert code == 0 and "new 2" in out and "already seen 1" in out
    assert np.fromfile(newfile, dtype="<u8").tolist() == [7, 8]
    code, out, _ = run("stats", "--store", store_dir, "--json")
    s = json.loads(out)
    assert s["keys"] == 6 and s["layout"].startswith("xxh3_64") and s["run_format"] == "1.1"
    code, out, _ = run("verify", "--store", store_dir)
    assert code == 0 and out.startswith("ok: 6 keys")


def test_new_out_to_stdout_keeps_summary_on_stderr(batch, store_dir):
    p = subprocess.run([sys.executable, "-m", "seenstore.cli", "merge", batch, "--store",
                        store_dir, "--new-out", "-"], capture_output=True)
    assert p.returncode == 0
    assert b"new 4" in p.stderr
    assert np.frombuffer(p.stdout, dtype="<u8").tolist() == [5, 3, 2**64 - 1, 0]


def test_default_store_location_from_env(tmp_path, batch):
    env_dir = str(tmp_path / "envstore")
    code, _, _ = run("merge", batch, env={"SEENSTORE_DIR": env_dir})
    assert code == 0 and os.path.exists(os.path.join(env_dir, "MANIFEST"))


@pytest.mark.parametrize("content,msg", [(b"abc", "multiple of 8")])
def test_bad_batch_files(tmp_path, store_dir, batch, content, msg):
    run("merge", batch, "--store", store_dir)
    bad = tmp_path / "bad.bin"
    bad.write_bytes(content)
    p = cli("merge", str(bad), "--store", store_dir)
    assert p.returncode == 3 and one_line_error(p.stderr) and msg in p.stderr
    assert cli("verify", "--store", store_dir).returncode == 0


def test_missing_batch_and_not_a_store(tmp_path, batch):
    p = cli("merge", str(tmp_path / "nope.bin"), "--store", str(tmp_path / "s"))
    assert p.returncode == 3 and one_line_error(p.stderr) and "no such batch" in p.stderr
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("hi")
    for cmd in (["merge", batch], ["stats"], ["verify"]):
        p = cli(*cmd, "--store", str(tmp_path / "docs"))
        assert p.returncode == 3 and one_line_error(p.stderr) and "not" in p.stderr, cmd
    assert os.listdir(tmp_path / "docs") == ["a.txt"]


def test_corrupt_and_foreign_run_files(batch, store_dir):
    run("merge", batch, "--store", store_dir)
    with SeenStore.open(store_dir) as s:
        files = [os.path.join(store_dir, r["file"]) for r in s._doc["runs"] if r["count"]]
    with open(files[0], "r+b") as f:
        f.truncate(4096 + 4)
    p = cli("verify", "--store", store_dir)
    assert p.returncode == 4 and one_line_error(p.stderr) and "truncated" in p.stderr
    with open(files[0], "wb") as f:
        f.write(b"%PDF-1.7\n" + b"\0" * 5000)
    for cmd in ("verify", "stats"):
        p = cli(cmd, "--store", store_dir)
        assert p.returncode == 4 and one_line_error(p.stderr) and "bad magic" in p.stderr
    p = cli("merge", batch, "--store", store_dir)
    assert p.returncode == 4 and one_line_error(p.stderr)


def test_damaged_manifest(batch, store_dir):
    run("merge", batch, "--store", store_dir)
    path = os.path.join(store_dir, "MANIFEST")
    text = open(path).read()
    damaged = text.replace('"generation":1,', '"generation":7,')
    assert damaged != text
    open(path, "w").write(damaged)
    p = cli("stats", "--store", store_dir)
    assert p.returncode == 4 and one_line_error(p.stderr) and "checksum" in p.stderr
    # a foreign file nested past the JSON parser's depth: refused the same way
    open(path, "w").write("[" * 100_000)
    for cmd in ("stats", "verify"):
        p = cli(cmd, "--store", store_dir)
        assert p.returncode == 4 and one_line_error(p.stderr) and "not valid JSON" in p.stderr


def test_second_writer_gets_one_line_error_naming_holder(batch, store_dir):
    run("merge", batch, "--store", store_dir)
    with SeenStore.open(store_dir):
        p = cli("merge", batch, "--store", store_dir)
        assert p.returncode == 5 and one_line_error(p.stderr)
        assert f"pid {os.getpid()}" in p.stderr
        assert cli("stats", "--store", store_dir).returncode == 0  # readers are not blocked
    assert cli("merge", batch, "--store", store_dir).returncode == 0


def _big_store(tmp_path, store_dir):
    rng = np.random.default_rng(3)
    with SeenStore.open(store_dir, create=True, shard_bits=0, bloom=False) as s:
        s.add(rng.integers(0, 2**64, 200_000, dtype=np.uint64))  # a 1.6 MB run, no BLOOM yet
    batch = tmp_path / "grow.bin"
    # 1.6 MB of new keys: the batch's new run (batches write only their new keys)
    rng.integers(0, 2**64, 200_000, dtype=np.uint64).astype("<u8").tofile(batch)
    with SeenStore.open(store_dir, readonly=True) as s:
        before = (s._runs[0][0].keys.copy(), sorted(os.listdir(store_dir)))
    return str(batch), before


def _unchanged(store_dir, before):
    assert cli("verify", "--store", store_dir).returncode == 0
    with SeenStore.open(store_dir, readonly=True) as s:
        assert np.array_equal(s._runs[0][0].keys, before[0])
    assert sorted(os.listdir(store_dir)) == before[1]


def test_file_size_limit_is_disk_full(tmp_path, store_dir):
    batch, before = _big_store(tmp_path, store_dir)
    p = subprocess.run(["bash", "-c", f'ulimit -f 1024; exec "{sys.executable}" -m seenstore.cli '
                        f'merge "{batch}" --store "{store_dir}"'], capture_output=True, text=True)
    assert p.returncode == 6 and one_line_error(p.stderr), p.stderr
    assert "nothing was committed" in p.stderr
    _unchanged(store_dir, before)


def test_full_tmpfs_is_disk_full(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root); the ulimit test covers EFBIG")
    try:
        store_dir = str(mnt / "store")
        batch, before = _big_store(tmp_path, store_dir)  # 1.6 MB + 1.6 MB new cannot fit
        p = cli("merge", batch, "--store", store_dir)
        assert p.returncode == 6 and one_line_error(p.stderr) and "No space" in p.stderr
        _unchanged(store_dir, before)
    finally:
        subprocess.run(["umount", str(mnt)])


def test_help_explains_commands():
    code, out, _ = run("--help")
    assert code == 0 and "merge" in out and "verify" in out and "SEENSTORE_DIR" in out
    code, out, _ = run("merge", "--help")
    assert code == 0 and "little-endian uint64" in out


def test_merge_and_stats_show_bloom_figures_and_approximate_mode(batch, store_dir):
    code, out, _ = run("merge", batch, "--store", store_dir, "--json")
    r = json.loads(out)
    assert r["bloom_negative"] == 4 and r["bloom"]["n_hashes"] > 0
    code, out, _ = run("merge", batch, "--store", store_dir, "--mode", "approximate")
    assert code == 0 and "4 answered seen by the filter alone" in out
    code, out, _ = run("stats", "--store", store_dir)
    assert "bits/key at its capacity" in out and "expected FPR now" in out
    assert "4 keys answered seen by the Bloom filter alone" in out
    code, out, _ = run("stats", "--store", store_dir, "--json")
    s = json.loads(out)
    assert s["counters"]["approx_answered"] == 4 and 0 < s["bloom"]["fill_ratio"] < 1
    code, out, _ = run("merge", batch, "--store", store_dir, "--json", "--no-bloom")
    assert json.loads(out)["bloom"] is None and json.loads(out)["new"] == 0


def test_merge_bloom_fpr_is_recorded_and_kept_by_later_commands(batch, store_dir):
    code, out, err = run("merge", batch, "--store", store_dir, "--bloom-fpr", "0.02", "--json")
    assert code == 0, err
    os.remove(os.path.join(store_dir, "BLOOM"))  # the rate is the store's, not the file's
    code, out, err = run("merge", batch, "--store", store_dir, "--json")
    assert code == 0, err
    code, out, _ = run("stats", "--store", store_dir, "--json")
    assert json.loads(out)["bloom"]["target_fpr"] == 0.02
    code, out, err = run("merge", batch, "--store", store_dir, "--bloom-fpr", "0.9")
    assert code == 2 and "--bloom-fpr" in out + err


def test_merge_bloom_capacity_and_stats_bytes_per_key_with_and_without_bloom(batch, store_dir):
    """Issue 11.5: merge takes --bloom-capacity as bench does; stats shows bytes/key both
    without the BLOOM file and with it (bench's figure), labelled."""
    code, out, err = run("merge", batch, "--store", store_dir, "--bloom-capacity", "3e6",
                         "--json")
    assert code == 0, err
    assert json.loads(out)["bloom"]["capacity"] >= 3_000_000
    code, out, _ = run("stats", "--store", store_dir, "--json")
    s = json.loads(out)
    bloom_file = os.path.getsize(os.path.join(store_dir, "BLOOM"))
    assert s["bytes_on_disk_with_bloom"] == s["bytes_on_disk"] + bloom_file
    assert s["bytes_per_key_with_bloom"] == pytest.approx(s["bytes_on_disk_with_bloom"] / 4)
    code, out, _ = run("stats", "--store", store_dir)
    assert "in runs and manifest" in out and "with the BLOOM file" in out
