"""Batches of uint64 keys: validated, sorted, deduplicated (docs/architecture.md).

  batch.py  offered keys checked and prepared; masks of first new occurrences
  sort.py   which sort (radix kernel or numpy) and on how many threads

Depends on kernels/ and runtime/ only.
"""
