"""A shard's live runs: opening and writing either run format, checking a batch
against them, streaming their union (docs/architecture.md, "Tiered runs").

A shard holds any number of live runs, pairwise disjoint (a batch writes only the
keys that none of them holds). ``check_runs`` marks the batch keys some run already
holds: one sequential, checksum-checked sweep per run (the batch sorted alongside),
or, when the batch is small against a run, point lookups through the run's sparse
index. ``merged_chunks`` streams the union of several runs in order (k-way merge,
checking order, disjointness and checksums): compaction writes it to one new run,
``verify`` only reads it. ``readers_for`` opens the runs a manifest names, each
checked against it.

What is checked before it is used (docs/format.md, "Checks and when they run"): a
point lookup checks the pages (1.1 raw runs) or blocks (2.0) it reads; a sweep or a
merge checks a raw run's whole body by the time the last chunk is read (its callers
use nothing before: a batch commits after, a compaction commits its output after),
and names the bad page on a mismatch; ``iter_range`` and ``iter_keys`` hand chunks
out as they go, so each chunk's pages are checked before it is yielded. A 1.0 run
has no page index: it is checked whole once per reader before its first point read
(``RunReader.check_whole``; ``seenstore upgrade`` rewrites it as 1.1).
"""

from __future__ import annotations

import os
from typing import Iterator

import numpy as np
import xxhash

from seenstore.kernels.dispatch import merge as _kernels  # numpy twins below dispatch.SMALL items
from seenstore.errors import CorruptionError
from seenstore.kernels.status import KWAY_BAD, KWAY_DONE
from seenstore.layout import Layout
from seenstore.store import manifest
from seenstore.store.runs.format import MAGIC, SPARSE_STRIDE, policy_digest
from seenstore.runtime.aligned import ALIGN, aligned_empty, whole_blocks
from seenstore.store.runs.reader import RunReader
from seenstore.store.runs.writer import BUF_KEYS, RunWriter
from seenstore.store.runcache import Entry, RunCache, run_key

RUN_FORMATS = (1, 2)  # 1: raw keys (format.py), 2: compressed (codec.py)
# None (the default): formats by run size, as LSM trees compress their older, larger
# levels. A run of COMPRESS_MIN_KEYS keys or more is compressed (about half the bytes:
# compaction's output, encoded on its background thread, and a batch's run only when
# the batch brings that many new keys to one shard); a smaller one, which is most
# batches' fresh runs, is raw (written at disk speed, a point lookup reads one checked
# page). 1 or 2 force every run.
DEFAULT_RUN_FORMAT = None
# Runs below this stay raw: their bytes are few, and a small store never loads the
# codec's kernels (32 MiB raw: a store of up to ~6e7 keys on 16 shards keeps every
# run raw; docs/architecture.md, "Run formats").
COMPRESS_MIN_KEYS = 1 << 22
# A raw run of fewer keys than this is written through the page cache, not O_DIRECT:
# O_DIRECT pays a device round trip per write (the header's placeholder, the body, the
# header) where buffered writes pay one at the fsync. Large runs stay O_DIRECT: no
# dirty pages for the fsync to write back, no page cache filled (docs/architecture.md).
DIRECT_MIN_KEYS = 1 << 17  # 1 MiB


def direct_for(keys: int | None) -> bool:
    """Whether a raw run of ``keys`` keys (None: not known) is written O_DIRECT."""
    return keys is None or keys >= DIRECT_MIN_KEYS


# -- the two run formats behind one contract (docs/format.md) ---------------------
def format_for(run_format: int | None, keys: int | None) -> int:
    """The format (1 raw, 2 compressed) of a new run of ``keys`` keys (None: not known,
    as a spilled batch's run) under a store's ``run_format`` (1 or 2: that one; None:
    by size, see DEFAULT_RUN_FORMAT)."""
    if run_format is not None:
        return run_format
    return 2 if keys is not None and keys >= COMPRESS_MIN_KEYS else 1


def new_writer(path: str, host_bits: int, shard_bits: int, shard: int, pdigest: bytes,
               run_format: int | None, buf: np.ndarray | None = None,
               cache: RunCache | None = None, keys: int | None = None):
    """A writer of a new run in ``format_for(run_format, keys)`` (1 raw, 2
    compressed); ``buf``: the raw writer's block buffer (the compressed one keeps its
    own). ``cache``: the keys written are also kept there (filed when ``finish``
    succeeds, dropped when the writer is aborted), so the next batch checks them from
    memory. ``keys``: how many keys the run will hold, when known: a raw run below
    ``DIRECT_MIN_KEYS`` is written through the page cache (``direct_for``)."""
    if format_for(run_format, keys) == 1:
        if buf is None and keys is not None and keys < BUF_KEYS:
            buf = aligned_empty(max(whole_blocks(8 * keys), ALIGN) // 8)  # not 8 MiB faulted in
        w = RunWriter(path, host_bits, shard_bits, shard, pdigest, direct=direct_for(keys),
                      buf=buf)
    else:
        # imports numba: only for compressed runs
        from seenstore.store.runs.codec import CompressedRunWriter

        w = CompressedRunWriter(path, host_bits, shard_bits, shard, pdigest)
    if cache is not None and cache.budget:
        return _CachingWriter(w, cache, os.path.basename(path))
    return w


class _CachingWriter:
    """A run writer whose keys also go to a run cache entry (``new_writer``)."""

    def __init__(self, writer, cache: RunCache, name: str) -> None:
        self.writer, self.cache, self.name = writer, cache, name
        self.builder = cache.builder()

    def write(self, keys: np.ndarray) -> None:
        self.writer.write(keys)
        self.builder.add(keys)

    def abort(self) -> None:
        self.builder.abandon()
        self.cache.forget([self.name])  # filed by finish, but the batch did not commit
        self.writer.abort()

    def __getattr__(self, name):
        return getattr(self.writer, name)


def finish(writer, sync: bool):
    """(header, sparse index or None, file bytes) of a finished writer."""
    if isinstance(writer, _CachingWriter):
        out = finish(writer.writer, sync)
        writer.builder.seal((writer.name, out[0].count, out[0].body_checksum))
        return out
    h = writer.finish(sync=sync)
    if not isinstance(writer, RunWriter):
        return h, None, h.file_size
    return h, writer.sparse_index(), h.file_size


def open_reader(path: str, index=None):
    """A reader of either format (a raw run given what its writer handed over:
    ``RunWriter.sparse_index()``). The codec (and numba with it) is imported only
    when a compressed run is there, so a store of raw runs opens without the JIT
    (kernels/dispatch.py)."""
    if index is None:
        try:
            with open(path, "rb") as f:
                head = f.read(10)
        except OSError:
            head = b""  # RunReader reports the missing or unreadable file
        if head[:8] == MAGIC and head[8:10] == (2).to_bytes(2, "little"):
            from seenstore.store.runs.codec import open_run

            return open_run(path)
    return RunReader(path, index)


def compressed(reader) -> bool:
    return not isinstance(reader, RunReader)


def paged(reader) -> bool:
    """True for a raw run with a page index (1.1): its pages are checked one by one."""
    return not compressed(reader) and reader.paged


def old_minor(reader) -> bool:
    """True for a run of an older minor version than this code writes in its format
    (a raw 1.0 run: no page index), which ``SeenStore.upgrade`` rewrites."""
    return not compressed(reader) and not reader.paged


def run_bytes(reader) -> int:
    """Bytes of the run's file (what a sweep reads)."""
    return reader.header.file_size


def min_buffer_keys(reader) -> int:
    """The smallest buffer ``reader.chunks`` takes, its pages checked as they go (a
    compressed run: one block; a 1.1 raw run: one page)."""
    if compressed(reader):
        return reader.header.block_keys
    return reader.min_chunk(check_pages=True)


def sample_keys(reader, m: int) -> np.ndarray:
    """Up to ``m`` stored keys spread over the run (first, last and evenly between):
    of a compressed run the first keys of its blocks (no block decoded), of a 1.1 raw
    run the first keys of its pages (its checked page index)."""
    keys = (reader._first if compressed(reader)
            else reader.sparse if reader.paged else reader.keys)
    n = len(keys)
    if not n:
        return np.empty(0, np.uint64)
    return np.ascontiguousarray(keys[np.linspace(0, n - 1, min(n, m)).astype(np.int64)],
                                dtype=np.uint64)

kway_step, sparse_member, sweep_step = (_kernels.kway_step, _kernels.sparse_member,
                                        _kernels.sweep_step)

# A run is swept when the keys to check are at least 1/PROBE_RATIO of its keys; fewer
# are looked up one by one (sparse index, then one 4 KiB page each). A lookup reads a
# page for one key where the sweep reads it for 512, but a random read costs several
# sequential ones (an estimate of that cost, not a measured optimum).
PROBE_RATIO = 64
MERGE_BUFFER_BYTES = 64 << 20  # the k-way merge's read buffers, all rows together


def lookup(reader: RunReader, needles: np.ndarray, found: np.ndarray) -> None:
    """Set ``found`` where sorted unique ``needles`` are in the run (point lookups):
    a compressed run decodes only the blocks the needles fall in (each checked by its
    checksum); a 1.1 raw run checks the pages the needles fall in (each once) against
    its page index, then searches its sparse index (the index's first keys) and one
    page each; a 1.0 raw run, which has no page index, is checked whole once per
    reader first (``check_whole``: one read of it), then looked up through the
    sparse index its writer handed over, else by a binary search in its memory map.
    Raises CorruptionError naming the file and the first bad page or block, before
    any answer is set."""
    if not (reader.count and len(needles)):
        return
    if compressed(reader):
        found |= reader.lookup(needles)
    elif reader.paged:
        _lookup_paged(reader, needles, found)
    else:
        reader.check_whole()  # a 1.0 run: no page index to check a page by
        if reader.has_sparse:
            sparse_member(np.asarray(reader.keys), reader.sparse, SPARSE_STRIDE, needles, found)
        else:
            keys = reader.keys
            pos = np.minimum(np.searchsorted(keys, needles), reader.count - 1)
            found |= np.asarray(keys[pos]) == needles


# A lookup needing at least 1/DENSE_PAGES of a run's pages checks the whole body
# against its checksum as it searches it, instead of each page: the body streams
# through the hash at ~30 GB/s (800 MB, a 1e8-key store, in 27 ms of CPU here),
# where pages picked at random cost ~0.6 us each (a DRAM read and a C call): the
# whole body wins from about a quarter of the pages on.
DENSE_PAGES = 4
# A dense lookup walks the run a stretch of this many pages at a time:
# hashed into the body checksum, then searched while it is in the cache (1 MiB)
STRETCH_PAGES = 256


def _lookup_paged(reader: RunReader, needles: np.ndarray, found: np.ndarray) -> None:
    """``lookup`` of a 1.1 raw run: the pages the needles fall in are checked before
    any answer is set. Few pages (below 1/DENSE_PAGES of the run's): each checked
    against the page index, then searched. Many: the whole body checked against its
    checksum in one pass that also searches it, a stretch at a time while the
    stretch is in the cache (hashing brought it there), its answers kept aside
    until the checksum holds; if it does not, the pages needed are checked one by
    one (raising for the first bad one) and the answer taken from them."""
    idx = reader.pages
    pk = reader.header.page_keys
    keys = np.asarray(reader.keys)
    pages = idx.pages_of(needles)
    if len(pages) * DENSE_PAGES < len(idx.sums):
        idx.check(keys, pages)
        sparse_member(keys, idx.first, pk, needles, found)
        return
    got = np.zeros(len(needles), np.bool_)
    h = xxhash.xxh3_64()
    step = STRETCH_PAGES * pk
    j = int(np.searchsorted(needles, idx.first[0]))  # below the run: not in it
    for a in range(0, reader.count, step):
        b = min(a + step, reader.count)
        h.update(keys[a:b])
        e = len(needles) if b == reader.count else int(
            np.searchsorted(needles, idx.first[b // pk]))
        if e > j:
            sparse_member(keys[a:b], idx.first[a // pk: -(-b // pk)], pk, needles[j:e],
                          got[j:e])
            j = e
    if h.intdigest() != reader.header.body_checksum:
        idx.check(keys, pages)  # raises, unless the bad pages are not this call's
        got[:] = False
        sparse_member(keys, idx.first, pk, needles, got)
    found |= got


def sweep(reader: RunReader, batch: np.ndarray, found: np.ndarray, buf: np.ndarray,
          builder=None) -> int:
    """Set ``found`` where sorted unique ``batch`` keys are in the run, reading it once
    sequentially through ``buf`` (checksum and order checked). Returns bytes read.
    ``builder``: a run cache Builder the keys read are copied to (a raw run; filed
    once the whole run passed its checks)."""
    if compressed(reader):  # decoded and compared block by block (codec.py)
        reader.sweep(batch, found)
        return run_bytes(reader)
    j, prev, have = 0, np.uint64(0), False
    # the whole body is checked by the last chunk (a batch uses ``found`` after), not
    # page by page: its checksum costs a quarter of the pages' (pages.py)
    for n in reader.chunks(buf):
        j, prev, have, ok = _kernels.sweep_step(buf, n, batch, j, found, prev, have)
        prev = np.uint64(prev)  # numba hands uint64 back as a Python int
        if not ok:
            raise reader.located(CorruptionError(
                f"{reader.name}: keys are not sorted and unique"))
        if builder is not None:
            builder.add(buf[:n])
    if builder is not None:
        builder.seal(run_key(reader))
    return run_bytes(reader)


def sweep_cached(entry: Entry, batch: np.ndarray, found: np.ndarray) -> None:
    """``sweep`` from a run cache entry: no I/O, and no order check (the cache
    checked the keys' order once, as they entered it: store/runcache.py ``Builder``)."""
    j = 0
    for block, n in entry.chunks():
        if j >= len(batch):
            break
        j = _kernels.sweep_sorted(block, n, batch, j, found)


def lookup_cached(entry: Entry, needles: np.ndarray, found: np.ndarray) -> None:
    """``lookup`` from a run cache entry: a binary search in each block the sorted
    ``needles`` fall in."""
    lo = 0
    for block, n in entry.chunks():
        if lo >= len(needles):
            break
        keys = block[:n]
        hi = lo + int(np.searchsorted(needles[lo:], keys[-1], side="right"))
        if hi > lo:
            pos = np.minimum(np.searchsorted(keys, needles[lo:hi]), n - 1)
            found[lo:hi] |= keys[pos] == needles[lo:hi]
        lo = hi


def check_runs(readers: list, batch: np.ndarray, found: np.ndarray, buf: np.ndarray,
               probe_ratio: int = PROBE_RATIO, cache: RunCache | None = None,
               tally: dict | None = None) -> int:
    """Mark in ``found`` the keys of sorted unique ``batch`` held by any of ``readers``
    (one shard's live runs). Each run is swept, or probed key by key when the keys
    still unanswered are fewer than 1/``probe_ratio`` of it. Returns bytes read from
    disk. ``cache``: runs it holds are checked from memory (``tally["cached"]``
    grows by their bytes), and raw runs swept from disk join it while it has room."""
    read = 0
    left = len(batch) - int(np.count_nonzero(found))
    for reader in readers:
        if reader.count == 0:
            continue
        if left == 0:
            break
        few = left * probe_ratio < reader.count
        entry = cache.acquire(reader) if cache is not None and cache.budget else None
        if entry is not None:
            try:
                if few:
                    todo = np.flatnonzero(~found)
                    sub = np.zeros(len(todo), dtype=np.bool_)
                    lookup_cached(entry, batch[todo], sub)
                    found[todo[sub]] = True
                else:
                    sweep_cached(entry, batch, found)
            finally:
                cache.release(entry)
            if tally is not None:
                tally["cached"] = tally.get("cached", 0) + 8 * reader.count
        elif few:
            todo = np.flatnonzero(~found)  # the few keys left: looked up one by one
            sub = np.zeros(len(todo), dtype=np.bool_)
            lookup(reader, batch[todo], sub)
            found[todo[sub]] = True
        else:  # a count, not a list of the keys left: a sweep reads every key anyway
            builder = (cache.builder() if cache is not None and cache.budget
                       and not compressed(reader) else None)
            try:
                read += sweep(reader, batch, found, buf, builder)
            finally:
                if builder is not None:
                    builder.abandon()  # a no-op once sealed
        left = len(batch) - int(np.count_nonzero(found))
    return read


def _cached_chunks(entry: Entry, buf: np.ndarray, cache: RunCache) -> Iterator[int]:
    """``RunReader.chunks`` from a pinned run cache entry (released at the end)."""
    try:
        filled = 0
        for block, n in entry.chunks():
            i = 0
            while i < n:
                m = min(n - i, len(buf) - filled)
                buf[filled:filled + m] = block[i:i + m]
                filled += m
                i += m
                if filled == len(buf):
                    yield filled
                    filled = 0
        if filled:
            yield filled
    finally:
        cache.release(entry)


def merged_chunks(readers: list, out_keys: int = 1 << 20,
                  buffer_bytes: int = MERGE_BUFFER_BYTES,
                  cache: RunCache | None = None,
                  tally: dict | None = None, check_pages: bool = False) -> Iterator[np.ndarray]:
    """The union of ``readers`` (disjoint sorted runs of one shard), ascending, as
    successive views of one output buffer (use each before asking for the next).

    Reads each run sequentially (O_DIRECT where allowed) through its row of one
    ``buffer_bytes`` block; raises CorruptionError when a run fails its checksum, is
    out of order, or two runs share a key: a raw run's whole body by its last chunk
    (the caller must not use what it had before then: compaction, verify), or with
    ``check_pages`` each chunk's pages as it is read (export). ``cache``: runs it
    holds are read from memory (compaction's inputs: no disk read;
    ``tally["cached"]`` grows by their bytes)."""
    k = len(readers)
    if k == 0:
        return
    # a row holds at most its share of buffer_bytes, and no more than the largest run:
    # fresh memory is faulted in (with transparent huge pages, 2 MiB zeroed per row
    # touched), so a merge of small runs asks for small rows (see _kway_lots' out)
    share = (buffer_bytes // 8 // k) // (ALIGN // 8) * (ALIGN // 8)
    most = whole_blocks(8 * max(r.count for r in readers)) // 8
    row = max(ALIGN // 8, min(share, most), max((min_buffer_keys(r) for r in readers), default=0))
    bufs = aligned_empty(k * row).reshape(k, row)
    out_keys = max(1, min(out_keys, sum(r.count for r in readers)))
    pos = np.zeros(k, np.int64)
    fill = np.zeros(k, np.int64)
    last = np.zeros(k, np.bool_)
    entries = [cache.acquire(r) if cache is not None and cache.budget else None
               for r in readers]
    if tally is not None:
        tally["cached"] = tally.get("cached", 0) + sum(
            8 * r.count for r, e in zip(readers, entries) if e is not None)
    gens = [r.chunks(bufs[i], check_pages) if e is None else _cached_chunks(e, bufs[i], cache)
            for i, (r, e) in enumerate(zip(readers, entries))]
    seen = [0] * k

    def refill(r: int) -> None:
        if seen[r] < readers[r].count:
            n = next(gens[r])
            seen[r] += n
            pos[r], fill[r] = 0, n
        if seen[r] == readers[r].count:
            last[r] = True
            for _ in gens[r]:  # runs the generator to its end: the body checksum
                pass

    try:
        yield from _kway_lots(_kernels.kway_step, bufs, pos, fill, last, refill, out_keys)
    except _KwayBad:
        names = ", ".join(r.name for r in readers)
        err = CorruptionError(f"{names}: keys out of order or held by two runs")
        for r, e in zip(readers, entries):  # a damaged page, where one can be named
            if e is None and paged(r):
                located = r.located(err)
                if located is not err:
                    raise located from None
        raise err from None


class _KwayBad(Exception):
    """The k-way merge kernel found a key out of order or in two runs."""


def _kway_lots(kernel, bufs, pos, fill, last, refill, out_keys: int) -> Iterator[np.ndarray]:
    """Drive the k-way merge ``kernel`` over the rows ``bufs`` (``refill(r)`` loads row
    r's next chunk and sets its ``pos``, ``fill``, ``last``): every row is loaded
    first; yields each lot of merged keys, a view of one buffer of ``out_keys`` (use
    it before asking for the next); raises _KwayBad on the kernel's KWAY_BAD."""
    for r in range(len(bufs)):
        refill(r)
    out = np.empty(out_keys, np.uint64)
    prev, have = np.uint64(0), False
    while True:
        n, status, prev, have = kernel(bufs, pos, fill, last, out, prev, have)
        prev = np.uint64(prev)
        if n:
            yield out[:n]
        if status >= 0:
            refill(status)
        elif status == KWAY_DONE:
            return
        elif status == KWAY_BAD:
            raise _KwayBad


def kway_arrays(runs: list, row: int, out_keys: int = 1 << 20, kernel=None):
    """The union of sorted disjoint uint64 arrays ``runs`` by the k-way merge kernel,
    driven as ``merged_chunks`` drives it (rows of ``row`` keys refilled as they run
    empty, output lots of ``out_keys``); None when the kernel reports a key out of
    order or in two runs. ``kernel``: ``kway_step`` (default) or a twin with its
    contract (the tests' and bench/bench_kway.py's)."""
    k = len(runs)
    bufs = np.zeros((k, row), np.uint64)
    pos, fill = np.zeros(k, np.int64), np.zeros(k, np.int64)
    last = np.zeros(k, np.bool_)
    at = [0] * k

    def refill(r: int) -> None:
        part = runs[r][at[r]:at[r] + row]
        bufs[r, :len(part)] = part
        at[r] += len(part)
        pos[r], fill[r] = 0, len(part)
        last[r] = at[r] == len(runs[r])

    try:
        lots = [lot.copy() for lot in _kway_lots(kernel or _kernels.kway_step, bufs, pos,
                                                 fill, last, refill, out_keys)]
    except _KwayBad:
        return None
    return np.concatenate(lots) if lots else np.empty(0, np.uint64)


def readers_for(path: str, doc: dict, have: dict | None = None) -> dict:
    """Readers of the live runs manifest ``doc`` names (in store directory ``path``),
    by shard, oldest first, each checked against it (CorruptionError otherwise);
    ``have``: readers already open by file name (kept: their sparse index is built)."""
    runs: dict[int, list] = {}
    pd = policy_digest(manifest.runs_policy_id(doc))
    host_bits = Layout.from_dict(doc["layout"]).host_bits
    for r in doc["runs"]:
        reader = (have or {}).get(r["file"])
        if reader is None:
            reader = open_reader(os.path.join(path, r["file"]))
        h = reader.header
        if (h.count != r["count"] or f"{h.body_checksum:016x}" != r["checksum"]
                or h.shard != r["shard"] or h.policy_digest != pd
                or h.host_bits != host_bits or h.shard_bits != doc["shard_bits"]):
            raise CorruptionError(f"{r['file']}: header does not match the manifest")
        runs.setdefault(r["shard"], []).append(reader)
    return runs


def all_readers(runs: dict) -> list:
    """Every run of ``runs`` (by shard), shard by shard, oldest first."""
    return [r for shard in sorted(runs) for r in runs[shard]]


def first_last(reader) -> tuple[int, int]:
    """The first and last key of a non-empty run (of a compressed run: its last
    block decoded, through its checked lookup path; of a 1.1 raw run: its page index
    and its last page, checked; a 1.0 run checked whole first, once)."""
    if paged(reader):
        reader.check_pages(np.array([reader.header.pages - 1]))
        return int(reader.sparse[0]), int(reader.keys[-1])
    if not compressed(reader):
        reader.check_whole()
        return int(reader.keys[0]), int(reader.keys[-1])
    return int(reader._first[0]), int(reader.last_key())


def count_formats(readers: list) -> dict:
    """``{"major.minor": runs}`` of ``readers``."""
    out: dict = {}
    for r in readers:
        v = f"{r.header.major}.{r.header.minor}"
        out[v] = out.get(v, 0) + 1
    return out


def spread_samples(readers: list, m: int) -> Iterator[np.ndarray]:
    """About ``m`` stored keys in all, spread over every non-empty run in proportion
    to its size (at least 2 per run: its first and last), one array per run."""
    total = max(sum(r.count for r in readers), 1)
    for reader in readers:
        if reader.count:
            yield sample_keys(reader, max(2, m * reader.count // total))


def iter_keys(readers: list, max_chunk_keys: int) -> Iterator[np.ndarray]:
    """Every key of ``readers``, run by run, as views of one reused buffer of at most
    ``max_chunk_keys`` (or a compressed run's block) keys: use each before the next.
    Each chunk is checked before it is yielded (a 1.1 raw run's pages, a compressed
    run's blocks); a 1.0 run's body only by its last chunk."""
    total = max(1, sum(r.count for r in readers))
    buf = aligned_empty(max([min(max_chunk_keys, whole_blocks(8 * total) // 8)]
                            + [min_buffer_keys(r) for r in readers]))
    for reader in readers:
        for n in reader.chunks(buf, check_pages=True):
            yield buf[:n]


def iter_range(runs: dict, lo: int = 0, hi: int = 1 << 64,
               chunk_keys: int = 1 << 20) -> Iterator[np.ndarray]:
    """The keys of the live runs ``runs`` (by shard) in [lo, hi), ascending, in chunks
    of at most ``chunk_keys``: views of a raw run's map, or copies. Use a chunk before
    asking for the next. Every chunk comes from checked bytes (a raw 1.0 run, which
    has no page index, is checked whole before its first key is handed out);
    raises CorruptionError naming the file (and page or block) otherwise."""
    for shard in sorted(runs):
        live = []
        for r in runs[shard]:
            if r.count:
                first, last = first_last(r)  # a 1.0 run checked whole first
                if last >= lo and first < hi:
                    live.append(r)
        if len(live) > 1 or (live and compressed(live[0])):
            # tiered runs: the shard's union in order (k-way merge), which also
            # decodes compressed runs block by block
            for chunk in merged_chunks(live, out_keys=chunk_keys, check_pages=True):
                part = chunk[(chunk >= np.uint64(lo)) & (chunk <= np.uint64(hi - 1))]
                if len(part):
                    yield part.copy()
            continue
        if not live:
            continue
        reader = live[0]
        keys = reader.keys
        a = reader.search(lo, "left") if lo else 0
        b = reader.search(hi - 1, "right") if hi < 1 << 64 else len(keys)
        pk = reader.header.page_keys
        for s in range(a, b, chunk_keys):
            e = min(b, s + chunk_keys)
            if reader.paged:
                reader.check_pages(np.arange(s // pk, (e - 1) // pk + 1))
            yield keys[s:e]
