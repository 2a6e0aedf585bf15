"""Running counts of the Bloom filter's answers (exact and approximate mode), for
``stats``; the streaming stage persists them."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from seenstore.errors import CorruptionError, InvalidInputError


@dataclass
class BloomCounters:
    """Running counts of the filter's answers, for ``stats`` (the store persists them).

    negatives: keys answered absent (certainly new, both modes).
    positives: keys answered maybe present (both modes).
    false_positives: exact mode, positives the merge found new.
    exact_new: exact mode, keys found new (negatives and false positives).
    approx_answered: approximate mode, positives taken as seen without the disk.
    """

    negatives: int = 0
    positives: int = 0
    false_positives: int = 0
    exact_new: int = 0
    approx_answered: int = 0

    def record_exact(self, maybe: np.ndarray, is_new: np.ndarray) -> None:
        """Count one exact-mode batch. Requires: bool arrays aligned on the batch's
        unique keys: the filter's answers and the verdicts (True = new; a Bloom
        negative is new by definition)."""
        maybe, is_new = np.asarray(maybe, np.bool_), np.asarray(is_new, np.bool_)
        if maybe.shape != is_new.shape or maybe.ndim != 1:
            raise InvalidInputError("maybe and is_new must be aligned 1-D bool arrays")
        pos = int(np.count_nonzero(maybe))
        self.positives += pos
        self.negatives += maybe.shape[0] - pos
        self.false_positives += int(np.count_nonzero(maybe & is_new))
        self.exact_new += int(np.count_nonzero(is_new))

    def record_approximate(self, maybe: np.ndarray) -> None:
        """Count one approximate-mode batch: every positive is answered without the disk."""
        pos = int(np.count_nonzero(np.asarray(maybe, np.bool_)))
        self.positives += pos
        self.negatives += len(maybe) - pos
        self.approx_answered += pos

    @property
    def measured_fpr(self) -> float | None:
        """False positives over new keys seen in exact mode; None before any."""
        return self.false_positives / self.exact_new if self.exact_new else None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> BloomCounters:
        """Inverse of ``to_dict``; missing fields are 0 (older stores). CorruptionError
        if a field is not a non-negative int."""
        names = cls.__dataclass_fields__
        vals = {k: d.get(k, 0) for k in names}
        if any(type(v) is not int or v < 0 for v in vals.values()):
            raise CorruptionError(f"bad Bloom counters {d!r}")
        return cls(**vals)
