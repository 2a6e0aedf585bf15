"""``seenstore bench``: the headline benchmark on a generated crawl-like stream.

Drives ``benchrun.run_bench`` (real store end to end, counts checked against the
stream's exact expectation, floor measured in the same run), prints per-batch and
total figures or one JSON object, optionally a plot. Exit 1 if any count is wrong.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import click

from seenstore.bench.run import (ANSWERS, SPILL_ABOVE_BATCHES, STAGES, BenchResult, default_batch_size, gib, plan_resources, run_bench)
from seenstore.errors import InvalidInputError, StoreIOError
from seenstore.bench.workload import CrawlStream
from seenstore.cli import COUNT, SIZE, Count, fail, main, threads_option




def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _print_text(r: dict) -> None:
    p = r["params"]
    ns = r["ns_per_key"]
    fl = r["floor"]
    echo = click.echo
    echo(f"keys offered     {r['offered']:,} in {len(r['batches'])} batches of {p['batch']:,} "
         f"(reoffer {p['reoffer']}, dup {p['dup']}, seed {p['seed']}); answer: "
         + ("sorted new keys (add_new)" if p.get("answer", "new") == "new"
            else "mask over offered keys (add)"))
    cap = p.get("bloom_capacity")
    if not p.get("bloom", True):
        echo("bloom            off (--no-bloom): the merge alone answers")
    else:
        echo("bloom capacity   " + (f"{cap:,} keys" if cap else
                                  "store default (2^20, grows 4x by adding a layer)"))
        end = r.get("bloom_end") or {}
        if end.get("state") == "kept":
            echo(f"bloom at end     kept: {end['keys']:,} keys, {end['bytes'] / 2**30:.2f} GiB in "
                 f"{end['layers']} layer(s), fill {end['fill_ratio']:.3f}, expected "
                 f"false-positive rate {end['expected_fpr']:.2g}")
        elif end:
            echo(f"bloom at end     {end['reason']}: the next open rebuilds it")
    echo(f"new keys         {r['new']:,} (expected {r['expected_new']:,}): "
         + ("VERIFIED" if r["verified"] else f"WRONG in batches {r['bad_batches']}"))
    echo(f"store total      {r['store_s']:.2f} s  = {r['keys_per_s'] / 1e6:.2f} M keys/s"
         f"  = {ns['store_total']:.1f} ns/key (generate not included)")
    echo("                 (ns/key below is per offered key; 'other' = time inside add() that "
         "last_timings does not name)")
    echo("ns/key by stage  " + "  ".join(f"{s} {ns[s]:.1f}" for s in STAGES)
         + f"  compaction wait {ns.get('compact_wait', 0):.1f}  other {ns['other']:.1f}")
    if ns.get("shard_sort"):
        echo(f"                 (sort = partitioning the batch by shard; each shard's sort, "
             f"{ns['shard_sort']:.1f} ns/key, ran on a thread of its own inside merge,")
        echo("                 beside the disk I/O of the shards already sorted)")
    if ns.get("bloom_background") and p.get("spill_memory"):
        echo("                 (bloom = time waited for the deferred Bloom inserts: each "
             "batch's new keys, read back from each shard's new run as its check finished "
             "it, went in on a thread beside that check and the next batch's spill,")
        echo(f"                 {ns['bloom_background']:.1f} ns/key of wall time, "
             f"{ns.get('bloom_cpu', 0):.1f} of CPU; the last batch's is waited for at "
             "the end)")
    elif ns.get("bloom_background"):
        echo("                 (bloom = time waited for the Bloom insert of each batch's "
             "new keys, which ran after its commit on a thread past its return, beside "
             "the next batch's generation,")
        echo(f"                 {ns['bloom_background']:.1f} ns/key of wall time, "
             f"{ns.get('bloom_cpu', 0):.1f} of CPU; waited for before the next batch's "
             "floor sorts and at the end)")
    stages = r.get("spill_stages_ns_per_key") or {}
    if stages:
        echo("spilled stages   " + "  ".join(f"{k} {v['wall']:.1f}/{v['cpu']:.1f}"
                                         for k, v in stages.items())
             + " ns/key, wall/CPU of the whole process")
        echo("                 (spill: partitioning the chunks and waiting for their appends; "
             "read, sort, split, check, write: the calling thread's steps of the check phase; "
             "write_behind: the run sink's thread, beside them; sync: the wait for the new "
             "runs' fsyncs)")
    if ns.get("cpu_user") is not None and r["store_s"]:
        busy = (ns["cpu_user"] + ns.get("cpu_sys", 0)) / ns["store_total"]
        echo(f"CPU inside add   user {ns['cpu_user']:.1f} + sys {ns.get('cpu_sys', 0):.1f} ns/key, "
             f"all threads: {busy:.2f} of the {p.get('threads', '?')} cores busy on average "
             "(on a shared machine, the others' work takes the rest)")
    laps = r.get("shard_threads_ns_per_key") or {}
    if laps.get("check_s"):
        echo("shard threads    " + "  ".join(
            f"{k} {laps.get(k + '_s', 0):.1f} (CPU {laps.get(k + '_cpu_s', 0):.1f})"
            for k in ("sort_wait", "check", "write", "fsync", "fsync_wait"))
             + " ns/key, summed over the threads; wall minus CPU = waiting")
    echo(f"bytes read       {r['bytes_read']:,}   written {r['bytes_written']:,}")
    if r.get("run_cache"):
        rc = r["run_cache"]
        echo(f"run cache        {r['bytes_cached']:,} run bytes checked from memory, not read; "
             f"budget {rc['budget_bytes'] / 2**30:.1f} GiB, holds {rc['bytes'] / 2**20:,.0f} MiB "
             f"({rc['runs']} runs) at the end")
    bpk = r["disk_bytes_per_key"]
    echo(f"on disk          {r['disk_bytes']:,} bytes for {r['store_keys']:,} keys"
         + (f" = {bpk:.3f} bytes/key" if bpk else ""))
    echo(f"peak RSS         {_mib(r['peak_rss_bytes'])} (whole process, generator included)")
    for i, d in enumerate(r["disk_probe"]):
        direct = d.get("direct_write_bps")
        echo(f"disk probe {('start', 'end')[min(i, 1)]:5} {_mib(d['nbytes'])}: "
             f"write+fsync {d['write_bps'] / 1e9:.2f} GB/s, cold read {d['read_bps'] / 1e9:.2f} GB/s"
             + (f", O_DIRECT write {direct / 1e9:.2f} GB/s" if direct else ""))
    probe = r.get("cpu_probe_ns_per_key") or []
    if probe:
        echo("cpu probe        np.sort of 2^20 keys: "
             + ", ".join(f"{x:.1f}" for x in probe)
             + " ns/key of thread CPU (start, end): this host's speed then; "
               "runs compare only where these agree")
    srt = r.get("sort") or {}
    echo(f"sort             {srt.get('sort', '?')} ({srt.get('source', '')}); threads "
         f"{p.get('threads')}")
    echo(f"floor            {fl['total_s']:.2f} s = {fl['sort_by']} sort {fl['sort_s']:.2f} s "
         f"+ sequential I/O of the bytes read and written (compaction included) "
         f"{fl['io_s']:.2f} s")
    echo(f"                 (the faster sort of the same batches, both timed in this run: "
         f"np.sort {fl['sort_numpy_s']:.2f} s, radix on {p.get('threads')} threads "
         f"{fl['sort_radix_s']:.2f} s, its scratch touched before the timer, as the store "
         f"keeps its own)")
    echo(f"ratio            store/floor {fl['ratio_store_to_floor']:.2f}x   "
         f"(store+generate)/floor {fl['ratio_store_plus_generate_to_floor']:.2f}x")
    if fl.get("direct_total_s"):
        echo(f"stricter floor   {fl['direct_total_s']:.2f} s with the O_DIRECT write rate: "
             f"store/floor {fl['ratio_store_to_direct_floor']:.2f}x")
    echo(f"JIT warm-up      {r['warmup_s']:.2f} s (not in timings); wall {r['wall_s']:.1f} s")
    m = r["machine"]
    simd = m["numpy_simd"]
    echo(f"machine          {m['cpu']}, {m['cores']} cores; numpy {m['numpy']} SIMD baseline "
         f"{' '.join(simd['baseline']) or '-'}, found {' '.join(simd['found']) or '-'}, "
         f"not found {' '.join(simd['not_found']) or '-'}")


ROW_STAGES = STAGES + ("compact_wait", "other")


def _print_batches(batches: list) -> None:
    click.echo(f"{'batch':>5} {'stored':>13} {'offered':>11} {'new':>11} {'ns/key':>7}  "
               + " ".join(f"{s[:6]:>6}" for s in ROW_STAGES) + f" {'MB rd':>7} {'MB wr':>7}")
    for b in batches:
        n = max(1, b["offered"])
        click.echo(f"{b['batch']:>5} {b['stored_before']:>13,} {b['offered']:>11,} "
                   f"{b['new']:>11,} {b['add_s'] / n * 1e9:>7.1f}  "
                   + " ".join(f"{b[s + '_s'] / n * 1e9:>6.1f}" for s in ROW_STAGES)
                   + f" {b['bytes_read'] / 1e6:>7.0f} {b['bytes_written'] / 1e6:>7.0f}"
                   + ("" if b["ok"] else "  WRONG"))


def write_plot(r: dict, path: str) -> None:
    """Stacked ns/key per stage for each batch against the store size before it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bs = r["batches"]
    x = [b["stored_before"] / 1e6 for b in bs]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    bottom = [0.0] * len(bs)
    for s in ROW_STAGES:
        y = [b[f"{s}_s"] / max(1, b["offered"]) * 1e9 for b in bs]
        ax.bar(range(len(bs)), y, bottom=bottom, label=s)
        bottom = [a + c for a, c in zip(bottom, y)]
    ax.set_xticks(range(len(bs)), [f"{v:.3g}" for v in x], rotation=90 if len(bs) > 20 else 0)
    ax.set_xlabel("keys in the store before the batch (millions)")
    ax.set_ylabel("ns per offered key")
    p = r["params"]
    ax.set_title(f"seenstore bench: {r['offered']:,} keys, batch {p['batch']:,}, "
                 f"reoffer {p['reoffer']} (floor ratio "
                 f"{r['floor']['ratio_store_to_floor']:.2f}x)")
    ax.legend(title="stage", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@main.command()
@click.option("--keys", "total", type=Count(minimum=1), default="1e8", show_default=True,
              help="Keys to offer in total (1e9 style accepted).")
@click.option("--batch", type=Count(minimum=1), default=None,
              help="Keys per batch (default: a quarter of available memory, 64 B/key).")
@click.option("--reoffer", type=click.FloatRange(0, 1), default=0.5, show_default=True,
              help="Share of each batch's distinct slots re-offering keys of earlier batches.")
@click.option("--dup", type=click.FloatRange(0, 0.99), default=0.1, show_default=True,
              help="Share of each batch that repeats keys inside the same batch.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--dir", "work_dir", type=click.Path(file_okay=False), default=None,
              help="Working folder (default: a new temp folder, removed afterwards).")
@click.option("--keep", is_flag=True, help="Keep the benchmark store afterwards.")
@click.option("--probe-bytes", type=COUNT, default=None,
              help="Size of the dd-style disk probe file (default: 8 B x keys, 64 MiB..1 GiB).")
@click.option("--bloom-capacity", type=COUNT, default=None,
              help="Keys the Bloom filter is sized for (default: the stream's distinct keys, "
                   "as an operator who knows the crawl's scale would; 0: the store's default, "
                   "which starts at 2^20 and is rebuilt 2x larger each time it fills).")
@click.option("--bloom/--no-bloom", default=True, show_default=True,
              help="Keep the store's Bloom filter (needed by contains, the stage and "
                   "approximate mode); --no-bloom measures the merge alone.")
@click.option("--answer", type=click.Choice(ANSWERS), default="new", show_default=True,
              help="What each batch asks the store for: 'new' = the sorted new keys "
                   "(SeenStore.add_new, what the peers return); 'mask' = a mask aligned with "
                   "the offered keys (SeenStore.add; one more pass, shown as 'align').")
@click.option("--run-format", type=click.Choice(["1", "2", "auto"]), default="auto",
              show_default=True,
              help="Runs written as 2 (compressed, ~4.5 B/key) or 1 (raw 8 B/key keys); auto: "
                   "raw when the raw plan takes at most 80% of the free disk, else compressed.")
@click.option("--memory", type=SIZE, default=None,
              help="Spill every batch (SeenStore.add_new_file) with this memory budget "
                   "(e.g. 2G; implies --spill). Default: chosen from the memory found.")
@click.option("--spill/--in-memory", default=None,
              help="Batches bigger than memory, generated straight into spill buckets "
                   "(DRUM-style, one store sweep per batch), or sorted in memory. Default: "
                   f"spilled when in-memory batches would be more than "
                   f"{SPILL_ABOVE_BATCHES}.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@click.option("--save", type=click.Path(dir_okay=False), default=None,
              help="Also write the JSON object to FILE.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Write a PNG of ns/key per stage for each batch.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@threads_option
@click.option("--shards", default=None, metavar="N[,N...]",
              help="Also run the stream through a ShardedStore on Ray with N shards (several: "
                   "1,2,4), beside the plain store; needs the [cluster] extra (docs/cluster.md).")
@click.option("--ray-address", default=None, help="With --shards: the Ray cluster to join.")
def bench(total, batch, reoffer, dup, seed, work_dir, keep, probe_bytes, bloom_capacity, bloom, answer,
          run_format, memory, spill, as_json, save, plot, quiet, threads, shards, ray_address):
    """Offer a generated crawl-like key stream to a new store and report the figures.

    Each batch mixes fresh keys, keys re-offered from earlier batches and repeats
    inside the batch, with host-skewed top bits. Every answer the store returns is
    checked against the stream's exact expectation (exit 1 if any is wrong). The
    floor (the faster of np.sort and the radix sort of the same batches, both timed
    in this run, + sequential read and write of the bytes the merges moved, at the
    disk bandwidth measured in this run) is printed beside, with the CPU and numpy's
    SIMD dispatch.
    """
    if plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise InvalidInputError(
                "--plot needs matplotlib: pip install 'seenstore[bench]'") from None
    probe = probe_bytes or min(1 << 30, max(64 << 20, 8 * total))
    # a first guess of the stream's distinct keys, with one batch of 1e8 (or all):
    # plan_bench remakes the plan for the chosen batch's own count
    distinct = CrawlStream(total, batch or min(total, 100_000_000), reoffer, dup,
                           seed=seed).expected_total_new
    bloom_capacity_arg = bloom_capacity
    if bloom_capacity is None:
        bloom_capacity = distinct
    bloom_capacity = bloom_capacity or None
    if shards is not None:
        if answer != "new" or not bloom or plot or keep or probe_bytes:
            raise InvalidInputError("--shards runs add_new with the Bloom filter and no disk "
                                    "probe: drop --answer mask, --no-bloom, --plot, --keep, "
                                    "--probe-bytes")
        stream = CrawlStream(total, batch or default_batch_size(total), reoffer, dup, seed=seed)
        return _cluster_bench(stream, shards, ray_address, work_dir, bloom_capacity, as_json, save)
    own_dir = work_dir is None
    if own_dir:
        work_dir = tempfile.mkdtemp(prefix="seenstore-bench-")
    else:
        os.makedirs(work_dir, exist_ok=True)
    store_path = os.path.join(work_dir, "bench-store")
    created = not os.path.exists(store_path)
    try:
        if (spill or memory is not None) and answer != "new":
            raise InvalidInputError("spilled batches answer with the count of new keys: "
                                    "drop --answer mask (or use --in-memory)")
        if spill is False and memory is not None:
            raise InvalidInputError("--memory is the spilled batches' budget: drop --in-memory")
        plan, bloom_capacity = plan_bench(
            total, distinct, batch, reoffer, dup, seed, work_dir, probe, bloom_capacity,
            bloom_capacity_arg is None, bloom, run_format, memory,
            spill if answer == "new" else False)
        stream = CrawlStream(total, plan.batch, reoffer, dup, seed=seed)
        res = _run(stream, store_path, probe, quiet, bloom_capacity, answer, bloom,
                   plan.run_format, threads, plan.spill_memory, plan.shard_bits,
                   plan.bloom_fpr)
    finally:
        if not keep:
            if own_dir:
                shutil.rmtree(work_dir, ignore_errors=True)
            elif created:
                shutil.rmtree(store_path, ignore_errors=True)
    r = res.to_dict()
    r["params"]["kept_store"] = store_path if keep else None
    r["resources"] = {**plan.to_dict(), "disk_used": r.get("disk_bytes"),
                      "peak_rss": r.get("peak_rss_bytes")}
    if save:
        with open(save, "w") as f:
            json.dump(r, f)
    if as_json:
        click.echo(json.dumps(r))
    else:
        _print_batches(r["batches"])
        _print_text(r)
        res_ = r["resources"]
        sm = res_.get("spill_memory")
        click.echo(f"resources       batch {res_['batch']:,} keys "
                   + (f"spilled (memory budget {_mib(sm)}, {res_['shard_bits']} shard bits, "
                      f"busiest shard {res_['busiest_shard_share']:.1%} of a batch) " if sm
                      else "in memory ")
                   + f"from {gib(res_['memory_available'])} memory available; run format "
                   f"{res_['run_format']}; disk needed about {gib(res_['disk_needed'])} ("
                   + ", ".join(f"{k} {gib(v)}" for k, v in res_.get("disk", {}).items())
                   + f") of {gib(res_['disk_free'])} free, used "
                   f"{gib(res_['disk_used'] or 0)}; peak RSS {gib(res_['peak_rss'] or 0)}")
        if sm:
            _print_memory_plan(res_, r)
        if keep:
            click.echo(f"store kept at   {store_path}")
    if plot:
        write_plot(r, plot)
        if not as_json:
            click.echo(f"plot written     {plot}")
    if not r["verified"]:
        fail(f"new-key counts differ from the expectation in batches {r['bad_batches']}", 1)


def _print_memory_plan(plan: dict, r: dict) -> None:
    """The spilled plan's estimated peak RSS by part against the measured peak (and
    the sampled peak of each phase of the spilled batches, benchrun.RssSampler)."""
    est = plan.get("memory_estimate") or {}
    if not est:
        return
    g = lambda n: f"{n / 2**30:.2f} GiB"  # noqa: E731
    click.echo(f"memory plan      estimated peak {g(est['total'])} = interpreter "
               f"{g(est['interpreter'])} + heap slack {g(est.get('heap_slack', 0))} + Bloom {g(est['bloom'])} (target "
               f"{plan['bloom_fpr']:g}) + max(spill phase {g(est['spill_phase'])}, check "
               f"phase {g(est['check_phase'])}); measured peak {g(r['peak_rss_bytes'])}")
    phases = r.get("rss_by_phase") or {}
    if phases:
        click.echo("                 sampled peak RSS by phase: " + ", ".join(
            f"{k} {g(v)}" for k, v in sorted(phases.items())))


def _cluster_bench(stream, shards, ray_address, work_dir, bloom_capacity, as_json, save):
    """``--shards``: the plain store and ShardedStores on the same stream (cluster/bench.py)."""
    try:
        counts = [int(x) for x in shards.replace("/", ",").split(",") if x.strip()]
    except ValueError:
        raise InvalidInputError(f"--shards takes N or N,N,...: {shards!r}") from None
    from seenstore.bench.cluster import format_text, run_cluster_bench

    own_dir = work_dir is None
    work_dir = tempfile.mkdtemp(prefix="seenstore-bench-") if own_dir else work_dir
    os.makedirs(work_dir, exist_ok=True)
    try:
        r = run_cluster_bench(stream, work_dir, counts, ray_address, bloom_capacity)
    finally:
        if own_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
    if save:
        with open(save, "w") as f:
            json.dump(r, f)
    click.echo(json.dumps(r) if as_json else "\n".join(format_text(r)))
    if not r["verified"]:
        fail("new keys differ from the expectation (see the answers column)", 1)


def _run(stream: CrawlStream, store_path: str, probe: int, quiet: bool,
         bloom_capacity: int | None, answer: str, bloom: bool, run_format: int,
         threads: int | None, spill_memory: int | None = None,
         shard_bits: int | None = None, bloom_fpr: float | None = None) -> BenchResult:
    if quiet:
        return run_bench(stream, store_path, probe, bloom_capacity=bloom_capacity, answer=answer,
                         bloom=bloom, run_format=run_format, threads=threads,
                         spill_memory=spill_memory, shard_bits=shard_bits,
                         bloom_fpr=bloom_fpr)
    with click.progressbar(length=stream.total_keys, label="offering keys", file=sys.stderr,
                           show_pos=True, item_show_func=lambda s: s) as bar:

        def on_batch(row: dict) -> None:
            n = max(1, row["offered"])
            bar.update(row["offered"], f"{row['add_s'] / n * 1e9:.0f} ns/key")

        return run_bench(stream, store_path, probe, on_batch, bloom_capacity, answer, bloom,
                         run_format, threads, spill_memory, shard_bits, bloom_fpr)


def plan_bench(total, distinct, batch, reoffer, dup, seed, work_dir, probe, bloom_capacity,
               sized, bloom, run_format, memory, spill):
    """The run's ResourcePlan and the Bloom capacity it was made for, from a first
    guess of the stream's ``distinct`` keys. They depend on the batch chosen (fewer,
    bigger batches re-offer less), so the plan is made again for the chosen batch's own
    count (``sized``: the filter is sized for it); when a bigger spilled batch's keys no
    longer fit (filter memory, disk), one batch more, until a plan fits (1e10 on this
    project's 24 GiB machine: 3 batches of 3.33e9 have 6e9 distinct keys, whose filter
    leaves no memory)."""
    def distinct_of(b: int) -> int:
        return CrawlStream(total, b, reoffer, dup, seed=seed).expected_total_new

    plan_batch, plan_spill = batch, spill
    plan = spilled_batch = error = None  # spilled_batch: the last spilled plan's batch
    for _ in range(8):
        try:
            plan = plan_resources(total, distinct, plan_batch, work_dir,
                                  bloom_capacity if bloom else None, probe,
                                  None if run_format == "auto" else int(run_format),
                                  memory, plan_spill, (20, None, seed))
        except StoreIOError as e:
            if spilled_batch is None or batch is not None:
                raise
            plan, error = None, e
            spilled_batch = plan_batch = -(-total // (-(-total // spilled_batch) + 1))
            plan_spill = True
            d = distinct_of(plan_batch)
        else:
            if plan.spill_memory is not None:
                spilled_batch = plan.batch
            d = distinct_of(plan.batch)
            if d == distinct or (d < distinct and not sized):
                return plan, bloom_capacity
        # the filter sized for the run's own distinct keys, exactly (it never grows,
        # and the spilled plan's memory depends on its size: 1e10 in batches of 2e9
        # has 5.4e9, not the 5.625e9 of batches of 1e8)
        distinct = d
        if sized:
            bloom_capacity = distinct
    if plan is None:
        raise error
    return plan, bloom_capacity
