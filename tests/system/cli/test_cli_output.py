"""Output failures after a commit lose nothing (issue 12.3) and input oddities (12.8, 11.4).

Before: `merge --new-out /nonexistent/dir/new.bin` committed the batch and then exited 6
saying nothing was committed; `--new-out - >/dev/full`, `add >/dev/full` and a closed
pipe lost the committed new keys/URLs (`add | head -1` exited 0, silent). Now every
output is opened and checked before the commit, and what a failed delivery could not
write is saved in an `undelivered-*` recovery file named in a one-line error (exit 6).
"""

from __future__ import annotations

import glob
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from seenstore.store import SeenStore

PIPE_BUF_MAX = 1 << 20  # what the OS may hold in a pipe the reader closed (Linux max)


def cli(*args, stdout=subprocess.PIPE, **kw):
    return subprocess.run([sys.executable, "-m", "seenstore.cli", *args], stdout=stdout,
                          stderr=subprocess.PIPE, **kw)


def one_line_error(stderr: bytes) -> str:
    lines = stderr.decode().strip().splitlines()
    errs = [ln for ln in lines if ln.startswith("seenstore: error: ")]
    assert len(errs) == 1 and "Traceback" not in stderr.decode(), stderr
    return errs[0]


def recovery(store: str) -> list[str]:
    return sorted(glob.glob(os.path.join(store, "undelivered-*")))


@pytest.fixture
def keys(tmp_path):
    p = tmp_path / "k.bin"
    np.arange(1, 5001, dtype="<u8").tofile(p)
    return str(p)


def test_unwritable_new_out_commits_nothing(tmp_path, keys, store_dir):
    p = cli("merge", keys, "--store", store_dir, "--new-out", str(tmp_path / "no/dir/new.bin"))
    assert p.returncode == 6 and "nothing was committed" in one_line_error(p.stderr)
    p = cli("merge", keys, "--store", store_dir, "--json")
    assert p.returncode == 0 and b'"new": 5000' in p.stdout  # still new: not committed


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_new_out_to_a_full_disk_saves_the_keys(keys, store_dir):
    with open("/dev/full", "wb") as full:
        p = cli("merge", keys, "--store", store_dir, "--new-out", "-", stdout=full)
    msg = one_line_error(p.stderr)
    [saved] = recovery(store_dir)
    assert p.returncode == 6 and "5,000 committed new keys" in msg and saved in msg
    assert np.fromfile(saved, dtype="<u8").tolist() == list(range(1, 5001))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_add_to_a_full_disk_saves_the_urls(tmp_path, store_dir):
    urls = [f"http://full.test/{i}" for i in range(50)]
    src = tmp_path / "u.txt"
    src.write_text("\n".join(urls) + "\n")
    with open("/dev/full", "wb") as full:
        p = cli("add", str(src), "--store", store_dir, stdout=full)
    [saved] = recovery(store_dir)
    assert p.returncode == 6 and "50 committed new URLs" in one_line_error(p.stderr)
    assert open(saved).read().splitlines() == urls


@pytest.mark.parametrize("seed", range(4))
def test_reader_killed_at_a_random_point_loses_nothing(tmp_path, store_dir, seed):
    """The consumer reads N bytes, then goes away. Every committed new URL was read,
    saved in the recovery file, or accepted by the pipe before the reader left (at most a
    pipe's worth); nothing is saved that was not committed; nothing is committed after
    the reader has gone."""
    rnd = random.Random(seed)
    urls = [f"http://kill.test/{seed}/{i}" for i in range(40_000)]
    src = tmp_path / "u.txt"
    src.write_text("\n".join(urls) + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "seenstore.cli", "add", str(src), "--store",
                             store_dir, "--batch-lines", "2000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got = proc.stdout.read(rnd.randrange(1, 30 * 40_000))
    proc.stdout.close()
    err = proc.stderr.read()
    code = proc.wait()
    read = set(got.decode().splitlines()[:-1])  # the last line may be cut
    saved = set()
    for f in recovery(store_dir):
        saved |= set(open(f).read().splitlines())
    with SeenStore.open(store_dir, readonly=True) as st:
        n_committed = len(st)
    if code == 0:
        assert len(read) == n_committed == len(urls)
        return
    one_line_error(err)
    assert code == 6
    assert n_committed < len(urls)  # stopped committing once the reader was gone
    missing = n_committed - len(read | saved)
    assert 0 <= missing and missing * len(urls[-1]) <= PIPE_BUF_MAX
    assert saved <= set(urls)


def test_empty_batch_file_and_empty_add_succeed_with_zero_counts(tmp_path, store_dir):
    empty = tmp_path / "e.bin"
    empty.write_bytes(b"")
    p = cli("merge", str(empty), "--store", store_dir, "--json")
    assert p.returncode == 0 and b'"offered": 0' in p.stdout and b'"new": 0' in p.stdout
    p = cli("add", "-", "--store", store_dir, input=b"")
    assert p.returncode == 0 and p.stdout == b"" and b"read 0, new 0" in p.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_and_device_batches_are_read_not_called_empty(tmp_path, store_dir):
    fifo = tmp_path / "f.bin"
    os.mkfifo(fifo)
    writer = subprocess.Popen([sys.executable, "-c",
                               f"import numpy as np; open({str(fifo)!r}, 'wb').write("
                               "np.arange(1, 101, dtype='<u8').tobytes())"])
    p = cli("merge", str(fifo), "--store", store_dir, "--json")
    writer.wait()
    assert p.returncode == 0 and b'"new": 100' in p.stdout, p.stderr
    p = cli("merge", "/dev/null", "--store", store_dir, "--json")
    assert p.returncode == 0 and b'"offered": 0' in p.stdout


def test_batch_larger_than_memory_is_one_line_exit_6(tmp_path):
    from seenstore.keys.batch import read_batch_file
    from seenstore.errors import StoreIOError

    p = tmp_path / "big.bin"
    np.arange(1, 1001, dtype="<u8").tofile(p)
    with pytest.raises(StoreIOError, match="split it"):
        read_batch_file(str(p), memory_limit=1000)
    assert len(read_batch_file(str(p), memory_limit=1 << 20)) == 1000


@pytest.mark.parametrize("scalar", [False, True])
def test_bom_is_skipped_and_a_huge_line_is_rejected_in_bounded_memory(tmp_path, store_dir,
                                                                     scalar):
    src = tmp_path / "u.txt"
    with open(src, "wb") as f:
        f.write(b"\xef\xbb\xbfhttp://bom.test/a\n")
        f.write(b"http://long.test/" + b"a" * (20 << 20) + b"\n")
        f.write(b"http://after.test/\n")
    args = ["add", str(src), "--store", store_dir] + (["--scalar"] if scalar else [])
    p = cli(*args)
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().splitlines() == ["http://bom.test/a", "http://after.test/"]
    assert b"too-long 1" in p.stderr


def test_line_reader_keeps_memory_bounded():
    import io

    from seenstore.url.reading import iter_lines

    data = b"\xef\xbb\xbfa\n" + b"x" * 100_000 + b"\r\nb\r\n"
    lines = list(iter_lines(io.BytesIO(data), max_line=10, block_bytes=64))
    assert lines == [b"a", b"x" * 10, b"b"]
