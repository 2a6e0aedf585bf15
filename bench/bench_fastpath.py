"""Throughput of the batch fast path (normalise + fingerprint) against the scalar path.

Workload (the "crawl" mix, deterministic in --seed): links as extracted from pages,
``base<TAB>href`` lines grouped by page (20-60 links per page; pages on Zipf-chosen
hosts out of 200k, 40 % with ``www.``). Each href is, by share:
  42 % absolute http(s) (30 % of them http; 5 % upper-case scheme, 10 % upper-case
       host, 4 % explicit default port, 2 % other port, 30 % to another host)
  28 % path-absolute ``/a/b``     12 % path-relative ``a/b``, ``./a``, ``../a``
   3 % query-only ``?q``           2 % fragment-only ``#f``   3 % ``//host/path``
   2 % mailto:/javascript:/tel:    8 % hard cases for the scalar path: non-ASCII
       path (3 %), space in path (1 %), IDN host (1 %), IPv4 host (1 %),
       userinfo (0.5 %), backslash (0.5 %), punycode label (0.5 %), tab (0.5 %)
Paths have 0-6 segments of words/ids; 8 % hold a dot segment, 10 % a %-escape
(%7E, %2F, %41, lower-case hex), 30 % end in a file name; 40 % have a query of
1-4 parameters (5 % with utm_ tracking parameters); 10 % have a fragment.
With --mix absolute, every line is an absolute URL as written (95 % the absolute
kind above, 5 % the hard kinds), one per line: the input of ``seenstore add``.

Measured in one run, single core: reading the file into a URLBuffer; the fast path
(normalise_buffer: kernel + scalar fallback + merge + keys), best and median of
--repeat; its breakdown; the scalar path (try_normalise + fingerprint per URL) and
w3lib.url.canonicalize_url (after urljoin) on a --sample of the lines, extrapolated
to N and labelled so. --rss runs a child that streams the file in chunks and
reports its peak RSS against the file size.

    python bench/bench_fastpath.py [--n 10000000] [--repeat 3] [--sample 200000] [--rss]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time

import numpy as np

from seenstore.url.fastpath import normalise_buffer, run_kernel, scalar_one
from seenstore.url.fingerprint import fingerprint
from seenstore.kernels.url import gather
from seenstore.url.normalise import DEFAULT_MAX_LENGTH, Rejection
from seenstore.url.policy import DEFAULT_POLICY
from seenstore.url.buffer import URLBuffer

SCRATCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scratch")
WORDS = ["news", "sport", "about", "contact", "products", "item", "category", "search", "blog",
         "archive", "page", "docs", "api", "v1", "users", "profile", "images", "static", "help",
         "faq", "world", "tech", "en", "de", "shop", "cart", "login", "tag", "2024", "video"]
TLDS = ["com", "org", "net", "de", "co.uk", "io", "fr", "jp", "info", "ru"]
PARAMS = ["id", "page", "q", "sort", "lang", "ref", "offset", "limit", "cat", "s"]


class Gen:
    """The crawl mix of the module doc; ``page()`` returns (base, [href, ...])."""

    def __init__(self, seed: int, hosts: int = 200_000):
        self.r = random.Random(seed)
        r = self.r
        self.hosts = [f"{r.choice(WORDS)}{i}.{r.choice(TLDS)}" for i in range(hosts)]
        self.cum = np.cumsum(1.0 / np.arange(1, hosts + 1))
        self.cum /= self.cum[-1]

    def host(self) -> str:
        i = int(np.searchsorted(self.cum, self.r.random()))
        return ("www." if i % 5 < 2 else "") + self.hosts[min(i, len(self.hosts) - 1)]

    def path(self) -> str:
        r = self.r
        segs = [r.choice(WORDS) if r.random() < 0.7 else str(r.randint(1, 99999))
                for _ in range(r.randint(0, 6))]
        if segs and r.random() < 0.08:
            segs.insert(r.randrange(len(segs)), r.choice([".", ".."]))
        if segs and r.random() < 0.10:
            segs[-1] += r.choice(["%7E", "%2F", "%41", "%7e", "%2f"])
        if r.random() < 0.3:
            segs.append(f"{r.choice(WORDS)}-{r.randint(1, 10**6)}.{r.choice(['html', 'php'])}")
        return "/".join(segs)

    def query(self) -> str:
        r = self.r
        if r.random() >= 0.4:
            return ""
        ps = [f"{p}={r.randint(0, 9999)}" for p in r.sample(PARAMS, r.randint(1, 4))]
        if r.random() < 0.05:
            ps.append("utm_source=feed")
        return "?" + "&".join(ps)

    def frag(self) -> str:
        return "#" + self.r.choice(WORDS) if self.r.random() < 0.1 else ""

    def absolute(self, host: str) -> str:
        r = self.r
        scheme = "http" if r.random() < 0.3 else "https"
        if r.random() < 0.05:
            scheme = scheme.upper()
        if r.random() < 0.3:
            host = self.host()
        if r.random() < 0.1:
            host = host.upper()
        x = r.random()
        port = (":80" if scheme.lower() == "http" else ":443") if x < 0.04 else \
            ":8080" if x < 0.06 else ""
        return f"{scheme}://{host}{port}/{self.path()}{self.query()}{self.frag()}"

    def hard(self, host: str) -> str:
        """One URL of the kinds the kernel leaves to the scalar path (and two it takes)."""
        r = self.r
        kinds = (  # (weight, maker); the weights are the shares of the module doc
            (3, lambda: f"https://{host}/{r.choice(['café', 'straße', 'новости', '日本'])}/"
                        f"{self.path()}"),
            (1, lambda: f"/{r.choice(WORDS)} {r.choice(WORDS)}/{self.path()}"),
            (1, lambda: f"https://{r.choice(['bücher', 'münchen', '例子'])}.{r.choice(TLDS)}/"
                        f"{self.path()}"),
            (1, lambda: f"http://{r.randint(1, 223)}.{r.randint(0, 255)}.0.{r.randint(1, 254)}/"
                        f"{self.path()}"),
            (0.5, lambda: f"https://user:pw@{host}/{self.path()}"),
            (0.5, lambda: f"https://{host}\\{self.path()}"),
            (0.5, lambda: f"https://xn--bcher-kva.{r.choice(TLDS)}/{self.path()}"),
            (0.5, lambda: f"/{self.path()}\t{self.query()}"),
        )
        make = r.choices([k for _, k in kinds], weights=[w for w, _ in kinds])[0]
        return make()

    def href(self, host: str) -> str:
        r = self.r
        x = r.random() * 100
        if x < 42:
            return self.absolute(host)
        if x < 70:
            return f"/{self.path()}{self.query()}{self.frag()}"
        if x < 82:
            return f"{r.choice(['', './', '../', '../../'])}{self.path()}{self.query()}"
        if x < 85:
            return "?" + (self.query()[1:] or "p=2")
        if x < 87:
            return "#" + r.choice(WORDS)
        if x < 90:
            return f"//{self.host()}/{self.path()}"
        if x < 92:
            return r.choice(["mailto:info@example.com", "javascript:void(0)", "tel:+4930123"])
        return self.hard(host)

    def page(self) -> tuple[str, list[str]]:
        host = self.host()
        base = f"https://{host}/{self.path()}"
        return base, [self.href(host) for _ in range(self.r.randint(20, 60))]


def dataset(n: int, seed: int, mix: str) -> str:
    """Path of the generated file (cached in scratch/)."""
    os.makedirs(SCRATCH, exist_ok=True)
    path = os.path.join(SCRATCH, f"fastpath_{mix}_{n}_{seed}.txt")
    if os.path.exists(path):
        return path
    t0 = time.perf_counter()
    g = Gen(seed)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        done = 0
        while done < n:
            base, hrefs = g.page()
            hrefs = hrefs[: n - done]
            if mix == "absolute":
                host = base.split("/")[2]
                lines = [g.absolute(host) if g.r.random() < 0.95 else g.hard(host).lstrip("/")
                         for _ in hrefs]
            else:
                lines = [f"{base}\t{h}" for h in hrefs]
            f.write("\n".join(lines) + "\n")
            done += len(lines)
    os.replace(tmp, path)
    print(f"generated {path} in {time.perf_counter() - t0:.0f} s")
    return path


def timed(fn, repeat: int):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times), out


def scalar_rate(ub: URLBuffer, m: int) -> tuple[float, list]:
    """URLs/s of the scalar path (scalar_one + fingerprint per URL) on the first m URLs."""
    items = [(ub.raw(i), ub.base(i)) for i in range(m)]
    t0 = time.perf_counter()
    res = []
    usable: dict[str, bool] = {}  # each distinct base is checked once, as normalise_buffer does
    for u, b in items:
        r = scalar_one(u, b, DEFAULT_POLICY, DEFAULT_MAX_LENGTH, usable)
        res.append(r if isinstance(r, Rejection) else (r, fingerprint(r)))
    return m / (time.perf_counter() - t0), res


def w3lib_rate(ub: URLBuffer, m: int) -> float:
    from urllib.parse import urljoin

    from w3lib.url import canonicalize_url

    items = [(ub[i], ub.base(i)) for i in range(m)]
    t0 = time.perf_counter()
    for u, b in items:
        try:
            canonicalize_url(urljoin(b, u) if b else u)
        except Exception:  # noqa: BLE001, S110 (w3lib raises assorted errors on odd input)
            pass
    return m / (time.perf_counter() - t0)


def common_case(ub: URLBuffer, status: np.ndarray, a) -> None:
    """The same measurement restricted to the URLs the kernel normalises itself."""
    keep = status == 0
    none = np.full(len(ub), -1, dtype=np.int64)
    data, offsets = gather(ub.data, ub.offsets, keep, none, np.zeros(8, np.uint8),
                           np.zeros(1, np.int64), 0)
    ids = None if ub.base_ids is None else ub.base_ids[keep]
    cub = URLBuffer(data, offsets, ub.bases if ids is not None else None, ids)
    n = len(cub)
    chunks = [cub.slice(i, min(i + a.batch, n)) for i in range(0, n, a.batch)]
    best, med, fbs = timed(lambda: [normalise_buffer(c) for c in chunks], a.repeat)
    assert sum(fb.routed for fb in fbs) == 0
    m = min(a.sample, n)
    srate, _ = scalar_rate(cub, m)
    print(f"\ncommon case only (the {n:,} URLs the kernel normalises itself, "
          f"{100 * n / len(ub):.1f} % of the mix), same batches:")
    print(f"  fast path {n / best / 1e6:.2f} M URLs/s (median {n / med / 1e6:.2f}), "
          f"{best / n * 1e9:.0f} ns/URL; scalar path on {m:,} of them {srate:,.0f} URLs/s "
          f"({1e9 / srate:.0f} ns/URL): {n / best / srate:.1f}x")


def rss_child(path: str, chunk: int) -> None:
    t0 = time.perf_counter()
    n = new = 0
    for ub in URLBuffer.iter_file(path, pairs=True, chunk_urls=chunk):
        fb = normalise_buffer(ub)
        n += len(ub)
        new += len(fb.positions)
    # VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork + exec.
    with open("/proc/self/status") as f:
        peak = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmHWM:"))
    print(f"{n} {new} {peak} {time.perf_counter() - t0:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mix", choices=["crawl", "absolute"], default="crawl")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1_000_000,
                    help="URLs per normalise_buffer call (seenstore add's default batch)")
    ap.add_argument("--sample", type=int, default=200_000, help="lines for the scalar path")
    ap.add_argument("--w3lib-sample", type=int, default=100_000)
    ap.add_argument("--rss", action="store_true", help="also measure peak RSS (child process)")
    ap.add_argument("--chunk", type=int, default=1_000_000, help="URLs per chunk for --rss")
    ap.add_argument("--rss-child", nargs=2, metavar=("PATH", "CHUNK"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rss_child:
        rss_child(a.rss_child[0], int(a.rss_child[1]))
        return

    path = dataset(a.n, a.seed, a.mix)
    size = os.path.getsize(path)
    t0 = time.perf_counter()
    normalise_buffer(URLBuffer.from_bytes(b"http://a/\thttp://b/c\nhttp://a/\t../d?e#f\n",
                                          pairs=True))
    print(f"JIT warm-up (load or compile the kernels): {time.perf_counter() - t0:.2f} s")

    t0 = time.perf_counter()
    ub = URLBuffer.from_file(path, pairs=True)
    read_s = time.perf_counter() - t0
    n = len(ub)
    hrefs = int(ub.offsets[-1])
    print(f"{a.mix} mix: {n:,} lines, file {size / 1e6:.0f} MB, mean href {hrefs / n:.0f} bytes;"
          f" read into a URLBuffer in {read_s:.2f} s ({read_s / n * 1e9:.0f} ns/URL)")

    chunks = [ub.slice(i, min(i + a.batch, n)) for i in range(0, n, a.batch)]
    best, med, fbs = timed(lambda: [normalise_buffer(c) for c in chunks], a.repeat)
    status = np.concatenate([run_kernel(c)[2] for c in chunks])
    routed = int((status == 1).sum())
    parts = {k: sum(fb.seconds[k] for fb in fbs) for k in ("kernel", "scalar", "merge")}
    t0 = time.perf_counter()
    for fb in fbs:
        _ = fb.canonical
    canon_s = time.perf_counter() - t0
    accepted = sum(len(fb.positions) for fb in fbs)
    reasons: dict[str, int] = {}
    for fb in fbs:
        for k, v in fb.reason_counts().items():
            reasons[k] = reasons.get(k, 0) + v
    del fbs
    print(f"\nfast path, normalise+fingerprint of {n:,} URLs in batches of {a.batch:,}, single "
          f"core, best/median of {a.repeat}: {best:.2f} / {med:.2f} s")
    print(f"  {n / best / 1e6:.2f} M URLs/s (median {n / med / 1e6:.2f}), "
          f"{best / n * 1e9:.0f} ns/URL; accepted {accepted:,}, rejected "
          f"{n - accepted:,} {reasons}")
    print(f"  routed to the scalar path: {routed:,} ({100 * routed / n:.2f} %); kernel-decided "
          f"scheme rejections: {int((status == 2).sum()):,}")
    print("  where the time goes (last run, timed inside normalise_buffer):")
    for name, key in (("kernel: parse, resolve, normalise, hash", "kernel"),
                      ("scalar path for the routed URLs", "scalar"),
                      ("keys of the scalar results, result object", "merge")):
        sec = parts[key]
        print(f"    {name:44s} {sec:6.2f} s {sec / n * 1e9:6.0f} ns/URL {100 * sec / best:5.1f} %")
    rest = best - sum(parts.values())
    print(f"    {'other (status scans, Python glue)':44s} {rest:6.2f} s "
          f"{rest / n * 1e9:6.0f} ns/URL")
    print(f"  on demand, not in the figure above: one contiguous canonical buffer per batch "
          f"(FastBatch.canonical) {canon_s:.2f} s, {canon_s / n * 1e9:.0f} ns/URL")

    m = min(a.sample, n)
    srate, sres = scalar_rate(ub, m)
    sample_fb = normalise_buffer(ub.slice(0, m))
    fast = dict(zip(sample_fb.positions.tolist(),
                    zip(sample_fb.urls, (int(k) for k in sample_fb.keys))))
    agree = all((fast.get(i) == r) if not isinstance(r, Rejection) else i not in fast
                for i, r in enumerate(sres))
    w = min(a.w3lib_sample, n)
    wrate = w3lib_rate(ub, w)
    frate = n / best
    print(f"\nbaselines in the same run (measured on a sample, extrapolated to {n:,}):")
    print(f"  scalar path (scalar_one + fingerprint), {m:,} URLs: {srate:,.0f} URLs/s, "
          f"{1e9 / srate:.0f} ns/URL -> {n / srate:.0f} s for {n:,}")
    print(f"  w3lib canonicalize_url(urljoin), {w:,} URLs: {wrate:,.0f} URLs/s, "
          f"{1e9 / wrate:.0f} ns/URL -> {n / wrate:.0f} s for {n:,}")
    print(f"  fast path speed-up: {frate / srate:.1f}x the scalar path, {frate / wrate:.1f}x w3lib;"
          f" fast == scalar on the {m:,}-URL sample: {agree}")
    common_case(ub, status, a)

    if a.rss:
        out = subprocess.run([sys.executable, __file__, "--rss-child", path, str(a.chunk)],
                             capture_output=True, text=True, check=True).stdout.split()
        cn, peak, secs = int(out[0]), int(out[2]), float(out[3])
        print(f"\npeak RSS streaming the file in chunks of {a.chunk:,} URLs: {peak / 1e6:.0f} MB"
              f" = {peak / size:.2f}x the file ({size / 1e6:.0f} MB); {cn:,} URLs in {secs:.1f} s")


if __name__ == "__main__":
    main()
