"""What a dedup stage takes and hands out (DedupStage, docs/stage.md; its remote
twin over ``seenstore serve``, seenstore/serve/remote_stage.py): ``offered_items``
checks an offer's items, the same way for both; ``Admitted`` is the keys handed out
exactly once in the store's life, with their payloads."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from seenstore.errors import InvalidInputError
from seenstore.url.normalise import all_strs_or_bytes


def offered_items(items) -> tuple:
    """``items`` as offered (keys: a uint64 array, ints; or URLs: str/bytes; in a list
    or any iterable, or one URL alone) checked and read once: (a uint64 array, list
    or tuple, whether they are URLs). Raises InvalidInputError for anything else,
    and for a list mixing URLs and other items (one kind per call), naming the first
    item that is not a URL."""
    if isinstance(items, (str, bytes)):
        items = [items]
    elif isinstance(items, Mapping) or not isinstance(items, (np.ndarray, Iterable)):
        raise InvalidInputError(
            f"offer takes keys (a uint64 array or ints) or URLs (str/bytes), in a list "
            f"or any iterable; got {type(items).__name__}")
    elif not isinstance(items, (np.ndarray, list, tuple)):
        items = list(items)  # generators, sets, ranges ...: read once
    is_urls = (not isinstance(items, np.ndarray) and len(items) > 0
               and isinstance(items[0], (str, bytes)))
    if is_urls and not all_strs_or_bytes(items):
        for i, x in enumerate(items):
            if not isinstance(x, (str, bytes)):
                raise InvalidInputError(
                    f"offer mixes URLs and other items: item {i} is {type(x).__name__} "
                    f"{x!r:.60}; offer either URLs (str/bytes) or keys (ints), one kind "
                    "per call")
    return items, is_urls


@dataclass
class Admitted:
    """Keys handed out by one call (each exactly once in the store's life) and their
    payloads, aligned (``payloads`` is None when no offer carried any). The first
    ``now`` are this call's own items, admitted at once; the rest were held by
    earlier offers and found new by a merge. ``rejected``: (index in this call,
    Rejection) for offered URLs that have no canonical form. ``trapped``: (URL in
    its safe-rule form, trap label) for new URLs a trap pattern refused (a stage
    opened with ``traps``; docs/frontier.md): this call's own and held ones a merge
    found new. They are consumed: merged as seen, never handed out."""

    keys: np.ndarray
    payloads: list | None = None
    now: int = 0
    rejected: list = field(default_factory=list)
    trapped: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self):
        """(key as int, payload) pairs."""
        pl = self.payloads if self.payloads is not None else [None] * len(self.keys)
        return zip(self.keys.tolist(), pl)
