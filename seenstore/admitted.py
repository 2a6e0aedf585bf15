"""``Admitted``: what a dedup stage hands out (DedupStage, docs/stage.md; its remote
twin over ``seenstore serve``, seenstore/serve/remote_stage.py): keys handed out
exactly once in the store's life, with their payloads."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


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
