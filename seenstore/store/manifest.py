"""The manifest: the store's single commit point (docs/format.md, "Manifest").

A small JSON document naming the live run files of every shard, the layout, the
policy identity, the generation and counters, sealed by an xxh3-64 checksum of its
canonical encoding. Replaced atomically: write MANIFEST.tmp, fsync, rename over
MANIFEST, fsync the directory. Whatever MANIFEST names is the store.

Format 2 (tiered runs) lets a shard hold any number of runs; format 1 (one run per
shard, every shard named, empty ones too) is read as is and rewritten as format 2
by the first commit (``upgraded``), never the other way: a format 1 reader would
take one run per shard and silently miss keys, so it must refuse format 2.
"""

from __future__ import annotations

import json
import os
import secrets

import xxhash

from seenstore.errors import CorruptionError, NotSupportedError, StoreIOError

NAME = "MANIFEST"
TMP_NAME = "MANIFEST.tmp"
FORMAT = "seenstore-manifest"
MAJOR = 2
MINOR = 1
# Minor 1 adds optional fields older readers ignore safely: "runs_policy_id" (the
# identity run headers carry; absent: "policy_id"), "policy" (the whole policy the
# store holds), "keep_urls", "url_files", "evidence", "tombstones" (the forgotten
# keys' file: file, count, checksum; store/tombstones.py), "values", "value_files",
# "value_seq", "value_counts" (store/values.py). A store whose policy changed
# has "policy_id" != "runs_policy_id", which a 2.0 reader refuses (run headers do
# not match), so it never answers under the wrong policy.
# Format 3 is format 2.1 holding content a reader that ignores it would misread, so a
# reader of format 2 only must refuse it ("newer than this seenstore reads"): a
# non-empty "tombstones" (it would answer forgotten keys stored, and its commits would
# bring them back), "values" (its rebuilds would leave the records on the old keys),
# trap patterns not detected yet (an earlier stage takes every listed pattern for a
# detected one and refuses its URLs). A manifest without them is written as 2.1, which
# every format 2 reader reads right: the major follows the content (``major_for``).
FEATURE_MAJOR = 3
NEWEST_MAJOR = FEATURE_MAJOR  # the newest this code reads
OLDEST_MAJOR = 1  # format 1 (one run per shard) is read and upgraded
# "store_id" (a store's random identity; the Bloom file is bound to it) is in every
# format 1.1 and 2 manifest; upgrading a 1.0 manifest gives it one.
# Counters of a format 2 manifest (a format 1 one has only batches and new).
NEW_COUNTERS = {"batches": 0, "new": 0, "bytes_written": 0, "compactions": 0,
                "bytes_compacted": 0}


def _canonical(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


def encode(body: dict) -> bytes:
    """The manifest file's bytes for ``body`` (no ``checksum`` field): the canonical
    encoding the checksum covers, with the checksum put first and each run on a line
    of its own. One C-encoder pass: pretty-printed JSON goes through json's
    pure-Python encoder, ~4x the time (1.3 ms per commit at 169 runs), held under the
    GIL beside the batch's shard threads."""
    canon = _canonical(body)
    digest = xxhash.xxh3_64_hexdigest(canon)
    out = b'{"checksum":"' + digest.encode("ascii") + b'",' + canon[1:]
    # whitespace only, between runs: no string the manifest holds has these bytes
    out = out.replace(b'"runs":[{', b'"runs":[\n{').replace(b'},{"checksum":', b'},\n{"checksum":')
    return out + b"\n"


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def major_for(doc: dict) -> int:
    """The major version ``doc`` is written as: FEATURE_MAJOR when it holds content a
    format 2 reader would misread (above), else MAJOR."""
    traps = doc.get("traps") or ()
    if (doc.get("tombstones") or doc.get("values")
            or any(isinstance(t, dict) and t.get("detected") is False for t in traps)):
        return FEATURE_MAJOR
    return MAJOR


def write(directory: str, doc: dict, sync: bool = True) -> None:
    """Atomically replace the manifest of ``directory`` with ``doc`` (as format 2.1,
    or 3.0 when it holds what a format 2 reader would misread: ``major_for``); sets
    ``doc``'s ``major`` and ``minor`` to the version written."""
    major = major_for(doc)
    doc["major"], doc["minor"] = major, MINOR if major == MAJOR else 0
    body = dict(doc, format=FORMAT)
    body.pop("checksum", None)
    data = encode(body)
    tmp = os.path.join(directory, TMP_NAME)
    with open(tmp, "wb") as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, os.path.join(directory, NAME))
    if sync:
        fsync_dir(directory)


def upgraded(doc: dict, n_keys: int) -> dict:
    """A copy of ``doc`` ready to be written as the current format: a format 1 one
    loses its empty runs and gains the format 2 counters (``bytes_written`` starts as
    the bytes of its ``n_keys`` keys: each was written once as far as anyone knows),
    and a 1.0 manifest gets a store id."""
    doc = dict(with_store_id(doc))
    if doc.get("major", MAJOR) < MAJOR:
        doc["runs"] = [r for r in doc["runs"] if r["count"]]
        doc["counters"] = {**NEW_COUNTERS, "bytes_written": 8 * n_keys, **doc["counters"]}
    doc["major"], doc["minor"] = MAJOR, MINOR
    return doc


def read(directory: str) -> dict:
    """Read and check the manifest. Raises CorruptionError / NotSupportedError;
    FileNotFoundError when there is none (the caller decides what that means)."""
    path = os.path.join(directory, NAME)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise
    except OSError as e:
        raise StoreIOError(f"{path}: cannot read manifest: {e.strerror}") from e
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        raise CorruptionError(f"{path}: manifest is not valid JSON (damaged or foreign)")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise NotSupportedError(f"{path}: not a seenstore manifest")
    want = doc.pop("checksum", None)
    sum_ok = want == xxhash.xxh3_64_hexdigest(_canonical(doc))
    major = doc.get("major")
    if not isinstance(major, int) or not OLDEST_MAJOR <= major <= NEWEST_MAJOR:
        how = "newer than" if isinstance(major, int) and major > NEWEST_MAJOR else "not one"
        raise NotSupportedError(
            f"{path}: manifest version {major}.{doc.get('minor')} is {how} this "
            f"seenstore reads ({OLDEST_MAJOR}.x-{NEWEST_MAJOR}.x); upgrade seenstore"
            + ("" if sum_ok else " (or the manifest is damaged: its checksum does not match)"))
    if not sum_ok:
        raise CorruptionError(f"{path}: manifest checksum mismatch")
    return doc


def new_store_id() -> str:
    """A random store identity: 128 bits as 32 hex digits."""
    return secrets.token_hex(16)


def with_store_id(doc: dict) -> dict:
    """``doc`` with a store identity: a 1.0 manifest gets one with its store's next
    commit (a copy; ``doc`` is not changed)."""
    return doc if doc.get("store_id") else dict(doc, store_id=new_store_id())


def runs_digest(doc: dict) -> int:
    """xxh3-64 of the runs ``doc`` names (shard, file, count, body checksum): what a
    Bloom filter built from exactly these runs records, to be recognised on load."""
    text = ";".join(f"{r['shard']}:{r['file']}:{r['count']}:{r['checksum']}"
                    for r in sorted(doc["runs"], key=lambda r: (r["shard"], r["file"])))
    return xxhash.xxh3_64_intdigest(text.encode("utf-8"))


def runs_policy_id(doc: dict) -> str:
    """The policy identity every run header of the store carries: the identity the
    store was created with (a policy change replaces ``policy_id`` only)."""
    return doc.get("runs_policy_id", doc["policy_id"])


def named_files(doc: dict) -> set:
    """Every file name ``doc`` names: runs, kept-URL and value files, the evidence
    snapshot, the tombstone file."""
    names = {r["file"] for r in doc["runs"]} | {e["file"] for e in doc.get("url_files", ())}
    names |= {e["file"] for e in doc.get("value_files", ())}
    for field in ("evidence", "tombstones"):
        if doc.get(field):
            names.add(doc[field]["file"])
    return names
