"""Compressed run files (format 2.0, docs/format.md, "Compressed run file").

The same sorted unique uint64 keys as a 1.x run, as Rice-coded blocks of
``block_keys`` keys (kernels/codec.py: ~log2(2^64/N) + 1.5 bits per key at N
uniform keys), each with its own xxh3-64 checksum, then a block index (first key
and byte offset of every block) and a footer. ``CompressedRunWriter`` appends
sorted chunks with memory bounded by its buffer (plus 16 bytes of index per
block); ``CompressedRunReader`` streams bounded chunks of decoded keys
(``chunks(buf)``, the same contract as ``RunReader.chunks``) and answers point
lookups by decoding only the blocks the queries fall in. ``open_run`` opens
either version, so a store can read its 1.x runs while it writes 2.x.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import xxhash

from seenstore.errors import CorruptionError, InvalidInputError, NotSupportedError, StoreIOError
from seenstore.kernels import codec as K
from seenstore.kernels.merge import is_strictly_increasing
from seenstore.runtime.readahead import will_need
from seenstore.store.runs.format import (COMPRESSED_MAJOR, COMPRESSED_MINOR, HASH_XXH3_64,
                                        HEADER_SIZE, MAGIC, RunIdentity)
from seenstore.store.runs.reader import RunReader
from seenstore.store.runs.writer import close_with_header, fill_buffer, remove_partial

MAJOR = COMPRESSED_MAJOR
MINOR = COMPRESSED_MINOR
CODEC_RICE = 1  # kernels/codec.py
BLOCK_KEYS = 4096  # keys per block: 0.01 bytes/key of overhead; a lookup decodes ~10 us
BUF_KEYS = 1 << 20  # the writer encodes (and the reader decodes) this many keys at a time
SWEEP_BLOCKS = 256  # blocks a sweep reads at a time (~1 Mi keys, ~4.5 MiB)
END_MAGIC = b"\x89SRFEND\n"

# magic, major, minor, header_size, count, host_bits, hash_id, shard_bits, codec,
# shard, policy_digest(16), body_checksum, block_keys, reserved, n_blocks,
# index_offset, index_checksum
_FIELDS = struct.Struct("<8sHHIQBBBBI16sQIIQQQ")
_CHECKED = _FIELDS.size  # 88: the header checksum covers bytes [0, 88)
_SUM = struct.Struct("<Q")
_FOOTER = struct.Struct("<Q8s")  # index offset, END_MAGIC
_STATUS = {K.BAD_SIZE: "impossible block size", K.BAD_ORDER: "keys out of order",
           K.BAD_STREAM: "damaged gap stream",
           K.BAD_INDEX: "block index disagrees with the block"}


@dataclass(frozen=True)
class CodecHeader(RunIdentity):
    block_keys: int
    n_blocks: int
    index_offset: int
    index_checksum: int
    major: int = MAJOR
    minor: int = MINOR

    @property
    def file_size(self) -> int:
        return self.index_offset + 16 * self.n_blocks + _FOOTER.size

    def pack(self) -> bytes:
        fields = _FIELDS.pack(
            MAGIC, self.major, self.minor, HEADER_SIZE, self.count, self.host_bits,
            HASH_XXH3_64, self.shard_bits, CODEC_RICE, self.shard, self.policy_digest,
            self.body_checksum, self.block_keys, 0, self.n_blocks, self.index_offset,
            self.index_checksum)
        head = fields + _SUM.pack(xxhash.xxh3_64_intdigest(fields))
        return head + b"\0" * (HEADER_SIZE - len(head))

    @classmethod
    def unpack(cls, raw: bytes, name: str) -> "CodecHeader":
        """Decode and check a 2.x header. NotSupportedError for a foreign file, another
        major version or an unknown codec; CorruptionError for a damaged header."""
        if not MAGIC.startswith(raw[:8]):
            raise NotSupportedError(f"{name}: not a seenstore run file (bad magic)")
        if len(raw) < _CHECKED + _SUM.size:
            raise CorruptionError(f"{name}: truncated header ({len(raw)} bytes)")
        major, minor = struct.unpack_from("<HH", raw, 8)
        if major != MAJOR:
            raise NotSupportedError(
                f"{name}: run format version {major}.{minor} is not a compressed run "
                f"({MAJOR}.x)" + ("; upgrade seenstore" if major > MAJOR else ""))
        (want,) = _SUM.unpack_from(raw, _CHECKED)
        if xxhash.xxh3_64_intdigest(raw[:_CHECKED]) != want:
            raise CorruptionError(f"{name}: header checksum mismatch")
        (_, major, minor, header_size, count, host_bits, hash_id, shard_bits, codec, shard,
         pdigest, body_sum, block_keys, _, n_blocks, index_offset,
         index_sum) = _FIELDS.unpack_from(raw)
        if header_size != HEADER_SIZE or hash_id != HASH_XXH3_64 or codec != CODEC_RICE:
            raise NotSupportedError(f"{name}: unsupported header size, hash id or codec")
        if not 1 <= block_keys <= K.MAX_BLOCK_KEYS or -(-count // block_keys) != n_blocks \
                or index_offset < HEADER_SIZE or index_offset % 8:
            raise CorruptionError(f"{name}: header fields disagree")
        return cls(count, host_bits, shard_bits, shard, pdigest, body_sum, block_keys,
                   n_blocks, index_offset, index_sum, major, minor)


def block_ends(offsets: np.ndarray, end: int) -> np.ndarray:
    """Word offset just past each block: the next block's offset, ``end`` for the last."""
    return np.append(offsets[1:], end).astype(np.int64) if len(offsets) else \
        np.empty(0, np.int64)


def block_sums(body: np.ndarray, offsets: np.ndarray, end: int) -> np.ndarray:
    """xxh3-64 of each block ``body[offsets[b]:offsets[b+1]]`` (word offsets; the last
    block ends at ``end``) without its final (checksum) word."""
    view = memoryview(body).cast("B")
    h = xxhash.xxh3_64_intdigest
    return np.array([h(view[8 * a: 8 * b - 8])
                     for a, b in zip(offsets.tolist(), block_ends(offsets, end).tolist())],
                    dtype=np.uint64)


def _stored_sums(body: np.ndarray, offsets: np.ndarray, end: int) -> np.ndarray:
    return body[block_ends(offsets, end) - 1]


class CompressedRunWriter:
    """Append sorted keys, then ``finish()``. Requires: keys strictly ascending across
    all ``write`` calls (checked: InvalidInputError, and nothing more is written).
    Memory: one buffer of ``buf_keys`` keys and its encoding, plus the index."""

    def __init__(self, path: str, host_bits: int, shard_bits: int, shard: int,
                 policy_digest: bytes, block_keys: int = BLOCK_KEYS, buf_keys: int = BUF_KEYS):
        if not 1 <= block_keys <= K.MAX_BLOCK_KEYS:
            raise InvalidInputError(f"block_keys must be 1..{K.MAX_BLOCK_KEYS}")
        self.path = path
        self._meta = (host_bits, shard_bits, shard, policy_digest, block_keys)
        buf_keys = max(block_keys, buf_keys // block_keys * block_keys)
        self._pend = np.empty(buf_keys, np.uint64)
        self._fill = 0
        self._words = np.empty(K.encoded_bound(buf_keys, block_keys), np.uint64)
        self._first: list[np.ndarray] = []
        self._offsets: list[np.ndarray] = []
        self._body = 0  # bytes of blocks written
        self._hash = xxhash.xxh3_64()  # over the block checksums, in order
        self._last = None
        self.count = 0
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        self._fd = os.open(path, flags, 0o644)
        try:
            self._write_all(b"\0" * HEADER_SIZE)
        except BaseException:  # the caller never gets a writer to abort: remove it here
            self.abort()
            raise

    def _write_all(self, data) -> None:
        view = memoryview(data).cast("B")
        while view:
            view = view[os.write(self._fd, view):]

    def write(self, keys: np.ndarray) -> None:
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        if not len(keys):
            return
        if not is_strictly_increasing(keys) or (self._last is not None
                                                and keys[0] <= self._last):
            raise InvalidInputError(f"{self.path}: keys must be strictly ascending")
        self._last = keys[-1]
        self.count += len(keys)
        self._fill = fill_buffer(self._pend, self._fill, keys, self._flush)

    def _flush(self, keys: np.ndarray) -> None:
        """Encode ``keys`` (the buffered ones) as blocks and write them."""
        block_keys = self._meta[4]
        nb = -(-len(keys) // block_keys)
        first = np.empty(nb, np.uint64)
        offsets = np.empty(nb, np.int64)
        end = K.encode_blocks(keys, block_keys, self._words, first, offsets)
        body = self._words[:end]
        sums = block_sums(body, offsets, end)
        body[block_ends(offsets, end) - 1] = sums
        self._hash.update(sums.astype("<u8").tobytes())
        self._first.append(first)
        self._offsets.append(offsets * 8 + self._body)
        self._write_all(body)
        self._body += 8 * end

    def finish(self, sync: bool = True) -> CodecHeader:
        """Write the last block, the index, the footer and the header; fsync; close.
        Returns the header written."""
        if self._fill:
            self._flush(self._pend[: self._fill])
            self._fill = 0
        host_bits, shard_bits, shard, pdigest, block_keys = self._meta
        first = np.concatenate(self._first) if self._first else np.empty(0, np.uint64)
        offsets = np.concatenate(self._offsets) if self._offsets else np.empty(0, np.int64)
        index = np.empty((len(first), 2), "<u8")
        index[:, 0] = first
        index[:, 1] = offsets
        index_bytes = index.tobytes()
        index_offset = HEADER_SIZE + self._body
        self._write_all(index_bytes)
        self._write_all(_FOOTER.pack(index_offset, END_MAGIC))
        header = CodecHeader(self.count, host_bits, shard_bits, shard, pdigest,
                             self._hash.intdigest(), block_keys, len(first), index_offset,
                             xxhash.xxh3_64_intdigest(index_bytes))
        close_with_header(self._fd, header.pack(), sync)
        self._fd = -1
        # a finished writer may be kept until its batch commits (store/spill.py keeps
        # one per shard for abort): its buffers go now, not then
        self._pend = self._words = None
        self._first, self._offsets = [], []
        return header

    def abort(self) -> None:
        """Close and delete the partial file; never raises."""
        remove_partial(self._fd, self.path)
        self._fd = -1


class CompressedRunReader:
    """A 2.x run file opened for reading: header, footer and block index checked on
    open (the index is held in memory: 16 bytes per block); the blocks stay on disk,
    memory-mapped, each checked by its checksum when first decoded."""

    def __init__(self, path: str):
        self.path = path
        self.name = os.path.basename(path)
        try:
            with open(path, "rb") as f:
                self.header = h = CodecHeader.unpack(f.read(HEADER_SIZE), self.name)
                size = os.fstat(f.fileno()).st_size
                if size != h.file_size:
                    raise CorruptionError(
                        f"{self.name}: file is {size} bytes, header says {h.file_size} "
                        f"({'truncated' if size < h.file_size else 'trailing bytes'})")
                f.seek(h.index_offset)
                index_bytes = f.read(16 * h.n_blocks)
                footer = f.read(_FOOTER.size)
                self._words = (np.memmap(f, dtype="<u8", mode="r", offset=HEADER_SIZE,
                                         shape=((h.index_offset - HEADER_SIZE) // 8,))
                               if h.index_offset > HEADER_SIZE else np.empty(0, np.uint64))
        except FileNotFoundError:
            raise CorruptionError(f"{self.name}: run file named by the manifest is missing")
        except OSError as e:
            raise StoreIOError(f"{self.name}: cannot read: {e.strerror}") from e
        if _FOOTER.unpack(footer) != (h.index_offset, END_MAGIC):
            raise CorruptionError(f"{self.name}: footer damaged")
        if xxhash.xxh3_64_intdigest(index_bytes) != h.index_checksum:
            raise CorruptionError(f"{self.name}: block index checksum mismatch")
        index = np.frombuffer(index_bytes, "<u8").reshape(-1, 2)
        self._first = index[:, 0].astype(np.uint64)
        offs = index[:, 1]
        body = h.index_offset - HEADER_SIZE
        if len(offs) and (offs[0] != 0 or (offs % 8).any() or offs[-1] >= body
                          or (np.diff(offs.astype(np.int64)) <= 0).any()
                          or not is_strictly_increasing(self._first)):
            raise CorruptionError(f"{self.name}: block index out of order")
        if not len(offs) and body:
            raise CorruptionError(f"{self.name}: blocks without an index")
        self._offsets = (offs // 8).astype(np.int64)  # word offsets into self._words

    @property
    def count(self) -> int:
        return self.header.count

    @property
    def body_bytes(self) -> int:
        return self.header.index_offset - HEADER_SIZE

    def _check_sums(self, words: np.ndarray, offsets: np.ndarray, end: int, b0: int) -> None:
        bad = np.flatnonzero(block_sums(words, offsets, end)
                             != _stored_sums(words, offsets, end))
        if len(bad):
            raise CorruptionError(f"{self.name}: block {b0 + int(bad[0])} checksum mismatch")

    def _block_range(self, b0: int, b1: int) -> tuple[int, int]:
        """Word span [a, e) of blocks b0..b1-1."""
        end = self._offsets[b1] if b1 < len(self._offsets) else len(self._words)
        return int(self._offsets[b0]), int(end)

    def _read_ahead(self, fd: int, b0: int, b1: int) -> None:
        """Let the OS start reading blocks b0..b1-1 (``readahead.will_need``: all of
        them, not only the first 2 MiB)."""
        a, e = self._block_range(b0, b1)
        will_need(fd, HEADER_SIZE + 8 * a, 8 * (e - a))

    def _blocks(self, per: int, b_lo: int = 0, b_hi: int | None = None):
        """Blocks ``b_lo``..``b_hi``-1 read ``per`` at a time (the OS asked to read the
        next ``per`` ahead), each checked by its checksum: yields ``(b0, b1, words,
        offs)``, ``words`` a reused buffer holding blocks b0..b1-1, ``offs`` their
        word offsets in it. OSError becomes StoreIOError."""
        b_hi = self.header.n_blocks if b_hi is None else b_hi
        raw = np.empty(per * K.max_block_words(self.header.block_keys), np.uint64)
        try:
            try:
                fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                # retired since this reader opened it (a compaction's commit beside a
                # reader taken before it: bloom/deferred.py, contains): the map made
                # at open outlives the file's removal, so read through it
                fd = -1
            try:
                for b0 in range(b_lo, b_hi, per):
                    b1 = min(b0 + per, b_hi)
                    a, e = self._block_range(b0, b1)
                    if e - a > len(raw):
                        raise CorruptionError(f"{self.name}: block {b0} larger than possible")
                    words = raw[: e - a]
                    if fd < 0:
                        words[:] = self._words[a:e]
                    else:
                        if b1 < b_hi:  # the disk reads the next blocks while these decode
                            self._read_ahead(fd, b1, min(b1 + per, b_hi))
                        self._pread(fd, words, a)
                    offs = self._offsets[b0:b1] - a
                    self._check_sums(words, offs, e - a, b0)
                    yield b0, b1, words, offs
            finally:
                if fd >= 0:
                    os.close(fd)
        except OSError as e:
            raise StoreIOError(f"{self.name}: cannot read: {e.strerror}") from e

    def _pread(self, fd: int, words: np.ndarray, a: int) -> None:
        """Fill ``words`` from the body at word ``a``."""
        view = memoryview(words).cast("B")
        got = 0
        while got < len(view):
            r = os.preadv(fd, [view[got:]], HEADER_SIZE + 8 * a + got)
            if not r:
                raise CorruptionError(f"{self.name}: body ends early")
            got += r

    def _damaged(self, st: int, b0: int, offs: np.ndarray, bad: int) -> CorruptionError:
        b = b0 + int(np.searchsorted(offs, bad, "right")) - 1
        return CorruptionError(f"{self.name}: block {b}: "
                               f"{_STATUS.get(st, 'blocks disagree with the index')}")

    def _check_whole(self, total: int, hasher) -> None:
        """After every block: the count and the checksum of all block checksums."""
        if total != self.header.count:
            raise CorruptionError(
                f"{self.name}: {total} keys decoded, header says {self.header.count}")
        if hasher.intdigest() != self.header.body_checksum:
            raise CorruptionError(f"{self.name}: body checksum mismatch")

    def chunks(self, buf: np.ndarray, check_pages: bool = True) -> Iterator[int]:
        """Stream the keys through ``buf`` (uint64, at least ``block_keys`` long),
        yielding how many keys it holds; whole blocks at a time, each checked by its
        checksum before its keys are yielded (``check_pages``: the raw reader's
        option, always so here). Raises CorruptionError on damage, at the latest
        after the last chunk (the checksum of all block checksums)."""
        h = self.header
        per = len(buf) // h.block_keys
        if per < 1:
            raise InvalidInputError(f"buffer of {len(buf)} keys < block size {h.block_keys}")
        hasher = xxhash.xxh3_64()
        last, have, total = np.uint64(0), False, 0
        for b0, b1, words, offs in self._blocks(per):
            used, n, nb, st, bad = K.decode_blocks(words, len(words), buf, last, have)
            if st != K.OK or nb != b1 - b0 or used != len(words):
                raise self._damaged(st, b0, offs, bad)
            if not (buf[:n:h.block_keys] == self._first[b0:b1]).all():
                raise CorruptionError(f"{self.name}: block index disagrees with block {b0}")
            hasher.update(_stored_sums(words, offs, len(words)).astype("<u8").tobytes())
            last, have = buf[n - 1], True
            total += n
            yield n
        self._check_whole(total, hasher)

    def sweep(self, batch: np.ndarray, found: np.ndarray, lo: int | None = None,
              hi: int | None = None) -> int:
        """Set ``found[i]`` where ``batch[i]`` is in the run (the store's check of a
        batch): blocks read SWEEP_BLOCKS at a time, checked by checksum, decoded and
        compared with the batch one block at a time in one kernel (``K.sweep_blocks``;
        the decoded keys never leave the cache). Without ``lo``/``hi``: every block,
        then the count and the body checksum, like ``chunks``; with them, only the
        blocks that can hold keys in [lo, hi] (a window of a split spill bucket).
        Requires: ``batch`` sorted ascending, unique, uint64, C-contiguous; ``found``
        bool, as long. Returns the bytes read. Raises CorruptionError on damage."""
        h = self.header
        whole = lo is None
        b_lo, b_hi = 0, h.n_blocks
        if not whole:
            b_lo = max(0, int(np.searchsorted(self._first, np.uint64(lo), "right")) - 1)
            b_hi = int(np.searchsorted(self._first, np.uint64(hi), "right"))
        scratch = np.empty(h.block_keys + K.SENTINELS, np.uint64)
        hasher = xxhash.xxh3_64()
        last, have, total, j, read = np.uint64(0), False, 0, 0, 0
        for b0, b1, words, offs in self._blocks(SWEEP_BLOCKS, b_lo, b_hi):
            used, n, nb, st, bad, j, last, have = K.sweep_blocks(
                words, len(words), self._first[b0:b1], scratch, batch, j, found, last, have)
            last = np.uint64(last)  # numba hands uint64 back as a Python int
            if st != K.OK or nb != b1 - b0 or used != len(words):
                raise self._damaged(st, b0, offs, bad)
            if whole:
                hasher.update(_stored_sums(words, offs, len(words)).astype("<u8").tobytes())
            total += n
            read += 8 * len(words)
        if whole:
            self._check_whole(total, hasher)
        return read

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """``mask[i]`` = True when ``keys[i]`` is in the run. Requires: ``keys``
        sorted ascending (uint64; repeats allowed). Reads and decodes only the
        blocks the keys fall in (checksums checked)."""
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        if len(keys) > 1 and (keys[1:] < keys[:-1]).any():
            raise InvalidInputError("lookup: keys must be sorted ascending")
        found = np.zeros(len(keys), dtype=bool)
        if not len(keys) or not self.header.n_blocks:
            return found
        blocks = np.unique(np.searchsorted(self._first, keys, "right") - 1)
        view = memoryview(self._words).cast("B")
        ends = block_ends(self._offsets, len(self._words))
        h = xxhash.xxh3_64_intdigest
        for b in blocks[blocks >= 0].tolist():
            a, e = int(self._offsets[b]), int(ends[b])
            if h(view[8 * a: 8 * e - 8]) != int(self._words[e - 1]):
                raise CorruptionError(f"{self.name}: block {b} checksum mismatch")
        st, bad = K.lookup(self._words, self._first, self._offsets, keys, found,
                           np.empty(self.header.block_keys, np.uint64))
        if st != K.OK:
            raise CorruptionError(f"{self.name}: block {bad}: {_STATUS[st]}")
        return found

    def last_key(self) -> int:
        """The run's last key: its last block read, checked and decoded. Requires a
        non-empty run."""
        b = self.header.n_blocks - 1
        a, e = self._block_range(b, b + 1)
        words = np.array(self._words[a:e], dtype=np.uint64)
        self._check_sums(words, self._offsets[b:b + 1] - a, e - a, b)
        buf = np.empty(self.header.block_keys, np.uint64)
        used, n, nb, st, bad = K.decode_blocks(words, e - a, buf, np.uint64(0), False)
        if st != K.OK or nb != 1 or not n:
            raise CorruptionError(f"{self.name}: block {b}: {_STATUS.get(st, 'damaged')}")
        return int(buf[n - 1])

    @property
    def keys(self) -> np.ndarray:
        """Every key, decoded into memory (8 B/key): for tests and small runs; the
        store's paths use ``chunks`` and ``lookup``."""
        out = np.empty(self.count, np.uint64)
        buf = np.empty(max(BUF_KEYS, self.header.block_keys), np.uint64)
        at = 0
        for n in self.chunks(buf):
            out[at:at + n] = buf[:n]
            at += n
        return out

    def verify(self, chunk_keys: int = BUF_KEYS) -> None:
        """Full check: every block's checksum and decoding, order across blocks, the
        index, the count and the body checksum. Raises CorruptionError."""
        buf = np.empty(max(chunk_keys, self.header.block_keys), np.uint64)
        for _ in self.chunks(buf):
            pass

    def close(self) -> None:
        self._words = np.empty(0, np.uint64)


def open_run(path: str) -> RunReader | CompressedRunReader:
    """Open a run file of either format version (1.x raw keys, 2.x compressed)."""
    name = os.path.basename(path)
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except FileNotFoundError:
        raise CorruptionError(f"{name}: run file named by the manifest is missing")
    except OSError as e:
        raise StoreIOError(f"{name}: cannot read: {e.strerror}") from e
    if len(head) >= 10 and head[:8] == MAGIC and struct.unpack_from("<H", head, 8)[0] == MAJOR:
        return CompressedRunReader(path)
    return RunReader(path)
