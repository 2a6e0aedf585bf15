"""``seenstore bench``'s report: the ``--json`` object, its text lines and its plot.

``document`` makes the one JSON object of a run (the result, the resource plan and
what was used of it); ``text_lines`` renders that object as the text report (batch
table, figures, resources, memory plan), one string per line, without a newline;
``write_plot`` draws its ns/key by stage per batch (matplotlib, the [bench] extra).
Each reads only the object it is given: the same lines come from a saved ``--save``
file.
"""

from __future__ import annotations

from seenstore.bench.plan import ResourcePlan
from seenstore.bench.result import STAGES, THREAD_LAPS, BenchResult
from seenstore.bench.units import gib, mib

ROW_STAGES = STAGES + ("compact_wait", "other")


def document(res: BenchResult, plan: ResourcePlan, kept_store: str | None) -> dict:
    """The ``--json`` object: ``res.to_dict()`` with ``params.kept_store`` (the store's
    path when it was kept, else None) and ``resources``: the plan, with the disk and
    peak RSS the run used."""
    r = res.to_dict()
    r["params"]["kept_store"] = kept_store
    r["resources"] = {**plan.to_dict(), "disk_used": r.get("disk_bytes"),
                      "peak_rss": r.get("peak_rss_bytes")}
    return r


def text_lines(r: dict) -> list[str]:
    """The text report of ``document``'s object ``r``."""
    return _batch_lines(r["batches"]) + _summary_lines(r) + _resource_lines(r)


def _summary_lines(r: dict) -> list[str]:
    """The lines after the batch table: the stream, the Bloom filter, the verdict, time
    by stage, bytes, disk and CPU probes, the floor and the ratio to it, the machine."""
    out: list[str] = []
    emit = out.append
    p = r["params"]
    ns = r["ns_per_key"]
    fl = r["floor"]
    emit(f"keys offered     {r['offered']:,} in {len(r['batches'])} batches of {p['batch']:,} "
         f"(reoffer {p['reoffer']}, dup {p['dup']}, seed {p['seed']}); answer: "
         + ("sorted new keys (add_new)" if p.get("answer", "new") == "new"
            else "mask over offered keys (add)"))
    cap = p.get("bloom_capacity")
    if not p.get("bloom", True):
        emit("bloom            off (--no-bloom): the merge alone answers")
    else:
        emit("bloom capacity   " + (f"{cap:,} keys" if cap else
                                  "store default (2^20, grows 4x by adding a layer)"))
        end = r.get("bloom_end") or {}
        if end.get("state") == "kept":
            emit(f"bloom at end     kept: {end['keys']:,} keys, {end['bytes'] / 2**30:.2f} GiB in "
                 f"{end['layers']} layer(s), fill {end['fill_ratio']:.3f}, expected "
                 f"false-positive rate {end['expected_fpr']:.2g}")
        elif end:
            emit(f"bloom at end     {end['reason']}: the next open rebuilds it")
    emit(f"new keys         {r['new']:,} (expected {r['expected_new']:,}): "
         + ("VERIFIED" if r["verified"] else f"WRONG in batches {r['bad_batches']}"))
    emit(f"store total      {r['store_s']:.2f} s  = {r['keys_per_s'] / 1e6:.2f} M keys/s"
         f"  = {ns['store_total']:.1f} ns/key (generate not included)")
    emit("                 (ns/key below is per offered key; 'other' = time inside add() that "
         "last_timings does not name)")
    emit("ns/key by stage  " + "  ".join(f"{s} {ns[s]:.1f}" for s in STAGES)
         + f"  compaction wait {ns.get('compact_wait', 0):.1f}  other {ns['other']:.1f}")
    if ns.get("shard_sort"):
        emit(f"                 (sort = partitioning the batch by shard; each shard's sort, "
             f"{ns['shard_sort']:.1f} ns/key, ran on a thread of its own inside merge,")
        emit("                 beside the disk I/O of the shards already sorted)")
    if ns.get("bloom_background") and p.get("spill_memory"):
        emit("                 (bloom = time waited for the deferred Bloom inserts: each "
             "batch's new keys, read back from each shard's new run as its check finished "
             "it, went in on a thread beside that check and the next batch's spill,")
        emit(f"                 {ns['bloom_background']:.1f} ns/key of wall time, "
             f"{ns.get('bloom_cpu', 0):.1f} of CPU; the last batch's is waited for at "
             "the end)")
    elif ns.get("bloom_background"):
        emit("                 (bloom = time waited for the Bloom insert of each batch's "
             "new keys, which ran after its commit on a thread past its return, beside "
             "the next batch's generation,")
        emit(f"                 {ns['bloom_background']:.1f} ns/key of wall time, "
             f"{ns.get('bloom_cpu', 0):.1f} of CPU; waited for before the next batch's "
             "floor sorts and at the end)")
    if r.get("final_bloom_wait_s"):
        emit(f"                 (after the last batch, {r['final_bloom_wait_s']:.3f} s waited "
             "for its Bloom insert, which no generation overlapped: in the store total, "
             "not in the last batch's row)")
    stages = r.get("spill_stages_ns_per_key") or {}
    if stages:
        emit("spilled stages   " + "  ".join(f"{k} {v['wall']:.1f}/{v['cpu']:.1f}"
                                         for k, v in stages.items())
             + " ns/key, wall/CPU of the whole process")
        emit("                 (spill: partitioning the chunks and waiting for their appends; "
             "read, sort, split, check, write: the calling thread's steps of the check phase; "
             "write_behind: the run sink's thread, beside them; remove: the wait for the "
             "read buckets' removal, on a thread beside them; sync: the wait for the new "
             "runs' fsyncs)")
    if ns.get("cpu_user") is not None and r["store_s"]:
        busy = (ns["cpu_user"] + ns.get("cpu_sys", 0)) / ns["store_total"]
        emit(f"CPU inside add   user {ns['cpu_user']:.1f} + sys {ns.get('cpu_sys', 0):.1f} ns/key, "
             f"all threads: {busy:.2f} of the {p.get('threads', '?')} cores busy on average "
             "(on a shared machine, the others' work takes the rest)")
    laps = r.get("shard_threads_ns_per_key") or {}
    if laps.get("check_s"):
        emit("shard threads    " + "  ".join(
            f"{k} {laps.get(k + '_s', 0):.1f} (CPU {laps.get(k + '_cpu_s', 0):.1f})"
            for k in THREAD_LAPS)
             + " ns/key, summed over the threads; wall minus CPU = waiting")
    emit(f"bytes read       {r['bytes_read']:,}   written {r['bytes_written']:,}")
    if r.get("run_cache"):
        rc = r["run_cache"]
        emit(f"run cache        {r['bytes_cached']:,} run bytes checked from memory, not read; "
             f"budget {rc['budget_bytes'] / 2**30:.1f} GiB, holds {rc['bytes'] / 2**20:,.0f} MiB "
             f"({rc['runs']} runs) at the end")
    bpk = r["disk_bytes_per_key"]
    emit(f"on disk          {r['disk_bytes']:,} bytes for {r['store_keys']:,} keys"
         + (f" = {bpk:.3f} bytes/key" if bpk else ""))
    emit(f"peak RSS         {mib(r['peak_rss_bytes'])} (whole process, generator included)")
    for i, d in enumerate(r["disk_probe"]):
        direct = d.get("direct_write_bps")
        emit(f"disk probe {('start', 'end')[min(i, 1)]:5} {mib(d['nbytes'])}: "
             f"write+fsync {d['write_bps'] / 1e9:.2f} GB/s, "
             f"cold read {d['read_bps'] / 1e9:.2f} GB/s"
             + (f", O_DIRECT write {direct / 1e9:.2f} GB/s" if direct else ""))
    probe = r.get("cpu_probe_ns_per_key") or []
    if probe:
        emit("cpu probe        np.sort of 2^20 keys: "
             + ", ".join(f"{x:.1f}" for x in probe)
             + " ns/key of thread CPU (start, end): this host's speed then; "
               "runs compare only where these agree")
    srt = r.get("sort") or {}
    emit(f"sort             {srt.get('sort', '?')} ({srt.get('source', '')}); threads "
         f"{p.get('threads')}")
    emit(f"floor            {fl['total_s']:.2f} s = {fl['sort_by']} sort {fl['sort_s']:.2f} s "
         f"+ sequential I/O of the bytes read and written (compaction included) "
         f"{fl['io_s']:.2f} s")
    emit(f"                 (the faster sort of the same batches, both timed in this run: "
         f"np.sort {fl['sort_numpy_s']:.2f} s, radix on {p.get('threads')} threads "
         f"{fl['sort_radix_s']:.2f} s, its scratch touched before the timer, as the store "
         f"keeps its own)")
    emit(f"ratio            store/floor {fl['ratio_store_to_floor']:.2f}x   "
         f"(store+generate)/floor {fl['ratio_store_plus_generate_to_floor']:.2f}x")
    if fl.get("direct_total_s"):
        emit(f"stricter floor   {fl['direct_total_s']:.2f} s with the O_DIRECT write rate: "
             f"store/floor {fl['ratio_store_to_direct_floor']:.2f}x")
    emit(f"JIT warm-up      {r['warmup_s']:.2f} s (not in timings); wall {r['wall_s']:.1f} s")
    jit = r.get("jit_in_run") or {}
    if jit.get("kernels"):
        emit(f"                 but {jit['kernels']} kernel(s) compiled inside the timed run "
             f"({jit['s']:.1f} s, in the figures): the warm-up missed them")
    m = r["machine"]
    simd = m["numpy_simd"]
    emit(f"machine          {m['cpu']}, {m['cores']} cores; numpy {m['numpy']} SIMD baseline "
         f"{' '.join(simd['baseline']) or '-'}, found {' '.join(simd['found']) or '-'}, "
         f"not found {' '.join(simd['not_found']) or '-'}")
    return out


def _batch_lines(batches: list) -> list[str]:
    """The table of batches: store size before each, keys offered and new, ns/key by
    stage, MB read and written; WRONG where the answer differed from the expectation."""
    out: list[str] = []
    emit = out.append
    emit(f"{'batch':>5} {'stored':>13} {'offered':>11} {'new':>11} {'ns/key':>7}  "
         + " ".join(f"{s[:6]:>6}" for s in ROW_STAGES) + f" {'MB rd':>7} {'MB wr':>7}")
    for b in batches:
        n = max(1, b["offered"])
        emit(f"{b['batch']:>5} {b['stored_before']:>13,} {b['offered']:>11,} "
             f"{b['new']:>11,} {b['add_s'] / n * 1e9:>7.1f}  "
             + " ".join(f"{b[s + '_s'] / n * 1e9:>6.1f}" for s in ROW_STAGES)
             + f" {b['bytes_read'] / 1e6:>7.0f} {b['bytes_written'] / 1e6:>7.0f}"
             + ("" if b["ok"] else "  WRONG"))
    return out


def _format_label(run_format: int | None) -> str:
    """How the report names a run's run format (None: the store's default, by size)."""
    return ("by size (runs of 2^22 keys or more 2, smaller 1)" if run_format is None
            else str(run_format))


def _resource_lines(r: dict) -> list[str]:
    """What the plan chose and what the run used of it; for a spilled run, the memory
    plan's estimated peak RSS by part against the measured peak (and the sampled peak
    of each phase of the spilled batches, probes.RssSampler)."""
    res = r["resources"]
    sm = res.get("spill_memory")
    out = [f"resources       batch {res['batch']:,} keys "
           + (f"spilled (memory budget {mib(sm)}, {res['shard_bits']} shard bits, "
              f"busiest shard {res['busiest_shard_share']:.1%} of a batch) " if sm
              else "in memory ")
           + f"from {gib(res['memory_available'])} memory available; run format "
           f"{_format_label(res['run_format'])}; disk needed about {gib(res['disk_needed'])} ("
           + ", ".join(f"{k} {gib(v)}" for k, v in res.get("disk", {}).items())
           + f") of {gib(res['disk_free'])} free, used "
           f"{gib(res['disk_used'] or 0)}; peak RSS {gib(res['peak_rss'] or 0)}"]
    est = res.get("memory_estimate") or {}
    if not sm or not est:
        return out

    def g(n: float) -> str:
        return f"{n / 2**30:.2f} GiB"

    out.append(f"memory plan      estimated peak {g(est['total'])} = interpreter "
               f"{g(est['interpreter'])} + heap slack {g(est.get('heap_slack', 0))} + Bloom "
               f"{g(est['bloom'])} (target {res['bloom_fpr']:g}) + max(spill phase "
               f"{g(est['spill_phase'])}, check phase {g(est['check_phase'])}); measured peak "
               f"{g(r['peak_rss_bytes'])}")
    phases = r.get("rss_by_phase") or {}
    if phases:
        out.append("                 sampled peak RSS by phase: " + ", ".join(
            f"{k} {g(v)}" for k, v in sorted(phases.items())))
    return out


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
