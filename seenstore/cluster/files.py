"""The cluster's own files (docs/cluster.md, "Files"): sealed JSON documents and
answer-log entries.

``CLUSTER`` (in a cluster root) names every shard's directory; ``SHARD`` (in each
shard directory) records which key range that directory holds; an answer-log entry
(``answers/NNNNNNNNNNNN.ans``) records one batch. All are JSON sealed by an xxh3-64
checksum and replaced atomically (temp, fsync, rename, fsync the directory).
``CLUSTER`` and ``SHARD`` are at major 2 (each shard's key ``range``; a 1.x file
is read as equal ranges), answer-log entries at major 1.
"""

from __future__ import annotations

import json
import os
import xxhash

from seenstore.errors import CorruptionError, NotSupportedError, StoreIOError
from seenstore.store.manifest import fsync_dir

MAJOR = 1  # answer-log entries
MINOR = 0
RANGE_MAJOR = 2  # CLUSTER and SHARD: major 2 added each shard's key range


def _canonical(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


def write_atomic(path: str, data: bytes, sync: bool = True) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync the directory."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(path) or ".")


def write_sealed(path: str, fmt: str, doc: dict, sync: bool = True,
                 major: int = MAJOR) -> None:
    """Write ``doc`` as a sealed JSON document of format ``fmt``, version ``major``.0
    (atomically)."""
    body = dict(doc, format=fmt, major=major, minor=MINOR)
    body.pop("checksum", None)
    sealed = dict(body, checksum=xxhash.xxh3_64_hexdigest(_canonical(body)))
    write_atomic(path, json.dumps(sealed, sort_keys=True, indent=1).encode() + b"\n", sync)


def read_sealed(path: str, fmt: str, major: int = MAJOR) -> dict:
    """Read a sealed JSON document of format ``fmt`` and a major up to ``major``.
    FileNotFoundError when missing; NotSupportedError for a foreign file or newer
    major; CorruptionError for damage."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        raise CorruptionError(f"{path}: not valid JSON (damaged or foreign)") from None
    except OSError as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise StoreIOError(f"{path}: cannot read: {e.strerror}") from e
    version = doc.get("major") if isinstance(doc, dict) else None
    if version is None or doc.get("format") != fmt:
        raise NotSupportedError(f"{path}: not a {fmt} file")
    if not isinstance(version, int) or version > major:
        raise NotSupportedError(f"{path}: version {version} is newer than this "
                                f"seenstore reads ({major}.x); upgrade seenstore")
    want = doc.pop("checksum", None)
    if want != xxhash.xxh3_64_hexdigest(_canonical(doc)):
        raise CorruptionError(f"{path}: checksum mismatch")
    return doc
