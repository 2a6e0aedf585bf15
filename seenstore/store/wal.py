"""Write-ahead log of the dedup stage: keys handed out but not yet merged into the store.

One segment file per stage buffer (``stage-<seq>.wal`` in the store directory):
a 32-byte header, then records of little-endian uint64 keys, each with its own
length and xxh3-64 checksum (docs/stage.md, "WAL format"). ``WalWriter`` appends
one record per ``append`` (one write call) and fsyncs by policy with group commit;
``read_segment`` returns a segment's keys, ignoring a torn tail record.
"""

from __future__ import annotations

import errno
import os
from itertools import pairwise
import re
import struct
import threading

import numpy as np
import xxhash

from seenstore.keys.sort import sorted_unique
from seenstore.runtime.worker import Worker

from seenstore.errors import (
    CorruptionError,
    DiskFullError,
    InvalidInputError,
    NotSupportedError,
    StoreIOError,
)

MAGIC = b"\x89SWL\r\n\x1a\n"  # PNG-style: high bit, name (Seenstore Wal Log), CRLF, EOF, LF
MAJOR = 1
MINOR = 0
HEADER = struct.Struct("<8sHHIQ")  # magic, major, minor, header_len, seq; then checksum
HEADER_LEN = HEADER.size + 8  # 32
RECORD = struct.Struct("<IHHQQ")  # body_len, kind, flags, body checksum, header checksum
KIND_KEYS = 1  # body: uint64 little-endian keys handed out by the stage
MAX_RECORD_KEYS = (2**32 - 1) // 8
_NAME_RE = re.compile(r"^stage-(\d{10})\.wal$")
_xxh3 = xxhash.xxh3_64_intdigest
_ADVICE = ("its keys cannot be trusted; delete the file to accept that keys it held "
           "may be handed out again")

# fsync policies (docs/stage.md, "fsync policy")
SYNC_ALWAYS = "always"  # every record is fsynced before the offer that wrote it returns
SYNC_NEVER = "never"    # write() only: safe against a process crash, not power loss


def segment_name(seq: int) -> str:
    return f"stage-{seq:010d}.wal"


def list_segments(directory: str) -> list[tuple[int, str]]:
    """``(seq, path)`` of every WAL segment in ``directory``, oldest first."""
    out = []
    for name in os.listdir(directory):
        m = _NAME_RE.match(name)
        if m:
            out.append((int(m.group(1)), os.path.join(directory, name)))
    return sorted(out)


def _io_error(e: OSError, what: str) -> StoreIOError:
    if e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return DiskFullError(f"{what}: {e.strerror}")
    return StoreIOError(f"{what}: {e.strerror or e}")


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pack_header(seq: int) -> bytes:
    head = HEADER.pack(MAGIC, MAJOR, MINOR, HEADER_LEN, seq)
    return head + struct.pack("<Q", _xxh3(head))


def pack_record(keys: np.ndarray, kind: int = KIND_KEYS) -> bytes:
    """One record holding ``keys``. Requires: uint64, len <= MAX_RECORD_KEYS."""
    body = keys.astype("<u8", copy=False).tobytes()
    head = struct.pack("<IHHQ", len(body), kind, 0, _xxh3(body))
    return head + struct.pack("<Q", _xxh3(head)) + body


def read_segment(path: str) -> tuple[np.ndarray, dict]:
    """Keys of every intact record of segment ``path`` (in write order) and
    ``{"seq", "records", "torn_bytes"}``.

    A file shorter than its header that holds a prefix of a header (or only zero
    bytes), or whose header is all zero bytes, was torn at creation and holds no
    records; a short file holding anything else is foreign (NotSupportedError). A
    torn tail (an incomplete last record, a last record whose body fails its
    checksum, or zero fill to the end) is ignored.
    Raises NotSupportedError (foreign file, newer major), CorruptionError (bad
    header checksum, or a bad record followed by more data), StoreIOError."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise _io_error(e, f"{path}: cannot read WAL segment") from e
    name = os.path.basename(path)
    empty = np.empty(0, dtype=np.uint64)
    if len(data) < HEADER_LEN or not any(data[:HEADER_LEN]):
        # torn at creation: the header goes out in one write, so what is there is
        # a prefix of one (or zero fill); anything else is a foreign file, kept
        head = data[:len(MAGIC)]
        if len(data) < HEADER_LEN and any(data) and head != MAGIC[:len(head)]:
            raise NotSupportedError(f"{name}: not a seenstore WAL segment (bad magic); "
                                    "move it out of the store directory")
        return empty, {"seq": None, "records": 0, "torn_bytes": len(data)}
    magic, major, minor, header_len, seq = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise NotSupportedError(f"{name}: not a seenstore WAL segment (bad magic)")
    (stored,) = struct.unpack_from("<Q", data, HEADER_LEN - 8)
    sum_ok = stored == _xxh3(data[:HEADER_LEN - 8])
    if major != MAJOR:
        raise NotSupportedError(
            f"{name}: WAL format {major}.{minor} is newer than this seenstore "
            f"reads ({MAJOR}.x): upgrade seenstore"
            + ("" if sum_ok else " (or the header is damaged: its checksum does not match)"))
    if not sum_ok:  # before the fields it covers are used (the header length)
        raise CorruptionError(f"{name}: WAL header checksum mismatch")
    if header_len < HEADER_LEN:
        raise CorruptionError(f"{name}: bad WAL header length {header_len}")
    if header_len > len(data):  # a longer (newer minor) header, torn at creation
        return empty, {"seq": seq, "records": 0, "torn_bytes": len(data)}
    parts, records, pos, end = [], 0, header_len, len(data)
    while pos < end:
        if end - pos < RECORD.size:
            break  # torn tail: incomplete record header
        body_len, kind, _flags, body_sum, head_sum = RECORD.unpack_from(data, pos)
        if head_sum != _xxh3(data[pos:pos + RECORD.size - 8]):
            if not any(data[pos:]):
                break  # torn tail: zero fill after a crash
            raise CorruptionError(f"{name}: WAL record header at offset {pos} fails its "
                                  "checksum; " + _ADVICE)
        body_end = pos + RECORD.size + body_len
        if body_end > end:
            break  # torn tail: incomplete body
        if body_sum != _xxh3(data[pos + RECORD.size:body_end]):
            last = body_end == end or not any(data[body_end:])
            if last and _zero_piece(data, pos, body_end):
                break  # torn tail: the last record, part of it never written
            raise CorruptionError(
                f"{name}: WAL record at offset {pos} fails its checksum "
                + ("(damaged: not a torn write, which leaves zero bytes); " if last
                   else "and more records follow; ") + _ADVICE)
        if kind == KIND_KEYS:
            if body_len % 8:
                raise CorruptionError(f"{name}: WAL record at offset {pos}: length {body_len} "
                                      "is not a multiple of 8")
            parts.append(np.frombuffer(data, dtype="<u8", count=body_len // 8,
                                       offset=pos + RECORD.size).astype(np.uint64))
        # other kinds: added by a later minor version; skipped
        records += 1
        pos = body_end
    keys = np.concatenate(parts) if parts else empty
    return keys, {"seq": seq, "records": records, "torn_bytes": end - pos}


SECTOR = 512  # the unit a crash leaves unwritten (zero) in a file that grew


def _zero_piece(data: bytes, pos: int, end: int) -> bool:
    """True when bytes [pos, end) of the segment (its last record) hold a piece a
    crash leaves: some sector's share of them (a whole SECTOR of the file, or the
    record's part of its first or last sector) all zero bytes, as where a write
    reached the file's length but not the disk. A record that fails its checksum
    without one was damaged after it was written."""
    cuts = list(range(pos, end, SECTOR)) if pos % SECTOR == 0 else \
        [pos] + list(range(pos - pos % SECTOR + SECTOR, end, SECTOR))
    cuts.append(end)
    return any(b > a and data.count(0, a, b) == b - a for a, b in pairwise(cuts))


class WalWriter:
    """Appends records to the current segment; ``rotate`` starts a new one.

    ``sync``: SYNC_ALWAYS (``append`` callers then call ``sync_upto`` before
    acknowledging), a float N (a background thread fsyncs at most N seconds
    after a write), or SYNC_NEVER. Thread-safe. Segments are created lazily by
    the first ``append`` after ``rotate``; their sequence numbers start at ``next_seq``.
    """

    def __init__(self, directory: str, next_seq: int, sync: str | float = SYNC_ALWAYS):
        if not (sync in (SYNC_ALWAYS, SYNC_NEVER) or
                isinstance(sync, (int, float)) and not isinstance(sync, bool) and sync > 0):
            raise InvalidInputError(
                f"wal_sync must be 'always', 'never' or seconds > 0, got {sync!r}")
        self.directory = directory
        self.sync = sync
        self._next_seq = next_seq
        self._fd = -1
        self._seq: int | None = None
        self._cond = threading.Condition()
        self._written = 0   # bytes appended (all segments): the log sequence number
        self._synced = 0    # bytes known durable
        self._syncing = False
        self.bytes_written = 0
        self.records = 0
        self.fsyncs = 0
        self._live: dict[int, int] = {}  # seq -> bytes, segments not yet removed
        self._closed = False
        self._wake = threading.Event()  # set by close: the flusher ends at once
        self._flusher: Worker | None = None
        if not isinstance(sync, str):
            self._flusher = Worker(self._flush_loop, "seenstore-wal-sync")

    @property
    def live_bytes(self) -> int:
        with self._cond:
            return sum(self._live.values())

    def append(self, keys: np.ndarray) -> int:
        """Write ``keys`` as record(s) with one write call each; return the log
        position to pass to ``sync_upto``. Requires: uint64 array."""
        with self._cond:
            if self._fd < 0 and len(keys):
                self._open_segment()
            for lo in range(0, len(keys), MAX_RECORD_KEYS):
                rec = pack_record(keys[lo:lo + MAX_RECORD_KEYS])
                self._write(rec)
                self.records += 1
            return self._written

    def _open_segment(self) -> None:
        seq = self._next_seq
        path = os.path.join(self.directory, segment_name(seq))
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        except OSError as e:
            raise _io_error(e, f"{path}: cannot create WAL segment") from e
        self._fd, self._seq, self._next_seq = fd, seq, seq + 1
        self._live[seq] = 0
        self._write(pack_header(seq))
        if self.sync != SYNC_NEVER:  # the file's name must survive power loss too
            try:
                os.fsync(fd)
                fsync_dir(self.directory)
            except OSError as e:
                raise _io_error(e, f"{path}: cannot sync new WAL segment") from e
            self.fsyncs += 1
            self._synced = self._written

    def _write(self, buf: bytes) -> None:
        view = memoryview(buf)
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        except OSError as e:
            raise _io_error(e, f"{segment_name(self._seq)}: WAL write failed") from e
        self._written += len(buf)
        self.bytes_written += len(buf)
        self._live[self._seq] += len(buf)

    def sync_upto(self, lsn: int) -> None:
        """Return once every byte up to log position ``lsn`` is fsynced. Group
        commit: one caller fsyncs for all that wait meanwhile."""
        with self._cond:
            while self._synced < lsn:
                if self._syncing:
                    self._cond.wait()
                    continue
                self._sync_locked()

    def _sync_locked(self) -> None:
        """fsync the current segment; the condition's lock is held on entry and exit."""
        target, fd = self._written, self._fd
        if fd < 0 or self._synced >= target:
            self._synced = max(self._synced, target)
            return
        self._syncing = True
        self._cond.release()
        try:
            os.fsync(fd)
        except OSError as e:
            raise _io_error(e, "WAL fsync failed") from e
        finally:
            self._cond.acquire()
            self._syncing = False
            self._cond.notify_all()
        self.fsyncs += 1
        self._synced = max(self._synced, target)

    def _flush_loop(self) -> None:
        """The flusher's body: every ``sync`` seconds, fsync what was written since;
        ends when ``close`` wakes it."""
        while not self._wake.wait(float(self.sync)):
            with self._cond:
                if self._closed:
                    return
                if self._synced < self._written and not self._syncing:
                    try:
                        self._sync_locked()
                    except StoreIOError:
                        pass  # surfaced by the next rotate/close, which fsync again

    def rotate(self) -> int | None:
        """Close the current segment (fsynced unless SYNC_NEVER) and return its
        seq, or None if no record was written since the last rotate."""
        with self._cond:
            while self._syncing:
                self._cond.wait()
            if self._fd < 0:
                return None
            if self.sync != SYNC_NEVER:
                self._sync_locked()
            fd, seq = self._fd, self._seq
            self._fd, self._seq = -1, None
            os.close(fd)
            return seq

    def remove(self, seq: int | None) -> None:
        """Delete segment ``seq`` (its keys are committed in the store)."""
        if seq is None:
            return
        with self._cond:
            self._live.pop(seq, None)
        try:
            os.unlink(os.path.join(self.directory, segment_name(seq)))
        except FileNotFoundError:
            pass
        except OSError as e:
            raise _io_error(e, f"{segment_name(seq)}: cannot remove WAL segment") from e

    def close(self) -> int | None:
        """Rotate and stop the background syncer (waiting for it; an error that ended
        it is raised here); return the last segment's seq."""
        seq = self.rotate()
        with self._cond:
            self._closed = True
        if self._flusher is not None:
            self._wake.set()
            self._flusher.join()
        return seq


def replay_wal(store) -> dict:
    """Merge the keys of every WAL segment in ``store``'s directory (those not in
    the store yet) and delete the segments. Returns figures and the next segment
    seq. Called by every writer's open (``SeenStore.open``) before it admits
    anything, so keys a stage handed out are never admitted as new again.
    Requires: ``store`` open as the writer (duck-typed: ``path``, ``sync``,
    ``add``). Raises what ``read_segment`` raises (naming the segment): the
    writer then refuses to open."""
    segs = list_segments(store.path)
    parts, records, torn = [], 0, 0
    for _, path in segs:
        keys, info = read_segment(path)
        parts.append(keys)
        records += info["records"]
        torn += info["torn_bytes"]
    keys = np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)
    new = int(store.add(keys).sum()) if len(keys) else 0
    for _, path in segs:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise _io_error(e, f"{path}: cannot remove replayed WAL segment") from e
    if segs and store.sync:
        fsync_dir(store.path)
    return {"segments": len(segs), "records": records, "keys": len(keys),
            "merged_new": new, "torn_bytes": torn,
            "next_seq": (segs[-1][0] + 1) if segs else 1}


class PendingKeys:
    """The keys of the WAL segments in a directory, as a reader sees them: sorted,
    unique, re-read only for segments that changed (seq, size, mtime) since the
    last call. A segment removed meanwhile was merged first (the stage deletes a
    segment only after its merge committed), so a reader that takes these keys
    *before* it reads the manifest misses none of them."""

    def __init__(self, directory: str):
        self.directory = directory
        self._seen: dict[int, tuple[tuple, np.ndarray]] = {}
        self._keys = np.empty(0, dtype=np.uint64)

    def keys(self) -> np.ndarray:
        """Sorted unique keys of every segment now. Raises what ``read_segment``
        raises (a corrupt or foreign segment)."""
        current, changed = {}, False
        for seq, path in list_segments(self.directory):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue  # merged and removed since the listing
            sig = (st.st_ino, st.st_size, st.st_mtime_ns)
            old = self._seen.get(seq)
            if old is not None and old[0] == sig:
                current[seq] = old
                continue
            try:
                keys, _ = read_segment(path)
            except StoreIOError as e:
                if isinstance(e.__cause__, FileNotFoundError):
                    continue
                raise
            current[seq] = (sig, keys)
            changed = True
        if changed or current.keys() != self._seen.keys():
            self._seen = current
            parts = [k for _, k in current.values()]
            # sort + drop repeats, not np.unique: numpy 2.4's np.unique of uint64
            # hashes and then sorts, ~1.4 us/key on the AMD hosts (np.sort ~20 ns)
            self._keys = (sorted_unique(np.concatenate(parts)) if parts
                          else np.empty(0, dtype=np.uint64))
        return self._keys
