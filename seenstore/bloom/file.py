"""The Bloom filter file: one filter's bits behind a checksummed header (docs/bloom.md,
"File format").

``write`` saves a filter atomically (temp file, fsync, rename, fsync dir);
``read`` returns the header fields and the words, refusing a foreign, truncated,
padded or checksum-failing file with a typed error. ``Binding`` is what the
header records of the store the filter was built from. The filter object itself
(filter.py) calls these from ``save``/``load``.
"""

from __future__ import annotations

import errno
import os
import struct
import sys
from dataclasses import dataclass

import numpy as np
import xxhash

from seenstore.errors import (CorruptionError, DiskFullError, InvalidInputError, NotSupportedError,
                      StoreIOError, StoreNotFoundError)
from seenstore.runtime.aligned import ALIGN, aligned_empty, set_direct
from seenstore.bloom.sizing import BLOCK_BITS, MAX_BLOCKS, WORDS_PER_BLOCK, block_aligned


MAGIC = b"\x89SBF\r\n\x1a\n"  # PNG-style: high bit, name, CRLF, EOF, LF catch mangled transfers
MAJOR = 1
MINOR = 1  # 1.1: the store binding (store id, keys, runs digest) in bytes 88..120
SCHEME = 1  # bit-position scheme of kernels/bloom.py ``locate``
HEADER_LEN = 128
MAX_HEADER_LEN = 65536
# Filters this large are written with O_DIRECT behind a header padded to one ALIGN
# block (header_len 4096, which every 1.x reader takes): through the page cache a
# large filter's fresh page-cache pages fault in slowly, and writing and fsyncing it
# takes 2-7x as long as with O_DIRECT.
DIRECT_MIN_BYTES = 4 << 20
_WRITE_CHUNK = 64 << 20
_PREFIX = struct.Struct("<8sHHI")  # magic, major, minor, header_len
# flags, scheme, block_bits, n_hashes, n_blocks, n_added, generation, capacity,
# target_fpr, body_len, body_checksum
_FIELDS = struct.Struct("<IIIIQQQQdQQ")
_BIND = struct.Struct("<16sQQ")  # minor 1: store id, store keys, runs digest (zero: unbound)
_SUM = struct.Struct("<Q")


@dataclass(frozen=True)
class Binding:
    """What a saved filter was built from: the store's identity (32 hex digits,
    ``manifest.store_id``), its key count and the digest of its runs
    (``manifest.runs_digest``). A store loads a filter only when all three match."""

    store_id: str
    keys: int
    digest: int

    def pack(self) -> bytes:
        return _BIND.pack(bytes.fromhex(self.store_id.rjust(32, "0")), self.keys, self.digest)

    @classmethod
    def unpack(cls, raw: bytes) -> Binding | None:
        sid, keys, digest = _BIND.unpack(raw)
        if not any(raw):
            return None  # a minor-0 file, or saved unbound
        return cls(sid.hex(), keys, digest)


def _pack_header(bf, generation: int, body_sum: int,
                 binding: Binding | None = None, header_len: int = HEADER_LEN) -> bytes:
    head = _PREFIX.pack(MAGIC, MAJOR, MINOR, header_len) + _FIELDS.pack(
        0, SCHEME, BLOCK_BITS, bf.n_hashes, bf.n_blocks, bf.n_added, generation,
        bf.capacity, bf.target_fpr, bf.nbytes, body_sum)
    head += binding.pack() if binding is not None else b"\0" * _BIND.size
    head += b"\0" * (header_len - _SUM.size - len(head))
    return head + _SUM.pack(xxhash.xxh3_64_intdigest(head))


def _read_header(f, name: str, file_size: int) -> tuple[int, tuple]:
    """Read and check the header; return ``(header_len, fields)``. Typed errors only."""
    raw = f.read(_PREFIX.size)
    if not raw.startswith(MAGIC[: len(raw)]):
        raise NotSupportedError(f"{name}: not a seenstore Bloom filter file (bad magic)")
    if len(raw) < _PREFIX.size:
        raise CorruptionError(f"{name}: truncated Bloom filter header ({file_size} bytes)")
    _, major, minor, header_len = _PREFIX.unpack(raw)
    if major != MAJOR:
        raise NotSupportedError(
            f"{name}: Bloom filter format version {major}.{minor} is not readable by "
            f"this seenstore (reads {MAJOR}.x); rebuild it or upgrade seenstore")
    if not HEADER_LEN <= header_len <= MAX_HEADER_LEN or header_len % 8:
        raise CorruptionError(f"{name}: implausible Bloom filter header length {header_len}")
    raw += f.read(header_len - _PREFIX.size)
    if len(raw) < header_len:
        raise CorruptionError(f"{name}: truncated Bloom filter header ({file_size} bytes)")
    (want,) = _SUM.unpack_from(raw, header_len - _SUM.size)
    if xxhash.xxh3_64_intdigest(raw[: header_len - _SUM.size]) != want:
        raise CorruptionError(f"{name}: Bloom filter header checksum mismatch")
    fields = _FIELDS.unpack_from(raw, _PREFIX.size)
    at = _PREFIX.size + _FIELDS.size
    return header_len, fields + (Binding.unpack(raw[at:at + _BIND.size]),)


def _load_body(f, name: str, fields: tuple, header_len: int, file_size: int) -> np.ndarray:
    flags, scheme, block_bits, n_hashes, n_blocks, _, _, _, _, body_len, body_sum, _ = fields
    if flags != 0 or scheme != SCHEME or block_bits != BLOCK_BITS:
        raise NotSupportedError(
            f"{name}: unsupported Bloom filter variant (flags {flags}, scheme {scheme}, "
            f"block bits {block_bits})")
    if not (1 <= n_hashes <= 64 and 1 <= n_blocks <= MAX_BLOCKS
            and body_len == n_blocks * WORDS_PER_BLOCK * 8):
        raise CorruptionError(f"{name}: inconsistent Bloom filter header fields")
    if file_size != header_len + body_len:
        what = "truncated" if file_size < header_len + body_len else "trailing bytes in"
        raise CorruptionError(
            f"{name}: {what} Bloom filter body ({file_size} bytes, expected "
            f"{header_len + body_len})")
    words = block_aligned(n_blocks * WORDS_PER_BLOCK, zero=False)
    if f.readinto(memoryview(words).cast("B")) != body_len:
        raise CorruptionError(f"{name}: truncated Bloom filter body")
    if xxhash.xxh3_64_intdigest(words) != body_sum:
        raise CorruptionError(f"{name}: Bloom filter body checksum mismatch")
    if sys.byteorder == "big":  # the file is little-endian
        words.byteswap(inplace=True)
    return words


def _io_error(e: OSError, what: str) -> StoreIOError:
    kind = DiskFullError if e.errno in (errno.ENOSPC, errno.EFBIG) else StoreIOError
    return kind(f"{what}: {e.strerror or e}")



def _write_all(fd: int, view: memoryview) -> None:
    at = 0
    while at < len(view):
        at += os.write(fd, view[at:at + _WRITE_CHUNK])


def _write_direct(fd: int, header: bytes, body: np.ndarray) -> bool:
    """Write ``header`` (ALIGN bytes) and ``body`` (ALIGN-aligned) at the start of the
    empty file ``fd``, the whole blocks with O_DIRECT, the tail through the page cache.
    False, with the file left empty, where the file system refuses O_DIRECT."""
    if not set_direct(fd, True):
        return False
    view = memoryview(body).cast("B")
    whole = len(view) // ALIGN * ALIGN
    head = aligned_empty(ALIGN // 8)
    memoryview(head).cast("B")[:] = header
    try:
        _write_all(fd, memoryview(head).cast("B"))
        _write_all(fd, view[:whole])
    except OSError as e:
        if e.errno != errno.EINVAL:  # accepted the flag, refused the transfer
            raise
        set_direct(fd, False)
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        return False
    set_direct(fd, False)
    _write_all(fd, view[whole:])
    return True


def write(bf, path: str | os.PathLike, generation: int, binding: Binding | None = None) -> None:
    """The body of ``BloomFilter.save`` (its docstring). A filter of DIRECT_MIN_BYTES or
    more whose words start on an ALIGN boundary (``block_aligned``) goes out with
    O_DIRECT behind a header of ALIGN bytes, else through the page cache behind one of
    HEADER_LEN; both read the same."""
    if not isinstance(generation, (int, np.integer)) or not 0 <= generation < 2**64:
        raise InvalidInputError(f"generation must be an int in [0, 2**64), got {generation!r}")
    path = os.fspath(path)
    body = np.asarray(bf.words, dtype="<u8")
    direct = body.nbytes >= DIRECT_MIN_BYTES and body.ctypes.data % ALIGN == 0
    header = _pack_header(bf, int(generation), xxhash.xxh3_64_intdigest(body), binding,
                          ALIGN if direct else HEADER_LEN)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            if not (direct and _write_direct(fd, header, body)):
                _write_all(fd, memoryview(header))
                _write_all(fd, memoryview(body).cast("B"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise _io_error(e, f"cannot save Bloom filter {path}") from e


def read(path: str | os.PathLike) -> tuple[tuple, np.ndarray]:
    """The body of ``BloomFilter.load``: ``(fields, words)`` of the file at ``path``,
    ``fields`` as ``_read_header`` returns them (the binding last)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            header_len, fields = _read_header(f, path, size)
            words = _load_body(f, path, fields, header_len, size)
    except FileNotFoundError as e:
        raise StoreNotFoundError(f"no Bloom filter at {path}") from e
    except OSError as e:
        raise _io_error(e, f"cannot read Bloom filter {path}") from e
    return fields, words
