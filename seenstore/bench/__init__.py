"""The benchmarks behind ``seenstore bench``: the workload (a crawl-like stream with
an exact expectation), the run and its verdict, the sharded comparison. Only the
CLI and the scripts under bench/ import this package; the engine never does.
"""
