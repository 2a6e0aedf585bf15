"""The benchmarks behind ``seenstore bench``. Only the CLI and the scripts under bench/
import this package; the engine never does.

  workload.py  the crawl-like stream, with an exact expectation of every answer
  plan.py      the resource plan: batch size, spilled or in memory, memory and disk
  probes.py    the machine's figures: memory, disk bandwidth, CPU speed, sorts, RSS
  run.py       one run of the stream through a new store, the floor measured beside
  result.py    what a run measured: the record, the verdict, the floor arithmetic
  report.py    the ``--json`` object, its text lines and its plot
  cluster.py   the plain store and sharded stores on the same stream (``--shards``)
  units.py     counts and sizes as people write them (1e9) and read them (GiB)
"""
