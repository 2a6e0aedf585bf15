"""What one ``seenstore bench`` run measured, and its verdict.

Owns the result record (``BenchResult``: per-batch rows and their totals), the
verdict (``verify_answer``: a batch's answer against the stream's exact expectation;
``BenchResult.verified``), the floor arithmetic (``BenchResult.floor_s``: the faster
sort of the same batches plus sequential I/O of the bytes the merges moved, at the
best rates the run's disk probes saw) and the ``--json`` object (``to_dict``).
Arithmetic over figures already taken: it runs no store and times nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from seenstore.keys import sort as sorting

# the store's stages of a batch (``SeenStore.last_timings``), after the stream's own
STAGES = ("generate", "sort", "spill", "bloom", "merge", "commit", "answer", "align")
# the shard threads' laps inside merge (store/scheduling.py), summed over the threads:
# wall seconds and CPU seconds of each; wall minus CPU is time the thread waited
# (for a sort, the disk, or a core). fsync runs in the shard thread (FSYNC = "inline");
# fsync_wait is the batch's wait, after its checks, for the fsyncs run beside them
THREAD_LAPS = ("sort_wait", "check", "write", "fsync", "fsync_wait")


def verify_answer(batch, got: np.ndarray, answer: str) -> tuple[int, bool]:
    """(new keys counted, batch correct) for what the store returned for ``batch`` (a
    workload.Batch): ``answer`` "mask" (``add``): the count must be the stream's exact
    expectation and every fresh key marked new; "new" (``add_new``): the sorted new
    keys must be exactly the batch's fresh keys, sorted."""
    if answer == "mask":
        n_new = int(np.count_nonzero(got))
        return n_new, n_new == batch.expected_new and bool(got[: batch.n_fresh].all())
    # The stream's new keys are exactly its distinct fresh keys (workload.py), so the
    # sorted answer must equal them sorted: one sort, far cheaper than a search per key
    want = batch.keys[: batch.n_fresh].copy()
    sorting.sort_keys(want)
    ok = len(got) == batch.expected_new and np.array_equal(got, want)
    return len(got), bool(ok)


@dataclass
class BenchResult:
    """Everything one run measured; ``to_dict`` is the ``--json`` object."""

    params: dict
    warmup_s: float = 0.0
    # (kernels, seconds) numba compiled inside the timed part: the warm-up missed them,
    # and the figures include their compile (bench/warm.py); (0, 0.0) when right
    jit_in_run: tuple = (0, 0.0)
    batches: list = field(default_factory=list)
    stage_s: dict = field(default_factory=lambda: {s: 0.0 for s in STAGES})
    store_s: float = 0.0  # wall time inside store.add / add_new, all batches
    final_bloom_wait_s: float = 0.0  # the wait for the last batch's Bloom insert (in store_s)
    bloom_background_s: float = 0.0  # Bloom inserts run past each call (bloom/deferred.py)
    bloom_cpu_s: float = 0.0  # their CPU time (the insert's threads)
    cpu_user_s: float = 0.0  # process CPU time inside add / add_new (every thread)
    cpu_sys_s: float = 0.0
    thread_laps: dict = field(default_factory=dict)  # THREAD_LAPS, wall and cpu
    shard_sort_s: float = 0.0  # per-shard sorts' CPU time, on their own threads inside the merge
    compact_wait_s: float = 0.0  # waits for the compaction run between batches
    sort_floor_s: float = 0.0  # the faster of the two sorts below, whole run
    sort_numpy_s: float = 0.0  # np.sort of every batch
    sort_radix_s: float = 0.0  # the radix sort of every batch, on the store's threads
    verify_s: float = 0.0
    bytes_read: int = 0
    bytes_cached: int = 0  # run bytes the checks took from the store's run cache, not the disk
    bytes_written: int = 0
    offered: int = 0
    new: int = 0
    expected_new: int = 0
    bad_batches: list = field(default_factory=list)
    disk: list = field(default_factory=list)  # probes.DiskBandwidth at the start and end
    cpu_probe_ns: list = field(default_factory=list)  # cpu_probe() at the start and end
    store_stats: dict = field(default_factory=dict)
    bloom_end: dict | None = None  # the filter after the last batch: kept, or dropped (why)
    disk_bytes: int = 0  # allocated by the store directory after close (runs, BLOOM, ...)
    peak_rss: int = 0
    rss_by_phase: dict = field(default_factory=dict)  # spilled runs: probes.RssSampler
    # spilled runs: seconds by stage of admit_file (wall and process CPU)
    spill_stages: dict = field(default_factory=dict)
    wall_s: float = 0.0

    def add_batch(self, row: dict, timings: dict) -> None:
        """Book one batch: its ``row`` (run.py: offered, new, expected_new, ok, and its
        seconds and bytes) and the store's ``last_timings`` for it, whose shard-thread
        laps and spilled stages are summed here."""
        parts = timings.get("merge_parts", {})
        for lap in THREAD_LAPS:
            for k in (f"{lap}_s", f"{lap}_cpu_s"):
                self.thread_laps[k] = self.thread_laps.get(k, 0.0) + float(parts.get(k, 0.0))
        for k, v in timings.get("spill_stages", {}).items():
            acc = self.spill_stages.setdefault(k, {"wall_s": 0.0, "cpu_s": 0.0})
            acc["wall_s"] += v["wall_s"]
            acc["cpu_s"] += v["cpu_s"]
        self.batches.append(row)
        self.stage_s["generate"] += row["generate_s"]
        for s in STAGES[1:]:
            self.stage_s[s] += row[f"{s}_s"]
        self.store_s += row["add_s"]
        self.bloom_background_s += row["bloom_background_s"]
        self.bloom_cpu_s += row["bloom_cpu_s"]
        self.shard_sort_s += row["shard_sort_s"]
        self.compact_wait_s += row["compact_wait_s"]
        self.sort_numpy_s += row["sort_numpy_s"]
        self.sort_radix_s += row["sort_radix_s"]
        self.sort_floor_s = min(self.sort_numpy_s, self.sort_radix_s)
        self.bytes_read += row["bytes_read"]
        self.bytes_cached += row["bytes_cached"]
        self.bytes_written += row["bytes_written"]
        self.offered += row["offered"]
        self.new += row["new"]
        self.expected_new += row["expected_new"]
        if not row["ok"]:
            self.bad_batches.append(row["batch"])

    def add_settled_bloom(self, waited: float, elapsed: float, cpu: float,
                          final: bool = False) -> None:
        """Book the wait for the last batch's deferred Bloom insert (``settle_bloom``)
        in the store time ("bloom"), and the insert's own elapsed and CPU seconds as
        that batch's background. The wait goes into that batch's row too, unless
        ``final``: the wait after the last batch, which no generation overlapped (a
        crawler's work between batches would), is booked on its own
        (``final_bloom_wait_s``) so the last row shows that batch's call alone.
        Requires: a batch booked."""
        row = self.batches[-1]
        if final:
            self.final_bloom_wait_s += waited
        else:
            row["bloom_s"] += waited
            row["add_s"] += waited
        self.stage_s["bloom"] += waited
        self.store_s += waited
        row["bloom_background_s"] += elapsed
        row["bloom_cpu_s"] += cpu
        self.bloom_background_s += elapsed
        self.bloom_cpu_s += cpu

    @property
    def verified(self) -> bool:
        return not self.bad_batches and self.new == self.expected_new

    def floor_s(self, direct: bool = False) -> float:
        """The faster sort of the same batches + read and write of the merged bytes at the
        best rates the probes saw (write+fsync through the page cache, or with ``direct``
        the O_DIRECT write; NaN where a probe could not write O_DIRECT). The best, not the
        mean: a run's first probe is often much slower than its later ones, and a mean
        would flatter the ratio."""
        read_bps = max(d.read_bps for d in self.disk)
        writes = [d.direct_write_bps if direct else d.write_bps for d in self.disk]
        if any(w is None for w in writes):
            return float("nan")
        return self.sort_floor_s + self.bytes_read / read_bps + self.bytes_written / max(writes)

    def to_dict(self) -> dict:
        n = max(1, self.offered)
        store_keys = self.store_stats.get("keys") or 0
        disk_bytes = self.disk_bytes
        floor = self.floor_s()
        floor_direct = self.floor_s(direct=True)
        return {
            "params": self.params,
            "verified": self.verified,
            "bad_batches": self.bad_batches,
            "offered": self.offered,
            "new": self.new,
            "expected_new": self.expected_new,
            "store_keys": store_keys,
            "warmup_s": self.warmup_s,
            "jit_in_run": {"kernels": self.jit_in_run[0], "s": self.jit_in_run[1]},
            "wall_s": self.wall_s,
            "store_s": self.store_s,
            "final_bloom_wait_s": self.final_bloom_wait_s,
            "keys_per_s": self.offered / self.store_s if self.store_s else None,
            "ns_per_key": {
                **{s: self.stage_s[s] / n * 1e9 for s in STAGES},
                "other": (self.store_s - sum(self.stage_s[s] for s in STAGES[1:])
                          - self.compact_wait_s) / n * 1e9,
                "compact_wait": self.compact_wait_s / n * 1e9,
                "store_total": self.store_s / n * 1e9,
                "bloom_background": self.bloom_background_s / n * 1e9,
                "bloom_cpu": self.bloom_cpu_s / n * 1e9,
                # not measured on the spilled path (the generator runs inside add there)
                "cpu_user": self.cpu_user_s / n * 1e9 if self.cpu_user_s else None,
                "cpu_sys": self.cpu_sys_s / n * 1e9 if self.cpu_user_s else None,
                "shard_sort": self.shard_sort_s / n * 1e9,
            },
            "shard_threads_ns_per_key": {k: v / n * 1e9 for k, v in self.thread_laps.items()},
            "spill_stages_ns_per_key": {k: {"wall": v["wall_s"] / n * 1e9,
                                            "cpu": v["cpu_s"] / n * 1e9}
                                        for k, v in self.spill_stages.items()},
            "bytes_read": self.bytes_read,
            "bytes_cached": self.bytes_cached,
            "run_cache": self.store_stats.get("run_cache"),
            "bloom_end": self.bloom_end,
            "bytes_written": self.bytes_written,
            "disk_bytes": disk_bytes,
            "disk_bytes_per_key": disk_bytes / store_keys if store_keys else None,
            "peak_rss_bytes": self.peak_rss,
            "rss_by_phase": self.rss_by_phase,
            "disk_probe": [d.__dict__ for d in self.disk],
            "cpu_probe_ns_per_key": list(self.cpu_probe_ns),
            "sort": self.store_stats.get("sort"),
            "machine": sorting.machine(),
            "floor": {
                "sort_s": self.sort_floor_s,
                "sort_by": "numpy" if self.sort_numpy_s <= self.sort_radix_s else "radix",
                "sort_numpy_s": self.sort_numpy_s,
                "sort_radix_s": self.sort_radix_s,
                "io_s": floor - self.sort_floor_s,
                "total_s": floor,
                "ratio_store_to_floor": self.store_s / floor if floor else None,
                "ratio_store_plus_generate_to_floor":
                    (self.store_s + self.stage_s["generate"]) / floor if floor else None,
                "direct_total_s": floor_direct if floor_direct == floor_direct else None,
                "ratio_store_to_direct_floor":
                    self.store_s / floor_direct if floor_direct == floor_direct else None,
            },
            "verify_s": self.verify_s,
            "batches": self.batches,
        }
