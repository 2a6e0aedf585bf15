"""The cluster's own files (docs/cluster.md, "Files"): sealed JSON documents and
answer-log entries.

``CLUSTER`` (in a cluster root) names every shard's directory; ``SHARD`` (in each
shard directory) records which key range that directory holds. Both are JSON
sealed by an xxh3-64 checksum and replaced atomically (temp, fsync, rename, fsync
the directory). An answer-log entry (``answers/NNNNNNNNNNNN.ans``) is binary:
magic, version, a JSON header and the batch's new keys, sealed by a checksum.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import xxhash

from ..errors import CorruptionError, NotSupportedError, StoreIOError
from ..manifest import fsync_dir

MAJOR = 1
MINOR = 0
ANSWER_MAGIC = b"\x89SSA\r\n\x1a\n"  # same scheme as the run file's magic
_ANSWER_HEAD = struct.Struct("<8sHHI")  # magic, major, minor, JSON header length


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


def write_sealed(path: str, fmt: str, doc: dict, sync: bool = True) -> None:
    """Write ``doc`` as a sealed JSON document of format ``fmt`` (atomically)."""
    body = dict(doc, format=fmt, major=MAJOR, minor=MINOR)
    body.pop("checksum", None)
    sealed = dict(body, checksum=xxhash.xxh3_64_hexdigest(_canonical(body)))
    write_atomic(path, json.dumps(sealed, sort_keys=True, indent=1).encode() + b"\n", sync)


def read_sealed(path: str, fmt: str) -> dict:
    """Read a sealed JSON document of format ``fmt``. FileNotFoundError when missing;
    NotSupportedError for a foreign file or newer major; CorruptionError for damage."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CorruptionError(f"{path}: not valid JSON (damaged or foreign)") from None
    except OSError as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise StoreIOError(f"{path}: cannot read: {e.strerror}") from e
    version = doc.get("major") if isinstance(doc, dict) else None
    if version is None or doc.get("format") != fmt:
        raise NotSupportedError(f"{path}: not a {fmt} file")
    if not isinstance(version, int) or version > MAJOR:
        raise NotSupportedError(f"{path}: version {version} is newer than this "
                                f"seenstore reads ({MAJOR}.x); upgrade seenstore")
    want = doc.pop("checksum", None)
    if want != xxhash.xxh3_64_hexdigest(_canonical(doc)):
        raise CorruptionError(f"{path}: checksum mismatch")
    return doc


def pack_answer(meta: dict, new_keys: np.ndarray | None) -> bytes:
    """An answer-log entry: header, JSON ``meta``, the new keys (uint64 LE), checksum."""
    js = _canonical(meta)
    body = (_ANSWER_HEAD.pack(ANSWER_MAGIC, MAJOR, MINOR, len(js)) + js
            + (np.ascontiguousarray(new_keys, dtype="<u8").tobytes()
               if new_keys is not None else b""))
    return body + struct.pack("<Q", xxhash.xxh3_64_intdigest(body))


def unpack_answer(path: str) -> tuple[dict, np.ndarray]:
    """(meta, new keys) of the entry at ``path``; refuses a damaged or foreign one."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < _ANSWER_HEAD.size + 8 or raw[:8] != ANSWER_MAGIC:
        raise NotSupportedError(f"{path}: not a seenstore answer-log entry")
    _, major, _, n = _ANSWER_HEAD.unpack_from(raw)
    if major > MAJOR:
        raise NotSupportedError(f"{path}: answer-log version {major} is newer than this "
                                f"seenstore reads ({MAJOR}.x); upgrade seenstore")
    (want,) = struct.unpack_from("<Q", raw, len(raw) - 8)
    if xxhash.xxh3_64_intdigest(raw[:-8]) != want:
        raise CorruptionError(f"{path}: answer-log entry checksum mismatch")
    start = _ANSWER_HEAD.size
    try:
        meta = json.loads(raw[start:start + n])
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CorruptionError(f"{path}: answer-log entry header is not JSON") from None
    keys = np.frombuffer(raw[start + n:-8], dtype="<u8").astype(np.uint64)
    return meta, keys
