"""Store commands: ``merge`` a batch file of keys, ``stats``, ``verify``."""

from __future__ import annotations

import json
import sys
import time

import click

from ..batch import read_batch_file
from ..store import SeenStore
from . import default_store_dir, main, store_option, threads_option

wait_option = click.option(
    "--wait", type=float, default=0.0, show_default=True, metavar="SECONDS",
    help="Wait this long for another writer to release the store (-1: forever).")


def _open(store_dir, **kw) -> SeenStore:
    return SeenStore.open(store_dir or default_store_dir(), **kw)


def _wait(value: float):
    return None if value is not None and value < 0 else value


@main.command()
@click.argument("batch", type=click.Path(dir_okay=True, allow_dash=False))
@store_option
@click.option("--new-out", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write the new keys (raw little-endian uint64, input order) to FILE, "
                   "or '-' for stdout.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@click.option("--create/--no-create", default=True, show_default=True,
              help="Create the store if it does not exist.")
@click.option("--mode", type=click.Choice(["exact", "approximate"]), default="exact",
              show_default=True,
              help="approximate: a Bloom-filter positive counts as seen without a disk check "
                   "(a new key may be skipped, never reported twice).")
@click.option("--bloom/--no-bloom", default=True, show_default=True,
              help="Keep the Bloom filter (loaded from BLOOM or rebuilt from the runs).")
@wait_option
@threads_option
def merge(batch, store_dir, new_out, as_json, create, mode, bloom, wait, threads):
    """Admit the keys of BATCH (raw little-endian uint64 fingerprints, any order,
    repeats allowed) into the store as one atomic batch.

    Prints how many keys were offered, unique, new and already seen, and the time
    per stage. The whole file is one commit: after a crash the store holds either
    none or all of it. Memory: about 3x the batch file size.
    """
    t0 = time.perf_counter()
    keys = read_batch_file(batch)
    t_read = time.perf_counter() - t0
    with _open(store_dir, create=create, wait=_wait(wait), mode=mode, bloom=bloom,
               threads=threads) as store:
        progress = _progress_line() if sys.stderr.isatty() else None
        if new_out is None:  # only the count: no mask to align with the input
            n_new = len(store.add_new(keys, progress=progress))
        else:
            mask = store.add(keys, progress=progress)
            n_new = int(mask.sum())
        timings = dict(store.last_timings)
        total_keys = len(store)
        bloom_stats = store.stats()["bloom"] if bloom else None
    if new_out is not None:
        data = keys[mask].astype("<u8").tobytes()
        if new_out == "-":
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            with open(new_out, "wb") as f:
                f.write(data)
    result = {
        "batch": batch, "offered": int(len(keys)), "unique": int(timings.get("unique", 0)),
        "new": n_new, "already_seen": int(timings.get("unique", 0)) - n_new,
        "store_keys": total_keys, "seconds": round(time.perf_counter() - t0, 6),
        "read_s": round(t_read, 6), "mode": mode,
        "bloom_negative": timings.get("bloom_negative", 0),
        "approx_answered": timings.get("approx_answered", 0),
        "bloom": bloom_stats,
        **{k: (round(v, 6) if isinstance(v, float) else v) for k, v in timings.items()
           if k.endswith("_s") or k.startswith("bytes_")},
    }
    out_err = new_out == "-"
    if as_json:
        click.echo(json.dumps(result), err=out_err)
    else:
        click.echo(
            f"offered {result['offered']:,}  unique {result['unique']:,}  new {n_new:,}  "
            f"already seen {result['already_seen']:,}  (store now {total_keys:,} keys)\n"
            f"time {result['seconds']:.3f}s: read {t_read:.3f}s, sort {timings.get('sort_s', 0):.3f}s, "
            f"bloom {timings.get('bloom_s', 0):.3f}s, merge {timings.get('merge_s', 0):.3f}s, "
            f"commit {timings.get('commit_s', 0):.3f}s",
            err=out_err)
        if bloom_stats:
            approx = (f", {result['approx_answered']:,} answered seen by the filter alone"
                      if mode == "approximate" else "")
            click.echo(
                f"bloom: {result['bloom_negative']:,} certainly new{approx}; "
                f"{_human_bytes(bloom_stats['bytes'])}, fill {bloom_stats['fill_ratio']:.1%}, "
                f"expected FPR now {_pct(bloom_stats['expected_fpr'])}", err=out_err)


def _progress_line():
    """A progress callback drawing 'merging shards i/n' on the terminal's stderr."""
    def show(done: int, total: int) -> None:
        click.echo(f"\rmerging shards {done}/{total}", err=True, nl=done == total)
    return show


def _pct(x: float) -> str:
    return f"{x * 100:.3g}%"


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{int(n):,} B"
        n /= 1024
    raise AssertionError


@main.command()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def stats(store_dir, as_json):
    """Show keys, files, bytes on disk, bytes per key, layout and format versions."""
    with _open(store_dir, readonly=True) as store:
        s = store.stats()
    if as_json:
        click.echo(json.dumps(s))
        return
    bpk = f"{s['bytes_per_key']:.3f}" if s["bytes_per_key"] else "-"
    lines = [
        ("store", s["path"]),
        ("keys", f"{s['keys']:,}"),
        ("files", f"{s['files']} ({s['shards']} shards, largest {s['largest_shard_keys']:,} keys)"),
        ("bytes on disk", f"{_human_bytes(s['bytes_on_disk'])} ({bpk} bytes/key)"),
        ("layout", s["layout"]),
        ("policy", s["policy_id"]),
        ("generation", str(s["generation"])),
        ("formats", f"run {s['run_format']}, manifest {s['manifest_format']}"),
        ("sort", f"{s['sort']['sort']} ({s['sort']['source']}); {s['threads']} threads"),
        ("batches", f"{s['counters']['batches']:,} committed"),
        ("approximate", f"{s['counters']['approx_answered']:,} keys answered seen by the "
                        f"Bloom filter alone"),
    ]
    if s["wal_segments"]:
        lines.append(("stage WAL", f"{s['wal_segments']} segments, {_human_bytes(s['wal_bytes'])} "
                                   "(not merged yet: replayed when the stage reopens)"))
    b = s.get("bloom")
    if b:
        per_stored = f", {b['bits_per_key']:.1f} per key stored now" if b["bits_per_key"] else ""
        lines.append(("bloom", (
            f"{_human_bytes(b['bytes'])} = {b['bits_per_key_at_capacity']:.1f} bits/key at its "
            f"capacity of {b['capacity']:,} keys{per_stored}; k={b['n_hashes']}, "
            f"fill {b['fill_ratio']:.1%}, expected FPR now {_pct(b['expected_fpr'])} "
            f"(target {_pct(b['target_fpr'])}); {b['state']}")))
    else:
        lines.append(("bloom", "none saved (a writer builds it from the runs)"))
    for k, v in lines:
        click.echo(f"{k:>14}: {v}")


@main.command()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def verify(store_dir, as_json):
    """Check the whole store: manifest, every run's header, checksum, order and
    shard range. Exits non-zero on any fault."""
    t0 = time.perf_counter()
    with _open(store_dir, readonly=True) as store:
        r = store.verify()
    r["seconds"] = round(time.perf_counter() - t0, 3)
    if as_json:
        click.echo(json.dumps({"ok": True, **r}))
    else:
        click.echo(f"ok: {r['keys']:,} keys in {r['runs']} runs, generation {r['generation']} "
                   f"({r['seconds']:.2f}s)")


__all__ = ["merge", "stats", "verify"]
