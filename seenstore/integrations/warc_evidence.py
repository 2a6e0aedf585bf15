"""Fetch evidence from WARC files, for ``seenstore learn`` (extra ``[warc]``: FastWARC).

``iter_evidence(paths, report)`` yields one dict per response and revisit record,
with the names ``SeenStore.record_fetches`` takes: ``url`` (WARC-Target-URI),
``status`` (the HTTP status), ``location`` and ``link_header`` (those HTTP
headers), ``body`` (the payload, from which seenstore computes the digests and
finds an HTML ``rel=canonical``). A revisit record has no payload: its
``digest`` is the one computed for the response with the same
``WARC-Payload-Digest`` (the identical payload), or, when that response is not
in the files, a digest of the ``WARC-Payload-Digest`` value itself (equal for
equal payloads). Request records and other types are counted and skipped; a
record without a target URI or an HTTP status is counted as skipped; damaged
records are counted and reading resumes at the next record start, as for links
(integrations/warc.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import xxhash

from seenstore.integrations.warc import WarcReport, _records, _require


def iter_evidence(paths: Iterable[str], report: WarcReport | None = None,
                  digest_of=None) -> Iterator[dict]:
    """Evidence records of the WARC files ``paths`` (see the module docstring).
    ``digest_of(body) -> int``: the page digest (seenstore.evidence.digest)."""
    _require()
    if digest_of is None:
        from seenstore.evidence.digest import page_digest as digest_of
    report = report if report is not None else WarcReport()
    by_payload: dict[str, int] = {}
    pending: list[tuple[dict, str]] = []  # revisits whose response comes later
    for path in paths:
        report.files += 1
        for rec, payload_digest in _records(path, report, _evidence):
            if "body" in rec:
                if payload_digest:
                    by_payload.setdefault(payload_digest, digest_of(rec["body"]))
                yield rec
            elif payload_digest in by_payload:
                yield dict(rec, digest=by_payload[payload_digest])
            else:
                pending.append((rec, payload_digest))
    for rec, payload_digest in pending:
        d = by_payload.get(payload_digest)
        if d is None and payload_digest:
            d = xxhash.xxh3_64_intdigest(payload_digest.encode())
        yield dict(rec, digest=d) if d is not None else rec


def _evidence(r, types):
    """(record dict, WARC-Payload-Digest) of a response or revisit; None to skip;
    False for a truncated response."""
    if r.record_type not in (types.response, types.revisit) or not r.is_http:
        return None
    uri = r.headers.get("WARC-Target-URI")
    status = r.http_headers.status_code
    if not uri or not status:
        return None
    rec = {"url": uri.strip("<>"), "status": int(status)}
    for header, name in (("Location", "location"), ("Link", "link_header")):
        value = r.http_headers.get(header)
        if value:
            rec[name] = value
    payload_digest = r.headers.get("WARC-Payload-Digest")
    if r.record_type == types.response:
        length = r.content_length
        body = r.reader.read()
        if len(body) < length:
            return False
        rec["body"] = body
    return rec, payload_digest
