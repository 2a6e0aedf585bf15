"""Measurements of the machine a benchmark runs on, taken beside the store it times.

Memory (``available_memory``, ``total_memory``), disk (``disk_bandwidth``: a dd-style
write, fsync and cold read; ``dir_bytes``), CPU speed (``cpu_probe``), the floor's sorts
(``floor_sorts``: np.sort and the radix sort of the same keys) and resident memory
(``peak_rss_bytes``, ``reset_peak_rss``, ``RssSampler`` by phase of a spilled batch).
Each reads or times; none changes a store. Linux first: where a source is missing
(/proc, O_DIRECT) the probe says so (None, False) instead of failing.
"""

from __future__ import annotations

import mmap
import os
import resource
import threading
import time
from dataclasses import dataclass

import numpy as np

from seenstore.runtime.worker import Worker

from seenstore.keys import sort as sorting

CHUNK = 8 << 20  # bytes per write and read of the disk probe
CPU_PROBE_KEYS = 1 << 20


def available_memory() -> int:
    """Bytes of memory available now (MemAvailable; free pages where /proc is absent)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def total_memory() -> int:
    """Bytes of physical memory of the machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def dir_bytes(path: str) -> int:
    """Bytes allocated on disk (st_blocks x 512) by every file under ``path``."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass  # removed meanwhile
    return total


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far, or since ``reset_peak_rss``
    (Linux ru_maxrss is in KiB; the reset lowers it too)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss() -> bool:
    """Start the peak RSS afresh from the current RSS (Linux: ``5`` written to
    /proc/self/clear_refs), so that a JIT warm-up's transient peak is not reported as
    the run's (what a cold numba cache's compile leaves resident still is). False
    where the system has no such reset (the peak then includes the warm-up)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class RssSampler:
    """Peak resident bytes of this process by phase of the spilled batches (what
    the store names in ``store.spill_phase``: spill, check, commit; "between"
    otherwise), read from /proc/self/statm every SAMPLE_S on a thread started at
    construction. A sample misses peaks shorter than its period; the run's peak is
    ``peak_rss_bytes``. ``stop`` ends the thread and returns the peaks by phase."""

    SAMPLE_S = 0.005

    def __init__(self, store) -> None:
        self.store, self.peaks = store, {}
        self._stop = threading.Event()
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._worker = Worker(self._run, "rss-sampler")

    def _run(self) -> None:
        try:
            f = open("/proc/self/statm", "rb", buffering=0)
        except OSError:
            return
        with f:
            while not self._stop.wait(self.SAMPLE_S):
                rss = int(os.pread(f.fileno(), 128, 0).split()[1]) * self._page
                phase = self.store.spill_phase or "between"
                if rss > self.peaks.get(phase, 0):
                    self.peaks[phase] = rss

    def stop(self) -> dict:
        self._stop.set()
        self._worker.join()
        return dict(self.peaks)


def cpu_probe(repeats: int = 5) -> float:
    """This host's speed now: thread CPU ns/key of ``np.sort`` on CPU_PROBE_KEYS random
    uint64 keys, best of ``repeats`` (~0.1 s in all). A shared VM's speed changes
    within the hour (another tenant on the same cores), so a benchmark takes it at
    its start and end: two runs compare only where it agrees."""
    keys = np.random.default_rng(7).integers(0, 2**64, CPU_PROBE_KEYS, dtype=np.uint64)
    best = float("inf")
    for _ in range(repeats):
        a = keys.copy()
        t = time.thread_time()
        a.sort()
        best = min(best, time.thread_time() - t)
    return best / CPU_PROBE_KEYS * 1e9


def floor_sorts(keys: np.ndarray, threads: int) -> tuple[float, float]:
    """Seconds of np.sort and of the radix sort (on ``threads`` threads) of one copy
    each of ``keys``: the floor's sort is the faster over the run. Each sorts as the
    store runs it: the radix sort's scratch allocated and its pages touched before
    the timer, since the store's shard threads keep theirs from batch to batch and a
    fresh scratch's page faults would be timed as the sort's."""
    out = []
    for method in ("numpy", "radix"):
        a = keys.copy()
        buf = None
        if method == "radix":
            buf = np.empty(len(a), np.uint64)
            buf.fill(0)
        t0 = time.perf_counter()
        sorting.sort_keys(a, threads if method == "radix" else 1, method=method, buf=buf)
        out.append(time.perf_counter() - t0)
        del a, buf
    return out[0], out[1]


@dataclass
class DiskBandwidth:
    """Sequential write (with fsync) and cold read (page cache dropped) of one file;
    ``direct_write_bps``: the same write with O_DIRECT (None where unsupported)."""

    nbytes: int
    write_bps: float
    read_bps: float
    direct_write_bps: float | None = None


def disk_bandwidth(directory: str, nbytes: int) -> DiskBandwidth:
    """dd-style probe in ``directory``: write ``nbytes`` (rounded down to whole CHUNKs,
    at least one) in CHUNK writes + fsync, drop the file's cached pages (posix_fadvise
    DONTNEED), read it back, then write it again with O_DIRECT. The file is removed."""
    path = os.path.join(directory, "disk-probe.bin")
    buf = np.random.default_rng(0).integers(0, 255, CHUNK, dtype=np.uint8).tobytes()
    nbytes = max(CHUNK, nbytes - nbytes % CHUNK)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        t0 = time.perf_counter()
        try:
            for _ in range(nbytes // CHUNK):
                os.write(fd, buf)
            os.fsync(fd)
        finally:
            os.close(fd)
        t_write = time.perf_counter() - t0
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            rbuf = bytearray(CHUNK)
            t0 = time.perf_counter()
            while os.readv(fd, [rbuf]):
                pass
            t_read = time.perf_counter() - t0
        finally:
            os.close(fd)
        direct = _direct_write_bps(path, nbytes)
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return DiskBandwidth(nbytes, nbytes / t_write, nbytes / t_read, direct)


def _direct_write_bps(path: str, nbytes: int) -> float | None:
    """Write ``nbytes`` with O_DIRECT from a page-aligned buffer + fsync; None if refused."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_DIRECT", 0)
    if not getattr(os, "O_DIRECT", 0):
        return None
    buf = mmap.mmap(-1, CHUNK)  # page-aligned, as O_DIRECT requires
    buf.write(b"\x5a" * CHUNK)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError:
        buf.close()
        return None
    try:
        t0 = time.perf_counter()
        for _ in range(nbytes // CHUNK):
            os.write(fd, buf)
        os.fsync(fd)
        return nbytes / (time.perf_counter() - t0)
    except OSError:
        return None
    finally:
        os.close(fd)
        buf.close()
