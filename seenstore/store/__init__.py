"""The store: the set of every key ever admitted, in a crash-safe directory.

A store is a directory: MANIFEST (the commit point), run files (keys sorted,
unique; shard = top ``shard_bits`` bits of the key; a shard has any number of live
runs, pairwise disjoint), the Bloom filter's BLOOM files and LOCK. Modules, mostly
in the order a batch passes them (docs/architecture.md has the protocol and cost
model):

  facade.py      ``SeenStore``: open, contains, compact, upgrade, stats, verify, close
  opening.py     ``SeenStore.open``'s body: directory checked, lock, runs, Bloom, WAL
  admission.py   the write path of one batch: add, add_new, add_sorted, add_new_file
  scheduling.py  the batch's threads: shards sorted, checked, new runs written
  check.py       the read path: ``contains``, and a spilled slice's check
  runcache.py    live runs' keys kept in memory for the check
  runs/          run files (format, reader, writer, codec) and a shard's live runs
  commit.py      the commit point: one generation's (manifest, runs), a new one made
  manifest.py    the MANIFEST file format
  compaction.py  the size-tiered policy and the background ``Compactor``
  spill.py       batches bigger than memory (buckets.py, runsink.py)
  wal.py         the write-ahead log a DedupStage leaves in the store
  tombstones.py  the forgotten keys (T): their file, and how readers and writers skip them
  forgetting.py  ``forget`` and ``drop_host``: stored keys join T in a commit of their own
  report.py      ``stats`` figures and the ``verify`` check
  files.py       the directory's file names, leftovers, the crash-test seam
  lock.py        one writer at a time (flock on LOCK)

The Bloom filter's lifecycle (load, grow, checkpoint) is in seenstore/bloom/. The
names in ``__all__`` are the package's public face.
"""

from seenstore.bloom.keeper import DEFAULT_BLOOM_FPR, MIN_BLOOM_CAPACITY
from seenstore.store.commit import MAX_SHARD_BITS
from seenstore.store.compaction import COMPACT_CREDIT
from seenstore.store.facade import SeenStore
from seenstore.store.opening import DEFAULT_POLICY_ID, DEFAULT_SHARD_BITS, MODES
from seenstore.store.files import BLOOM_NAME, run_name

__all__ = ["BLOOM_NAME", "COMPACT_CREDIT", "DEFAULT_BLOOM_FPR", "DEFAULT_POLICY_ID",
           "DEFAULT_SHARD_BITS", "MAX_SHARD_BITS", "MIN_BLOOM_CAPACITY", "MODES",
           "SeenStore", "run_name"]
