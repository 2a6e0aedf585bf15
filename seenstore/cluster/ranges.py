"""Each shard's key range: a run of consecutive values of the top 8 key bits.

Shard i of N owns the keys whose top ``RANGE_BITS`` bits g satisfy
``lo_i <= g < hi_i``; the ranges are ascending, contiguous and cover 0..256, so
shard order is key order. Equal ranges (``lo_i = i * 256 / N``) are the top bits
of the shard index, as before ranges were recorded (files of major 1); balanced
ranges are cut where a sample of keys (e.g. the first batch) gives every shard an
equal share: the top bits are a host hash, so a crawl's keys are not spread
evenly over them (docs/cluster.md, "Key ranges").
"""

from __future__ import annotations

import numpy as np

from seenstore.errors import CorruptionError, InvalidInputError

RANGE_BITS = 8  # the grain of a range (and so at most 256 shards)
GROUPS = 1 << RANGE_BITS


def equal_ranges(n: int) -> list[list[int]]:
    """N ranges of 256 / N groups each (shard i: the top log2(N) bits equal i)."""
    w = GROUPS // n
    return [[i * w, (i + 1) * w] for i in range(n)]


def balanced_ranges(sample: np.ndarray, n: int) -> list[list[int]]:
    """N ranges giving each shard about the same share of ``sample``'s keys: cut
    where the running count of the sample's top 8 bits is nearest to j/N, every range
    at least one group wide. An empty sample gives equal ranges."""
    sample = np.asarray(sample, dtype=np.uint64)
    if n == 1 or len(sample) == 0:
        return equal_ranges(n)
    counts = np.bincount((sample >> np.uint64(64 - RANGE_BITS)).astype(np.int64),
                         minlength=GROUPS)
    run = np.concatenate([[0], np.cumsum(counts)])  # run[g]: keys below group g
    cuts = [0]
    for j in range(1, n):
        lo, hi = cuts[-1] + 1, GROUPS - (n - j)  # leave a group for every shard after
        want = len(sample) * j / n
        g = int(np.clip(np.searchsorted(run, want), lo, hi))
        if g > lo and want - run[g - 1] < run[g] - want:
            g -= 1  # the nearer of the two cuts around ``want``
        cuts.append(g)
    cuts.append(GROUPS)
    return [[cuts[i], cuts[i + 1]] for i in range(n)]


def check_ranges(ranges, n: int, where: str) -> list[list[int]]:
    """``ranges`` as read from a file, checked: N ranges, ascending, contiguous,
    covering 0..256, none empty (CorruptionError otherwise)."""
    ok = (isinstance(ranges, list) and len(ranges) == n
          and all(isinstance(r, list) and len(r) == 2 and all(type(x) is int for x in r)
                  for r in ranges))
    ok = ok and ranges[0][0] == 0 and ranges[-1][1] == GROUPS and all(
        r[0] < r[1] for r in ranges) and all(
        ranges[i][1] == ranges[i + 1][0] for i in range(n - 1))
    if not ok:
        raise CorruptionError(f"{where}: shard key ranges {ranges!r} do not cover the key "
                              "space in order")
    return [list(r) for r in ranges]


def key_bounds(rng) -> tuple[int, int]:
    """The keys of a range: ``[lo, hi)`` as integers (hi may be 2^64)."""
    return rng[0] << (64 - RANGE_BITS), rng[1] << (64 - RANGE_BITS)


def shard_of_group(ranges) -> np.ndarray:
    """The shard of each value of the top 8 bits (a 256-entry table)."""
    return np.repeat(np.arange(len(ranges), dtype=np.int64), [hi - lo for lo, hi in ranges])


def split_range(rng) -> list[list[int]]:
    """The two halves ``[lo, mid)`` and ``[mid, hi)`` of a range, mid = (lo + hi) // 2
    (InvalidInputError when it is one value wide: a range cannot be cut below the top
    8 bits)."""
    lo, hi = rng
    if hi - lo < 2:
        raise InvalidInputError(f"a shard of range {list(rng)} (one value of the top 8 key "
                                "bits) cannot be split")
    mid = (lo + hi) // 2
    return [[lo, mid], [mid, hi]]
