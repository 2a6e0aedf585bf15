"""Reads one run file: checked header, memory-mapped body, checked pages, streamed
checked chunks.

Opening checks the header (magic, version, header checksums) and that the file
length matches the key count. A 1.1 run's page index (pages.py) is read and checked
against its checksum on first use; from then on every page a point lookup reads is
checked first (``check_pages``). A stream (``chunks``) checks the body checksum once
the last chunk is read, and with ``check_pages`` each chunk's pages before it is
yielded. ``verify()`` checks everything. A 1.0 run (no page index) is checked only
as a whole: by a stream's end, or by ``verify``.
"""

from __future__ import annotations

import os
from typing import Iterator

import numpy as np
import xxhash

from seenstore.errors import CorruptionError, InvalidInputError, StoreIOError
from seenstore.kernels.dispatch import merge as _kernels
from seenstore.store.runs.format import HEADER_SIZE, KEY_DTYPE, MINOR, SPARSE_STRIDE, RunHeader
from seenstore.store.runs.pages import PageIndex
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
    """A run file opened for reading. ``keys`` is a read-only memory map of the body.
    ``index``: what this process's writer of the run handed over (its
    ``sparse_index()``: the page index of a 1.1 run, the sparse keys of a 1.0 one),
    else read from the file on first use."""

    def __init__(self, path: str, index: PageIndex | np.ndarray | None = None):
        self.path = path
        self.name = os.path.basename(path)
        self._pages: PageIndex | None = None
        self._sparse: np.ndarray | None = None  # a 1.0 run's, built on first use
        self._whole_checked = False  # a 1.0 run's body checked whole (check_whole)
        try:
            with open(path, "rb") as f:
                raw = f.read(HEADER_SIZE)
                size = os.fstat(f.fileno()).st_size
                self.header = h = RunHeader.unpack(raw, self.name)
                want = h.file_size
                # a later minor version may add bytes after the page index
                if size != want and not (h.minor > MINOR and size > want):
                    raise CorruptionError(
                        f"{self.name}: file is {size} bytes, header says {want} "
                        f"({'truncated' if size < want else 'trailing bytes'})")
                # Mapped now, from the file just checked: the map outlives the file's
                # removal, so a reader taken before a commit retires the run (a
                # ``contains`` beside ``add``) still reads it. Pages load on first use.
                words = (want - HEADER_SIZE) // 8
                mm = (np.memmap(f, dtype=KEY_DTYPE, mode="r", offset=HEADER_SIZE,
                                shape=(words,))
                      if words else np.empty(0, dtype=np.uint64))
        except FileNotFoundError:
            raise CorruptionError(f"{self.name}: run file named by the manifest is missing")
        except OSError as e:
            raise StoreIOError(f"{self.name}: cannot read: {e.strerror}") from e
        self._keys = mm[:h.count]
        self._index_words = mm[h.count:]  # the page index, as stored (1.1)
        if isinstance(index, PageIndex):
            self._pages = index
        elif index is not None and not h.paged:
            self._sparse = index

    @property
    def count(self) -> int:
        return self.header.count

    @property
    def keys(self) -> np.ndarray:
        """The body as a read-only memory map (empty array for an empty run).
        Unchecked bytes: check the pages read (``check_pages``) or the whole."""
        return self._keys

    @property
    def paged(self) -> bool:
        """True when the run has a page index (1.1): its pages are checked one by one."""
        return self.header.paged

    @property
    def pages(self) -> PageIndex:
        """The page index of a 1.1 run: from its writer, or read from the file and
        checked against the header's index checksum on first use (16 bytes per 4 KiB
        page). Raises CorruptionError naming the file when it fails the check."""
        if self._pages is None:
            h = self.header
            words = np.array(self._index_words, dtype=np.uint64)
            if xxhash.xxh3_64_intdigest(words) != h.index_checksum:
                raise CorruptionError(f"{self.name}: page index checksum mismatch")
            self._pages = PageIndex.from_words(words, h.page_keys, self.name)
        return self._pages

    @property
    def has_sparse(self) -> bool:
        return self.paged or self._sparse is not None

    @property
    def sparse(self) -> np.ndarray:
        """Every SPARSE_STRIDE-th key (a point lookup's index): of a 1.1 run its page
        index's first keys; a 1.0 run builds it on first use (one read of the run
        through its memory map, kept for the reader's life: N/64 bytes)."""
        if self.paged:
            return self.pages.first
        if self._sparse is None:
            self._sparse = np.array(self._keys[::SPARSE_STRIDE], dtype=np.uint64)
        return self._sparse

    def check_pages(self, pages: np.ndarray) -> None:
        """Check pages ``pages`` (ascending page numbers) of a 1.1 run's memory map
        against its page index, before they are read. Raises CorruptionError naming
        the file and the first bad page."""
        self.pages.check(self._keys, pages)

    def check_whole(self) -> None:
        """A 1.0 run (no page index): check it whole (``verify``) once for this reader
        before its first point read, since its pages cannot be checked one by one:
        one read of the run per process (``seenstore upgrade`` rewrites it as 1.1).
        A no-op for a 1.1 run, and once a stream or a check has read it whole."""
        if not self.paged and not self._whole_checked:
            self.verify()
            self._whole_checked = True

    def search(self, x: int, side: str = "left") -> int:
        """``np.searchsorted(keys, x, side)``: of a 1.1 run through its page index and
        the one page that can hold ``x``, checked first; of a 1.0 run a binary search
        in the memory map (checked whole first, once)."""
        if not self.paged:
            self.check_whole()
            return int(np.searchsorted(self._keys, np.uint64(x), side))
        pk = self.header.page_keys
        p = int(np.searchsorted(self.pages.first, np.uint64(x), "right")) - 1
        if p < 0:
            return 0
        self.check_pages(np.array([p]))
        page = self._keys[p * pk: min((p + 1) * pk, self.count)]
        return p * pk + int(np.searchsorted(page, np.uint64(x), side))

    def min_chunk(self, check_pages: bool) -> int:
        """The fewest keys a ``chunks`` buffer may hold."""
        return self.header.page_keys if check_pages and self.paged else 1

    def chunks(self, buf: np.ndarray, check_pages: bool = False) -> Iterator[int]:
        """Stream the body through ``buf`` (uint64), yielding how many keys it holds.

        Checks the body checksum once the last chunk is read and raises
        CorruptionError on mismatch, so a merge never commits over a bad run.
        ``check_pages`` (a 1.1 run; ``buf`` of at least one page): each chunk's pages
        are checked before it is yielded, so a caller may use a chunk at once (export).
        A failed check names the first bad page where the run has a page index.
        """
        if check_pages and self.paged:
            pk = self.header.page_keys
            if len(buf) < pk:
                raise InvalidInputError(f"buffer of {len(buf)} keys < a page ({pk} keys)")
            step = len(buf) // pk * pk
            index = self.pages  # checked before the first chunk
        else:
            step, index = len(buf), None
        try:
            yield from self._stream(buf, step, index)
        except CorruptionError as e:
            raise self.located(e) from None

    def _stream(self, buf: np.ndarray, step: int, index: PageIndex | None) -> Iterator[int]:
        h = xxhash.xxh3_64()
        try:
            fd, direct = _open_for_stream(self.path, buf)
        except FileNotFoundError:
            # retired by a writer's commit since we opened it: the map still holds it
            yield from self._chunks_from_map(buf, step, index, h)
            return
        left, done = self.count, 0
        with open(fd, "rb", buffering=0) as f:
            f.seek(HEADER_SIZE)
            whole = memoryview(buf).cast("B")
            while left:
                n = min(left, step)
                # With O_DIRECT, ask for whole blocks: only the last chunk can end
                # mid-block, and its read takes the page index after it into ``buf``
                # (unused), or stops at the end of the file.
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
                if index is not None:
                    index.check_span(buf, done, n)
                left -= n
                done += n
                yield n
        if h.intdigest() != self.header.body_checksum:
            raise CorruptionError(f"{self.name}: body checksum mismatch")
        self._whole_checked = True  # bytes as written: point reads need no more

    def _chunks_from_map(self, buf: np.ndarray, step: int, index, h) -> Iterator[int]:
        """``chunks`` from the memory map taken at open (the file may be gone)."""
        for lo in range(0, self.count, step):
            n = min(step, self.count - lo)
            buf[:n] = self._keys[lo:lo + n]
            h.update(memoryview(buf[:n]).cast("B"))
            if index is not None:
                index.check_span(buf, lo, n)
            yield n
        if h.intdigest() != self.header.body_checksum:
            raise CorruptionError(f"{self.name}: body checksum mismatch")
        self._whole_checked = True

    def located(self, e: CorruptionError) -> CorruptionError:
        """``e`` (damage found by a check of the whole body: its checksum, the keys'
        order) with the first bad page named, where the run has a page index that
        names one; else ``e``."""
        if not self.paged or "page " in str(e):
            return e
        try:
            bad = self.pages.first_bad(self._keys)
        except CorruptionError as index_damage:
            return index_damage
        return e if bad is None else self.pages.damaged(bad)

    def verify(self, chunk_keys: int = 1 << 22) -> None:
        """Full check: body checksum, strictly ascending keys and (1.1) the page index
        and every page against it. Raises CorruptionError."""
        buf = aligned_empty(whole_blocks(8 * chunk_keys) // 8)  # whole blocks: O_DIRECT reads
        last, done = None, 0
        pk = self.header.page_keys
        try:
            for n in self.chunks(buf, check_pages=True):
                part = buf[:n]
                if not is_strictly_increasing(part) or (last is not None and part[0] <= last):
                    raise CorruptionError(f"{self.name}: keys are not sorted and unique")
                if self.paged and not np.array_equal(
                        part[::pk], self.pages.first[done // pk: (done + n - 1) // pk + 1]):
                    raise CorruptionError(f"{self.name}: page index disagrees with the body")
                last = part[n - 1]
                done += n
        except CorruptionError as e:
            raise self.located(e) from None

    def close(self) -> None:
        self._keys = self._index_words = np.empty(0, dtype=np.uint64)
        self._sparse = np.empty(0, dtype=np.uint64)
        self._pages = None
