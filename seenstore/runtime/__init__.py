"""Mechanisms every stage shares and none owns, one copy each: threads over a
batch's chunks and the ordered pipeline map (parallel.py), the process's thread
pools (pool.py), a body of work on a background thread (worker.py), seconds by
stage (clock.py), page-aligned buffers for O_DIRECT (aligned.py), reading a file
range ahead into the page cache (readahead.py). No seenstore
imports beyond errors: everything may depend on this package.
"""
