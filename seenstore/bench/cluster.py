"""``seenstore bench --shards N[,N...]``: the plain store and sharded stores on the
same verified stream, in one run.

Each configuration gets a new store (or cluster) in the working folder and the same
``CrawlStream``; a cluster's key ranges are cut from a sample of the stream's first
batch (``ShardedStore.open(sample=)``: the stream's top bits are host-skewed);
every answer (``add_new``: the sorted new keys) is checked against the stream's
exact expectation. Figures per configuration: time inside the calls,
keys/s, ratio to the plain store, bytes through Ray's object store per offered key,
and per shard: its key range, keys offered, time inside the actor's ``add_new`` and
in its answer log, its process's CPU time over those calls, and its time idle while
another shard of the batch was still working.
"""

from __future__ import annotations

import os
import shutil
import time

from seenstore.bench.result import verify_answer
from seenstore.bench.workload import CrawlStream
from seenstore.cluster.sharded import ShardedStore, cluster_bits, ensure_ray
from seenstore.store import SeenStore
from seenstore.warmup import warm_up

SAMPLE_STRIDE = 16  # every 16th key of the first batch cuts the ranges
WARM_UP_MIN_KEYS = 1_000_000  # smaller streams (tests) time nothing worth a warm-up


def _drive(store, stream: CrawlStream, per_batch=None) -> dict:
    """Offer every batch of ``stream`` to ``store.add_new`` and check each answer; the
    figures: seconds inside the calls, keys offered, new and expected, the verdict.
    ``per_batch``: called after each batch's timed call."""
    res = {"store_s": 0.0, "offered": 0, "new": 0, "expected_new": 0, "bad_batches": []}
    for plan in stream.plan():
        batch = stream.batch(*plan)
        t0 = time.perf_counter()
        got = store.add_new(batch.keys)
        res["store_s"] += time.perf_counter() - t0
        n_new, ok = verify_answer(batch, got, "new")
        res["offered"] += len(batch.keys)
        res["new"] += n_new
        res["expected_new"] += batch.expected_new
        if not ok:
            res["bad_batches"].append(batch.index)
        if per_batch is not None:
            per_batch()
        del batch, got
    res["verified"] = not res["bad_batches"] and res["new"] == res["expected_new"]
    res["keys_per_s"] = res["offered"] / res["store_s"] if res["store_s"] else None
    return res


def run_cluster_bench(stream: CrawlStream, work_dir: str, shard_counts: list[int],
                      ray_address: str | None = None, bloom_capacity: int | None = None,
                      plain: bool = True) -> dict:
    """Run ``stream`` through a plain SeenStore (``plain``) and a ShardedStore with each
    of ``shard_counts`` shards, one after the other, in new directories under
    ``work_dir`` (removed afterwards). Returns one dict per configuration."""
    for n in shard_counts:
        cluster_bits(n)
    ray = ensure_ray(ray_address)
    out = {"params": {"keys": stream.total_keys, "batch": stream.batch_size,
                      "reoffer": stream.reoffer, "dup": stream.dup, "seed": stream.seed,
                      "ray_nodes": len([n for n in ray.nodes() if n.get("Alive")]),
                      "ray_cpus": ray.cluster_resources().get("CPU")},
           "runs": []}
    warm = stream.total_keys >= WARM_UP_MIN_KEYS
    out["warmup_s"] = warm_up(work_dir, child=True) if warm else 0.0
    if plain:
        path = os.path.join(work_dir, "plain-store")
        try:
            with SeenStore.open(path, create=True, bloom_capacity=bloom_capacity) as st:
                r = _drive(st, stream)
                r["store_keys"] = len(st)
        finally:
            shutil.rmtree(path, ignore_errors=True)
        out["runs"].append(dict(r, name="plain SeenStore", shards=0))
    sample = None
    for plan in stream.plan():  # the first batch: what the operator has before creating
        sample = stream.batch(*plan).keys[::SAMPLE_STRIDE].copy()
        break
    for n in shard_counts:
        root = os.path.join(work_dir, f"cluster-{n}")
        try:
            with ShardedStore.open(root, shards=n, create=True, bloom_capacity=bloom_capacity,
                                   sample=sample) as st:
                # each actor's process loads its kernels first, as this one did above
                # (the client's partition of a batch among them)
                if warm:
                    st._call(range(n), lambda i: st.actors[i].warm_up.remote())
                shard_rows = [{"offered": 0, "idle_s": 0.0, "cpu_s": 0.0} for _ in range(n)]
                busy0 = [(s["admit_s"], s["timings"]["log_s"]) for s in st.shard_stats()]

                client = {"partition_s": 0.0, "put_s": 0.0}

                def per_batch():  # (after the batch's timed call)
                    keys = st.last_timings["shard_keys"]
                    last = st._call(keys, lambda i: st.actors[i].last_admit.remote())
                    end = max(a["exit"] for a in last.values())
                    for i, k in keys.items():
                        shard_rows[i]["offered"] += k
                        shard_rows[i]["cpu_s"] += last[i]["cpu_s"]
                        shard_rows[i]["idle_s"] += end - last[i]["exit"]  # the slower's wait
                    for k in client:
                        client[k] += st.last_timings[k]

                base = dict(st.counters)
                r = _drive(st, stream, per_batch)
                stats = st.stats()
                moved = (st.counters["object_store_bytes_in"] - base["object_store_bytes_in"]
                         + st.counters["object_store_bytes_out"] - base["object_store_bytes_out"])
                for i, s in enumerate(stats["per_shard"]):
                    shard_rows[i].update(keys=s["keys"], node_ip=s["node_ip"], pid=s["pid"],
                                         range=stats["ranges"][i],
                                         admit_s=s["admit_s"] - busy0[i][0],
                                         log_s=s["timings"]["log_s"] - busy0[i][1],
                                         bytes_on_disk=s["bytes_on_disk"])
                r.update(store_keys=stats["keys"], object_store_bytes=moved,
                         object_store_bytes_per_key=moved / max(1, r["offered"]),
                         retries=st.counters["retries"], per_shard=shard_rows, client=client)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        out["runs"].append(dict(r, name=f"ShardedStore, {n} shard" + "s" * (n > 1), shards=n))
    plain_kps = out["runs"][0]["keys_per_s"] if plain else None
    for r in out["runs"]:
        r["vs_plain"] = r["keys_per_s"] / plain_kps if plain_kps and r["keys_per_s"] else None
    out["verified"] = all(r["verified"] for r in out["runs"])
    return out


def format_text(res: dict) -> list[str]:
    """The text report of ``run_cluster_bench``'s figures, one string per line."""
    p = res["params"]
    lines = [f"keys offered     {p['keys']:,} in batches of {p['batch']:,} (reoffer "
             f"{p['reoffer']}, dup {p['dup']}, seed {p['seed']}); answer: sorted new keys; "
             f"Ray: {p['ray_nodes']} node(s), {p['ray_cpus']:.0f} CPUs",
             f"{'configuration':<26} {'seconds':>8} {'M keys/s':>9} {'ns/key':>7} "
             f"{'vs plain':>8} {'obj.store B/key':>15}  answers"]
    for r in res["runs"]:
        ns = r["store_s"] / max(1, r["offered"]) * 1e9
        vs = f"{r['vs_plain']:.2f}x" if r.get("vs_plain") else "-"
        ob = f"{r['object_store_bytes_per_key']:.1f}" if "object_store_bytes_per_key" in r else "-"
        lines.append(f"{r['name']:<26} {r['store_s']:>8.2f} {r['keys_per_s'] / 1e6:>9.2f} "
                     f"{ns:>7.1f} {vs:>8} {ob:>15}  "
                     + ("VERIFIED" if r["verified"] else f"WRONG in batches {r['bad_batches']}"))
        if "client" in r:
            lines.append(f"    client: partition {r['client']['partition_s']:.2f} s, "
                         f"ray.put {r['client']['put_s']:.2f} s")
        for i, s in enumerate(r.get("per_shard", [])):
            lo, hi = s["range"]
            lines.append(f"    shard {i} (top 8 bits {lo:#04x}..{hi - 1:#04x}): offered "
                         f"{s['offered']:,} ({s['offered'] / max(1, r['offered']):.1%}) in "
                         f"{s['admit_s']:.2f} s of "
                         f"add_new (+ {s['log_s']:.2f} s answer log; {s['cpu_s']:.2f} s of CPU; "
                         f"then {s['idle_s']:.2f} s idle, the others finishing), "
                         f"stored {s['keys']:,} keys, "
                         f"{s['bytes_on_disk']:,} bytes on disk (node {s['node_ip']}, "
                         f"pid {s['pid']})")
    lines.append(f"JIT warm-up      {res['warmup_s']:.2f} s (not in timings)")
    return lines
