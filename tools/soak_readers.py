"""Concurrency soak (issue 12 item 7): one writer commits while readers check.

A DedupStage (the writer: small buffers, so it merges, commits, creates and deletes
WAL segments all the time) is fed random keys, half of them re-offers, from a
thread. Meanwhile, until --seconds pass:

* reader threads call ``contains`` / ``verify`` / ``stats`` on a read-only
  SeenStore of their own and on the writer's own store object, and require every
  key the stage has handed out so far to be answered present (in the runs or in
  the WAL: never a miss, never an exception);
* reader processes open the store read-only in a loop and call the same three.

Any exception, and any handed-out key answered absent, is an error. Prints one
line per kind of reader and ``errors N``; exits 1 when N > 0.

    python tools/soak_readers.py --seconds 120          # the 2-minute soak
    python tools/soak_readers.py --seconds 10 --dir D   # what tests/test_soak.py runs
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import numpy as np

from seenstore.stage import DedupStage
from seenstore.store import SeenStore

PROCESS_READER = r"""
import sys, time, traceback
import numpy as np
from seenstore.store import SeenStore
path, until = sys.argv[1], float(sys.argv[2])
calls = errors = 0
rng = np.random.default_rng()
while time.time() < until:
    try:
        with SeenStore.open(path, readonly=True) as ro:
            ro.contains(rng.integers(0, 2**64, 1000, dtype=np.uint64))
            ro.verify()
            ro.stats()
        calls += 3
    except Exception:
        errors += 1
        traceback.print_exc()
print(calls, errors)
"""


class Soak:
    def __init__(self, path: str, seconds: float):
        self.path = path
        self.until = time.time() + seconds
        self.handed: list[np.ndarray] = []  # appended by the writer only
        self.errors: list[str] = []
        self.calls: dict[str, int] = {}
        self.writer_done = threading.Event()
        self.stage: DedupStage | None = None

    def error(self, where: str) -> None:
        self.errors.append(f"{where}: {traceback.format_exc()}")

    def writer(self) -> None:
        rng = np.random.default_rng(1)
        try:
            stage = self.stage
            while time.time() < self.until:
                fresh = rng.integers(0, 2**64, 2000, dtype=np.uint64)
                old = (rng.choice(np.concatenate(self.handed[-50:]), 2000)
                       if self.handed else fresh)
                got = stage.offer(np.concatenate([fresh, old]))
                self.calls["writer offers"] = self.calls.get("writer offers", 0) + 1
                if len(got):
                    self.handed.append(got.keys.copy())
        except Exception:
            self.error("writer")
        finally:
            self.writer_done.set()

    def sample(self, rng) -> np.ndarray:
        n = len(self.handed)  # every array up to n was handed out before this call
        if not n:
            return np.empty(0, dtype=np.uint64)
        keys = np.concatenate(self.handed[:n])
        return rng.choice(keys, min(len(keys), 2000))

    def reader(self, name: str, store: SeenStore) -> None:
        rng = np.random.default_rng()
        calls = 0
        while not self.writer_done.is_set():
            try:
                keys = self.sample(rng)
                ok = store.contains(keys)
                if not ok.all():
                    self.errors.append(f"{name}: {int((~ok).sum())} handed-out keys "
                                       "answered absent")
                store.verify()
                store.stats()
                calls += 3
            except Exception:
                self.error(name)
                time.sleep(0.05)
        self.calls[name] = calls


def run(path: str, seconds: float, n_threads: int, n_procs: int) -> int:
    soak = Soak(path, seconds)
    soak.stage = DedupStage.open(path, create=True, budget_bytes=8 * 20_000, sync=False,
                                 wal_sync="never", cache_keys=0)
    procs = [subprocess.Popen([sys.executable, "-c", PROCESS_READER, path, str(soak.until)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(n_procs)]
    readonly = [SeenStore.open(path, readonly=True) for _ in range(n_threads)]
    threads = [threading.Thread(target=soak.writer)]
    threads += [threading.Thread(target=soak.reader, args=(f"thread-ro-{i}", ro))
                for i, ro in enumerate(readonly)]
    threads.append(threading.Thread(target=soak.reader, args=("thread-writer-store",
                                                              soak.stage.store)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        soak.stage.close()
    except Exception:
        soak.error("close")
    for ro in readonly:
        ro.close()
    for i, p in enumerate(procs):
        out, err = p.communicate(timeout=seconds + 120)
        try:
            calls, errs = map(int, out.split())
        except ValueError:
            calls, errs = 0, 1
        soak.calls[f"process-{i}"] = calls
        if errs or p.returncode:
            soak.errors.append(f"process-{i}: {errs} errors, exit {p.returncode}\n"
                               + err.decode(errors="replace")[-3000:])
    handed = sum(len(h) for h in soak.handed)
    with SeenStore.open(path, readonly=True) as ro:
        print(f"writer handed out {handed:,} keys; store generation {ro.generation}")
    for name, calls in sorted(soak.calls.items()):
        print(f"{name:22s} {calls:,} calls")
    for e in soak.errors[:5]:
        print(e, file=sys.stderr)
    print(f"errors {len(soak.errors)}")
    return 1 if soak.errors else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--threads", type=int, default=2, help="read-only reader threads")
    ap.add_argument("--processes", type=int, default=2, help="reader processes")
    ap.add_argument("--dir", help="work directory (default: a temporary one)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        return run(os.path.join(d, "soak.db"), a.seconds, a.threads, a.processes)


if __name__ == "__main__":
    sys.exit(main())
