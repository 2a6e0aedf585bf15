"""Moved: tiered runs are seenstore/store/runs.py (run I/O, sweep, lookup, k-way merge)
and seenstore/store/compaction.py (the size-tiered policy). Kept so old imports work."""

from .store.compaction import FANOUT, MIN_TIER_KEYS, job_bytes, plan, tier  # noqa: F401
from .store.runs import *  # noqa: F401,F403
from .store.runs import (DEFAULT_RUN_FORMAT, PROBE_RATIO, RUN_FORMATS, check_runs,  # noqa: F401
                         compressed, finish, lookup, merged_chunks, min_buffer_keys,
                         new_writer, open_reader, run_bytes, sample_keys, sweep)
