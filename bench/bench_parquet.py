"""``seenstore add --parquet`` against ``seenstore add`` on the same URLs in a text
file: URLs/s and peak RSS of each command (a subprocess, timed by wall clock, RSS
from wait4's rusage).

Writes (once, under --dir) N generated crawl URLs (bench_normalise's generator) as a
Parquet file (one string column 'url') and as a text file, then runs each command
into a fresh store, --repeat times, keeping the best time and its peak RSS.

    python bench/bench_parquet.py [--n 1e6] [--repeat 1] [--dir scratch]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))


def make_inputs(n: int, d: str) -> tuple[str, str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench_normalise import generate_urls

    pq_path, txt_path = os.path.join(d, f"urls-{n}.parquet"), os.path.join(d, f"urls-{n}.txt")
    if not (os.path.exists(pq_path) and os.path.exists(txt_path)):
        urls = generate_urls(n, seed=1)
        pq.write_table(pa.table({"url": pa.array(urls, pa.string())}), pq_path,
                       row_group_size=1 << 20)
        with open(txt_path, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write("\n".join(urls) + "\n")
    return pq_path, txt_path


def run(args: list[str], store: str) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, peak RSS bytes) of one `seenstore add` run into a
    fresh ``store``. CPU time (user + system) is the steadier figure on a shared
    machine: the wall clock counts the time other jobs hold the cores."""
    shutil.rmtree(store, ignore_errors=True)
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "seenstore.cli", "add", "--store", store,
                          *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"failed: {p.stderr.read().decode()}")
    shutil.rmtree(store, ignore_errors=True)
    return dt, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--dir", default="scratch")
    a = ap.parse_args()
    n = int(a.n)
    os.makedirs(a.dir, exist_ok=True)
    generated = not os.path.exists(os.path.join(a.dir, f"urls-{n}.parquet"))
    pq_path, txt_path = make_inputs(n, a.dir)
    store = os.path.join(a.dir, "bench-parquet-store")
    print(f"{n:,} URLs: parquet {os.path.getsize(pq_path) / 1e6:.1f} MB, "
          f"text {os.path.getsize(txt_path) / 1e6:.1f} MB")
    pq1, txt1 = make_inputs(1, a.dir)  # start-up cost: imports, numba cache, store
    if generated:  # a child's peak RSS counts this process's pages it was forked with:
        os.execv(sys.executable, [sys.executable, *sys.argv])  # restart small
    for name, args, args1 in (
            ("add --parquet", ["--parquet", pq_path, "--column", "url"], ["--parquet", pq1]),
            ("add (text file)", [txt_path], [txt1])):
        best = min(run(args, store) for _ in range(a.repeat))
        one = min(run(args1, store) for _ in range(a.repeat))
        marginal = (n - 1) / max(best[1] - one[1], 1e-9)
        print(f"{name:18s} wall {best[0]:7.2f}s ({n / best[0] / 1e6:5.2f} M URLs/s)  "
              f"CPU {best[1]:7.2f}s ({n / best[1] / 1e6:5.2f} M URLs/s; "
              f"{marginal / 1e6:5.2f} M/s after the {one[1]:.2f}s start-up of a 1-URL run)  "
              f"peak RSS {best[2] / 2**20:6.0f} MiB (1 URL: {one[2] / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()
