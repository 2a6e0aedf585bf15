"""seenstore serve against Redis: 8 client processes admitting URLs at once.

Each client offers --urls generated URLs: half its own, half from a pool every
client shares (50% overlap between clients), in requests of --request URLs, as
fast as answers come. seenstore: a ``seenstore serve --warm`` subprocess on a free
port, clients ``seenstore.Client.add_urls`` (the server normalises, fingerprints,
group-commits durably and answers a mask). Redis: a ``redis-server`` this script
starts on a free port (no persistence: its default snapshotting off, so nothing
is fsynced), clients ``SADD`` of the same 64-bit fingerprints (8 raw bytes each,
computed before the clock starts), one SADD per URL, pipelined per request, as
scrapy-redis does; SADD's 1 is "new". Both: aggregate URLs/s (all clients' URLs /
wall time from the first request to the last answer), p50/p99 request latency,
and the exactly-once check (the union of "new" answers is every distinct URL,
none twice). Memory per distinct URL: Redis ``INFO memory`` used_memory (and its
growth from the empty server); seenstore: the server's RSS at the end (and its
growth from the idle server, after the warm-up) and the store's bytes on disk.
Both also sampled every 0.25 s during the run (seenstore: the server's RSS against
its key count, /v1/stats; Redis: used_memory against SCARD): the *marginal* bytes
per URL is the least-squares slope over the second half of the keys, what each
further URL costs once the fixed parts (the interpreter and kernels, the run cache
and answer log up to their budgets) are in.

    python bench/serve.py --urls 1e6          # 8 clients x 1e6 URLs (the issue's figure)
    python bench/serve.py --urls 1e5 --clients 4 --request 5000
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from seenstore.bench.units import parse_count  # noqa: E402


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _status(pid: int, fields: tuple[str, ...]) -> dict:
    """The ``fields`` of /proc/PID/status that are sizes, in bytes."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(fields):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024
    return out


def rss_parts(pid: int) -> dict:
    """RssAnon, RssFile, RssShmem of ``pid`` in bytes (file pages: mapped files,
    reclaimable)."""
    return _status(pid, ("RssAnon", "RssFile", "RssShmem"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_of(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in bytes."""
    out = _status(pid, ("VmRSS", "VmHWM"))
    return out.get("VmRSS", 0), out.get("VmHWM", 0)


class Sampler:
    """(keys, bytes) pairs from ``probe()`` every ``step`` seconds on a thread."""

    def __init__(self, probe, step: float = 0.25) -> None:
        import threading

        self.points: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._probe = probe

        def run() -> None:
            while not self._stop.wait(step):
                try:
                    self.points.append(self._probe())
                except Exception:  # noqa: BLE001 - a sample lost is a sample lost
                    pass

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> float:
        """Stop; the marginal bytes per key: the slope over the second half of the
        keys (NaN with fewer than 4 samples there)."""
        self._stop.set()
        self._thread.join()
        try:
            self.points.append(self._probe())
        except Exception:  # noqa: BLE001
            pass
        if not self.points:
            return float("nan")
        top = max(k for k, _ in self.points)
        late = [(k, b) for k, b in self.points if k >= top / 2]
        if len(late) < 4 or len({k for k, _ in late}) < 2:
            return float("nan")
        k, b = np.array(late, dtype=np.float64).T
        return float(np.polyfit(k, b, 1)[0])


def client_urls(c: int, n: int) -> tuple[list[str], np.ndarray]:
    """Client ``c``'s URLs (canonical spellings already) and their ids: own URL i has
    id c*n + i, shared URL j has id 1e15 + j. Hosts: 1,000 per client, 1,000 shared."""
    half = n // 2
    rng = np.random.default_rng(c)
    own = [f"http://h{i % 1000}.c{c}.example/page/{i}" for i in range(half)]
    shared_idx = rng.permutation(n - half)
    shared = [f"http://h{j % 1000}.shared.example/page/{j}" for j in shared_idx.tolist()]
    urls, ids = [], []
    for i in range(n - half):
        if i < half:
            urls.append(own[i])
            ids.append(c * n + i)
        urls.append(shared[i])
        ids.append(10**15 + int(shared_idx[i]))
    return urls, np.array(ids, dtype=np.int64)


def _seenstore_client(args) -> tuple:
    url, c, n, req, barrier = args
    from seenstore import Client

    urls, ids = client_urls(c, n)
    lat, new = [], []
    with Client(url) as cl:
        cl.stats()
        barrier.wait()
        t0 = time.perf_counter()
        for i in range(0, len(urls), req):
            t = time.perf_counter()
            m = cl.add_urls(urls[i:i + req])
            lat.append(time.perf_counter() - t)
            new.append(ids[i:i + req][m])
        t1 = time.perf_counter()
    return t0, t1, lat, np.concatenate(new)


def _redis_client(args) -> tuple:
    port, c, n, req, barrier = args
    import redis

    from seenstore.url.fingerprint import fingerprint_many

    urls, ids = client_urls(c, n)
    fps = fingerprint_many(urls).astype("<u8").tobytes()
    members = [fps[k * 8:k * 8 + 8] for k in range(len(urls))]
    r = redis.Redis(port=port)
    r.ping()
    lat, new = [], []
    barrier.wait()
    t0 = time.perf_counter()
    for i in range(0, len(urls), req):
        t = time.perf_counter()
        p = r.pipeline(transaction=False)
        for m in members[i:i + req]:
            p.sadd("seen", m)
        got = np.array(p.execute(), dtype=bool)
        lat.append(time.perf_counter() - t)
        new.append(ids[i:i + req][got])
    t1 = time.perf_counter()
    return t0, t1, lat, np.concatenate(new)


def run_clients(fn, target, clients: int, n: int, req: int) -> dict:
    ctx = mp.get_context("fork")
    barrier = ctx.Manager().Barrier(clients)
    with ctx.Pool(clients) as pool:
        res = pool.map(fn, [(target, c, n, req, barrier) for c in range(clients)])
    t0 = min(r[0] for r in res)
    t1 = max(r[1] for r in res)
    lat = np.concatenate([np.array(r[2]) for r in res]) * 1000
    new = np.concatenate([r[3] for r in res])
    expect = set()
    for c in range(clients):
        expect.update(client_urls(c, n)[1].tolist())
    uniq = np.unique(new)
    return {"seconds": t1 - t0, "urls": clients * n, "urls_per_s": clients * n / (t1 - t0),
            "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
            "requests": len(lat), "new": len(new), "distinct": len(expect),
            "exactly_once": len(uniq) == len(new) and set(uniq.tolist()) == expect}


def bench_seenstore(work: str, clients: int, n: int, req: int, max_delay: float,
                    server_args: list[str]) -> dict:
    store = os.path.join(work, "store")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, *sys.path]))
    proc = subprocess.Popen([sys.executable, "-m", "seenstore.cli", "serve", "--store", store,
                             "--create", "--warm", "--listen", "127.0.0.1:0",
                             "--max-delay", str(max_delay), *server_args],
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        url = line.split(" on ")[-1].strip()
        idle_rss = rss_of(proc.pid)[0]
        idle_parts = rss_parts(proc.pid)
        from seenstore import Client

        with Client(url) as probe_client:
            sampler = Sampler(lambda: (probe_client.stats()["keys"], rss_of(proc.pid)[0]))
            out = run_clients(_seenstore_client, url, clients, n, req)
            out["marginal_per_url"] = sampler.stop()
        rss, hwm = rss_of(proc.pid)
        out["parts"] = {k: (idle_parts[k], v) for k, v in rss_parts(proc.pid).items()}
        disk = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(store)
                   for f in fs)
        out.update(rss=rss, hwm=hwm, idle_rss=idle_rss, disk=disk)
        proc.send_signal(signal.SIGTERM)
        out["exit"] = proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
    d = out["distinct"]
    out.update(rss_per_url=out["rss"] / d, growth_per_url=(out["rss"] - idle_rss) / d,
               disk_per_url=disk / d)
    return out


def bench_redis(clients: int, n: int, req: int) -> dict:
    import redis

    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server not found (apt-get install redis-server)")
    port = free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--save", "", "--appendonly", "no",
                             "--bind", "127.0.0.1"], stdout=subprocess.DEVNULL)
    try:
        r = redis.Redis(port=port)
        for _ in range(200):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        base = r.info("memory")["used_memory"]
        probe = redis.Redis(port=port)
        sampler = Sampler(lambda: (probe.scard("seen"), probe.info("memory")["used_memory"]))
        out = run_clients(_redis_client, port, clients, n, req)
        out["marginal_per_url"] = sampler.stop()
        mem = r.info("memory")
        out.update(used_memory=mem["used_memory"], base_memory=base,
                   rss=rss_of(proc.pid)[0])
    finally:
        proc.terminate()
        proc.wait(30)
    d = out["distinct"]
    out.update(mem_per_url=out["used_memory"] / d,
               growth_per_url=(out["used_memory"] - base) / d, rss_per_url=out["rss"] / d)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--urls", default="1e6", help="URLs per client (default 1e6)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--request", type=int, default=10_000, help="URLs per request")
    ap.add_argument("--max-delay", type=float, default=5.0, help="server --max-delay, ms")
    ap.add_argument("--skip-redis", action="store_true")
    ap.add_argument("--server-args", default="", help="more `seenstore serve` options, "
                                                       "e.g. '--cache-bytes 0'")
    a = ap.parse_args()
    n = parse_count(a.urls)
    print(f"CPU: {cpu_model()} ({os.cpu_count()} cores); {a.clients} clients x {n:,} URLs, "
          f"50% shared, requests of {a.request:,} URLs; server options: "
          f"{a.server_args or '(defaults)'}")
    work = tempfile.mkdtemp(prefix="seenstore-bench-serve-")
    try:
        s = bench_seenstore(work, a.clients, n, a.request, a.max_delay, a.server_args.split())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    r = None if a.skip_redis else bench_redis(a.clients, n, a.request)
    print(f"{'':12}{'URLs/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'exactly once':>14}"
          f"{'memory B/URL':>14}{'(growth)':>10}{'marginal':>10}{'disk B/URL':>12}")
    print(f"{'seenstore':12}{s['urls_per_s']:>12,.0f}{s['p50_ms']:>9.1f}{s['p99_ms']:>9.1f}"
          f"{str(s['exactly_once']):>14}{s['rss_per_url']:>14.1f}{s['growth_per_url']:>10.1f}"
          f"{s['marginal_per_url']:>10.1f}{s['disk_per_url']:>12.1f}")
    if r is not None:
        print(f"{'redis':12}{r['urls_per_s']:>12,.0f}{r['p50_ms']:>9.1f}{r['p99_ms']:>9.1f}"
              f"{str(r['exactly_once']):>14}{r['mem_per_url']:>14.1f}"
              f"{r['growth_per_url']:>10.1f}{r['marginal_per_url']:>10.1f}{'-':>12}")
    print(f"distinct URLs {s['distinct']:,}; seenstore new answers {s['new']:,}, server RSS "
          f"{s['rss'] / 2**20:.0f} MiB (peak {s['hwm'] / 2**20:.0f}, idle "
          f"{s['idle_rss'] / 2**20:.0f}), store {s['disk'] / 2**20:.1f} MiB on disk, "
          f"SIGTERM exit {s['exit']}")
    print("server RSS by kind, idle -> end (MiB): " + ", ".join(
        f"{k} {a / 2**20:.0f} -> {b / 2**20:.0f}" for k, (a, b) in s["parts"].items()))
    if r is not None:
        print(f"redis: new answers {r['new']:,}, used_memory {r['used_memory'] / 2**20:.0f} "
              f"MiB (empty {r['base_memory'] / 2**20:.1f}), RSS {r['rss'] / 2**20:.0f} MiB")
        print(f"throughput seenstore/redis {s['urls_per_s'] / r['urls_per_s']:.2f}x; memory "
              f"per URL seenstore RSS/redis used_memory {s['rss_per_url'] / r['mem_per_url']:.2f}"
              f" (growth {s['growth_per_url'] / r['growth_per_url']:.2f}, marginal "
              f"{s['marginal_per_url'] / r['marginal_per_url']:.2f})")
    ok = s["exactly_once"] and (r is None or r["exactly_once"])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
