"""Reads one run file: checked header, memory-mapped body, streamed checked chunks.

Opening checks the header (magic, version, header checksum) and that the file
length matches the key count. The body checksum and sort order are checked by
``verify()`` and, for free, by every merge that streams the run (``chunks``).
"""

from __future__ import annotations

import os
from typing import Iterator

import numpy as np
import xxhash

from seenstore.errors import CorruptionError, StoreIOError
from seenstore.kernels.dispatch import merge as _kernels
from seenstore.store.runs.format import HEADER_SIZE, KEY_DTYPE, SPARSE_STRIDE, RunHeader
from seenstore.runtime.aligned import ALIGN, aligned_empty, direct_ready, set_direct, whole_blocks

is_strictly_increasing = _kernels.is_strictly_increasing  # numpy twin when small


def _open_for_stream(path: str, buf: np.ndarray) -> tuple[int, bool]:
    """Read-only fd, and whether it reads with O_DIRECT: when ``buf`` allows it
    (page-aligned, whole blocks) and the file system does. Runs are written with
    O_DIRECT (writer.py), so they are rarely in the page cache: direct reads skip
    a copy and keep the cache free for others."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    return fd, direct_ready(buf) and set_direct(fd, True)


class RunReader:
    """A run file opened for reading. ``keys`` is a read-only memory map."""

    def __init__(self, path: str, sparse: np.ndarray | None = None):
        self.path = path
        self._sparse = sparse  # given by the writer, else built on first use
        self.name = os.path.basename(path)
        try:
            with open(path, "rb") as f:
                raw = f.read(HEADER_SIZE)
                size = os.fstat(f.fileno()).st_size
                self.header = RunHeader.unpack(raw, self.name)
                want = HEADER_SIZE + 8 * self.header.count
                if size != want:
                    raise CorruptionError(
                        f"{self.name}: file is {size} bytes, header says {want} "
                        f"({'truncated' if size < want else 'trailing bytes'})")
                # Mapped now, from the file just checked: the map outlives the file's
                # removal, so a reader taken before a commit retires the run (a
                # ``contains`` beside ``add``) still reads it. Pages load on first use.
                self._keys = (np.memmap(f, dtype=KEY_DTYPE, mode="r", offset=HEADER_SIZE,
                                        shape=(self.header.count,))
                              if self.header.count else np.empty(0, dtype=np.uint64))
        except FileNotFoundError:
            raise CorruptionError(f"{self.name}: run file named by the manifest is missing")
        except OSError as e:
            raise StoreIOError(f"{self.name}: cannot read: {e.strerror}") from e

    @property
    def count(self) -> int:
        return self.header.count

    @property
    def keys(self) -> np.ndarray:
        """The body as a read-only memory map (empty array for an empty run)."""
        return self._keys

    @property
    def has_sparse(self) -> bool:
        return self._sparse is not None

    @property
    def sparse(self) -> np.ndarray:
        """Every SPARSE_STRIDE-th key (a point lookup's index). A run this process
        wrote got it from its writer; others build it on first use (one read of the
        run through its memory map, kept for the reader's life: N/64 bytes)."""
        if self._sparse is None:
            self._sparse = np.array(self._keys[::SPARSE_STRIDE], dtype=np.uint64)
        return self._sparse

    def chunks(self, buf: np.ndarray) -> Iterator[int]:
        """Stream the body through ``buf`` (uint64), yielding how many keys it holds.

        Checks the body checksum once the last chunk is read and raises
        CorruptionError on mismatch, so a merge never commits over a bad run.
        """
        h = xxhash.xxh3_64()
        left = self.count
        try:
            fd, direct = _open_for_stream(self.path, buf)
        except FileNotFoundError:
            # retired by a writer's commit since we opened it: the map still holds it
            yield from self._chunks_from_map(buf, h)
            return
        with open(fd, "rb", buffering=0) as f:
            f.seek(HEADER_SIZE)
            whole = memoryview(buf).cast("B")
            while left:
                n = min(left, len(buf))
                # With O_DIRECT, ask for whole blocks: the file ends the body exactly,
                # so the read stops at 8 n bytes anyway.
                want = whole_blocks(8 * n) if direct else 8 * n
                got = 0
                while got < 8 * n:
                    if got % ALIGN and direct:  # a short read left the buffer unaligned
                        direct = set_direct(fd, False)
                    r = f.readinto(whole[got:want])
                    if not r:
                        raise CorruptionError(f"{self.name}: body ends early")
                    got += r
                view = whole[: 8 * n]
                h.update(view)
                left -= n
                yield n
        if h.intdigest() != self.header.body_checksum:
            raise CorruptionError(f"{self.name}: body checksum mismatch")

    def _chunks_from_map(self, buf: np.ndarray, h) -> Iterator[int]:
        """``chunks`` from the memory map taken at open (the file may be gone)."""
        for lo in range(0, self.count, len(buf)):
            n = min(len(buf), self.count - lo)
            buf[:n] = self._keys[lo:lo + n]
            h.update(memoryview(buf[:n]).cast("B"))
            yield n
        if h.intdigest() != self.header.body_checksum:
            raise CorruptionError(f"{self.name}: body checksum mismatch")

    def verify(self, chunk_keys: int = 1 << 22) -> None:
        """Full check: body checksum and strictly ascending keys. Raises CorruptionError."""
        buf = aligned_empty(whole_blocks(8 * chunk_keys) // 8)  # whole blocks: O_DIRECT reads
        last = None
        for n in self.chunks(buf):
            part = buf[:n]
            if not is_strictly_increasing(part) or (last is not None and part[0] <= last):
                raise CorruptionError(f"{self.name}: keys are not sorted and unique")
            last = part[n - 1]

    def close(self) -> None:
        self._keys = np.empty(0, dtype=np.uint64)
        self._sparse = np.empty(0, dtype=np.uint64)
