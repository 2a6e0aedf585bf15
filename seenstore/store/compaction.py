"""Compaction: the size-tiered policy that decides which runs of a shard merge, and
the ``Compactor`` that merges them between batches, paid for by the batches'
credit (docs/architecture.md, "Tiered runs and compaction").

A shard's runs are grouped by size class (``tier``); FANOUT runs of a tier merge
(the k-way merge of runs.py) into one run about a tier up. Each merge of a shard is
its own commit (commit.py), except that small merges (at most GROUP_JOB_BYTES each,
GROUP_BYTES in all: tier 0's) commit together; so the extra disk space is one
shard's runs (or a few MiB) and an interrupted compaction leaves the store as it was
after its last commit.
"""

from __future__ import annotations

import math
import os
import threading
import time
import warnings

import numpy as np

from seenstore.layout import Layout
from seenstore.store import manifest, tombstones
from seenstore.store.runs.format import policy_digest
from seenstore.store.runs import live as runsmod
from seenstore.store.commit import Live
from seenstore.store.files import fault, io_error, run_name
from seenstore.store.scheduling import Syncer
from seenstore.runtime.worker import Worker

FANOUT = 4  # size-tiered: FANOUT runs of one tier merge into one run of the next
MIN_TIER_KEYS = 1 << 12  # runs below this size share tier 0
# Compaction credit: each batch earns compaction the right to read (and write)
# COMPACT_CREDIT times the bytes of the new run(s) it wrote; unspent credit carries
# over. After one batch, jobs run while they fit both the credit and COMPACT_CREDIT x
# that batch's bytes (the first job only needs the credit): the compaction charged
# to one batch stays a small multiple of its own writes, spread over the next batches.
# Size-tiered at FANOUT 4 rewrites a key about log4(N / batch) times.
COMPACT_CREDIT = 3
# A batch stops the background compaction between two jobs (one shard's merge) rather
# than wait for the whole round (the rest waits for the next gap between batches),
# unless a shard holds more than STALL_RUNS live runs: then compaction has fallen so
# far behind that the batch waits for the round (a bounded backlog: every run is
# swept by every batch of its shard).
STALL_RUNS = 3 * FANOUT
# Jobs merging less than this in all (smallest first, as plan orders them) commit
# together: a commit's fixed cost (~3 fsyncs and the manifest) was most of a small
# job's time, and batches of 1e5 keys, whose 16 tier-0 runs start ~4 such jobs per
# batch, waited for them (docs/architecture.md, "Tiered runs and compaction"). Not
# more: a batch waits for the group under way (8 MiB cost batches of 1e6 ~25 %).
GROUP_BYTES = 2 << 20
GROUP_JOB_BYTES = 2 << 20  # a job merging more than this commits alone (tier 0's are smaller)
SYNC_THREADS = 4  # fsyncs of a group's runs at once


def tier(count: int) -> int:
    """Size class of a run of ``count`` keys: 0 below MIN_TIER_KEYS, then +1 per FANOUT x."""
    if count < MIN_TIER_KEYS:
        return 0
    return 1 + int(math.log(count / MIN_TIER_KEYS, FANOUT) + 1e-9)


def plan(runs: list, full: bool = False, rewrite: frozenset = frozenset()) -> list:
    """Compaction jobs for a manifest's ``runs`` (dicts with shard, file, count): a list
    of ``(shard, [run entries])``, at most one per shard, smallest input first.

    Size-tiered: a shard's runs are grouped by ``tier``; the lowest tier holding
    FANOUT or more runs is merged into one run (which usually lands one tier up).
    Empty runs (left by format 1 stores) always go. ``full``: every shard with more
    than one run (or an empty one), or in ``rewrite`` (shards holding forgotten keys,
    which a merge drops), is merged into a single run."""
    by_shard: dict[int, list] = {}
    for r in runs:
        by_shard.setdefault(r["shard"], []).append(r)
    jobs = []
    for shard, rs in sorted(by_shard.items()):
        empty = [r for r in rs if r["count"] == 0]
        live = [r for r in rs if r["count"]]
        if full:
            if len(live) > 1 or empty or shard in rewrite:
                jobs.append((shard, rs if len(live) > 1 or shard in rewrite else empty))
            continue
        tiers: dict[int, list] = {}
        for r in live:
            tiers.setdefault(tier(r["count"]), []).append(r)
        group = next((g for t, g in sorted(tiers.items()) if len(g) >= FANOUT), [])
        if group or empty:
            jobs.append((shard, group + empty))
    jobs.sort(key=lambda j: job_bytes(j[1]))
    return jobs


def upgrade_jobs(runs: list, old: set) -> list:
    """Jobs (as ``plan``'s) rewriting the runs named in ``old`` (files of an older
    minor version of their format): per shard, its old runs merged into one new run
    (one run: rewritten as is), smallest first."""
    by_shard: dict[int, list] = {}
    for r in runs:
        if r["file"] in old:
            by_shard.setdefault(r["shard"], []).append(r)
    return sorted(by_shard.items(), key=lambda j: job_bytes(j[1]))


def job_bytes(entries: list) -> int:
    """Bytes a compaction job reads (and, the runs being disjoint, writes)."""
    return sum(8 * r["count"] for r in entries)


def pending(doc: dict) -> dict:
    """What the size-tiered policy would merge now in manifest ``doc``: jobs, runs, bytes."""
    jobs = plan(doc["runs"])
    return {"jobs": len(jobs), "runs": sum(len(e) for _, e in jobs),
            "bytes": sum(job_bytes(e) for _, e in jobs)}


class Compactor:
    """Merges the runs of ``live`` (a writer's), in ``run_format`` (None: by size,
    ``runs.live.format_for``), one commit per shard; in the background between
    batches (``start``/``join``) or now (``run``).
    Not thread-safe: the store calls it under its write mutex."""

    def __init__(self, live: Live, run_format: int | None) -> None:
        self.live = live
        self.run_format = run_format
        self.credit = 0  # bytes compaction may still read (earned by batches)
        self.credit_step = 0  # what the last batch earned: one round's spending limit
        self.last: dict = {}  # figures of the last background compaction
        self.tally: dict = {}
        self.joined: dict = {}  # ... of the one the last join waited for
        self._worker: Worker | None = None  # the background compaction, until joined
        self._stop = threading.Event()  # set by join(stop=True): end after this job
        # the store's forgotten keys, which a merge drops (None: kept, approximate mode)
        self.tomb: tombstones.Tombstones | None = None

    def earn(self, bytes_written: int) -> None:
        """A batch that wrote ``bytes_written`` of new runs pays for compaction."""
        self.credit_step = COMPACT_CREDIT * bytes_written
        self.credit += self.credit_step

    def run(self, jobs: list, paid: bool = False, run_format: int | None = None,
            debt: bool = False) -> dict:
        """Run compaction ``jobs`` (``plan``) in order. ``paid``: spend the batches'
        credit — stop before a job that does not fit what is left of it, or that
        would take this round past ``credit_step`` (a first job may), or once a
        batch asked it to stop (``join(stop=True)``). Consecutive jobs of at most
        GROUP_JOB_BYTES each and GROUP_BYTES in all merge as one group: one commit,
        their runs fsynced side by side (``_merge_group``); a larger job is a group
        of its own. A stop is honoured between groups. ``run_format``: what the new
        runs are written as (default ``self.run_format``). ``debt``: the first job
        runs whatever the credit (which may go below zero)."""
        t0 = time.perf_counter()
        done = {"jobs": 0, "runs_merged": 0, "bytes_read": 0, "bytes_written": 0,
                "stopped": False, "commits": 0}
        self.tally = {}  # run bytes merged from the run cache, not read (runs.merged_chunks)
        i, broke = 0, False
        # a round spends what one batch earned; a shard past STALL_RUNS spends the
        # credit saved too (small batches earn little each, and a round of one
        # credit_step merged about one shard's job per batch: the others piled up)
        limit = max(self.credit, self.credit_step) if paid and self.behind() \
            else self.credit_step
        while i < len(jobs) and not broke:
            if paid and self._stop.is_set():
                done["stopped"] = True
                break
            group, group_bytes = [], 0
            while i < len(jobs):
                cost = job_bytes(jobs[i][1])
                if group and (group_bytes + cost > GROUP_BYTES or cost > GROUP_JOB_BYTES):
                    break
                if paid:
                    taken = done["bytes_read"] + group_bytes
                    first = not (done["jobs"] or group)
                    if (cost > self.credit and not (first and debt)) or (
                            not first and taken + cost > limit):
                        broke = True
                        break
                    self.credit -= cost
                group.append(jobs[i])
                group_bytes += cost
                i += 1
                if cost > GROUP_JOB_BYTES:
                    break
            if not group:
                break
            done["bytes_written"] += self._merge_group(group, run_format or self.run_format)
            done["jobs"] += len(group)
            done["commits"] += 1
            done["runs_merged"] += sum(len(entries) for _, entries in group)
            done["bytes_read"] += group_bytes
        done["bytes_cached"] = self.tally.get("cached", 0)
        done["bytes_read"] -= done["bytes_cached"]
        done["seconds"] = time.perf_counter() - t0
        return done

    def _merge_group(self, group: list, run_format: int) -> int:
        """Merge the runs of each ``(shard, entries)`` of ``group`` into one new run per
        shard and commit them together (one manifest write: the commit's fixed cost,
        ~3 fsyncs, is paid once); with more than one run, the runs are fsynced side
        by side after all are written. Forgotten keys (``tomb``) met are left out of
        the new runs and out of T, in the same commit. Returns the bytes written."""
        live = self.live
        doc = live.doc
        t = (self.tomb.keys(doc) if self.tomb is not None and tombstones.count(doc)
             else tombstones.EMPTY)
        dropped: list = []
        entry = None
        gen = live.generation + 1
        host_bits = Layout.from_dict(doc["layout"]).host_bits
        pdigest = policy_digest(manifest.runs_policy_id(doc))
        side_by_side = live.sync and len(group) > 1
        added, removed, writers, written = [], [], [], 0
        shard = group[0][0]
        try:
            for shard, entries in group:
                files = [e["file"] for e in entries]
                removed += files
                readers = [r for r in live.runs.get(shard, []) if r.name in files]
                count = sum(r.count for r in readers)
                if not count:
                    continue
                w = runsmod.new_writer(os.path.join(live.path, run_name(shard, gen)),
                                       host_bits, doc["shard_bits"], shard, pdigest,
                                       run_format, cache=live.cache, keys=count)
                writers.append(w)
                kept = 0
                for chunk in runsmod.merged_chunks(readers, cache=live.cache, tally=self.tally):
                    hit = tombstones.in_sorted(t, chunk)  # only T's keys in its range
                    if len(hit):
                        dropped.append(chunk[hit])  # copies: the chunk is a view
                        chunk = np.delete(chunk, hit)
                    if len(chunk):
                        w.write(chunk)
                    kept += len(chunk)
                    fault("compact-write")
                if not kept:  # every key was forgotten: no run at all
                    writers.pop().abort()
                    continue
                header, sparse, nbytes = runsmod.finish(w, live.sync and not side_by_side)
                written += nbytes
                added.append((shard, header, sparse))
            if side_by_side and writers:
                syncer = Syncer(min(len(writers), SYNC_THREADS))
                for w in writers:
                    syncer.submit(w.path)
                syncer.wait()
            fields = None
            if dropped:
                gone = np.concatenate(dropped)
                entry = self.tomb.write(tombstones.less(t, gone), gen,
                                        live.sync)
                fields = {tombstones.FIELD: entry}
            fault("compact-written")
            live.commit(gen, added, removed,
                        {"compactions": len(group), "bytes_compacted": written,
                         "forgotten_dropped": sum(len(d) for d in dropped)},
                        step="compact-", fields=fields)
        except OSError as e:
            self._abandon(writers, entry)
            where = f"shard {shard}" if len(group) == 1 else f"shards {[g[0] for g in group]}"
            raise io_error(e, f"{live.path}: compacting {where}") from e
        except BaseException:
            self._abandon(writers, entry)
            raise
        if fields is not None:
            self.tomb.retire(doc.get(tombstones.FIELD), entry)
        return written

    def _abandon(self, writers: list, entry: dict | None) -> None:
        """A merge that did not commit: its runs and its T file go."""
        for w in writers:
            w.abort()
        if self.tomb is not None:
            self.tomb.discard(entry)

    def _runs_per_shard(self) -> dict:
        per_shard: dict = {}
        for r in self.live.doc["runs"]:
            per_shard[r["shard"]] = per_shard.get(r["shard"], 0) + 1
        return per_shard

    def behind(self) -> bool:
        """True when a shard holds more than STALL_RUNS live runs."""
        return max(self._runs_per_shard().values(), default=0) > STALL_RUNS

    def start(self) -> None:
        """After a batch: run the pending size-tiered jobs its credit pays for on a
        background thread (joined by the next write, ``close``), so compaction
        overlaps the caller's own work between batches. A store that fell behind
        (``behind``) merges its most crowded shards first, the first of them even
        past the credit (a debt later batches pay): the backlog stays bounded."""
        jobs = plan(self.live.doc["runs"])
        behind = self.behind()
        if behind:
            crowded = self._runs_per_shard()
            jobs.sort(key=lambda j: -crowded.get(j[0], 0))
        if not jobs or (job_bytes(jobs[0][1]) > self.credit and not behind):
            return

        def run():  # an error is reported by the join; the store stays consistent
            self.last = self.run(jobs, paid=True, debt=behind)

        self._worker = Worker(run, "compact")

    def join(self, stop: bool = False) -> float:
        """Wait for the background compaction; return the seconds waited. ``stop``
        (a batch about to start): ask it to end after the job under way, unless it
        is too far behind (``behind``): the jobs left wait for the next round, paid
        by the credit kept. A failed compaction warns (nothing was lost: its runs
        are leftovers of an uncommitted generation, removed by the next open).
        ``joined``: the figures of the compaction joined (empty if none)."""
        t0 = time.perf_counter()
        self.joined = {}
        worker = self._worker
        if worker is not None:
            if stop and not self.behind():
                self._stop.set()
            worker.join(raise_error=False)
            self._worker = None
            self._stop.clear()
            self.joined = self.last
            if worker.error is not None:
                warnings.warn(f"background compaction failed ({worker.error}); the store is "
                              "unchanged by it and the next write retries")
        return time.perf_counter() - t0
