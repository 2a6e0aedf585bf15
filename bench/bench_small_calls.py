"""A long-lived process whose calls all stay small: twins, then kernels once settled.

A crawler calling ``SeenStore.add_urls`` with a page's worth of links at a time never
makes a call of ``SMALL`` (1e5) items, so no call of its own loads the numba kernels
(kernels/dispatch.py). This runs, in a fresh process each, --calls calls of --urls
distinct URLs (about a third offered again) into a new store, and prints the us per
URL of each tenth of the calls: once as the store runs (the process takes the kernels
once its calls have put ``TWIN_ITEMS`` items through the twins, if they load from
numba's cache without compiling), once with ``SEENSTORE_TWIN_ITEMS`` so large that it
never does (the twins throughout: the baseline, measured in the same run). The numba
cache should be warm (``seenstore warmup``): a kernel that would compile keeps its twin.

    python bench/bench_small_calls.py [--calls 100] [--urls 1e4] [--dir scratch/small-calls]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

from seenstore.bench.units import parse_count
from seenstore.keys.sort import machine_summary

CHILD = r"""
import json, sys, time
from seenstore.store import SeenStore
import seenstore.kernels.dispatch as D
path, calls, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = []
with SeenStore.open(path, create=True, sync=False) as s:
    for c in range(calls):
        urls = [f"http://h{(c * n + i) % 997}.test/p/{(c * n + i) * 2 // 3}" for i in range(n)]
        t = time.perf_counter()
        s.add_urls(urls)
        out.append([time.perf_counter() - t, D.jit_live()])
print(json.dumps({"calls": out, "numba": "numba" in sys.modules}))
"""


def run(path: str, calls: int, n: int, never: bool) -> dict:
    env = dict(os.environ)
    if never:
        env["SEENSTORE_TWIN_ITEMS"] = str(10**18)
    shutil.rmtree(path, ignore_errors=True)
    p = subprocess.run([sys.executable, "-c", CHILD, path, str(calls), str(n)],
                       capture_output=True, text=True, env=env, check=True)
    return json.loads(p.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--urls", type=parse_count, default=10_000)
    ap.add_argument("--dir", default="scratch/small-calls")
    a = ap.parse_args()
    print(machine_summary())
    os.makedirs(a.dir, exist_ok=True)
    path = os.path.join(a.dir, "store")
    got = {name: run(path, a.calls, a.urls, never)
           for name, never in (("as it runs", False), ("twins throughout", True))}
    shutil.rmtree(path, ignore_errors=True)
    tenth = max(1, a.calls // 10)
    print(f"{a.calls} calls of {a.urls:,} URLs; us per URL by tenth of the calls "
          "(* = kernels running by the end of that tenth)")
    for name, doc in got.items():
        cells = []
        for i in range(0, a.calls, tenth):
            part = doc["calls"][i:i + tenth]
            us = 1e6 * sum(t for t, _ in part) / (len(part) * a.urls)
            cells.append(f"{us:5.2f}{'*' if part[-1][1] else ' '}")
        total = 1e6 * sum(t for t, _ in doc["calls"]) / (a.calls * a.urls)
        print(f"{name:17s} {' '.join(cells)}   all: {total:.2f} us/URL   "
              f"numba imported: {doc['numba']}")


if __name__ == "__main__":
    main()
