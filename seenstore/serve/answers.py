"""The server's answer log: recent batch ids and their answers, durable (docs/serve.md).

A client sends each batch with an id and sends the same id again when it retries
after a connection failure. The group commit (batcher.py) computes a group's
answers before the store commits it (the server is the store's one writer, so the
store cannot change between that check and the commit), appends them here as one
record and fsyncs, then commits the group to the store. A record is *committed*
when the store's count of committed batches (MANIFEST ``counters.batches``, +1 per
batch, moved by nothing else) passed its ``batches_before``; the last record is
*void* when the count still equals it (the process died before the store's commit:
nothing of it was answered, and a retry is a fresh batch against the same state),
and so is a record followed by one with the same ``batches_before`` (the store
refused that group).

File ``serve-answers.log`` in the store directory, little-endian:

    header  magic b"SSRVANS\\0", u16 major, u16 minor, u16 n, n bytes store_id
            (the MANIFEST's), u64 xxh3-64 of the header's preceding bytes
    record  u32 length L, u64 xxh3-64 of the payload, payload of L bytes:
            u64 batches_before, u32 entries, then per entry: u8 id length, the id
            (ASCII), u64 digest of the request, u32 items n, ceil(n/8) bytes of the
            answer mask (numpy packbits, little bit order)

A record cut short or failing its checksum at the end of the file is a write the
process did not finish (so the store never committed its group): it is cut off on
open. One anywhere else is damage: CorruptionError. When the file passes
``max_bytes`` it is rewritten (temp, fsync, rename, fsync the directory) with the
newest records holding about ``keep`` ids; a retry older than that is a fresh batch.

Memory is bounded however long the server runs: the records the file holds (kept
for the rewrite, at most ``max_bytes``) and the answers a retry can get, packed (1 bit
per item, as in the file), for the newest ``keep`` ids of those records: at most about
2 x ``max_bytes`` plus ~250 B per id (the id, its digest, the dict's entry); masks
of 1 B per item would hold 8 x the file.
"""

from __future__ import annotations

import os
import struct
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import xxhash

from seenstore.errors import CorruptionError, NotSupportedError
from seenstore.store.manifest import fsync_dir

NAME = "serve-answers.log"
MAGIC = b"SSRVANS\0"
MAJOR, MINOR = 1, 0
MAX_ID = 64
_REC = struct.Struct("<IQ")
_ENTRY = struct.Struct("<QI")


@dataclass(frozen=True, slots=True)
class Answer:
    """A request's answer: ``mask`` over its ``n`` items, for the request whose
    ``digest`` (of kind, base and body) it was."""

    digest: int
    mask: np.ndarray


def _xxh(b: bytes) -> int:
    return xxhash.xxh3_64_intdigest(b)


def _header(store_id: str) -> bytes:
    sid = store_id.encode("ascii")
    head = MAGIC + struct.pack("<HHH", MAJOR, MINOR, len(sid)) + sid
    return head + struct.pack("<Q", _xxh(head))


def encode_record(batches_before: int, entries: list[tuple[str, Answer]]) -> bytes:
    parts = [struct.pack("<QI", batches_before, len(entries))]
    for bid, ans in entries:
        b = bid.encode("ascii")
        parts += [bytes([len(b)]), b, _ENTRY.pack(ans.digest, len(ans.mask)),
                  np.packbits(ans.mask, bitorder="little").tobytes()]
    payload = b"".join(parts)
    return _REC.pack(len(payload), _xxh(payload)) + payload


@dataclass(frozen=True, slots=True)
class Packed:
    """An answer as the log holds it in memory: ``bits`` (packbits, little bit order)
    of a mask over ``n`` items."""

    digest: int
    n: int
    bits: bytes

    @staticmethod
    def of(ans: Answer) -> "Packed":
        return Packed(ans.digest, len(ans.mask),
                      np.packbits(ans.mask, bitorder="little").tobytes())

    def answer(self) -> Answer:
        bits = np.frombuffer(self.bits, dtype=np.uint8)
        return Answer(self.digest, np.unpackbits(bits, count=self.n,
                                                 bitorder="little").astype(bool))


def decode_payload(payload: bytes) -> tuple[int, list[tuple[str, Packed]]]:
    before, n = struct.unpack_from("<QI", payload, 0)
    at, out = 12, []
    for _ in range(n):
        ln = payload[at]
        bid = payload[at + 1: at + 1 + ln].decode("ascii")
        at += 1 + ln
        digest, items = _ENTRY.unpack_from(payload, at)
        at += _ENTRY.size
        nb = (items + 7) // 8
        if at + nb > len(payload):
            raise ValueError("payload length")
        out.append((bid, Packed(digest, items, payload[at: at + nb])))
        at += nb
    if at != len(payload):
        raise ValueError("payload length")
    return before, out


class AnswerLog:
    """The log of one store directory, opened by the server that owns the store.
    ``lookup`` from any thread; ``append`` and ``settle`` from one thread at a time."""

    def __init__(self, directory: str, store_id: str, store_batches: int, *,
                 sync: bool = True, keep: int = 100_000, max_bytes: int = 16 << 20):
        self.path = os.path.join(directory, NAME)
        self.directory = directory
        self.store_id = store_id
        self.sync = sync
        self.keep = keep
        self.max_bytes = max_bytes
        self.answers: OrderedDict[str, Packed] = OrderedDict()  # oldest first
        self.records = 0
        self.dropped_tail = 0  # bytes of an unfinished record cut off on open
        self._records: list[bytes] = []  # the encoded records kept (for a rewrite)
        self._load(store_batches)
        self._f = open(self.path, "ab")

    # --------------------------------------------------------------- opening
    def _load(self, store_batches: int) -> None:
        if not os.path.exists(self.path):
            self._rewrite([])
            return
        with open(self.path, "rb") as f:
            data = f.read()
        head = _header(self.store_id)
        if data[:8] != MAGIC:
            raise CorruptionError(f"{self.path}: not a seenstore answer log (bad magic)")
        major = struct.unpack_from("<H", data, 8)[0] if len(data) >= 10 else -1
        if major != MAJOR:
            raise NotSupportedError(f"{self.path}: answer log format {major}, "
                                    f"this version reads {MAJOR}")
        if data[:len(head)] != head:
            raise CorruptionError(f"{self.path}: header damaged or of another store "
                                  f"(store_id {self.store_id})")
        at, recs = len(head), []
        while at < len(data):
            if at + _REC.size > len(data):
                break
            ln, digest = _REC.unpack_from(data, at)
            payload = data[at + _REC.size: at + _REC.size + ln]
            if len(payload) < ln or _xxh(payload) != digest:
                break
            try:
                before, entries = decode_payload(payload)
            except (ValueError, IndexError, UnicodeDecodeError, struct.error):
                raise CorruptionError(f"{self.path}: record at byte {at} is damaged") from None
            recs.append((before, entries, data[at: at + _REC.size + ln]))
            at += _REC.size + ln
        if at < len(data):
            if self._later_record(data, at):
                raise CorruptionError(f"{self.path}: record at byte {at} fails its "
                                      f"checksum, with records after it")
            self.dropped_tail = len(data) - at
        kept = []
        for i, (before, entries, raw) in enumerate(recs):
            nxt = recs[i + 1][0] if i + 1 < len(recs) else store_batches
            if before > store_batches:
                raise CorruptionError(f"{self.path}: a record is newer than the store "
                                      f"({before} batches before it, the store has "
                                      f"{store_batches})")
            if nxt == before:
                continue  # void: the store did not commit this group
            kept.append(raw)
            for bid, ans in entries:
                self._remember(bid, ans)
        self._bound()
        self._rewrite(kept) if self.dropped_tail or len(kept) != len(recs) else None
        self._records = kept
        self.records = len(kept)

    @staticmethod
    def _later_record(data: bytes, at: int) -> bool:
        """True when a whole, valid record starts somewhere after byte ``at``."""
        for start in range(at + 1, len(data) - _REC.size):
            ln, digest = _REC.unpack_from(data, start)
            end = start + _REC.size + ln
            if ln >= 12 and end <= len(data) and _xxh(data[start + _REC.size:end]) == digest:
                return True
        return False

    def _rewrite(self, records: list[bytes]) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(_header(self.store_id))
            for r in records:
                f.write(r)
            f.flush()
            if self.sync:
                os.fsync(f.fileno())
        os.replace(tmp, self.path)
        if self.sync:
            fsync_dir(self.directory)

    # --------------------------------------------------------------- the log
    def _remember(self, bid: str, ans: Packed) -> None:
        self.answers[bid] = ans
        self.answers.move_to_end(bid)

    def _bound(self, ids: int | None = None) -> None:
        """Forget the oldest answers beyond ``ids`` (default ``keep``)."""
        limit = self.keep if ids is None else min(ids, self.keep)
        while len(self.answers) > limit:
            self.answers.popitem(last=False)

    def lookup(self, bid: str) -> Answer | None:
        got = self.answers.get(bid)
        return None if got is None else got.answer()

    def append(self, batches_before: int, entries: list[tuple[str, Answer]]) -> bytes:
        """Write and fsync one record; return it (``settle`` it once the store has
        committed the group, or ``void`` it when the store refused the group)."""
        rec = encode_record(batches_before, entries)
        self._f.write(rec)
        self._f.flush()
        if self.sync:
            os.fsync(self._f.fileno())
        return rec

    def settle(self, rec: bytes, entries: list[tuple[str, Answer]]) -> None:
        """The store committed the record's group: its answers are served from now on."""
        self._records.append(rec)
        self.records += 1
        for bid, ans in entries:
            self._remember(bid, Packed.of(ans))
        self._bound()
        if self._f.tell() > self.max_bytes:
            self._shrink()

    def _shrink(self) -> None:
        """Keep the newest records holding about ``keep`` ids (and at most half of
        ``max_bytes``); rewrite the file with them."""
        ids, size, start = 0, 0, len(self._records)
        while start > 0:
            r = self._records[start - 1]
            n = struct.unpack_from("<I", r, _REC.size + 8)[0]
            if ids + n > self.keep or size + len(r) > self.max_bytes // 2:
                break
            ids += n
            size += len(r)
            start -= 1
        kept = self._records[start:]
        self._f.close()
        self._rewrite(kept)
        self._records = kept
        self._f = open(self.path, "ab")
        self._bound(ids)

    def close(self) -> None:
        self._f.close()
