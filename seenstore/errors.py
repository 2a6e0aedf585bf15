"""The closed set of things that can go wrong in seenstore.

Every error raised on purpose is a ``SeenStoreError``. Each kind can also be
caught as the matching built-in (``ValueError``, ``OSError`` ...). The CLI maps
each kind to a one-line message and the exit code in ``exit_code``.
"""

from __future__ import annotations


class SeenStoreError(Exception):
    """Root of every error seenstore raises on purpose."""

    exit_code = 1


class InvalidInputError(SeenStoreError, ValueError):
    """The caller's input is malformed (odd-length batch, wrong dtype, bad option)."""

    exit_code = 3


class CorruptionError(SeenStoreError, ValueError):
    """A file's bytes cannot be trusted: truncated, checksum mismatch, unsorted body."""

    exit_code = 4


class NotSupportedError(SeenStoreError, ValueError):
    """A file is foreign (wrong magic) or from a future major format version."""

    exit_code = 4


class NotAStoreError(SeenStoreError, ValueError):
    """A directory exists but holds no seenstore manifest."""

    exit_code = 3


class StoreNotFoundError(SeenStoreError, FileNotFoundError):
    """The store (or an input file) does not exist and creation was not asked for."""

    exit_code = 3


class LockedError(SeenStoreError, BlockingIOError):
    """Another writer holds the store's lock."""

    exit_code = 5


class MismatchError(SeenStoreError, ValueError):
    """The store was created with another policy or fingerprint layout."""

    exit_code = 3


class PolicyError(SeenStoreError, ValueError):
    """A policy file cannot be read or is invalid."""

    exit_code = 3


class StoreIOError(SeenStoreError, OSError):
    """An operating-system I/O failure while reading or writing the store."""

    exit_code = 6


class DiskFullError(StoreIOError):
    """The disk (or a file-size limit) ran out while writing; nothing was committed."""

    exit_code = 6


class ClosedError(InvalidInputError):
    """A call on a SeenStore or DedupStage after its ``close()`` (closing again is a no-op)."""

    exit_code = 3


class UndeliveredError(StoreIOError):
    """Results of a committed batch could not be delivered (closed pipe, full disk,
    unwritable output); the undelivered ones were saved to a recovery file whose path
    the message gives (docs/format.md, "Recovery files")."""

    exit_code = 6
