"""What learning costs on a store (issue 38, "Cost"): ``record_fetches`` throughput
(records without a body, and HTML pages whose digests seenstore computes),
``learn`` time over 1e6 evidence records, and a policy change's rebuild.

Synthetic evidence: N records over H hosts, five behaviours (an ignored session
parameter with order-insensitive queries, slash redirects, ``www.`` and path case,
index documents, declared canonicals). Prints the CPU and one line per figure.

    python3 bench/bench_learn.py [--records 1e6] [--hosts 1000] [--pages 2000]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

from seenstore.keys.sort import cpu_model
from seenstore.store import SeenStore


def records(n: int, hosts: int, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    per = max(1, n // hosts)
    out = []
    for h in range(hosts):
        host = f"site{h}.example"
        kind = h % 5
        for r in range(per):
            page = rng.randrange(per // 3 + 1)
            digest = (h << 32) | page
            if kind == 0:
                q = [f"id={page}", f"sid={rng.randrange(10**6)}"]
                rng.shuffle(q)
                out.append({"url": f"http://{host}/item/{page % 50}?" + "&".join(q),
                            "status": 200, "digest": digest})
            elif kind == 1:
                if r % 3 == 0:
                    out.append({"url": f"http://{host}/a/{page}", "status": 301,
                                "location": f"http://{host}/a/{page}/"})
                else:
                    out.append({"url": f"http://{host}/a/{page}/", "status": 200,
                                "digest": digest})
            elif kind == 2:
                w = "www." if r % 2 else ""
                path = f"/Doc/{page}" if r % 3 else f"/doc/{page}"
                out.append({"url": f"http://{w}{host}{path}", "status": 200, "digest": digest})
            elif kind == 3:
                tail = "index.html" if r % 2 else ""
                out.append({"url": f"http://{host}/n/{page}/{tail}", "status": 200,
                            "digest": digest})
            else:
                out.append({"url": f"http://{host}/p/{page}?ref={rng.randrange(99)}",
                            "status": 200, "canonical": f"http://{host}/p/{page}",
                            "digest": digest})
    return out


def page(i: int) -> bytes:
    words = " ".join(f"word{(i * 7 + j) % 997}" for j in range(300))
    return (f"<html><head><title>page {i}</title></head><body><p>{words}</p>"
            f"<p>updated 2026-12-04 07:{i % 60:02d}</p></body></html>").encode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=float, default=1e6)
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--pages", type=int, default=2000, help="HTML bodies recorded")
    ap.add_argument("--dir", default=None, help="scratch folder (default: a temp dir)")
    a = ap.parse_args()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores")
    tmp = tempfile.mkdtemp(prefix="bench-learn-", dir=a.dir)
    try:
        recs = records(int(a.records), a.hosts)
        with SeenStore.open(os.path.join(tmp, "s"), create=True) as store:
            t0 = time.perf_counter()
            for i in range(0, len(recs), 50_000):
                store.record_fetches(recs[i:i + 50_000])
            dt = time.perf_counter() - t0
            print(f"record_fetches, no body: {len(recs):,} records in {dt:.1f} s "
                  f"({len(recs) / dt / 1e3:.0f}k records/s)")
            bodies = [{"url": f"http://pages.example/p/{i}", "status": 200, "body": page(i)}
                      for i in range(a.pages)]
            size = sum(len(b["body"]) for b in bodies)
            t0 = time.perf_counter()
            store.record_fetches(bodies)
            dt = time.perf_counter() - t0
            print(f"record_fetches, HTML bodies of {size / len(bodies) / 1e3:.1f} kB: "
                  f"{len(bodies) / dt:,.0f} pages/s ({size / dt / 1e6:.1f} MB/s)")
            t0 = time.perf_counter()
            findings = store.learn(apply=False)
            dt = time.perf_counter() - t0
            info = store.last_learn
            adopted = sum(f.status == "adopted" for f in findings)
            print(f"learn over {info['fetches']:,} kept records ({info['hosts']:,} hosts): "
                  f"{dt:.1f} s, {adopted} rules adopted on {info['rules']} hosts")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
