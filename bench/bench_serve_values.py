"""Per-URL values through ``seenstore serve`` against the same calls on a local store.

One client admits --urls generated URLs (50 hosts) through a ``seenstore serve
--values --warm`` subprocess (every other request with records, ``check_update_urls``,
the rest bare, ``add_urls``), then marks them IN_FLIGHT (one scalar update per
request), DONE with a status and a digest per URL (arrays), reads them back
(``get_urls``), counts, lists the DONE keys (``select``) and the due ones. The
baseline, in the same run: the same calls in the same request sizes on a local
store with values (no HTTP, no JSON). Both sides first run the whole sequence once
on other URLs, after loading the kernels (the server with ``--warm``, this process
with ``seenstore.warmup.warm_up``), so both run the compiled kernels. Printed per
call: microseconds per URL (for counts, select and due, one call over the whole
store, per stored URL) for both and their ratio; the answers of the two are
compared (counts, records, selected keys): "verified" only when they agree.

    python bench/bench_serve_values.py --urls 2e5 --request 1e4
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from seenstore import Client, SeenStore, State
from seenstore.keys.sort import machine_summary


def _calls(store, urls: list[str], request: int) -> dict:
    """Run the sequence on ``store`` (a Client or a SeenStore); seconds per call and
    what it answered."""
    t, out = {}, {}

    def timed(name, fn):
        t0 = time.perf_counter()
        r = fn()
        t[name] = t.get(name, 0.0) + time.perf_counter() - t0
        return r

    parts = [urls[i:i + request] for i in range(0, len(urls), request)]
    rng = np.random.default_rng(1)
    for j, p in enumerate(parts):  # half the requests admit bare, half with records
        if j % 2 == 0:
            timed("add_urls (1/2)", lambda: store.add_urls(p))
        else:
            timed("check_update_urls (1/2)", lambda: store.check_update_urls(
                p, state=State.QUEUED, next_due=rng.integers(1, 100, len(p))))
    for p in parts:
        timed("update_urls (scalar)", lambda: store.update_urls(p, state=State.IN_FLIGHT))
    for p in parts:
        status = rng.choice([200, 301, 404], len(p))
        digest = rng.integers(0, 2**63, len(p)).astype(np.uint64)
        timed("update_urls (arrays)", lambda: store.update_urls(
            p, state=State.DONE, status=status, digest=digest, next_due=100))
    got = [timed("get_urls", lambda: store.get_urls(p)) for p in parts]
    out["records"] = np.concatenate(got)
    out["counts"] = timed("counts", store.counts)
    out["done"] = timed("select (DONE)", lambda: store.select(State.DONE))
    out["due"] = timed("due", lambda: store.due(100))
    return {"seconds": t, "answers": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--urls", type=float, default=2e5)
    ap.add_argument("--request", type=float, default=1e4, help="URLs per request")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    a = ap.parse_args()
    n, request = int(a.urls), int(a.request)
    work = tempfile.mkdtemp(prefix="bench-serve-values-", dir=a.dir)
    urls = [f"http://h{i % 50}.example/item/{i}?ref={i % 7}" for i in range(n)]
    # one round of every call on other URLs first, on both sides (kernels loaded,
    # caches warm; both stores then hold the same keys)
    warm = [f"http://warm{i % 5}.example/{i}" for i in range(2 * request)]
    print(f"Machine: {machine_summary()}")
    print(f"{n:,} URLs in requests of {request:,}; scratch {work}")
    try:
        from seenstore.warmup import warm_up

        # the server runs with --warm: this process loads the same kernels, so small
        # calls take the kernels on both sides, not the numpy twins here
        print(f"warm-up (kernels loaded): {warm_up(work, child=True):.1f} s")
        local = SeenStore.open(os.path.join(work, "local"), create=True, values=True,
                               bloom=False)
        _calls(local, warm, request)
        base = _calls(local, urls, request)
        local.close()
        proc = subprocess.Popen([sys.executable, "-m", "seenstore.cli", "serve", "--store",
                                 os.path.join(work, "served"), "--create", "--values",
                                 "--warm", "--listen", "127.0.0.1:0"],
                                stdout=subprocess.PIPE, text=True)
        try:
            line = proc.stdout.readline()
            if "serving" not in line:
                raise SystemExit(f"the server did not start: {line!r}")
            with Client(line.split(" on ")[-1].strip()) as c:
                _calls(c, warm, request)
                served = _calls(c, urls, request)
        finally:
            proc.terminate()
            proc.wait(60)
        a_, b_ = served["answers"], base["answers"]
        ok = (a_["counts"] == b_["counts"]
              and a_["done"].tolist() == b_["done"].tolist()
              and a_["due"].tolist() == b_["due"].tolist()
              and all(a_["records"][f].tolist() == b_["records"][f].tolist()
                      for f in b_["records"].dtype.names))
        print(f"{'call':<24} {'server us/URL':>12} {'local us/URL':>13} {'ratio':>6}")
        for name, s in served["seconds"].items():
            loc = base["seconds"][name]
            per = n / 2 if name.endswith("(1/2)") else n  # URLs that call took
            print(f"{name:<24} {s / per * 1e6:>12.2f} {loc / per * 1e6:>13.2f} "
                  f"{s / loc if loc else float('nan'):>6.2f}")
        print(f"counts: { {k.name: v for k, v in a_['counts'].items()} }")
        print("verified: the server's answers equal the local store's" if ok
              else "NOT VERIFIED: the answers differ")
        if not ok:
            raise SystemExit(1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
