"""End-to-end throughput of ``seenstore add --pairs`` on real link data.

Data: ``base<TAB>href`` lines gathered from the HTML and text documentation
installed on the machine (tools/gather_links.py; no internet, nothing generated).
Make it first:

    python tools/gather_links.py --out scratch/links.tsv --lines 3000000

(``--lines 10000000`` takes every real line there is: 6,465,967 from the 119,957
files of the dev machine; pass that file with ``--data``.)

First the ``seenstore add --pairs`` COMMAND itself, end to end (a subprocess:
start-up, read, normalise, fingerprint, admit into a fresh store, print to a file): its
start-up alone (the command on the first 1,000 lines with every kernel taken,
``SEENSTORE_JIT_MIN=0``: interpreter, imports, numba's cache loads, store open and
close; best of --reps), then for each thread count (--threads, default 1 and 2) one
warm-up run and the best of --reps runs over the whole file, the child pinned to that
many cores (sched_setaffinity, so the one-thread figure is one core's, its commit
thread sharing that core): lines/s over the wall time (start-up included) and net of
the start-up, with the CPU time of the child (all its threads) and the load average
beside it. The start-up is split (CPU time, fresh processes): the bare interpreter,
``seenstore add --help``, and inside the command its imports, numba's import, the
kernels' cache loads, the store's open and the rest. JIT compilation (an empty numba
cache) happens in the warm-up run before any timing and is reported separately
(``seenstore warmup``).

Then the per-stage split, in process (pinned the same way): ``add_fast`` (what the
command runs) over the whole file into a fresh store with the time of each stage
(read: waiting for the next URL buffer from the line kernel; kernel: normalise +
fingerprint; scalar: the routed URLs; merge; store: ``SeenStore.add``; write: the new
canonical URLs to a file), as wall time per thread count, and one thread again with
each stage's time taken as the thread's CPU time (a loaded machine's waiting left out;
the store's own threads not counted). The output of every run is compared byte for
byte with ``seenstore add --pairs --scalar`` over the first --check-lines lines (all
with --check-lines 0), and the routed URLs of the data are classified (userinfo, IDN /
xn-- hosts, other) with their share of the scalar time.

    python bench/bench_add.py [--data scratch/links.tsv] [--threads 1,2]
        [--check-lines 300000] [--reps 3]
"""

from __future__ import annotations

import argparse
import collections
import compileall
import filecmp
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time


def _startup_child(small: str, store_dir: str) -> None:
    """(run by startup_split in a fresh process) the command on ``small``, its
    start-up split printed on stderr as ``SPLIT name=seconds ...``."""
    c0 = time.process_time()
    import seenstore.cli as cli_module

    c1 = time.process_time()
    from seenstore.kernels import dispatch

    dispatch._numba_without_scipy()  # numba as the command imports it (scipy hidden)
    import numba.core.dispatcher as nd  # the command imports these as it runs

    c2 = time.process_time()
    from seenstore.store import SeenStore

    c3 = time.process_time()
    spent = {"loads": 0.0, "open": 0.0, "n": 0}
    compile_, open_ = nd.Dispatcher.compile, SeenStore.open.__func__

    def compile(self, sig):  # a cache load (or a compile) of one kernel
        t = time.process_time()
        try:
            return compile_(self, sig)
        finally:
            spent["loads"] += time.process_time() - t
            spent["n"] += 1

    def timed_open(cls, *a, **kw):
        t = time.process_time()
        try:
            return open_(cls, *a, **kw)
        finally:
            spent["open"] += time.process_time() - t

    nd.Dispatcher.compile = compile
    SeenStore.open = classmethod(timed_open)
    cli_module.main(["add", "--pairs", "--store", store_dir, small], standalone_mode=False)
    total = time.process_time() - c0
    print(f"SPLIT cli-imports={c1 - c0:.4f} numba-import={c2 - c1:.4f} store-imports={c3 - c2:.4f} "
          f"kernel-cache-loads={spent['loads']:.4f} store-open={spent['open']:.4f} "
          f"rest={total - (c3 - c0) - spent['loads'] - spent['open']:.4f} total={total:.4f}",
          file=sys.stderr)


if __name__ == "__main__" and sys.argv[1:2] == ["--startup-child"]:
    _startup_child(*sys.argv[2:4])  # before this script's own imports
    sys.exit(0)

import numpy as np  # noqa: E402

# dispatch.SMALL is left as a user has it (SEENSTORE_JIT_MIN unset: 100,000), here and
# in the command's runs; only the start-up run takes every kernel (JIT_MIN=0)
import seenstore.pipeline
import seenstore.url.fastpath
from seenstore.kernels import dispatch
from seenstore.pipeline import add_fast
from seenstore.url.fastpath import run_kernel
from seenstore.kernels.status import ROUTE
from seenstore.url.normalise import DEFAULT_MAX_LENGTH
from seenstore.runtime.parallel import keep_freed_memory
from seenstore.url.policy import DEFAULT_POLICY
from seenstore.store import SeenStore
from seenstore.url.buffer import URLBuffer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRATCH = os.path.join(REPO, "scratch")
STAGES = ("read", "kernel", "scalar", "merge", "wait", "store", "write")


class _Sink:
    """What add_fast sends to (deliver.Output's check/send) over a file."""

    def __init__(self, f) -> None:
        self.send, self.check = f.write, lambda: None


def in_process(data: str, threads: int, tmp: str) -> tuple[float, float, int, dict, str]:
    store_dir, out_path = os.path.join(tmp, f"store-{threads}"), os.path.join(tmp, f"out-{threads}")
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores(threads))  # threads started from here on inherit it
    try:
        return _in_process(data, threads, store_dir, out_path)
    finally:
        os.sched_setaffinity(0, allowed)


def _in_process(data, threads, store_dir, out_path):
    seconds: dict[str, float] = {}
    counts: dict[str, int] = {}
    with open(data, "rb") as f, open(out_path, "wb") as out, \
            SeenStore.open(store_dir, create=True, policy_id=DEFAULT_POLICY.identity,
                           threads=threads) as store:
        t0, c0 = time.perf_counter(), time.process_time()
        read, _ = add_fast(f, store, _Sink(out), counts, base=None, policy=DEFAULT_POLICY,
                           max_length=DEFAULT_MAX_LENGTH, batch_lines=1_000_000, pairs=True,
                           threads=threads, seconds=seconds)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    shutil.rmtree(store_dir)
    return wall, cpu, read, seconds, out_path


def cpu_split(data: str, tmp: str) -> tuple[int, dict]:
    """One thread, stage times as this thread's CPU time (add_fast and normalise_buffer
    read their clock as ``time.perf_counter``; with one thread every stage runs here),
    so that a loaded machine's waiting is left out."""
    class _CPUClock:
        perf_counter = staticmethod(time.thread_time)

    mods = (seenstore.pipeline, seenstore.url.fastpath)
    for m in mods:
        m.time = _CPUClock
    try:
        _, _, n, sec, _ = in_process(data, 1, tmp)
    finally:
        for m in mods:
            m.time = time
    return n, sec


def cores(n: int) -> set[int]:
    """The first ``n`` CPUs this process may run on."""
    return set(sorted(os.sched_getaffinity(0))[:n])


def cli(src: str, tmp: str, name: str, *extra: str, env: dict | None = None,
        cpus: set[int] | None = None) -> tuple[float, float, str]:
    """Run ``seenstore add --pairs`` on ``src`` into a fresh store (on ``cpus`` only,
    if given): (wall s, CPU s of the child over all its threads, output path)."""
    store_dir, out_path = os.path.join(tmp, f"cstore-{name}"), os.path.join(tmp, f"cout-{name}")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
               **(env or {}))
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(out_path, "wb") as out:
        subprocess.run([sys.executable, "-m", "seenstore.cli", "add", "--pairs", "--store",
                        store_dir, src, *extra], stdout=out, stderr=subprocess.DEVNULL,
                       check=True, env=env,
                       preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus))
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    shutil.rmtree(store_dir)
    return wall, cpu, out_path


def best_of(reps: int, run) -> tuple[float, float, float, str]:
    """(best wall, CPU of that run, load average before it, output) of ``reps`` runs."""
    runs = []
    for _ in range(reps):
        load = os.getloadavg()[0]
        wall, cpu, out = run()
        runs.append((wall, cpu, load, out))
    return min(runs)


def command(data: str, n: int, threads: list[int], reps: int, tmp: str) -> dict[int, str]:
    """The command end to end: JIT warm-up, start-up, then per thread count one warm-up
    run and the best of ``reps``; returns each thread count's output path."""
    env = os.environ.copy()
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "seenstore.cli", "warmup"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"JIT warm-up (seenstore warmup: compiles on an empty numba cache, else loads "
          f"it): {time.perf_counter() - t0:.2f} s wall, not in any figure below")
    small = head(data, 1000, tmp, "head1k.tsv")
    su, su_cpu, load, _ = best_of(reps, lambda: cli(small, tmp, "startup",
                                                    env={"SEENSTORE_JIT_MIN": "0"}))
    print(f"start-up of the command (1,000 lines, every kernel loaded): {su:.2f} s wall, "
          f"{su_cpu:.2f} s CPU (best of {reps}; load average {load:.1f})")
    startup_split(small, tmp, reps)
    outs = {}
    for t in threads:
        def run(t=t):
            return cli(data, tmp, f"t{t}", "--threads", str(t), cpus=cores(t))
        run()  # warm-up: page cache, numba cache
        wall, cpu, load, outs[t] = best_of(reps, run)
        print(f"seenstore add --pairs --threads {t} on {len(cores(t))} core(s): "
              f"{wall:.2f} s wall = "
              f"{n / wall / 1e6:.2f} M lines/s end to end; net of start-up "
              f"{n / max(wall - su, 1e-9) / 1e6:.2f} M lines/s; CPU {cpu:.2f} s "
              f"({(cpu - su_cpu) / n * 1e9:.0f} ns/line net of start-up, all threads); "
              f"best of {reps}, load average {load:.1f}")
    return outs


def startup_split(small: str, tmp: str, reps: int) -> None:
    """Where the command's start-up goes (CPU time, best of ``reps`` fresh processes
    each): the bare interpreter, ``seenstore add --help``, and inside the command on
    ``small`` (every kernel taken) its imports, numba's import, the kernels' cache
    loads, the store's open and the rest."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
               SEENSTORE_JIT_MIN="0")

    def cpu_of(args: list[str]) -> float:
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, *args], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)

    bare = min(cpu_of(["-c", "pass"]) for _ in range(reps))
    helped = min(cpu_of(["-m", "seenstore.cli", "add", "--help"]) for _ in range(reps))
    splits = []
    for i in range(reps):
        err = subprocess.run([sys.executable, __file__, "--startup-child", small,
                              os.path.join(tmp, f"su-store-{i}")], env=env, check=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True).stderr
        words = next(ln for ln in err.splitlines() if ln.startswith("SPLIT ")).split()[1:]
        splits.append(dict(w.split("=") for w in words))
    best = min(splits, key=lambda d: float(d["total"]))
    print(f"start-up CPU (best of {reps}; load average {os.getloadavg()[0]:.1f}): bare "
          f"interpreter {bare * 1e3:.0f} ms; seenstore add --help {helped * 1e3:.0f} ms; "
          f"in the command: " + ", ".join(f"{k} {float(v) * 1e3:.0f} ms"
                                           for k, v in best.items()))


def head(src: str, lines: int, tmp: str, name: str = "head.tsv") -> str:
    path = os.path.join(tmp, name)
    with open(src, "rb") as f, open(path, "wb") as out:
        for i, line in enumerate(f):
            if i == lines:
                break
            out.write(line)
    return path


def routed_kinds(data: str, lines: int, tmp: str) -> tuple[int, collections.Counter]:
    """(URLs read, Counter of kinds) of the URLs the kernel routes, on the first lines."""
    ub = URLBuffer.from_file(head(data, lines, tmp), pairs=True)
    _, _, status, _ = run_kernel(ub)
    kinds: collections.Counter = collections.Counter()
    for i in np.flatnonzero(status == ROUTE).tolist():
        href = ub[i]
        full = href if "://" in href[:12] or ub.base(i) is None else ub.base(i)
        auth = full.split("://", 1)[-1].split("/", 1)[0].split("?", 1)[0]
        if "@" in auth:
            kinds["userinfo"] += 1
        elif "xn--" in auth.lower() or not auth.isascii():
            kinds["IDN / xn-- host"] += 1
        elif not href.isascii():
            kinds["non-ASCII path/query"] += 1
        elif any(c in href for c in " \t\\") or href != href.strip():
            kinds["space, tab or backslash"] += 1
        elif href.lower().startswith(("http:", "https:")) and "://" not in href[:8]:
            kinds["http: without //"] += 1
        elif "[" in auth or auth.replace(".", "").replace(":", "").isdigit():
            kinds["IP host"] += 1
        elif "://" in href[:12] and not href.lower().startswith(("http", "https")):
            kinds["other scheme with //"] += 1
        else:
            kinds["other"] += 1
    return len(ub), kinds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(SCRATCH, "links.tsv"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--check-lines", type=int, default=300_000,
                    help="compare with --scalar over this many lines (0: all)")
    ap.add_argument("--reps", type=int, default=3, help="runs of the command (best taken)")
    ap.add_argument("--no-cli", action="store_true", help="skip the command's runs")
    a = ap.parse_args()
    if not os.path.exists(a.data):
        sys.exit(f"no data: run tools/gather_links.py --out {a.data} first")
    os.makedirs(SCRATCH, exist_ok=True)
    # bytecode of seenstore's modules, as an installed package has it: without it (a
    # checkout run with PYTHONDONTWRITEBYTECODE=1) every command compiles them from
    # source, ~0.1 s of CPU of its start-up measured here
    compileall.compile_dir(os.path.join(REPO, "seenstore"), quiet=1)
    tmp = tempfile.mkdtemp(dir=SCRATCH, prefix="bench-add-")
    size = os.path.getsize(a.data)
    with open(a.data, "rb") as f:
        n = sum(1 for line in f if line.strip())
    threads = [int(t) for t in a.threads.split(",")]
    print(f"data: {a.data}, {size / 1e6:.0f} MB, {n} lines; machine: {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f} (shared: wall figures are noisy)")
    outs = {} if a.no_cli else {f"command, {t} thread(s)": o
                                for t, o in command(a.data, n, threads, a.reps, tmp).items()}
    keep_freed_memory()  # as seenstore add does
    # load the JIT cache in this process (a first run compiles or loads every kernel;
    # above dispatch.SMALL lines, so that the kernels run, not their twins)
    warm = head(a.data, 2 * dispatch.SMALL, tmp, "warm.tsv")
    in_process(warm, 2, tmp)
    in_process(warm, 1, tmp)
    for t in threads:
        wall, cpu, n, sec, outs[f"add_fast, {t} thread(s)"] = in_process(a.data, t, tmp)
        split = "  ".join(f"{k} {sec.get(k, 0.0) / n * 1e9:.0f}" for k in STAGES)
        print(f"add_fast in process, {t} thread(s): {n} lines in {wall:.2f} s = "
              f"{n / wall / 1e6:.2f} M lines/s; CPU {cpu / n * 1e9:.0f} ns/line over all "
              f"threads; wall ns/line: {split} "
              f"(other {max(0.0, wall - sum(sec.values())) / n * 1e9:.0f}); "
              f"load average {os.getloadavg()[0]:.1f}")
    n, sec = cpu_split(a.data, tmp)
    print("1 thread, CPU ns/line: " + "  ".join(f"{k} {sec.get(k, 0.0) / n * 1e9:.0f}"
                                               for k in STAGES)
          + f"  (sum {sum(sec.values()) / n * 1e9:.0f} = "
            f"{n / sum(sec.values()) / 1e6:.2f} M lines/s of CPU)")
    first = next(iter(outs.values()))
    same = all(filecmp.cmp(first, o, shallow=False) for o in outs.values())
    print(f"outputs of all runs identical ({', '.join(outs)}): {same}")
    src = a.data if not a.check_lines else head(a.data, a.check_lines, tmp)
    _, _, fast_out = cli(src, tmp, "check-fast")
    sw, _, scalar_out = cli(src, tmp, "check-scalar", "--scalar")
    lines = sum(1 for _ in open(src, "rb"))
    identical = filecmp.cmp(fast_out, scalar_out, shallow=False)
    print(f"--scalar over {lines} lines: {sw:.1f} s ({lines / sw / 1e3:.0f} k lines/s); "
          f"fast output byte-identical: {identical} ({os.path.getsize(fast_out)} bytes)")
    n, kinds = routed_kinds(a.data, a.check_lines or 10**12, tmp)
    total = sum(kinds.values())
    print(f"routed by the kernel: {total} of {n} URLs ({100 * total / max(n, 1):.2f} %)")
    for k, v in kinds.most_common():
        print(f"  {k}: {v} ({100 * v / max(n, 1):.3f} % of URLs)")
    shutil.rmtree(tmp)
    if not (same and identical):
        sys.exit(1)


if __name__ == "__main__":
    main()
