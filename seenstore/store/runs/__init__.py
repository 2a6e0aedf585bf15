"""Run files: sorted unique keys on disk (docs/format.md, "Run file").

  format.py   raw run header codec and constants (format 1.x)
  reader.py   a raw run: checked header, memory map, streamed checked chunks
  writer.py   a raw run written sequentially, fsynced, header last
  codec.py    compressed runs (format 2.x): Rice-coded blocks, their reader and writer
  live.py     a shard's live runs in either format: open, write, sweep, look up,
              k-way merge, iterate a key range
  buffers.py  the fixed buffers of a shard's check, reused across batches
"""
