"""Fetch evidence kept in a store: what fetches revealed (status, redirect target,
declared canonical, content digests), per host, bounded (docs/format.md, "Evidence";
docs/evidence.md).

Per host (its ``host_key``) at most ``per_host`` distinct URLs are kept, the latest
fetch of each; past that a reservoir sample (Algorithm R over the host's distinct
URLs, a deterministic generator per host) decides which stay, so every URL a host
served has the same chance to be kept, whatever the order of the crawl.

Durability: ``record`` appends each record to ``evidence.log`` (framed: length,
xxh3-64, JSON; fsynced per call when the store syncs) whose header names the
snapshot it follows; ``snapshot`` writes every kept record to a new snapshot file
(``e-gGGGGGGGGGG-XXXXXXXX.evd``: header, zlib'd JSON lines, xxh3-64) that the
caller's commit names in the manifest (``evidence``), then starts a new log. On
open the snapshot the manifest names is read and the log replayed if it follows
that snapshot (a log following an older one was folded into it already); a torn
tail (a crash mid-append) is dropped.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import struct
import zlib
from collections.abc import Iterator

import xxhash

from seenstore.errors import CorruptionError, NotSupportedError

from seenstore.store.files import EVIDENCE_LOG as LOG_NAME
LOG_MAGIC = b"SEENEVL1"
SNAP_MAGIC = b"SEENEVD1"
MAJOR, MINOR = 1, 0
SNAP_HEADER = struct.Struct("<8sHHIQQQ")  # magic, major, minor, (0), count, body bytes, xxh3
FRAME = struct.Struct("<IQ")  # payload length, xxh3-64 of the payload
DEFAULT_PER_HOST = 4096
FIELDS = ("url", "status", "location", "canonical", "digest", "simhash", "host")


def _encode(rec) -> bytes:
    return json.dumps([getattr(rec, f) for f in FIELDS], separators=(",", ":")).encode()


class EvidenceLog:
    """The evidence of one store (see the module docstring). ``make(values)``
    turns a decoded record (the FIELDS, in order) into the caller's record type."""

    def __init__(self, store_path: str, doc: dict, make, per_host: int = DEFAULT_PER_HOST,
                 sync: bool = True, writable: bool = True):
        self.path = store_path
        self.per_host = per_host
        self.sync = sync
        self._make = make
        self.hosts: dict[str, dict] = {}  # host -> {url: record}
        self._slots: dict[str, list] = {}  # host -> its kept URLs, a reservoir's slots
        self.seen: dict[str, int] = {}  # host -> distinct URLs offered to its reservoir
        self.appended = 0  # records in the log since the snapshot
        entry = doc.get("evidence")
        self.base = entry["file"] if entry else ""
        if entry:
            for rec in self._read_snapshot(os.path.join(store_path, entry["file"]), entry):
                self._keep(rec)
        self._replay_log()
        self._log = None
        self._writable = writable

    # ------------------------------------------------------------------ records
    def _rng(self, host: str) -> random.Random:
        return random.Random(xxhash.xxh3_64_intdigest(host.encode()) ^ self.seen[host])

    def _keep(self, rec) -> None:
        urls = self.hosts.setdefault(rec.host, {})
        if rec.url in urls:
            urls[rec.url] = rec  # the latest fetch of a URL wins
            return
        n = self.seen.get(rec.host, 0) + 1
        self.seen[rec.host] = n
        slots = self._slots.setdefault(rec.host, [])
        if len(urls) < self.per_host:
            urls[rec.url] = rec
            slots.append(rec.url)
            return
        j = self._rng(rec.host).randrange(n)
        if j < self.per_host:  # replaces the URL in slot j (Algorithm R)
            del urls[slots[j]]
            slots[j] = rec.url
            urls[rec.url] = rec

    def record(self, records: list) -> None:
        """Keep ``records`` and append them to the log (fsynced when syncing)."""
        if not records:
            return
        if self._log is None:
            self._open_log()
        out = bytearray()
        for rec in records:
            payload = _encode(rec)
            out += FRAME.pack(len(payload), xxhash.xxh3_64_intdigest(payload)) + payload
        self._log.write(out)
        self._log.flush()
        if self.sync:
            os.fsync(self._log.fileno())
        for rec in records:
            self._keep(rec)
        self.appended += len(records)

    def __iter__(self) -> Iterator:
        for urls in self.hosts.values():
            yield from urls.values()

    def __len__(self) -> int:
        return sum(len(u) for u in self.hosts.values())

    # --------------------------------------------------------------- snapshots
    def snapshot(self, generation: int) -> dict:
        """Write every kept record to a new snapshot file (fsynced); return its
        manifest entry. The caller commits it, then calls ``committed``."""
        name = f"e-g{generation:010d}-{secrets.token_hex(4)}.evd"
        body = zlib.compress(b"\n".join(_encode(r) for r in self), 1)
        head = SNAP_HEADER.pack(SNAP_MAGIC, MAJOR, MINOR, 0, len(self), len(body),
                                xxhash.xxh3_64_intdigest(body))
        tmp = os.path.join(self.path, name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(head + body)
            if self.sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, os.path.join(self.path, name))
        return {"file": name, "count": len(self),
                "checksum": f"{xxhash.xxh3_64_intdigest(body):016x}"}

    def committed(self, entry: dict) -> None:
        """The manifest now names snapshot ``entry``: start a new log after it and
        delete the previous snapshot."""
        old, self.base = self.base, entry["file"]
        if self._log is not None:
            self._log.close()
            self._log = None
        self._open_log(fresh=True)
        self.appended = 0
        if old and old != self.base:
            try:
                os.unlink(os.path.join(self.path, old))
            except OSError:
                pass

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    # ------------------------------------------------------------------ reading
    def _read_snapshot(self, path: str, entry: dict) -> list:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise CorruptionError(f"{path}: cannot read evidence: {e.strerror}") from e
        if len(data) < SNAP_HEADER.size or data[:8] != SNAP_MAGIC:
            raise CorruptionError(f"{path}: not an evidence snapshot")
        _, major, minor, _, count, size, checksum = SNAP_HEADER.unpack_from(data)
        if major != MAJOR:
            raise NotSupportedError(f"{path}: evidence format {major}.{minor} is not one "
                                    f"this seenstore reads ({MAJOR}.x)")
        body = data[SNAP_HEADER.size:]
        if (len(body) != size or xxhash.xxh3_64_intdigest(body) != checksum
                or f"{checksum:016x}" != entry["checksum"]):
            raise CorruptionError(f"{path}: evidence snapshot damaged (checksum mismatch)")
        lines = zlib.decompress(body).split(b"\n") if count else []
        if len(lines) != count:
            raise CorruptionError(f"{path}: evidence snapshot count mismatch")
        return [self._make(json.loads(x)) for x in lines]

    def _replay_log(self) -> None:
        path = os.path.join(self.path, LOG_NAME)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        except OSError as e:
            raise CorruptionError(f"{path}: cannot read evidence log: {e.strerror}") from e
        base, at = _log_header(data)
        if base is None or base != self.base:
            return  # a log of an older snapshot (folded in already) or a torn header
        while at + FRAME.size <= len(data):
            n, checksum = FRAME.unpack_from(data, at)
            payload = data[at + FRAME.size: at + FRAME.size + n]
            if len(payload) != n or xxhash.xxh3_64_intdigest(payload) != checksum:
                break  # a torn tail: the crash came mid-append; those records were lost
            self._keep(self._make(json.loads(payload)))
            self.appended += 1
            at += FRAME.size + n
        self._valid_bytes = at

    def _open_log(self, fresh: bool = False) -> None:
        path = os.path.join(self.path, LOG_NAME)
        keep = getattr(self, "_valid_bytes", 0)
        if fresh or not keep:
            head = LOG_MAGIC + struct.pack("<H", len(self.base)) + self.base.encode()
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(head)
                if self.sync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)
            self._valid_bytes = len(head)
        else:
            os.truncate(path, keep)  # drop a torn tail before appending after it
        self._log = open(path, "ab")


def _log_header(data: bytes) -> tuple[str | None, int]:
    if len(data) < 10 or data[:8] != LOG_MAGIC:
        return None, 0
    (n,) = struct.unpack_from("<H", data, 8)
    if len(data) < 10 + n:
        return None, 0
    return data[10:10 + n].decode("utf-8", "replace"), 10 + n
