"""Host health: per host, what a store holds about it (``seenstore hosts``,
docs/frontier.md, "Host health").

``host_report(store)`` reads, without changing anything: the kept URLs (the URLs
the store admitted, safe-rule form; their count and path-depth histogram per
host), the fetch evidence (distinct URLs fetched; among the records kept, failed
fetches, status >= 400, and duplicate fetches, a 2xx digest already fetched under
another URL of the host) and the trap patterns a stage recorded (manifest field
``traps``). Hosts are named by ``host_key`` (no ``www.``, no port), as the evidence
groups them. What the store does not hold is listed in ``not_available``, never
guessed: per-URL state and values, and offers beyond first sightings.
"""

from __future__ import annotations

from collections import Counter

from seenstore.frontier.traps import MANIFEST_FIELD
from seenstore.store import learning, urls as urlcalls
from seenstore.url.policy import host_key

NO_VALUES = ("per-URL state (queued, in flight, done, failed, skipped), fetch times and "
             "values per URL: this store keeps no values (a store created with values=True "
             "does)")
VALUES_ELSEWHERE = ("per-host counts of URL states: this report does not read the store's "
                    "values (seenstore select --state S lists the URLs in a state)")
NO_OFFERS = ("discovered counts only first sightings: the store keeps the URLs it admitted; "
             "links offered again are not counted, so discovered = admitted here")


def _host_depth(url: bytes) -> tuple[bytes, int]:
    """(raw host, path depth) of a canonical URL: ``/`` is 0, ``/a/b`` and ``/a/b/`` 2."""
    rest = url.split(b"://", 1)[-1]
    slash = rest.find(b"/")
    if slash < 0:
        return rest, 0
    path = rest[slash:].split(b"?", 1)[0]
    return rest[:slash], path.count(b"/") - path.endswith(b"/")


def _name(raw: bytes) -> str:
    host = raw.rsplit(b"@", 1)[-1]
    if host.startswith(b"["):
        host = host[:host.find(b"]") + 1]
    else:
        host = host.split(b":", 1)[0]
    return host_key(host.decode("utf-8", "replace"))


def host_report(store, top: int | None = None) -> dict:
    """``{"hosts": [...], "not_available": [...], "keep_urls", "evidence"}``: one
    entry per host (most kept URLs first, then most fetched; ``top``: the first N)
    with ``kept_urls``, ``depth`` ({depth: URLs}), ``fetched``, ``evidence_kept``,
    ``evidence_sampled`` (more URLs fetched than records kept: failed and duplicate
    counts are of the sample, and ``fetched`` is a lower bound, the evidence's
    count of distinct URLs not being kept across its snapshots), ``failed``, ``duplicate_fetches``,
    ``discovered_per_fetched`` (kept / fetched, None without fetches) and ``traps``
    (the patterns recorded for it)."""
    hosts: dict[str, dict] = {}

    def entry(h: str) -> dict:
        e = hosts.get(h)
        if e is None:
            e = hosts[h] = {"host": h, "kept_urls": 0, "depth": Counter(), "fetched": 0,
                            "evidence_kept": 0, "evidence_sampled": False, "failed": 0,
                            "duplicate_fetches": 0, "discovered_per_fetched": None,
                            "traps": []}
        return e

    names: dict[bytes, str] = {}
    keep = bool(store.keep_urls)
    if keep:
        for f in urlcalls.kept_files(store):
            for lines in f.iter_all():
                for url in lines:
                    raw, depth = _host_depth(url)
                    h = names.get(raw)
                    if h is None:
                        h = names[raw] = _name(raw)
                    e = entry(h)
                    e["kept_urls"] += 1
                    e["depth"][depth] += 1
    log = learning.evidence(store)
    digests: dict[str, set] = {}
    for host, urls in log.hosts.items():
        e = entry(host)
        e["fetched"] = log.seen.get(host, len(urls))
        e["evidence_kept"] = len(urls)
        e["evidence_sampled"] = e["fetched"] > len(urls)
        seen = digests.setdefault(host, set())
        for rec in urls.values():
            if rec.status >= 400:
                e["failed"] += 1
            elif 200 <= rec.status < 300 and rec.digest is not None:
                if rec.digest in seen:
                    e["duplicate_fetches"] += 1
                seen.add(rec.digest)
    for t in store._doc.get(MANIFEST_FIELD) or ():
        if t.get("detected", True) is not False:  # else a count kept, not a trap
            entry(t["host"])["traps"].append(dict(t))
    for e in hosts.values():
        if e["fetched"] and keep:
            e["discovered_per_fetched"] = round(e["kept_urls"] / e["fetched"], 3)
        e["depth"] = dict(sorted(e["depth"].items()))
    out = sorted(hosts.values(), key=lambda e: (-e["kept_urls"], -e["fetched"], e["host"]))
    missing = [VALUES_ELSEWHERE if store.values else NO_VALUES, NO_OFFERS]
    if not keep:
        missing.append("kept URLs, pages per depth and discovered/fetched: the store keeps "
                       "no URLs (keys only: their top bits hash the host, not name it)")
    if not len(log):
        missing.append("fetch figures (fetched, failed, duplicate fetches): no fetch evidence "
                       "recorded (store.record_fetch, DedupStage.record_fetch, seenstore learn)")
    return {"hosts": out[:top] if top else out, "host_count": len(out),
            "keep_urls": keep, "evidence": len(log), "not_available": missing}


__all__ = ["host_report"]
