"""Store commands: ``merge`` a batch file of keys, ``stats``, ``verify``, ``compact``,
``upgrade``, ``replay`` (print what an output could not deliver: deliver.py's
recovery files)."""

from __future__ import annotations

import json
import os
import sys
import time

import click

from seenstore.bloom.sizing import MAX_FPR, MIN_FPR

from seenstore.keys.batch import read_batch_file
from seenstore.errors import (InvalidInputError, SeenStoreError, StoreIOError,
                              StoreNotFoundError, UndeliveredError)
from seenstore.store import SeenStore, manifest
from seenstore.cli import (COUNT, SIZE, default_store_dir, json_to_stderr, main, store_option,
                           threads_option)
from seenstore.cli.deliver import Output, recovery_files

wait_option = click.option(
    "--wait", type=float, default=0.0, show_default=True, metavar="SECONDS",
    help="Wait this long for another writer to release the store (-1: forever).")


def maintenance_command(f):
    """A writer command on an existing store: --store, --json, --wait."""
    f = wait_option(f)
    f = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")(f)
    return main.command()(store_option(f))


def _open(store_dir, **kw) -> SeenStore:
    path = store_dir or default_store_dir()
    try:
        return SeenStore.open(path, **kw)
    except StoreNotFoundError:
        # The API's message names a Python argument; say what a CLI user can do.
        raise StoreNotFoundError(
            f"{path}: no store here (give --store DIR, set $SEENSTORE_DIR, or create one "
            "with 'seenstore merge' or 'seenstore add')") from None


def _echo_after_commit(text: str, err: bool, what: str) -> None:
    """Print a line about a batch already committed: a failure must not claim that
    nothing was committed."""
    try:
        click.echo(text, err=err)
    except OSError as e:
        raise StoreIOError(f"{what} was committed, but its summary could not be written "
                           f"({e.strerror or e})") from None


def _wait(value: float):
    return None if value is not None and value < 0 else value


@main.command()
@click.argument("batch", type=click.Path(dir_okay=True, allow_dash=False))
@store_option
@click.option("--new-out", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write the new keys (raw little-endian uint64, input order; with "
                   "--memory sorted ascending) to FILE, or '-' for stdout.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@click.option("--create/--no-create", default=True, show_default=True,
              help="Create the store if it does not exist.")
@click.option("--mode", type=click.Choice(["exact", "approximate"]), default="exact",
              show_default=True,
              help="approximate: a Bloom-filter positive counts as seen without a disk check "
                   "(a new key may be skipped, never reported twice).")
@click.option("--bloom/--no-bloom", default=True, show_default=True,
              help="Keep the Bloom filter (loaded from BLOOM or rebuilt from the runs).")
@click.option("--bloom-capacity", type=COUNT, default=None,
              help="Keys the Bloom filter is sized for when it is (re)built (1e9 style; "
                   "default: the store's, twice its keys and at least 2^20).")
@click.option("--bloom-fpr", type=click.FloatRange(MIN_FPR, MAX_FPR), default=None,
              help="The Bloom filter's false-positive target, recorded as the store's: "
                   "later commands keep it (default: the store's own, 0.001 for a new "
                   "store). Another rate than the saved filter's rebuilds it once. Exact "
                   "answers never depend on it; it trades the filter's memory and disk "
                   "against the work of contains and the stage.")
@click.option("--memory", type=SIZE, default=None,
              help="Memory budget (4G, 64M): a batch of any size is spilled by shard to "
                   "bucket files in the store and merged shard by shard within it "
                   "(exact mode; no Bloom filter in memory). Default: the whole batch "
                   "in memory.")
@wait_option
@threads_option
def merge(batch, store_dir, new_out, as_json, create, mode, bloom, bloom_capacity, bloom_fpr,
          memory, wait, threads):
    """Admit the keys of BATCH (raw little-endian uint64 fingerprints, any order,
    repeats allowed) into the store as one atomic batch.

    Prints how many keys were offered, unique, new and already seen, and the time
    per stage. The whole file is one commit: after a crash the store holds either
    none or all of it. Memory: about 3x the batch file size.
    """
    if new_out == "-":
        json_to_stderr()
    if memory is not None:
        return _merge_spilled(batch, store_dir, new_out, as_json, create, mode, memory, wait,
                              threads)
    t0 = time.perf_counter()
    keys = read_batch_file(batch)
    t_read = time.perf_counter() - t0
    with _open(store_dir, create=create, wait=_wait(wait), mode=mode, bloom=bloom,
               bloom_capacity=bloom_capacity or None, bloom_fpr=bloom_fpr,
               threads=threads) as store:
        # Opened and checked before the commit: an unwritable --new-out commits nothing.
        out = Output(new_out, store.path, 8, "keys").open() if new_out is not None else None
        try:
            if out is not None:
                out.check()
            progress = _progress_line() if sys.stderr.isatty() else None
            if out is None:  # only the count: no mask to align with the input
                n_new = len(store.add_new(keys, progress=progress))
            else:
                mask = store.add(keys, progress=progress)
                n_new = int(mask.sum())
        except BaseException:
            if out is not None:
                out.abandon()
            raise
        # stats() waits for the batch's Bloom insert (it runs past add's return): its
        # count of certainly-new keys lands in last_timings by then
        bloom_stats = store.stats()["bloom"] if bloom else None
        timings = dict(store.last_timings)
        total_keys = len(store)
    if out is not None:  # committed: deliver, or save what could not be delivered
        out.send(keys[mask].astype("<u8").tobytes())
        out.close()
        out.finish()
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
    what = f"the batch ({n_new:,} new keys)"
    if as_json:
        _echo_after_commit(json.dumps(result), out_err, what)
    else:
        _echo_after_commit(
            f"offered {result['offered']:,}  unique {result['unique']:,}  new {n_new:,}  "
            f"already seen {result['already_seen']:,}  (store now {total_keys:,} keys)\n"
            f"time {result['seconds']:.3f}s: read {t_read:.3f}s, "
            f"sort {timings.get('sort_s', 0):.3f}s, "
            f"bloom {timings.get('bloom_s', 0):.3f}s, merge {timings.get('merge_s', 0):.3f}s, "
            f"commit {timings.get('commit_s', 0):.3f}s",
            out_err, what)
        if bloom_stats:
            approx = (f", {result['approx_answered']:,} answered seen by the filter alone"
                      if mode == "approximate" else "")
            _echo_after_commit(
                f"bloom: {result['bloom_negative']:,} certainly new{approx}; "
                f"{_human_bytes(bloom_stats['bytes'])}, fill {bloom_stats['fill_ratio']:.1%}, "
                f"expected FPR now {_pct(bloom_stats['expected_fpr'])}", out_err, what)


def _merge_spilled(batch, store_dir, new_out, as_json, create, mode, memory, wait, threads):
    """``merge --memory``: SeenStore.add_new_file, new keys sorted ascending."""
    if mode != "exact":
        raise InvalidInputError("--memory merges in exact mode only")
    t0 = time.perf_counter()
    with _open(store_dir, create=create, wait=_wait(wait), bloom=False,
               threads=threads) as store:
        store.compact_between_batches = False  # compaction's buffers are not budgeted
        out = Output(new_out, store.path, 8, "keys").open() if new_out is not None else None
        try:
            if out is not None:
                out.check()
            tmp = os.path.join(store.path, f"spill.tmp.{os.getpid()}.new") if out else None
            r = store.add_new_file(batch, memory, new_out=tmp)
        except BaseException:
            if out is not None:
                out.abandon()
            raise
        total_keys = len(store)
    if out is not None:  # committed: deliver in pieces, or keep the file as recovery
        _deliver_file(out, tmp, store.path)
    result = {"batch": batch, "offered": r["offered"], "unique": r["unique"], "new": r["new"],
              "already_seen": r["unique"] - r["new"], "store_keys": total_keys,
              "seconds": round(time.perf_counter() - t0, 6), "mode": mode, "memory": memory,
              **{k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()
                 if k.endswith("_s") or k.startswith("bytes_") or k == "slices"}}
    what = f"the batch ({r['new']:,} new keys)"
    if as_json:
        _echo_after_commit(json.dumps(result), new_out == "-", what)
    else:
        _echo_after_commit(
            f"offered {r['offered']:,}  unique {r['unique']:,}  new {r['new']:,}  "
            f"already seen {result['already_seen']:,}  (store now {total_keys:,} keys)\n"
            f"time {result['seconds']:.3f}s: spill {r['spill_s']:.3f}s, merge {r['merge_s']:.3f}s, "
            f"commit {r['commit_s']:.3f}s; {r['slices']} slices within "
            f"{_human_bytes(memory)}", new_out == "-", what)


def _deliver_file(out, tmp: str, store_dir: str) -> None:
    """Send the new keys of ``tmp`` to ``out`` 8 MiB at a time, then delete it. If a
    piece cannot be written, the whole file stays as the store's recovery file
    (every new key of the batch) and the error names it."""
    try:
        with open(tmp, "rb") as f:
            while piece := f.read(8 << 20):
                out.send(piece)
        out.close()
        out.finish()
    except (OSError, SeenStoreError) as e:
        keep = os.path.join(store_dir, time.strftime("undelivered-%Y%m%dT%H%M%SZ", time.gmtime())
                            + f"-{os.getpid()}.bin")
        os.replace(tmp, keep)
        raise StoreIOError(f"the batch was committed, but its new keys could not be written "
                           f"({e}); all of them are in {keep}") from None
    os.unlink(tmp)


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


def _add_bloom_file_figures(s: dict) -> None:
    """``bytes_on_disk_with_bloom`` / ``bytes_per_key_with_bloom``: the runs and manifest
    plus the saved BLOOM file (bench's bytes/key counts it; ``bytes_on_disk`` does
    not). Kept if the store already reports them."""
    if "bytes_on_disk_with_bloom" not in s:
        try:
            bloom_file = os.path.getsize(os.path.join(s["path"], "BLOOM"))
        except OSError:
            bloom_file = 0
        s["bloom_file_bytes"] = bloom_file
        s["bytes_on_disk_with_bloom"] = s["bytes_on_disk"] + bloom_file
    keys = s["keys"]
    s.setdefault("bytes_per_key_with_bloom",
                 s["bytes_on_disk_with_bloom"] / keys if keys else None)


@main.command()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def stats(store_dir, as_json):
    """Show keys, files, bytes on disk, bytes per key, layout and format versions."""
    with _open(store_dir, readonly=True) as store:
        s = store.stats()
    _add_bloom_file_figures(s)
    if as_json:
        click.echo(json.dumps(s))
        return
    bpk = f"{s['bytes_per_key']:.3f}" if s["bytes_per_key"] else "-"
    bpk_all = (f"{s['bytes_per_key_with_bloom']:.3f}" if s["bytes_per_key_with_bloom"]
               else "-")
    lines = [
        ("store", s["path"]),
        ("keys", f"{s['keys']:,}"),
        ("files", f"{s['files']} ({s['shards']} shards, largest {s['largest_shard_keys']:,} keys)"),
        ("runs", f"{s['runs']} live, at most {s['max_runs_per_shard']} in a shard; pending "
                 f"compaction {s['pending_compaction']['jobs']} jobs "
                 f"({_human_bytes(s['pending_compaction']['bytes'])})"),
        ("write amp.", "-" if s["write_amplification"] is None else
         f"{s['write_amplification']:.2f} (run bytes written / bytes of keys admitted)"),
        ("bytes on disk", f"{_human_bytes(s['bytes_on_disk'])} in runs and manifest "
                          f"({bpk} bytes/key)"),
        ("with bloom", f"{_human_bytes(s['bytes_on_disk_with_bloom'])} with the BLOOM file "
                       f"({bpk_all} bytes/key; what bench reports)"),
        ("layout", s["layout"]),
        ("policy", f"{s['policy_id']} (version {s['policy_version']})"),
        ("kept URLs", "not kept" if s["keep_urls"] is False else
         f"{s['kept_urls']:,} in {s['kept_url_files']} files "
         f"({_human_bytes(s['kept_url_bytes'])})"),
        ("forgotten", f"{s['forgotten']:,} keys (leave the runs at their next compaction)"),
        ("values", "kept beside the keys: " + (f"{s['value_entries']:,} entries in "
                                               f"{s['value_files']} files")
         if s["values"] else "not kept"),
        ("generation", str(s["generation"])),
        ("formats", f"runs {s['run_format']} (large runs {s['large_run_format']}; live: "
                    + ", ".join(f"{n} of {f}" for f, n in sorted(s["run_formats"].items()))
                    + f"), manifest {s['manifest_format']}"
                    + (" (upgraded by the next write or `seenstore upgrade`)"
                       if int(s["manifest_format"].split(".")[0]) < manifest.MAJOR else "")
                    + (f"; {s['runs_to_upgrade']} runs of format 1.0, lookups in them "
                       "not checked page by page (`seenstore upgrade` rewrites them)"
                       if s["runs_to_upgrade"] else "")),
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


@maintenance_command
def compact(store_dir, as_json, wait):
    """Merge every shard's runs into one run now (a full compaction). Batches
    compact on their own, a little at a time; this is for before a backup or a
    read-mostly period. One shard at a time: the extra disk space is at most one
    shard's runs. An interrupted compaction loses nothing."""
    with _open(store_dir, wait=_wait(wait), bloom=False) as store:
        r = store.compact()
        s = store.stats()
    r = {**{k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()},
         "runs": s["runs"], "keys": s["keys"], "write_amplification": s["write_amplification"]}
    if as_json:
        click.echo(json.dumps(r))
    else:
        click.echo(f"compacted {r['jobs']} shards ({r['runs_merged']} runs, "
                   f"{_human_bytes(r['bytes_written'])} written) in {r['seconds']:.2f}s; "
                   f"{r['keys']:,} keys now in {r['runs']} runs")


@maintenance_command
def upgrade(store_dir, as_json, wait):
    """Rewrite the store's manifest in the current format (one atomic rename) and
    its raw runs of format 1.0 as 1.1 (a checksum per 4 KiB page, checked by every
    lookup; one commit per shard, as a compaction). Any write rewrites the manifest
    too; after it, older seenstore versions refuse the store."""
    with _open(store_dir, wait=_wait(wait), bloom=False) as store:
        r = store.upgrade()
    if as_json:
        click.echo(json.dumps(r))
    elif r["upgraded"]:
        runs = (f"; {r['runs_rewritten']} runs rewritten as run format 1.1"
                if r["runs_rewritten"] else "")
        click.echo(f"upgraded: manifest format {r['from']} -> {r['to']}{runs}")
    else:
        click.echo(f"nothing to do: manifest format {r['to']} and every run are current")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def warmup(as_json):
    """Compile every numba kernel now (a first run's 10-40 s), so later commands never
    wait for the compiler. Inputs below SEENSTORE_JIT_MIN items (default 100,000)
    use numpy twins and need no compiling; larger ones compile on first use.
    The compiled kernels are cached (numba's cache, $NUMBA_CACHE_DIR if set)."""
    from seenstore.kernels import dispatch
    from seenstore.warmup import warm_up

    dispatch.on_compile = None  # this command says what it does itself

    def progress(name: str, i: int, n: int) -> None:
        if not as_json:
            click.echo(f"[{i}/{n}] {name}: done ({time.perf_counter() - t0:.1f} s)", err=True)

    t0 = time.perf_counter()
    if not as_json:
        click.echo("compiling kernels (or loading them from the cache)...", err=True)
    seconds = warm_up(progress=progress)
    if as_json:
        click.echo(json.dumps({"ok": True, "seconds": round(seconds, 3)}))
    else:
        click.echo(f"kernels ready in {seconds:.1f} s")


@main.command()
@store_option
@click.option("--keys", is_flag=True,
              help="Replay the key files (.bin: raw little-endian uint64 of 'merge "
                   "--new-out') instead of the URL files (.txt of 'add').")
def replay(store_dir, keys):
    """Print what was committed but not delivered, then delete it.

    'seenstore add' (and 'merge --new-out') save the committed new URLs (keys)
    that their reader did not read, also those left in the pipe when it went
    away, in undelivered-*.txt (.bin) files in the store directory. replay
    writes them to stdout, oldest first, and deletes the files once all of it
    is read (it waits while the reader reads). If the reader goes away first,
    what it did not read is saved in one new undelivered file (exit 6), as add
    does: replay again.
    """
    path = store_dir or default_store_dir()
    _open(path, readonly=True).close()  # a store, or the one-line error (exit 3)
    if keys and sys.stdout.isatty():
        raise click.UsageError("refusing to write binary keys to a terminal; use a pipe or "
                               "redirect")
    files = recovery_files(path, "bin" if keys else "txt")
    what = "keys" if keys else "URLs"
    out = Output("-", path, 8 if keys else 0, what).open()  # refused if the reader has gone
    at = {"file": -1, "open": None}

    def remainder():
        """What a rescue saves after the undelivered bytes: the rest of the file
        being written, then the files not begun."""
        if at["open"] is not None:
            yield at["open"].read()
        for name in files[at["file"] + 1:]:
            with open(name, "rb") as g:
                yield g.read()

    out.remainder = remainder
    sent = 0
    try:
        for i, name in enumerate(files):
            at["file"] = i
            with open(name, "rb") as f:
                at["open"] = f
                while piece := f.read(8 << 20):
                    out.send(piece)
                    sent += len(piece) // 8 if keys else piece.count(b"\n")
                at["open"] = None
        out.finish(patience=None)
    except UndeliveredError:
        _remove(files)  # what was not read is in the new file the error names
        raise
    _remove(files)
    click.echo(f"seenstore replay: {sent:,} {what} from {len(files)} undelivered files "
               "delivered; files removed", err=True)


def _remove(paths: list[str]) -> None:
    for p in paths:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


__all__ = ["merge", "stats", "verify", "compact", "upgrade", "warmup", "replay"]
