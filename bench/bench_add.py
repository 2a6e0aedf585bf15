"""End-to-end throughput of ``seenstore add --pairs`` on real link data.

Data: ``base<TAB>href`` lines gathered from the HTML and text documentation
installed on the machine (tools/gather_links.py; no internet, nothing generated).
Make it first:

    python tools/gather_links.py --out scratch/links.tsv --lines 3000000

For each thread count (--threads, default 1 and 2), into a fresh store under
scratch/: ``add_fast`` (what ``seenstore add`` runs) over the whole file, in
process, with the time of each stage (read: lines into URL buffers by the line
kernel; kernel: normalise + fingerprint; scalar: the routed URLs; merge; store:
``SeenStore.add``; write: the new canonical URLs to a file), lines/s = input lines
over the wall time of the loop; then the ``seenstore add --pairs`` command itself
(a subprocess, wall time including start-up); then one thread again with each
stage's time taken as the thread's CPU time (a loaded machine's waiting left
out; the store's own threads not counted). The output of every run is compared
byte for byte with ``seenstore add --pairs --scalar`` over the first --check-lines
lines (all with --check-lines 0), and the routed URLs of the data are classified
(userinfo, IDN / xn-- hosts, other) with their share of the scalar time.

    python bench/bench_add.py [--data scratch/links.tsv] [--threads 1,2] [--check-lines 300000]
"""

from __future__ import annotations

import argparse
import collections
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("SEENSTORE_JIT_MIN", "0")  # kernels for every size (dispatch.py)
import seenstore.cli.url_cmds  # noqa: E402
import seenstore.fastpath  # noqa: E402
from seenstore.cli.url_cmds import add_fast  # noqa: E402
from seenstore.fastpath import run_kernel  # noqa: E402
from seenstore.kernels.status import ROUTE  # noqa: E402
from seenstore.normalise import DEFAULT_MAX_LENGTH  # noqa: E402
from seenstore.parallel import keep_freed_memory  # noqa: E402
from seenstore.policy import DEFAULT_POLICY  # noqa: E402
from seenstore.store import SeenStore  # noqa: E402
from seenstore.urlbuffer import URLBuffer  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRATCH = os.path.join(REPO, "scratch")
STAGES = ("read", "kernel", "scalar", "merge", "store", "write")


class _Sink:
    """What add_fast sends to (deliver.Output's check/send) over a file."""

    def __init__(self, f) -> None:
        self.send, self.check = f.write, lambda: None


def in_process(data: str, threads: int, tmp: str) -> tuple[float, float, int, dict, str]:
    store_dir, out_path = os.path.join(tmp, f"store-{threads}"), os.path.join(tmp, f"out-{threads}")
    seconds: dict[str, float] = {}
    counts: dict[str, int] = {}
    with open(data, "rb") as f, open(out_path, "wb") as out, \
            SeenStore.open(store_dir, create=True, policy_id=DEFAULT_POLICY.identity) as store:
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

    mods = (seenstore.cli.url_cmds, seenstore.fastpath)
    for m in mods:
        m.time = _CPUClock
    try:
        _, _, n, sec, _ = in_process(data, 1, tmp)
    finally:
        for m in mods:
            m.time = time
    return n, sec


def cli(src: str, tmp: str, name: str, *extra: str) -> tuple[float, str]:
    store_dir, out_path = os.path.join(tmp, f"cstore-{name}"), os.path.join(tmp, f"cout-{name}")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    with open(out_path, "wb") as out:
        subprocess.run([sys.executable, "-m", "seenstore.cli", "add", "--pairs", "--store",
                        store_dir, src, *extra], stdout=out, stderr=subprocess.DEVNULL,
                       check=True, env=env)
    wall = time.perf_counter() - t0
    shutil.rmtree(store_dir)
    return wall, out_path


def head(src: str, lines: int, tmp: str) -> str:
    path = os.path.join(tmp, "head.tsv")
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
    ap.add_argument("--no-cli", action="store_true", help="skip the subprocess runs")
    a = ap.parse_args()
    if not os.path.exists(a.data):
        sys.exit(f"no data: run tools/gather_links.py --out {a.data} first")
    os.makedirs(SCRATCH, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=SCRATCH, prefix="bench-add-")
    size = os.path.getsize(a.data)
    print(f"data: {a.data}, {size / 1e6:.0f} MB; machine: {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f} (shared: figures are noisy)")
    keep_freed_memory()  # as seenstore add does
    # warm the JIT cache (a first run compiles or loads every kernel)
    in_process(head(a.data, 20_000, tmp), 2, tmp)
    in_process(head(a.data, 20_000, tmp), 1, tmp)
    outs = {}
    for threads in [int(t) for t in a.threads.split(",")]:
        wall, cpu, n, sec, outs[threads] = in_process(a.data, threads, tmp)
        split = "  ".join(f"{k} {sec.get(k, 0.0) / n * 1e9:.0f}" for k in STAGES)
        print(f"add_fast, {threads} thread(s): {n} lines in {wall:.2f} s = "
              f"{n / wall / 1e6:.2f} M lines/s; CPU {cpu / n * 1e9:.0f} ns/line over all "
              f"threads; wall ns/line: {split} "
              f"(other {max(0.0, wall - sum(sec.values())) / n * 1e9:.0f})")
        if not a.no_cli:
            cw, _ = cli(a.data, tmp, f"t{threads}", "--threads", str(threads))
            print(f"  seenstore add --pairs --threads {threads}: {cw:.2f} s wall = "
                  f"{n / cw / 1e6:.2f} M lines/s (with start-up)")
    n, sec = cpu_split(a.data, tmp)
    print("1 thread, CPU ns/line: " + "  ".join(f"{k} {sec.get(k, 0.0) / n * 1e9:.0f}"
                                               for k in STAGES)
          + f"  (sum {sum(sec.values()) / n * 1e9:.0f} = "
            f"{n / sum(sec.values()) / 1e6:.2f} M lines/s of CPU)")
    first = next(iter(outs.values()))
    same = all(filecmp.cmp(first, o, shallow=False) for o in outs.values())
    print(f"outputs of all thread counts identical: {same}")
    src = a.data if not a.check_lines else head(a.data, a.check_lines, tmp)
    _, fast_out = cli(src, tmp, "check-fast")
    t0 = time.perf_counter()
    _, scalar_out = cli(src, tmp, "check-scalar", "--scalar")
    sw = time.perf_counter() - t0
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
