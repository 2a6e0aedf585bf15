"""The Python list APIs over URLs: ``normalise_many``, ``fingerprint_many`` and
``DedupStage.offer`` of URL strings, ns per URL.

What a crawler embedding seenstore calls with the links of its pages. Input: the
absolute URLs of ``--data`` (``base<TAB>href`` lines from tools/gather_links.py,
resolved by the fast path's kernel: real canonical URLs) or, without it, --n URLs
from bench_normalise.py's generator (raw spellings: mixed case, default ports, dot
segments, escapes, some non-ASCII). Each figure is the median of --repeat runs
(wall and process CPU), the kernels loaded before the clock starts:

* ``normalise_many(urls, threads=T)`` over the whole list;
* ``fingerprint_many(canonical, threads=T)`` over the canonical forms;
* a fresh ``DedupStage`` (WAL "always", real fsyncs; a store in --dir) offered the
  list --offer URLs per call, then closed (its final merge included).

    python bench/bench_url_lists.py [--data scratch/links.tsv] [--n 1000000] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from seenstore.keys import sort as sorting  # noqa: E402
from seenstore.runtime.parallel import default_threads  # noqa: E402
from seenstore.url.fastpath import run_kernel  # noqa: E402
from seenstore.url.fingerprint import fingerprint_many  # noqa: E402
from seenstore.url.fastpath import normalise_many  # noqa: E402
from seenstore.stage import DedupStage  # noqa: E402
from seenstore.url.buffer import URLBuffer  # noqa: E402


def real_urls(path: str, n: int) -> list[str]:
    """The canonical forms of the first ``n`` lines of a ``base<TAB>href`` file."""
    with open(path, "rb") as f:
        pieces = URLBuffer.iter_file(f, pairs=True, chunk_urls=1 << 17, max_line=16384)
        out: list[str] = []
        for ub in pieces:
            data, offsets, _, _ = run_kernel(ub, threads=1)
            out.extend(u for u in URLBuffer(data, offsets).tolist() if u)  # OK ones only
            if len(out) >= n:
                break
    return out[:n]


def timed(fn, repeat: int) -> tuple[float, float]:
    """Median (wall, CPU) seconds of ``fn()`` over ``repeat`` runs."""
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="base<TAB>href lines (tools/gather_links.py)")
    ap.add_argument("--n", type=float, default=1e6, help="URLs (default 1e6)")
    ap.add_argument("--threads", type=int, default=default_threads())
    ap.add_argument("--offer", type=int, default=10_000, help="URLs per offer call")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="folder for the stage's store (default: temp)")
    a = ap.parse_args()
    n = int(a.n)
    if a.data:
        urls, what = real_urls(a.data, n), f"canonical URLs of {a.data}"
    else:
        from bench_normalise import generate_urls
        urls, what = generate_urls(n), "generated raw URLs (bench_normalise.py)"
    n = len(urls)
    print(f"machine: {sorting.machine_summary()}; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{n:,} {what}, mean length {sum(map(len, urls)) / n:.0f} characters; "
          f"threads {a.threads}; median of {a.repeat}")
    t = time.perf_counter()
    canonical = normalise_many(urls[:2000], threads=a.threads).urls  # kernels loaded
    fingerprint_many(canonical, threads=a.threads)
    print(f"kernel loads (not timed below): {time.perf_counter() - t:.2f} s")
    canonical = normalise_many(urls, threads=a.threads).urls
    rows = [("normalise_many", lambda: normalise_many(urls, threads=a.threads)),
            ("fingerprint_many", lambda: fingerprint_many(canonical, threads=a.threads))]
    root = a.dir or tempfile.mkdtemp(prefix="seenstore-bench-urls-")
    store = os.path.join(root, "stage")

    def stage() -> None:
        shutil.rmtree(store, ignore_errors=True)
        st = DedupStage.open(store, create=True, threads=a.threads)
        try:
            for i in range(0, n, a.offer):
                st.offer(urls[i:i + a.offer])
        finally:
            st.close()

    rows.append((f"DedupStage.offer ({a.offer:,} per call) + close", stage))
    try:
        for name, fn in rows:
            wall, cpu = timed(fn, a.repeat)
            print(f"{name:45s} {wall / n * 1e9:8.0f} ns/URL wall {cpu / n * 1e9:8.0f} CPU"
                  f"   {n / wall / 1e6:6.2f} M URLs/s")
    finally:
        if a.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
