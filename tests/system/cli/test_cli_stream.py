"""The CLI that streams (issue 39.3): ``add -`` as a live filter, nothing committed lost
when the reader goes away, ``replay``, and ``export`` refusing a damaged run.

Every committed new URL is read by the consumer or saved in an undelivered file, also
those still in the pipe when the consumer leaves (FIONREAD): committed − read −
undelivered = 0 exactly, checked with a reader that reads a known number of bytes and
with a real ``sh -c '... | head -1'``. ``replay`` prints the undelivered lines and
deletes the files only once they are read. A pipe that stays open (``tail -f``) has
each URL printed within about ``--flush-interval``. ``export`` reads through the
checked path: a flipped byte is exit 4 and one line, and ``-o FILE`` leaves no file.
"""

from __future__ import annotations

import glob
import os
import select
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from seenstore.cli import main
from seenstore.store import SeenStore

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="FIONREAD on a pipe, poll(2) semantics of Linux")
CLI = [sys.executable, "-m", "seenstore.cli"]
N = 20_000


def undelivered(store: str) -> bytes:
    return b"".join(open(f, "rb").read() for f in sorted(glob.glob(f"{store}/undelivered-*")))


def committed(store: str) -> int:
    with SeenStore.open(store, readonly=True) as s:
        return len(s)


@pytest.fixture
def urls(tmp_path):
    lines = [f"http://stream{i % 97}.test/page/{i}" for i in range(N)]
    path = tmp_path / "u.txt"
    path.write_text("\n".join(lines) + "\n")
    return str(path), [(u + "\n").encode() for u in lines]


def read_exactly(fd: int, n: int) -> bytes:
    got = b""
    while len(got) < n and (piece := os.read(fd, n - len(got))):
        got += piece
    return got


def test_a_reader_that_leaves_loses_nothing_and_replay_delivers_the_rest(urls, store_dir,
                                                                          take=30_000):
    """The reader reads `take` bytes and closes the pipe. The undelivered file holds
    exactly the committed output from the line holding byte `take` on (that cut line
    too), however much of it was still in the pipe; replay prints it and removes it."""
    src, lines = urls
    p = subprocess.Popen([*CLI, "add", src, "--store", store_dir, "--batch-lines", "4000"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got = read_exactly(p.stdout.fileno(), take)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait() == 6 and err.count("seenstore: error: ") == 1, err
    n = committed(store_dir)
    stream = b"".join(lines[:n])
    assert stream.startswith(got) and n < N  # stopped committing once the reader left
    start = stream.rfind(b"\n", 0, take) + 1
    saved = undelivered(store_dir)
    assert saved == stream[start:]  # lost = committed - read - undelivered = 0
    n_saved = saved.count(b"\n")
    assert f"{n_saved:,} committed new URLs" in err

    r = subprocess.run([*CLI, "replay", "--store", store_dir], capture_output=True)
    assert r.returncode == 0 and r.stdout == saved, r.stderr
    assert not glob.glob(f"{store_dir}/undelivered-*")
    r = subprocess.run([*CLI, "replay", "--store", store_dir], capture_output=True)
    assert r.returncode == 0 and r.stdout == b""
    r = subprocess.run([*CLI, "replay", "--store", store_dir + "-none"], capture_output=True)
    assert r.returncode == 3 and r.stderr.decode().startswith("seenstore: error: ")


def test_head_dash_1_loses_nothing(urls, store_dir, tmp_path):
    """`seenstore add big.txt | head -1`: head prints one line; every other committed
    URL is in the undelivered file but those head read (one read of its buffer)."""
    src, lines = urls
    rc, err = tmp_path / "rc", tmp_path / "err"
    out = subprocess.run(["sh", "-c", f"{{ {sys.executable} -m seenstore.cli add {src} --store "
                          f"{store_dir} --batch-lines 4000 2>{err}; echo $? >{rc}; }} | head -1"],
                         capture_output=True, env={**os.environ, "LC_ALL": "C"})
    assert out.stdout == lines[0] and rc.read_text().strip() == "6", err.read_text()
    n = committed(store_dir)
    stream = b"".join(lines[:n])
    saved = undelivered(store_dir)
    assert saved and stream.endswith(saved)
    head_read = len(stream) - len(saved)  # whole lines head took out of the pipe
    assert stream[:head_read].endswith(b"\n") and 0 < head_read <= 1 << 16


def test_replay_keeps_what_a_leaving_reader_did_not_read(store_dir, tmp_path):
    lines = [f"http://replay.test/{i}\n".encode() for i in range(30_000)]
    SeenStore.open(store_dir, create=True).close()
    first, second = b"".join(lines[:12_000]), b"".join(lines[12_000:])
    for name, data in (("undelivered-20000101T000000Z-1.txt", first),
                       ("undelivered-20000101T000001Z-1.txt", second)):
        with open(os.path.join(store_dir, name), "wb") as f:
            f.write(data)
    p = subprocess.Popen([*CLI, "replay", "--store", store_dir], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    got = read_exactly(p.stdout.fileno(), 5000)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait() == 6 and err.count("seenstore: error: ") == 1, err
    whole = first + second
    assert got == whole[:5000]
    assert undelivered(store_dir) == whole[whole.rfind(b"\n", 0, 5000) + 1:]
    assert len(glob.glob(f"{store_dir}/undelivered-*")) == 1  # the two replaced by one


def test_live_input_is_committed_and_printed_within_the_flush_interval(store_dir):
    """A pipe that stays open: each line comes out about --flush-interval after it went
    in, committed (readable by another process) before it is printed."""
    p = subprocess.Popen([*CLI, "add", "-", "--store", store_dir, "--flush-interval", "0.2"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    waits = []
    try:
        for i, text in enumerate([b"http://live.test/a\n", b"http://live.test/a\n"
                                  b"http://live.test/b\n\xef\xbb\xbfhttp://live.test/c\n"]):
            t0 = time.monotonic()
            p.stdin.write(text)
            p.stdin.flush()
            ready, _, _ = select.select([p.stdout], [], [], 30)  # the first waits for start-up
            assert ready, "no output while the input stays open"
            line = os.read(p.stdout.fileno(), 4096)
            waits.append(time.monotonic() - t0)
            assert line == (b"http://live.test/a\n" if i == 0 else b"http://live.test/b\n")
            assert committed(store_dir) == i + 1
    finally:
        p.stdin.close()
    assert p.wait() == 0 and b"read 4, new 2, seen 1, rejected 1" in p.stderr.read()
    assert 0.2 <= waits[1] < 1.5, waits  # started up: about the interval and one commit


def test_a_reader_leaving_a_waiting_live_filter_is_noticed(store_dir):
    """`tail -f | seenstore add - | head -1`: the reader leaves while add waits for input;
    add stops at once, the line the reader left in the pipe saved."""
    p = subprocess.Popen([*CLI, "add", "-", "--store", store_dir, "--flush-interval", "0.1"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = b"http://gone.test/1\n"
    p.stdin.write(first + b"http://gone.test/2\n")
    p.stdin.flush()
    assert read_exactly(p.stdout.fileno(), len(first)) == first
    p.stdout.close()
    try:
        assert p.wait(timeout=20) == 6  # stdin still open
    finally:
        p.stdin.close()
    assert undelivered(store_dir) == b"http://gone.test/2\n"


def test_export_of_a_damaged_run_is_exit_4_and_leaves_no_file(tmp_path, store_dir):
    with SeenStore.open(store_dir, create=True) as s:
        s.add(np.random.default_rng(3).integers(0, 2**64, 20_000, dtype=np.uint64))
    out = tmp_path / "out.bin"
    r = CliRunner().invoke(main, ["export", "--store", store_dir, "-o", str(out)])
    assert r.exit_code == 0 and out.stat().st_size == 8 * 20_000
    out.unlink()
    run = sorted(glob.glob(f"{store_dir}/*.run"))[0]
    with open(run, "r+b") as f:  # one bit of a key in the run's second page
        f.seek(4096 + 8 * 600 + 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x04]))
    r = CliRunner().invoke(main, ["export", "--store", store_dir, "-o", str(out)])
    err = r.stderr.strip().splitlines()
    assert r.exit_code == 4 and len(err) == 1 and "checksum mismatch" in err[0], err
    assert os.path.basename(run) in err[0] and not out.exists()
    assert not glob.glob(str(tmp_path / ".out.bin.*"))
