"""The store: the set of every key ever admitted, in a crash-safe directory.

A store is a directory: MANIFEST (the commit point), run files (keys sorted,
unique; shard = top ``shard_bits`` bits of the key; a shard has any number of live
runs, pairwise disjoint), the Bloom filter's BLOOM files and LOCK. Modules, in the
order a batch passes them (docs/architecture.md has the protocol and cost model):

  facade.py      ``SeenStore``: open, contains, compact, upgrade, stats, verify, close
  admission.py   the write path of one batch: add, add_new, add_sorted, add_new_file
  scheduling.py  the batch's threads: shards sorted, checked, new runs written
  runs.py        a shard's live runs: both run formats, sweep / lookup, k-way merge
  commit.py      the commit point: one generation's (manifest, runs), a new one made
  compaction.py  the size-tiered policy and the background ``Compactor``
  report.py      ``stats`` figures and the ``verify`` check
  files.py       the directory's file names, leftovers, the crash-test seam

The Bloom filter's lifecycle (load, grow, checkpoint) is in seenstore/bloom/; the
manifest file format in seenstore/manifest.py; batches bigger than memory in
seenstore/spill.py. Everything a caller imported from the former store.py is
importable from here.
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
