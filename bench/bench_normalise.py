"""Throughput of normalise + fingerprint (URLs/s) against peer canonicalisers.

Generates a realistic URL list (Zipf hosts, mixed-case hosts, default ports, dot
segments, percent-escapes, UTF-8 paths, tracking parameters, fragments) and times, in
the same run: seenstore's ``normalise_many`` and ``fingerprint_many`` on the whole
list (lists of 256 or more take the batch fast path, numba kernels: their cache loads
fall in the first of --repeat runs), normalise + fingerprint (safe policy, and a
policy with every risky rule on: those hosts' URLs go through the scalar path), the
bare ada-url parse the scalar path builds on, w3lib.url.canonicalize_url and
url_normalize.url_normalize. Best of --repeat runs.

    python bench/bench_normalise.py [--n 200000] [--repeat 3] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import ada_url

from seenstore.url.fingerprint import fingerprint_many
from seenstore.url.fastpath import normalise_many
from seenstore.url.policy import parse_policy

WORDS = ["news", "sport", "about", "contact", "products", "item", "category", "search",
         "blog", "archive", "page", "docs", "api", "v1", "v2", "users", "profile", "images",
         "static", "css", "js", "download", "help", "faq", "café", "straße", "größe", "naïve"]
TLDS = ["com", "org", "net", "de", "co.uk", "io", "fr", "jp"]
PARAMS = ["id", "page", "q", "sort", "lang", "ref", "utm_source", "utm_medium",
          "utm_campaign", "gclid", "sessionid", "offset", "limit"]

ALL_RULES = parse_policy("""
version = "bench"
[[rule]]
hosts = ["*"]
strip_tracking = true
strip_params = ["sessionid"]
sort_query = true
trailing_slash = "remove"
strip_www = true
strip_trailing_dot = true
""")


def generate_urls(n: int, seed: int = 1, hosts: int = 5000) -> list[str]:
    """``n`` absolute URLs, deterministic in ``seed``; about 65 characters on average."""
    rnd = random.Random(seed)
    names = [f"{rnd.choice(WORDS).replace('é', 'e').replace('ß', 'ss').replace('ö', 'o')}"
             f"{i}.{rnd.choice(TLDS)}" for i in range(hosts)]
    weights = [1 / (i + 1) for i in range(hosts)]
    out = []
    for host in rnd.choices(names, weights, k=n):
        r = rnd.random()
        scheme = "https" if r < 0.7 else "http"
        if rnd.random() < 0.05:
            scheme = scheme.upper()
        h = ("www." if rnd.random() < 0.4 else "") + host
        if rnd.random() < 0.1:
            h = h.upper()
        port = (":443" if scheme.lower() == "https" else ":80") if rnd.random() < 0.05 else ""
        segs = [rnd.choice(WORDS) for _ in range(rnd.randint(0, 5))]
        if segs and rnd.random() < 0.1:
            segs.insert(rnd.randrange(len(segs)), rnd.choice([".", ".."]))
        if segs and rnd.random() < 0.1:
            segs[-1] = segs[-1].replace("a", "%61").replace("-", "%2d") + "%7E"
        if rnd.random() < 0.3:
            segs.append(f"{rnd.randint(1, 10**7)}.html")
        elif rnd.random() < 0.3:
            segs.append("-".join(rnd.choice(WORDS) for _ in range(rnd.randint(3, 8))))
        path = "/" + "/".join(segs) + ("/" if rnd.random() < 0.2 else "")
        query = ""
        if rnd.random() < 0.45:
            ps = rnd.sample(PARAMS, rnd.randint(1, 4))
            query = "?" + "&".join(f"{p}={rnd.randint(0, 99999)}" for p in ps)
        frag = "#" + rnd.choice(WORDS) if rnd.random() < 0.1 else ""
        out.append(f"{scheme}://{h}{port}{path}{query}{frag}")
    return out


def best_rate(fn, urls, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(urls)
        times.append(time.perf_counter() - t0)
    return len(urls) / min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    import url_normalize
    import w3lib.url

    t0 = time.perf_counter()
    urls = generate_urls(a.n, a.seed)
    gen_s = time.perf_counter() - t0
    mean_len = statistics.fmean(len(u) for u in urls)
    print(f"{a.n} URLs generated in {gen_s:.2f} s, mean length {mean_len:.0f} chars; "
          f"best of {a.repeat}; seenstore's list calls run the numba kernels (cache loads "
          f"in the first run)")

    def ada_only(us):
        for u in us:
            ada_url.parse_url(u, ("href",))

    canonical = normalise_many(urls).urls
    cases = [
        ("ada_url.parse_url, href only (public API)", ada_only),
        ("seenstore normalise (safe)", lambda us: normalise_many(us)),
        ("seenstore fingerprint_many only", lambda us: fingerprint_many(canonical)),
        ("seenstore normalise+fingerprint (safe)",
         lambda us: fingerprint_many(normalise_many(us).urls)),
        ("seenstore normalise+fingerprint (all risky rules)",
         lambda us: fingerprint_many(normalise_many(us, policy=ALL_RULES).urls)),
        ("w3lib.url.canonicalize_url", lambda us: [w3lib.url.canonicalize_url(u) for u in us]),
        ("url_normalize.url_normalize", lambda us: [url_normalize.url_normalize(u) for u in us]),
    ]
    rates = {}
    for name, fn in cases:
        rates[name] = best_rate(fn, urls, a.repeat)
    w3, un = rates["w3lib.url.canonicalize_url"], rates["url_normalize.url_normalize"]
    print(f"{'stage':52s} {'URLs/s':>11s} {'us/URL':>7s} {'x w3lib':>8s} {'x url_norm':>10s}")
    for name, r in rates.items():
        print(f"{name:52s} {r:11,.0f} {1e6 / r:7.2f} {r / w3:8.2f} {r / un:10.2f}")
    print(f"rejected by seenstore: {a.n - len(canonical)} of {a.n}; "
          f"distinct canonical URLs: {len(set(canonical))}")


if __name__ == "__main__":
    main()
