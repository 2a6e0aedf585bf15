"""The Bloom filter in front of the store: "definitely new" in memory (docs/bloom.md).

Modules, in the order a newcomer reads them:
  sizing.py    the blocked design's geometry and exact FPR; ``size_for``
  filter.py    ``BloomFilter``: one filter's batch add / query (kernels/bloom.py)
  file.py      the BLOOM file format: ``save``/``load`` of one filter, ``Binding``
  layers.py    ``LayeredBloom``: the store's filter, grown by layers, never rebuilt
  keeper.py    ``BloomKeeper``: the store's filter over its life: load or rebuild
               at open, reserve/insert per batch, drop on failure, checkpoint; it
               owns the deferred insert and a new filter's prefault
  deferred.py  ``DeferredInsert``: a batch's insert after its commit, on a thread
               that runs past the call's return; ``BloomKeeper.settle`` waits for it

Every public name is importable from ``seenstore.bloom`` itself. Nothing here
imports the store: the keeper is handed the runs' keys as chunks.
"""

from seenstore.bloom.file import HEADER_LEN, MAGIC, MAJOR, MINOR, SCHEME, Binding
from seenstore.bloom.filter import (GROUP, REGION_BYTES, REGION_MIN_KEYS, BloomFilter,
                                    PendingAdd, region_bits)
from seenstore.bloom.layers import GROWTH, MAX_LAYERS, RATIO, LayeredBloom, layer_path
from seenstore.bloom.sizing import (BLOCK_BITS, MAX_BLOCKS, MAX_HASHES, WORDS_PER_BLOCK,
                                    block_aligned, blocked_fpr, classic_fpr, max_loads,
                                    size_for)

__all__ = [
    "BLOCK_BITS", "GROUP", "GROWTH", "HEADER_LEN", "MAGIC", "MAJOR", "MAX_BLOCKS",
    "MAX_HASHES", "MAX_LAYERS", "MINOR", "RATIO", "REGION_BYTES", "REGION_MIN_KEYS",
    "SCHEME", "WORDS_PER_BLOCK", "Binding", "BloomFilter", "LayeredBloom",
    "PendingAdd", "block_aligned", "blocked_fpr", "classic_fpr", "layer_path", "max_loads",
    "region_bits", "size_for",
]
