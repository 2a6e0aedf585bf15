"""Learning on a store: fetch evidence recorded and kept (store/evidencelog.py), rules
learned from it (seenstore/evidence/learn.py) and applied as the store's policy,
rebuilding the hosts they change (store/rebuild.py). docs/evidence.md.

``record_fetch`` / ``record_fetches`` keep what a fetch revealed; ``learn`` proposes
per-host rules with their support and counter-evidence and, with ``apply``, makes
the adopted ones (and the withdrawal of contradicted ones) the store's policy in
one commit, then snapshots the evidence. ``duplicate_report`` groups the fetches
whose content was already fetched under another URL by the rule that explains it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from seenstore.errors import InvalidInputError, SeenStoreError
from seenstore.evidence.learn import LearnConfig, learn as learn_rules
from seenstore.evidence.record import Fetch, make_fetch
from seenstore.store.evidencelog import EvidenceLog
from seenstore.store import urls as urlcalls

SNAPSHOT_EVERY = 100_000  # records in the log before it is folded into a snapshot
RECORD_KEYS = {"url", "status", "location", "canonical", "digest", "body", "simhash",
               "link_header"}


def evidence(store) -> EvidenceLog:
    """The store's evidence, read on first use."""
    if store._evidence is None:
        store._evidence = EvidenceLog(store.path, store._doc, lambda v: Fetch(*v),
                                      sync=store.sync, writable=store._lock is not None)
    return store._evidence


def record_fetch(store, url, status, *, location=None, canonical=None, digest=None,
                 body=None, simhash=None, link_header=None) -> Fetch:
    """``SeenStore.record_fetch``'s body (its docstring)."""
    store._check_writable()
    rec = make_fetch(url, status, location=location, canonical=canonical, digest=digest,
                     body=body, simhash=simhash, link_header=link_header)
    _record(store, [rec])
    return rec


def record_fetches(store, records) -> dict:
    """``SeenStore.record_fetches``'s body (its docstring)."""
    store._check_writable()
    kept, rejected = fetches_of(records)
    _record(store, kept)
    return {"recorded": len(kept), "rejected": rejected}


def fetches_of(records) -> tuple[list, list]:
    """(Fetch records, [(index, reason)] of the records refused) of ``records``: dicts
    with ``record_fetch``'s argument names, or an Arrow table with those columns."""
    if hasattr(records, "to_pylist"):  # an Arrow table (or record batch)
        records = records.to_pylist()
    kept, rejected = [], []
    for i, r in enumerate(records):
        if not isinstance(r, Mapping):
            rejected.append((i, f"not a mapping: {type(r).__name__}"))
            continue
        extra = set(r) - RECORD_KEYS
        if extra:
            rejected.append((i, f"unknown field(s) {sorted(extra)}"))
            continue
        try:
            args = {k: v for k, v in r.items() if k not in ("url", "status") and v is not None}
            kept.append(make_fetch(r.get("url"), r.get("status"), **args))
        except SeenStoreError as e:
            rejected.append((i, str(e)))
    return kept, rejected


def _record(store, recs: list) -> None:
    with store._mutex:
        log = evidence(store)
        log.record(recs)
        if log.appended >= SNAPSHOT_EVERY:
            snapshot(store)


def snapshot(store) -> None:
    """Fold the evidence log into a new snapshot the manifest names (one commit).
    Requires: the store's mutex held (no batch commits beside it)."""
    log = store._evidence
    if log is None or not log.appended:
        return
    store._join_compactor(stop=True)
    entry = log.snapshot(store.generation)
    store._live.commit_counters(0, batches=0, fields={"evidence": entry})
    log.committed(entry)


def learn(store, apply: bool = True, config: LearnConfig | None = None,
          extra: Iterable = ()) -> list:
    """``SeenStore.learn``'s body (its docstring). ``extra``: more fetches to learn
    from, not recorded (``seenstore learn --dry-run``)."""
    if apply:
        store._check_writable()
    else:
        store._check_open()
    policy = urlcalls.store_policy(store)
    base = getattr(policy, "base", policy)
    previous = getattr(policy, "learned", {}) or {}
    with store._mutex:
        fetches = list(evidence(store)) + list(extra)
    rules, findings = learn_rules(fetches, base, config or LearnConfig(), previous)
    new = base.with_learned(rules)
    store.last_learn = {"fetches": len(fetches), "hosts": len({f.host for f in fetches}),
                        "rules": len(rules), "rebuild": None, "policy": new,
                        "notes": _notes(findings)}
    if not apply:
        return findings
    if new.identity != policy.identity:
        store.last_learn["rebuild"] = store.set_policy(new, notes=_notes(findings))
    with store._mutex:
        snapshot(store)
    return findings


def _notes(findings: Iterable) -> dict:
    """host -> one comment line: the adopted rules and their support."""
    out: dict[str, list] = {}
    for f in findings:
        if f.status == "adopted":
            name = f"{f.kind}={f.name}" if f.name else f.kind
            out.setdefault(f.host, []).append(f"{name} (support {f.support}, {f.paths} paths)")
    return {h: "learned: " + "; ".join(v) for h, v in out.items()}


def check_config(config) -> LearnConfig:
    if config is not None and not isinstance(config, LearnConfig):
        raise InvalidInputError("config must be a seenstore.evidence.learn.LearnConfig")
    return config or LearnConfig()


def duplicate_report(store, examples: int = 3) -> list[dict]:
    """``seenstore duplicates``: per host, the 2xx fetches whose content digest was
    fetched already under another URL that the store's policy keeps apart, grouped
    by the one rule that would have merged each with the first URL of its digest
    (the rule's name, "several rules" when only their sum does, or "no rule
    explains it"). Hosts with most duplicates first; each with up to ``examples``
    (url, first url, rule)."""
    from seenstore.evidence.learn import INDEX_DOCUMENTS, fold
    from seenstore.url.normalise import try_normalise
    from seenstore.url.policy import Policy

    policy = urlcalls.store_policy(store)
    with store._mutex:
        fetches = list(evidence(store))
    by_host: dict[str, dict[int, list[str]]] = {}
    for f in fetches:
        if 200 <= f.status < 300 and f.digest is not None:
            by_host.setdefault(f.host, {}).setdefault(f.digest, []).append(f.url)
    out = []
    for host, groups in by_host.items():
        counts: dict[str, int] = {}
        shown: list = []
        fetched = sum(len(u) for u in groups.values())
        for urls in groups.values():
            canon = {try_normalise(u, None, policy): u for u in sorted(set(urls))}
            if len(canon) < 2:
                continue
            first, *rest = list(canon.values())
            for u in rest:
                rule = _explaining_rule(host, first, u, fold, INDEX_DOCUMENTS, Policy)
                counts[rule] = counts.get(rule, 0) + 1
                if len(shown) < examples:
                    shown.append({"url": u, "first": first, "rule": rule})
        if counts:
            out.append({"host": host, "fetches": fetched, "duplicates": sum(counts.values()),
                        "by_rule": dict(sorted(counts.items(), key=lambda kv: -kv[1])),
                        "examples": shown})
    out.sort(key=lambda d: (-d["duplicates"], d["host"]))
    return out


def _explaining_rule(host, a: str, b: str, fold, documents, policy_cls) -> str:
    from urllib.parse import urlsplit

    from seenstore.url.normalise import try_normalise

    names = set()
    for u in (a, b):
        q = urlsplit(u).query
        names |= {p.split("=", 1)[0] for p in q.split("&") if p} if q else set()
    atoms = ([("strip_params", n) for n in sorted(names)]
             + [("sort_query", ""), ("trailing_slash", "remove"), ("strip_www", ""),
                ("lowercase_path", "")] + [("index_documents", d) for d in documents])
    for atom in atoms:
        p = policy_cls("explain", (fold(host, [atom]),))
        if try_normalise(a, None, p) == try_normalise(b, None, p):
            kind, name = atom
            return f"{kind}={name}" if name else kind
    p = policy_cls("explain", (fold(host, [x for x in atoms if x[1] != "add"]),))
    if try_normalise(a, None, p) == try_normalise(b, None, p):
        return "several rules"
    return "no rule explains it"
