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


def parse_state(text) -> State:
    """A ``State`` from its name (any case) or number, as a user types it; raises
    InvalidInputError naming the states otherwise."""
    from seenstore.errors import InvalidInputError

    if isinstance(text, State):
        return text
    s = str(text).strip()
    try:
        return State(int(s)) if s.isdigit() else State[s.upper().replace("-", "_")]
    except (KeyError, ValueError):
        raise InvalidInputError(f"unknown state {text!r}: one of "
                                + ", ".join(f"{x.name} ({x.value})" for x in State)) from None
