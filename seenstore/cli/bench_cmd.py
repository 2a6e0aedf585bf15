"""``seenstore bench``: the headline benchmark on a generated crawl-like stream.

The command line only: the options, the ones that do not go together, the working
folder, a progress bar and the printing. The plan (seenstore/bench/plan.py), the run
(run.py: a real store end to end, counts checked against the stream's exact
expectation, the floor measured in the same run), the report (report.py) and the
sharded comparison (cluster.py) live in the bench package. Exit 1 if any count is
wrong.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time

import click

from seenstore.bloom.sizing import MAX_FPR, MIN_FPR

from seenstore.bench.plan import (SPILL_ABOVE_BATCHES, default_batch_size, plan_bench,
                                  stream_distinct)
from seenstore.bench.report import document, text_lines, write_plot
from seenstore.bench.result import BenchResult
from seenstore.bench.run import ANSWERS, run_bench
from seenstore.bench.workload import CrawlStream
from seenstore.cli import COUNT, SIZE, Count, fail, main, threads_option
from seenstore.errors import InvalidInputError

FIRST_RUN_ETA = "about 20 s"  # README "First run": the warm-up of `seenstore bench --keys 1e7`


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
                   "which starts at 2^20 and grows by a layer that makes it 4x larger each "
                   "time it fills).")
@click.option("--bloom-fpr", type=click.FloatRange(MIN_FPR, MAX_FPR), default=None,
              help="The Bloom filter's false-positive target (default: the store's, 0.001; "
                   "a spilled run whose filter would leave too little memory takes 0.002). "
                   "Exact answers never depend on it: the filter's rate trades its memory "
                   "and disk against the work of contains and the stage.")
@click.option("--bloom/--no-bloom", default=True, show_default=True,
              help="Keep the store's Bloom filter (needed by contains, the stage and "
                   "approximate mode); --no-bloom measures the merge alone.")
@click.option("--answer", type=click.Choice(ANSWERS), default="new", show_default=True,
              help="What each batch asks the store for: 'new' = the sorted new keys "
                   "(SeenStore.add_new, what the peers return); 'mask' = a mask aligned with "
                   "the offered keys (SeenStore.add; one more pass, shown as 'align').")
@click.option("--run-format", type=click.Choice(["1", "2", "auto"]), default="auto",
              show_default=True,
              help="Every run written as 2 (compressed, ~4.5 B/key) or 1 (raw 8 B/key keys); "
                   "auto: the store's default (runs of 2^22 keys or more compressed, smaller "
                   "ones raw: most batches' runs) when a raw plan takes at most 80% of the "
                   "free disk, else every run compressed.")
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
def bench(total, batch, reoffer, dup, seed, work_dir, keep, probe_bytes, bloom_capacity,
          bloom_fpr, bloom, answer, run_format, memory, spill, as_json, save, plot, quiet,
          threads, shards, ray_address):
    """Offer a generated crawl-like key stream to a new store and report the figures.

    Each batch mixes fresh keys, keys re-offered from earlier batches and repeats
    inside the batch, with host-skewed top bits. Every answer the store returns is
    checked against the stream's exact expectation (exit 1 if any is wrong). The
    floor (the faster of np.sort and the radix sort of the same batches, both timed
    in this run, + sequential read and write of the bytes the merges moved, at the
    disk bandwidth measured in this run) is printed beside, with the CPU and numpy's
    SIMD dispatch.
    """
    early_notice()
    if plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise InvalidInputError(
                "--plot needs matplotlib: pip install 'seenstore[bench]'") from None
    probe = probe_bytes or min(1 << 30, max(64 << 20, 8 * total))
    # a first guess of the stream's distinct keys: plan_bench remakes the plan for the
    # chosen batch's own count
    distinct = stream_distinct(total, batch, reoffer, dup, seed)
    sized = bloom_capacity is None  # the filter sized for the stream's distinct keys
    bloom_capacity = (distinct if sized else bloom_capacity) or None
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
            total, distinct, batch, reoffer, dup, seed, work_dir, probe, bloom_capacity, sized,
            bloom, "auto" if run_format == "auto" else int(run_format), memory,
            spill if answer == "new" else False, bloom_fpr)
        stream = CrawlStream(total, plan.batch, reoffer, dup, seed=seed)
        res = _run(stream, store_path, probe, quiet, bloom_capacity=bloom_capacity,
                   answer=answer, bloom=bloom, run_format=plan.run_format, threads=threads,
                   spill_memory=plan.spill_memory, shard_bits=plan.shard_bits,
                   bloom_fpr=plan.bloom_fpr)
    finally:
        if not keep:
            if own_dir:
                shutil.rmtree(work_dir, ignore_errors=True)
            elif created:
                shutil.rmtree(store_path, ignore_errors=True)
    r = document(res, plan, store_path if keep else None)
    if save:
        with open(save, "w") as f:
            json.dump(r, f)
    if as_json:
        click.echo(json.dumps(r))
    else:
        for line in text_lines(r):
            click.echo(line)
        if keep:
            click.echo(f"store kept at   {store_path}")
    if plot:
        write_plot(r, plot)
        if not as_json:
            click.echo(f"plot written     {plot}")
    if not r["verified"]:
        fail(f"new-key counts differ from the expectation in batches {r['bad_batches']}", 1)


def _run(stream: CrawlStream, store_path: str, probe: int, quiet: bool,
         **options) -> BenchResult:
    """``run_bench`` with ``options``, and a progress bar on stderr unless ``quiet``.
    On an empty numba cache it says at once that it compiles (``_compiling_notice``)
    and, unless ``quiet``, each kernel as it is compiled; the bar starts once the
    kernels are ready."""
    notice = _compiling_notice(quiet, bool(options.get("bloom", True)))
    if quiet:
        return run_bench(stream, store_path, probe, on_warmup=notice, **options)
    with contextlib.ExitStack() as stack:
        bars: list = []

        def start_bar() -> None:
            bars.append(stack.enter_context(click.progressbar(
                length=stream.total_keys, label="offering keys", file=sys.stderr,
                show_pos=True, item_show_func=lambda s: s)))

        def on_warmup(where: str, kernel: str, seconds: float) -> None:
            notice(where, kernel, seconds)
            if where == "ready":
                start_bar()

        def on_batch(row: dict) -> None:
            n = max(1, row["offered"])
            if not bars:
                start_bar()
            bars[0].update(row["offered"], f"{row['add_s'] / n * 1e9:.0f} ns/key")

        if notice is None:
            start_bar()
        return run_bench(stream, store_path, probe, on_batch,
                         on_warmup=None if notice is None else on_warmup, **options)


# Said once per bench command, from the first moment it is known (``early_notice``).
_NOTICE = ("seenstore: first run: compiling the numba kernels this benchmark calls into "
           "machine code for this CPU (once; {eta} on 2 cores; cached in {where}; "
           "'seenstore warmup' compiles every kernel ahead)")
_noticed = [0.0]  # perf_counter when the notice was printed, 0: not yet


def early_notice() -> None:
    """Print the first-run notice now if the kernel cache is surely empty, told
    without importing numba (jitcache.surely_cold): before the seconds of imports
    and planning that come first. Called first by each bench command."""
    from seenstore.kernels.jitcache import cache_dir_guess, surely_cold

    _noticed[0] = 0.0
    if surely_cold():
        _say_compiling(cache_dir_guess())


def _say_compiling(where: str) -> None:
    click.echo(_NOTICE.format(eta=FIRST_RUN_ETA, where=where), err=True)
    _noticed[0] = time.perf_counter()


def _compiling_notice(quiet: bool, bloom: bool = True):
    """If the kernels this bench calls are not compiled for this machine yet (an
    empty numba cache, bench/warm.py ``cold``), say so on stderr now (unless
    ``early_notice`` did) and return a printer of the warm-up's events for
    ``run_bench``'s ``on_warmup`` (``quiet``: silent); else None."""
    from seenstore.bench.warm import cold
    from seenstore.kernels.jitcache import cache_dir

    if not _noticed[0]:
        if not cold(bloom):
            return None
        _say_compiling(cache_dir())
    t0 = _noticed[0]

    def step(where: str, kernel: str, seconds: float) -> None:
        if quiet:
            return
        if where == "ready":
            click.echo(f"seenstore: kernels ready ({time.perf_counter() - t0:.0f} s)", err=True)
        else:
            click.echo(f"seenstore: {time.perf_counter() - t0:4.0f} s  compiled {kernel} "
                       f"({seconds:.1f} s; {where})", err=True)

    return step


def _cluster_bench(stream, shards, ray_address, work_dir, bloom_capacity, as_json, save):
    """``--shards``: the plain store and ShardedStores on the same stream
    (seenstore/bench/cluster.py)."""
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
