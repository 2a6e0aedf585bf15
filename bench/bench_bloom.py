"""Bloom filter benchmark: measured FPR against theory, and ns/key.

Part 1, FPR at --fpr-keys (1e7) keys for targets 1%, 0.1%, 0.01%, on uniform keys
and on host-skewed keys (top 20 bits: a Zipf(1) host over --hosts hosts, low 44
random); measured over --probes never-added keys, against this design's theory
(seenstore.bloom.blocked_fpr) and the rate read from the filled bits. Beside it:
a classic (unblocked) filter with the same memory, and what a block index taken
from the raw key, without the mix, would do to host-skewed keys.

Part 2, speed at --speed-keys (1e8) keys: insert, probe of absent keys, probe of
present keys, add_query, in ns/key (best of --reps, fresh keys and a fresh,
pre-faulted filter each rep; thread CPU time, so time descheduled on a shared
machine is not counted; JIT warm-up timed apart), for the blocked filter with
GROUP keys located ahead; the same on words 8 bytes off a 64-byte boundary
("unaligned": each block then straddles two cache lines, as on numpy's own 16-byte
alignment; the filter allocates its words 64-byte aligned); without look-ahead
(group 1); and the classic filter.

Part 3 (alone, --store-stream KEYS BATCH): the Bloom work of `seenstore bench --keys
KEYS --batch BATCH` without the store, thread CPU time per offered key per batch.
Part 4 (alone, --peers-stream KEYS BATCH): the same for bench/peers.py's seenstore,
whose store is opened with defaults (the filter starts at 2^20 keys and grows by
layers): CPU per new key per batch, page faults, layers, and the save at close.

Part 5 (alone, --big-filter GIB [--lot N] [--reps R]): what the spilled path's deferred
insert does, lots of --lot random keys (default 2^20) into a filter of about GIB GiB at
0.1%, on 2 MiB pages if Linux gives them (printed): ``BloomFilter.add`` (by regions of
~1,024 keys from 1 GiB up: one TLB miss per region, not per key) against the key-order
kernel, lots interleaved, thread CPU per key, median and min of R lots each. Needs GIB
of memory, and first touch of that much fresh memory takes a while on a VM.

Part 6 (alone, --fuse KEYS [--fuse-bits 8 11 12 16] [--reps R]): a static binary fuse
filter (seenstore/bloom/fuse.py) against the blocked Bloom filter at equal
false-positive rate, on KEYS host-skewed keys: for each fingerprint width f, the fuse
filter's bits per key and measured FPR beside a blocked Bloom filter sized for that
measured rate (``for_capacity(KEYS, rate)``: its bits per key and measured rate), and
for both the build (fuse: the whole build; Bloom: the insert of every key) and the
probes of absent and present keys in ns/key of thread CPU (best of R, same keys).

With --baseline FILE (a seenstore/kernels/bloom.py of another checkout, e.g. of a
worktree of main) part 2 adds a row "baseline file": the same filter through that
file's kernels, in the same run (an A/B of a kernel change on a shared machine).

    python bench/bench_bloom.py [--fpr-keys 1e7] [--speed-keys 1e8] [--reps 3] [--quick]
    python bench/bench_bloom.py --store-stream 1e8 1e7
    python bench/bench_bloom.py --peers-stream 1e8 1e7 [--lots 4] [--workdir DIR]
    python bench/bench_bloom.py --big-filter 3 [--lot 1048576] [--reps 7]
    python bench/bench_bloom.py --skip-fpr --baseline ../main/seenstore/kernels/bloom.py
    python bench/bench_bloom.py --fuse 1e7 [--fuse-bits 8 11 12 16] [--reps 3]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from seenstore import bloom as B
from seenstore.kernels import bloom as K

TARGETS = (0.01, 0.001, 0.0001)
BASELINE = None  # kernels module of --baseline FILE
SWEEP = (1, 4, 8, 16, 32, 64, 128)
M64 = 2**64 - 1


def uniform_keys(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, M64, n, np.uint64, endpoint=True)


def skewed_keys(rng: np.random.Generator, n: int, buckets: np.ndarray) -> np.ndarray:
    """Host rank r = floor((H+1)**u) - 1 (Zipf(1)-like), bucket buckets[r]; low 44 bits random."""
    u = rng.random(n)
    ranks = np.minimum(np.floor((len(buckets) + 1.0) ** u).astype(np.int64) - 1, len(buckets) - 1)
    return (buckets[ranks] << np.uint64(44)) | rng.integers(0, 2**44, n, np.uint64)


def absent(probes: np.ndarray, sorted_added: np.ndarray) -> np.ndarray:
    """The probes not in ``sorted_added`` (exact: a host-skewed probe can repeat a key)."""
    i = np.minimum(np.searchsorted(sorted_added, probes), len(sorted_added) - 1)
    return probes[sorted_added[i] != probes]


def ci95(p: float, n: int) -> float:
    return 1.96 * math.sqrt(max(p * (1 - p), 1e-300) / n)


def classic_k(bits_per_key: float) -> int:
    return max(1, min(32, round(bits_per_key * math.log(2))))


def rawblock_fpr(keys: np.ndarray, n_blocks: int, k: int) -> float:
    """FPR if the block came from the key's raw top bits (no mix): sum over blocks of
    (probe share) * (within-block FPR at that block's load), probes drawn like keys."""
    blocks = ((keys >> np.uint64(32)) * np.uint64(n_blocks)) >> np.uint64(32)
    loads = np.bincount(blocks.astype(np.int64), minlength=n_blocks).astype(np.float64)
    within = (1.0 - (1.0 - 1.0 / B.BLOCK_BITS) ** (k * loads)) ** k
    return float(np.sum(loads / loads.sum() * within))


def fpr_part(a: argparse.Namespace) -> None:
    n, n_probes = int(a.fpr_keys), int(a.probes)
    rng = np.random.default_rng(a.seed)
    buckets = rng.permutation(2**20)[: a.hosts].astype(np.uint64)
    print(f"\n== FPR at {n:,} keys, {n_probes:,} probes of never-added keys ==")
    print(f"host-skewed: Zipf(1) over {a.hosts:,} hosts in 2^20 buckets, low 44 bits random")
    print("theory = blocked_fpr(n/n_blocks, k); bits = expected_fpr from the filled bits; "
          "ratio = measured/theory; classic: same memory, k = round(b ln 2)")
    head = (f"{'keys':8} {'target':>7} {'k':>2} {'bits/key':>8} {'theory':>9} {'bits':>9} "
            f"{'measured':>9} {'+-95%':>8} {'ratio':>6} | {'classic':>9} {'c.theory':>9} "
            f"{'c.ratio':>7} | {'no-mix':>7}")
    print(head)
    print("-" * len(head))
    worst = 0.0
    for kind in ("uniform", "skewed"):
        make = (lambda m: uniform_keys(rng, m)) if kind == "uniform" else (
            lambda m: skewed_keys(rng, m, buckets))
        keys = make(n)
        srt = np.sort(keys)
        distinct = int(np.count_nonzero(np.diff(srt))) + 1
        probes = absent(make(n_probes), srt)
        top = ""
        if kind == "skewed":
            share = np.bincount((keys >> np.uint64(44)).astype(np.int64)).max() / n
            top = f" (top host {share:.1%} of keys, {distinct:,} distinct)"
        for target in TARGETS:
            bf = B.BloomFilter.for_capacity(n, target)
            bf.add(keys)
            measured = float(bf.query(probes).mean())
            theory = B.blocked_fpr(distinct / bf.n_blocks, bf.n_hashes)
            worst = max(worst, abs(measured / theory - 1))
            ck = classic_k(bf.n_bits / n)
            cw = np.zeros(len(bf.words), np.uint64)
            K.classic_add(cw, keys, ck, B.GROUP)
            out = np.empty(len(probes), np.bool_)
            K.classic_query(cw, probes, ck, B.GROUP, out)
            c_meas, c_theory = float(out.mean()), B.classic_fpr(bf.n_bits / distinct, ck)
            nomix = rawblock_fpr(keys, bf.n_blocks, bf.n_hashes)
            print(f"{kind:8} {target:7.2%} {bf.n_hashes:2d} {bf.bits_per_key:8.2f} {theory:9.3e} "
                  f"{bf.expected_fpr:9.3e} {measured:9.3e} {ci95(measured, len(probes)):8.1e} "
                  f"{measured / theory:6.3f} | {c_meas:9.3e} {c_theory:9.3e} "
                  f"{c_meas / c_theory:7.3f} | {nomix:7.3f}{top}")
            top = ""
    print(f"worst |measured/theory - 1| = {worst:.1%} (the target: < 25%)")


def timed(n: int, fn, *args) -> float:
    """ns/key of ``fn(*args)`` in this thread's CPU time (kernels run in the calling
    thread): on a shared machine, time spent descheduled is not counted. Wall time over
    CPU time is kept in ``CONTENTION`` to show how shared the machine was."""
    w0, c0 = time.perf_counter(), time.thread_time()
    fn(*args)
    wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
    CONTENTION.append(wall / max(cpu, 1e-9))
    return cpu / n * 1e9


CONTENTION: list[float] = []


def warm_up() -> float:
    """First call of every kernel on tiny inputs: numba compile or cache load."""
    t0 = time.perf_counter()
    bf = B.BloomFilter(2, 3)
    keys = np.arange(5, dtype=np.uint64)
    bf.add(keys), bf.query(keys), bf.add_query(keys), bf.fill_ratio
    out = np.empty(5, np.bool_)
    K.classic_add(bf.words.copy(), keys, 3, 4)
    K.classic_query(bf.words, keys, 3, 4, out)
    return time.perf_counter() - t0


def speed_variant(name: str, n: int, fpr: float, rng, reps: int) -> dict[str, float]:
    """Best-of-reps ns/key for one variant; each rep uses new keys and a new filter."""
    best: dict[str, float] = {}
    for _ in range(reps):
        keys, others = uniform_keys(rng, n), uniform_keys(rng, n)
        bf = B.BloomFilter.for_capacity(n, fpr)
        words, k = bf.words, bf.n_hashes
        if name == "blocked, unaligned":  # 8 bytes off a 64-byte boundary: 2 lines a block
            raw = np.empty(len(words) + 16, np.uint64)
            skip = (-raw.ctypes.data % 64) // 8 + 1
            words = raw[skip: skip + len(words)]
        words[:] = 0  # pre-fault every page outside the timing
        out = np.empty(n, np.bool_)
        group = 1 if name == "blocked, group 1" else B.GROUP
        if name == "baseline file":  # --baseline FILE's kernels (same bits)
            none = np.empty(0, np.bool_)
            r = {"insert": timed(n, BASELINE.bloom_add_query, words, keys, k, group, none, False),
                 "probe absent": timed(n, BASELINE.bloom_query, words, others, k, group, out),
                 "probe present": timed(n, BASELINE.bloom_query, words, keys, k, group, out)}
            fresh = B.block_aligned(len(words))
            fresh[:] = 0
            tmp = np.zeros(min(n, max(B.REGION_MIN_KEYS, len(words))), np.uint64)
            r["regions"] = timed(n, BASELINE.bloom_add_regions, fresh, keys, k, group,
                                 B.region_bits(bf.nbytes), tmp)
        elif name == "classic":
            k = classic_k(bf.n_bits / n)
            r = {"insert": timed(n, K.classic_add, words, keys, k, group),
                 "probe absent": timed(n, K.classic_query, words, others, k, group, out),
                 "probe present": timed(n, K.classic_query, words, keys, k, group, out)}
        else:
            none = np.empty(0, np.bool_)
            r = {"insert": timed(n, K.bloom_add_query, words, keys, k, group, none, False),
                 "probe absent": timed(n, K.bloom_query, words, others, k, group, out),
                 "probe present": timed(n, K.bloom_query, words, keys, k, group, out)}
            assert out.all(), "false negative"
            if name == "blocked":  # the region kernels and add_query: aligned filter only
                fresh = B.block_aligned(len(words))  # one cache line per block, as the filter
                fresh[:] = 0  # pre-faulted, as words above
                tmp = np.zeros(min(n, max(B.REGION_MIN_KEYS, len(words))), np.uint64)
                r["regions"] = timed(n, K.bloom_add_regions, fresh, keys, k, group,
                                     B.region_bits(bf.nbytes), tmp)
                assert np.array_equal(fresh, words), "region insert set other bits"
                m = n // 10
                r["add_query"] = timed(m, bf.add_query, others[:m])
                for g in SWEEP:  # probe absent, keys located ahead g at a time
                    r[f"group {g}"] = timed(m, K.bloom_query, words, others[-m:], k, g, out[:m])
        for key, v in r.items():
            best[key] = min(best.get(key, math.inf), v)
        best["MB"] = bf.nbytes / 1e6
        best["k"] = k
    return best


def speed_part(a: argparse.Namespace) -> None:
    n = int(a.speed_keys)
    print(f"\n== speed at {n:,} keys (uniform; the mix makes skew irrelevant here), "
          f"best of {a.reps} ==")
    rng = np.random.default_rng(a.seed + 1)
    for fpr in a.speed_fpr:
        variants = ("blocked", "blocked, unaligned", "blocked, group 1",
                    "classic") + (("baseline file",) if BASELINE else ())
        if a.variants:
            variants = ("blocked",) + tuple(v for v in variants if v in a.variants)
        results = {v: speed_variant(v, n, fpr, rng, a.reps) for v in variants}
        base = results["blocked"]
        print(f"\ntarget {fpr:.2%}: filter {base['MB']:.0f} MB, blocked k={base['k']}, "
              f"classic k={results['classic']['k'] if 'classic' in results else '-'} "
              "(same memory); ns/key "
              f"(x = over blocked)")
        cols = ("insert", "regions", "probe absent", "probe present", "add_query")
        print(f"{'variant':18} " + " ".join(f"{c:>20}" for c in cols))
        for v, r in results.items():
            cells = []
            for c in cols:
                if c in r:
                    cells.append(f"{r[c]:8.1f} (x{r[c] / base[c]:4.2f})".rjust(20))
                else:
                    cells.append(f"{'-':>20}")
            print(f"{v:18} " + " ".join(cells))
    print(f"(the kernels compile k = {', '.join(map(str, K.SPECIAL_K))} as a constant; "
          "other k run the previous kernels' field loop)")
    print(f"\nprobe absent ns/key by group size (GROUP = {B.GROUP}), last target: " + ", ".join(
        f"{g}: {base[f'group {g}']:.1f}" for g in SWEEP))
    print(f"ns/key are thread CPU time; wall/CPU over all timings: median "
          f"{np.median(CONTENTION):.2f}, max {max(CONTENTION):.2f} (1.00 = machine to ourselves)")


def store_part(a: argparse.Namespace) -> None:
    """The Bloom work of ``seenstore bench --keys N --batch B`` alone: the same key
    stream (seenstore.bench.workload.CrawlStream: re-offers, repeats, host skew), a
    LayeredBloom sized as the bench sizes it (the stream's distinct keys, 0.1%), and
    per batch what the store does: the insert of every offered key (``fill``, growing
    a layer only when the keys could overfill the newest), here on the calling thread
    alone (``add``: the same steps the store's background thread runs; its waiter only
    helps once its merge is done), then ``prepare`` of the next layer on a thread
    (prefaulted, outside the timing, as the store does between batches). Thread CPU
    time of the insert per offered key."""
    from seenstore.bloom.sizing import prefault
    from seenstore.bench.workload import CrawlStream

    n, b = int(a.store_stream[0]), int(a.store_stream[1])
    stream = CrawlStream(n, b, 0.5, 0.1, seed=0)
    bf = B.LayeredBloom.for_capacity(stream.expected_total_new, 1e-3)
    prefault(bf.layers[0].words)
    print(f"\n== the store's Bloom work in `seenstore bench --keys {n:.0e} --batch {b:.0e}` "
          f"(first layer {bf.layers[0].nbytes / 2**20:.0f} MiB, k={bf.n_hashes}) ==")
    total_cpu = total_keys = 0
    for plan in stream.plan():
        keys = stream.batch(*plan).keys
        if bf._next is not None:
            bf._next.take()  # built between batches in the store: not this batch's time
        t0, c0, before = time.perf_counter(), time.thread_time(), bf.n_added
        bf.add(keys)
        cpu, wall = time.thread_time() - c0, time.perf_counter() - t0
        fresh = bf.n_added - before
        bf.prepare(fresh)
        total_cpu += cpu
        total_keys += len(keys)
        top = bf.layers[-1]
        print(f"batch {plan[0]}: {len(keys):,} keys, "
              f"{fresh:,} set a bit; layers {len(bf.layers)}, top {top.nbytes / 2**20:.0f} MiB "
              f"k={top.n_hashes}: {cpu / len(keys) * 1e9:.1f} ns/key CPU, "
              f"wall {wall / len(keys) * 1e9:.1f}", flush=True)
    print(f"all batches: {total_cpu / total_keys * 1e9:.1f} ns per offered key (thread CPU)")


def peers_part(a: argparse.Namespace) -> None:
    """The Bloom work of bench/peers.py's seenstore (the store opened with defaults) alone:
    the keeper as an empty store opens it (MIN_BLOOM_CAPACITY at 0.1%), per batch of the
    same stream its new keys, sorted, fed in --lots lots as the store's BloomFeed does
    (``start_insert`` / ``finish_insert``: fill, layers added as they fill), then
    ``prepare_next`` (the next layer built ahead, joined here so its CPU counts in the
    batch), and at the end the checkpoint's ``save``. Per batch: insert CPU (the insert
    threads), process CPU (all threads), minor faults, layers."""
    import os
    import resource
    import tempfile

    from seenstore.bloom.keeper import MIN_BLOOM_CAPACITY, BloomKeeper
    from seenstore.bench.workload import CrawlStream

    n, b = int(a.peers_stream[0]), int(a.peers_stream[1])
    stream = CrawlStream(n, b, 0.5, 0.1, seed=0)
    for k in range(7, 12):  # load every kernel the layers may use, outside the timing
        probe = B.BloomFilter(1 << 14, k)  # (from SMALL keys on: the twins run below it)
        probe.add_in_background(np.arange(1 << 17, dtype=np.uint64)).wait()  # by regions
        B.BloomFilter(1 << 18, k).add(np.arange(1 << 17, dtype=np.uint64))  # key order
    kp = BloomKeeper()
    kp.rebuild(MIN_BLOOM_CAPACITY, 1e-3, [])
    print(f"\n== the Bloom work of bench/peers.py's seenstore (defaults), {n:.0e} keys in "
          f"batches of {b:.0e}, new keys fed in {a.lots} lots ==")
    cpu_all = proc_all = 0.0
    for plan in stream.plan():
        batch = stream.batch(*plan)
        new = np.sort(batch.keys[:batch.n_fresh])
        p0, cpu, fresh = time.process_time(), 0.0, 0
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for part in np.array_split(new, a.lots):
            pending = kp.start_insert(part)
            fresh += kp.finish_insert(pending)
            cpu += pending.cpu_s
        kp.batch_done(fresh)
        kp.prepare_next()
        if kp.bf._next is not None:
            kp.bf._next.take()
        proc = time.process_time() - p0
        cpu_all, proc_all = cpu_all + cpu, proc_all + proc
        print(f"batch {plan[0]}: {len(new):,} new keys: insert CPU {cpu / len(new) * 1e9:.1f}, "
              f"process CPU {proc / len(new) * 1e9:.1f} ns/new key; minor faults "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0}; layers "
              f"{[f'{x.capacity / 1e6:.1f}M k{x.n_hashes}' for x in kp.bf.layers]} "
              f"{kp.bf.nbytes / 2**20:.0f} MiB", flush=True)
    with tempfile.TemporaryDirectory(dir=a.workdir) as d:
        t0 = time.perf_counter()
        kp.bf.save(os.path.join(d, "BLOOM"), 1)
        save = time.perf_counter() - t0
    print(f"per offered key: insert CPU {cpu_all / n * 1e9:.1f} ns, process CPU "
          f"{proc_all / n * 1e9:.1f} ns; save at close {save:.2f} s = {save / n * 1e9:.1f} ns "
          f"(wall)")


def huge_page_kib(words: np.ndarray) -> int | None:
    """AnonHugePages (KiB) of the mapping holding ``words`` (Linux), else None."""
    at, inside = words.ctypes.data, False
    try:
        with open("/proc/self/smaps") as f:
            for line in f:
                head = line.split()
                if head and "-" in head[0] and not head[0].endswith(":"):
                    lo, hi = (int(x, 16) for x in head[0].split("-"))
                    inside = lo <= at < hi
                elif inside and head[0] == "AnonHugePages:":
                    return int(head[1])
    except OSError:
        pass
    return None


def big_part(a: argparse.Namespace) -> None:
    """Lots of --lot keys into a filter of --big-filter GiB: ``add`` against key order."""
    from seenstore.bloom.sizing import prefault, size_for

    per_gib = 2**30 / (size_for(10**9, 1e-3)[0] * 64) * 1e9
    n_blocks, k = size_for(int(a.big_filter * per_gib), 1e-3)
    bf = B.BloomFilter(n_blocks, k)
    t0 = time.perf_counter()
    prefault(bf.words)
    huge = huge_page_kib(bf.words)
    print(f"\n== lots of {a.lot:,} keys into {bf.nbytes / 2**30:.2f} GiB (k={k}; first touch "
          f"{time.perf_counter() - t0:.1f} s; on 2 MiB pages: "
          f"{'unknown' if huge is None else f'{huge / 2**20:.2f} GiB'}; "
          f"add by {bf._region_bits_for(a.lot)} region bits) ==")
    rng = np.random.default_rng(a.seed)
    none = np.empty(0, np.bool_)
    res: dict[str, list] = {"add": [], "key order": []}
    for r in range(a.reps):
        for name in (("add", "key order") if r % 2 == 0 else ("key order", "add")):
            keys = np.sort(uniform_keys(rng, a.lot))  # new keys arrive sorted per shard
            if name == "add":
                res[name].append(timed(a.lot, bf.add, keys))
            else:
                res[name].append(timed(a.lot, K.bloom_add_query, bf.words, keys, k, B.GROUP,
                                       none, False))
    for name, got in res.items():
        print(f"{name:>10}: {np.median(got):.1f} ns/key (median of {a.reps}; min {min(got):.1f})")
    print(f"wall/CPU median {np.median(CONTENTION):.2f} (above 1: the machine was shared)")


def fuse_part(a: argparse.Namespace) -> None:
    """Part 6: binary fuse against blocked Bloom at equal measured FPR (module doc)."""
    from seenstore.bloom.fuse import FuseFilter

    n, n_probes = int(a.fuse), int(a.probes)
    rng = np.random.default_rng(a.seed)
    buckets = rng.permutation(2**20)[: a.hosts].astype(np.uint64)
    keys = np.unique(skewed_keys(rng, n, buckets))
    rng.shuffle(keys)  # a run's keys are sorted; the costs here do not depend on it
    n = len(keys)
    probes = absent(skewed_keys(rng, n_probes, buckets), np.sort(keys))
    FuseFilter.build(keys[:1000], 8).query(keys[:10])  # compile or load the kernels
    print(f"\n== static binary fuse vs blocked Bloom, {n:,} distinct host-skewed keys, "
          f"{len(probes):,} absent probes; ns/key = thread CPU, best of {a.reps} ==")
    print(f"{'filter':<24} {'bits/key':>9} {'FPR':>10} {'build':>8} {'absent':>8} "
          f"{'present':>8}")
    for bits in a.fuse_bits:
        best = {"build": 1e18, "absent": 1e18, "present": 1e18}
        for _ in range(a.reps):
            c0 = time.thread_time()
            f = FuseFilter.build(keys, bits)
            best["build"] = min(best["build"], (time.thread_time() - c0) / n * 1e9)
            best["absent"] = min(best["absent"], timed(len(probes), f.query, probes))
            best["present"] = min(best["present"], timed(n, f.query, keys))
        assert f.query(keys).all()
        rate = float(f.query(probes).mean())
        print(f"{f'fuse {bits}-bit':<24} {f.bits_per_key:9.2f} {rate:10.3e} "
              f"{best['build']:8.1f} {best['absent']:8.1f} {best['present']:8.1f}")
        target = max(rate, 1e-9)
        bbest = {"build": 1e18, "absent": 1e18, "present": 1e18}
        for _ in range(a.reps):
            bf = B.BloomFilter.for_capacity(n, target)
            bbest["build"] = min(bbest["build"], timed(n, bf.add, keys))
            bbest["absent"] = min(bbest["absent"], timed(len(probes), bf.query, probes))
            bbest["present"] = min(bbest["present"], timed(n, bf.query, keys))
        brate = float(bf.query(probes).mean())
        label = f"blocked Bloom k={bf.n_hashes}"
        print(f"{label:<24} {bf.bits_per_key:9.2f} {brate:10.3e} "
              f"{bbest['build']:8.1f} {bbest['absent']:8.1f} {bbest['present']:8.1f}"
              f"   fuse/Bloom memory {f.bits_per_key / bf.bits_per_key:.2f}")
    print(f"machine contention (wall/CPU of the timed calls): median "
          f"{float(np.median(CONTENTION)):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fpr-keys", type=float, default=1e7)
    ap.add_argument("--probes", type=float, default=1e7)
    ap.add_argument("--hosts", type=int, default=100_000)
    ap.add_argument("--speed-keys", type=float, default=1e8)
    ap.add_argument("--speed-fpr", type=float, nargs="+", default=[0.01, 0.0005, 0.0001])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--skip-fpr", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--quick", action="store_true", help="1e6 keys everywhere, 1 rep")
    ap.add_argument("--store-stream", type=float, nargs=2, metavar=("KEYS", "BATCH"),
                    help="only the store's Bloom work of `seenstore bench --keys KEYS "
                    "--batch BATCH` (e.g. 1e8 1e7), per offered key")
    ap.add_argument("--peers-stream", type=float, nargs=2, metavar=("KEYS", "BATCH"),
                    help="only the Bloom work of bench/peers.py's seenstore (defaults)")
    ap.add_argument("--lots", type=int, default=4, help="--peers-stream: feed lots per batch")
    ap.add_argument("--workdir", default=".", help="--peers-stream: where the save goes")
    ap.add_argument("--big-filter", type=float, metavar="GIB",
                    help="only lots of --lot keys into a filter of GIB GiB (add against "
                    "key order)")
    ap.add_argument("--lot", type=int, default=1 << 20, help="--big-filter: keys per lot")
    ap.add_argument("--baseline", metavar="FILE",
                    help="another checkout's seenstore/kernels/bloom.py: a 'baseline file' row")
    ap.add_argument("--variants", nargs="+", metavar="NAME",
                    help="part 2: only these rows besides 'blocked' (e.g. 'baseline file')")
    ap.add_argument("--fuse", type=float, metavar="KEYS",
                    help="only part 6: a static binary fuse filter against blocked Bloom")
    ap.add_argument("--fuse-bits", type=int, nargs="+", default=[8, 11, 12, 16])
    a = ap.parse_args()
    if a.baseline:
        import importlib.util
        global BASELINE
        spec = importlib.util.spec_from_file_location("bloom_baseline", a.baseline)
        BASELINE = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(BASELINE)
    if a.quick:
        a.fpr_keys = a.probes = a.speed_keys = 1e6
        a.reps = 1
    print(f"JIT warm-up (numba compile or cache load; excluded from every timing): "
          f"{warm_up():.2f} s")
    if a.store_stream:
        store_part(a)
        return
    if a.peers_stream:
        peers_part(a)
        return
    if a.fuse:
        fuse_part(a)
        return
    if a.big_filter:
        a.reps = max(a.reps, 1)
        big_part(a)
        return
    if not a.skip_fpr:
        fpr_part(a)
    if not a.skip_speed:
        speed_part(a)


if __name__ == "__main__":
    main()
