"""Duplicate fetches on a simulated web (issue 38): the safe rules only, online
learning, the aggressive global rules of the domain documents, and the per-host
rules of the ground truth known from the start (the ceiling for learning), side by side.

Owns: the comparison table. The web, its HTTP server and the crawler loop are
tests/simweb/ (web.py, server.py, crawl.py): ~40 hosts, each with a known behaviour
(ignored session and tracking parameters, order-insensitive queries, slash and
``www.`` redirects, case-insensitive paths, index documents, declared canonicals,
timestamped bodies) and hosts where each such rule would be wrong; a real crawler
loop fetches it over HTTP/1.1 on 127.0.0.1 through a ``DedupStage`` and is scored
against the ground truth: duplicate fetches (2xx fetches of a page already
fetched), redirects and 404s (fetches of no page), wrong merges (reachable pages
never fetched).

    python bench/dust.py [--seed 38] [--pages-per-host 30]
                         [--configs safe,learn,aggressive,oracle] [--warc DIR] [--json]

Config "learn" needs ``DedupStage.open(..., learn=True)`` and ``record_fetch``; on a
seenstore without them its row says so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))

from seenstore.keys.sort import cpu_model, default_threads  # noqa: E402
from simweb.crawl import (CONFIGS, crawl_config, learning_supported,  # noqa: E402
                          oracle_policy, score)
from simweb.server import SimServer  # noqa: E402
from simweb.web import SEED, Web  # noqa: E402

LABELS = {"safe": "(a) safe rules only", "learn": "(b) online learning (learn=True)",
          "aggressive": "(c) aggressive global rules",
          "oracle": "(d) per-host rules of the ground truth, from the start"}


def run(seed: int, pages_per_host: int, configs: list[str], warc: str | None) -> dict:
    """Crawl the web once per config; returns the web's figures and each config's score
    (None: the config needs an API this seenstore lacks)."""
    web = Web(seed, pages_per_host)
    reachable = web.reachable()
    out = {"seed": seed, "pages_per_host": pages_per_host, "hosts": len(web.hosts) + 1,
           "pages": len(web.all_pages()), "reachable": len(reachable),
           "cpu": cpu_model(), "cores": default_threads(), "configs": {}}
    with SimServer(web) as server, tempfile.TemporaryDirectory(prefix="dust-") as tmp:
        for name in configs:
            if name == "learn" and not learning_supported():
                out["configs"][name] = None
                continue
            w = os.path.join(warc, f"{name}.warc.gz") if warc else None
            r = crawl_config(name, web, server.port, os.path.join(tmp, name), warc=w)
            sc = score(r, web, reachable)
            sc["policy_toml"] = r.policy_toml
            if name == "oracle":
                sc["oracle_extended"] = oracle_policy(web)[1]
            out["configs"][name] = sc
    return out


def _pct(part: int, whole: int) -> str:
    return f"{100 * (1 - part / whole):.1f}%" if whole else "-"


def render(res: dict, web: Web) -> str:
    lines = [f"Simulated web: seed {res['seed']}, {res['hosts']} hosts, {res['pages']} "
             f"distinct pages ({res['reachable']} reachable), {res['pages_per_host']} pages "
             "per rule host.",
             f"CPU: {res['cpu']}, {res['cores']} cores (shared).", "",
             "| config | fetches | duplicate fetches | cut vs safe | redirects | 404 | "
             "wasted (dup+3xx+404) cut vs safe | wrong merges | pages fetched / reachable "
             "| crawl s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    safe = res["configs"].get("safe")
    for name, sc in res["configs"].items():
        if sc is None:
            lines.append(f"| {LABELS[name]} | n/a: this seenstore's DedupStage has no "
                         "open(..., learn=True) / record_fetch | | | | | | | | |")
            continue
        waste = sc["duplicate_fetches"] + sc["redirects"] + sc["not_found"]
        swaste = (safe["duplicate_fetches"] + safe["redirects"] + safe["not_found"]
                  if safe else 0)
        lines.append(
            f"| {LABELS[name]} | {sc['fetches']} | {sc['duplicate_fetches']} | "
            f"{_pct(sc['duplicate_fetches'], safe['duplicate_fetches']) if safe else '-'} | "
            f"{sc['redirects']} | {sc['not_found']} | {_pct(waste, swaste)} | "
            f"{sc['wrong_merges']} | {sc['pages_fetched']} / {sc['reachable']} | "
            f"{sc['seconds']} |")
    oracle = res["configs"].get("oracle")
    if oracle and not oracle["oracle_extended"]:
        lines += ["", "(d): without lowercase_path / index_documents (this seenstore's policy "
                  "vocabulary lacks them)"]
    kinds = {h.name: h.kind for h in web.hosts}
    for name, sc in res["configs"].items():
        if sc and sc["missed_hosts"]:
            lines += ["", f"{LABELS[name]}: wrong merges by host"]
            lines += [f"  {h:18} {n:4}  {kinds.get(h, '')}" for h, n in sc["missed_hosts"].items()]
        if sc and name != "safe" and sc["duplicate_hosts"]:
            top = list(sc["duplicate_hosts"].items())[:8]
            lines += ["", f"{LABELS[name]}: duplicate fetches left, by host (top {len(top)})"]
            lines += [f"  {h:18} {n:4}  {kinds.get(h, '')}" for h, n in top]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--pages-per-host", type=int, default=30)
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help=f"comma-separated, of {', '.join(CONFIGS)}")
    ap.add_argument("--warc", metavar="DIR", help="write each crawl to DIR/<config>.warc.gz")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    configs = [c for c in args.configs.split(",") if c]
    bad = [c for c in configs if c not in CONFIGS]
    if bad:
        ap.error(f"unknown config {bad[0]!r}; one of {', '.join(CONFIGS)}")
    if args.warc:
        os.makedirs(args.warc, exist_ok=True)
    res = run(args.seed, args.pages_per_host, configs, args.warc)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(render(res, Web(args.seed, args.pages_per_host)))


if __name__ == "__main__":
    main()
