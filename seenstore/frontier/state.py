"""The crawl state of a stored key (``seenstore.State``), one of the value fields a
store opened with ``values=True`` keeps beside its keys (store/values.py,
docs/frontier.md "Values"). A key with no record is QUEUED: the all-zero record.
The numbers are stored on disk (docs/format.md, "Value files"): never renumber.
"""

from __future__ import annotations

from enum import IntEnum


class State(IntEnum):
    QUEUED = 0     # admitted, not handed to a fetcher yet
    IN_FLIGHT = 1  # handed out, no outcome recorded yet
    DONE = 2       # fetched
    FAILED = 3     # fetching failed (``retries`` says how often)
    SKIPPED = 4    # decided not to fetch (robots, traps, policy)
