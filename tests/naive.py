"""Slow, obviously-correct twins of the kernels, used as test oracles."""

from __future__ import annotations

import numpy as np


def add_naive(seen: set, keys) -> np.ndarray:
    """The brief's add() semantics over a Python set, mutating ``seen``."""
    mask = []
    for k in keys:
        k = int(k)
        mask.append(k not in seen)
        seen.add(k)
    return np.array(mask, dtype=bool)


def sweep_naive(run: np.ndarray, batch: np.ndarray) -> np.ndarray:
    """Mask over sorted ``batch``: True where the key is in ``run``."""
    s = set(int(x) for x in run)
    return np.array([int(b) in s for b in batch], dtype=bool)


def kway_naive(runs) -> np.ndarray:
    """The union of disjoint sorted runs, sorted."""
    out = sorted(int(x) for r in runs for x in r)
    return np.array(out, dtype=np.uint64)


def split_lines_naive(text: bytes, pairs: bool, base: bytes | None, max_line: int):
    """Twin of kernels/lines.py over a whole stream: [(href, base or None, too_long)].
    A leading UTF-8 BOM is dropped; lines end at b"\\n", one b"\\r" before it goes;
    blank lines are skipped; a line over max_line bytes is (b"", None, True); with
    ``pairs`` a line is split at its first TAB into (href, base)."""
    if text.startswith(b"\xef\xbb\xbf"):
        text = text[3:]
    out = []
    for line in text.split(b"\n"):
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            continue
        if len(line) > max_line:
            out.append((b"", None, True))
        elif pairs and b"\t" in line:
            b, href = line.split(b"\t", 1)
            out.append((href, b, False))
        else:
            out.append((line, base, False))
    return out


# -- compressed runs: the block codec of seenstore/kernels/codec.py, in plain Python --

def rice_k_naive(keys) -> int:
    """The codec's low-bit width: of f - 1 and f = floor(log2(mean gap)), the one
    giving fewer bits (ties: f); 0 when the mean gap is below 2."""
    m = len(keys) - 1
    gaps = [b - a - 1 for a, b in zip(keys, keys[1:])]
    f = (sum(gaps) // m).bit_length() - 1
    if f <= 0:
        return 0
    cost = {k: m * k + sum(g >> k for g in gaps) for k in (f - 1, f)}
    return f - 1 if cost[f - 1] < cost[f] else f


def rice_encode_block_naive(keys) -> list:
    """One block (docs/format.md, "Compressed run file") as a list of word ints."""
    import xxhash

    keys = [int(x) for x in keys]
    n = len(keys)
    k = rice_k_naive(keys) if n > 1 else 0
    gaps = [b - a - 1 for a, b in zip(keys, keys[1:])]
    low = sum((g & ((1 << k) - 1)) << (i * k) for i, g in enumerate(gaps))
    low_words = -(-(n - 1) * k // 64)
    high, pos = 0, 0
    for g in gaps:
        pos += g >> k
        high |= 1 << pos
        pos += 1
    high_words = -(-pos // 64)
    body = [low >> (64 * i) & (2**64 - 1) for i in range(low_words)]
    body += [high >> (64 * i) & (2**64 - 1) for i in range(high_words)]
    size = 2 + len(body) + 1
    words = [keys[0], n | k << 32 | size << 48] + body
    raw = b"".join(w.to_bytes(8, "little") for w in words)
    return words + [xxhash.xxh3_64_intdigest(raw)]


def rice_decode_block_naive(words) -> list:
    """Keys of one block given as word ints (no checks: the twin of a valid block)."""
    n, k = words[1] & 0xFFFFFFFF, words[1] >> 32 & 0xFF
    low_words = -(-(n - 1) * k // 64)
    low = sum(w << (64 * i) for i, w in enumerate(words[2:2 + low_words]))
    high = sum(w << (64 * i) for i, w in enumerate(words[2 + low_words:-1]))
    keys, last_one = [words[0]], -1
    for i in range(n - 1):
        pos = (high >> (last_one + 1) & -(high >> (last_one + 1))).bit_length() - 1 + last_one + 1
        q = pos - last_one - 1
        last_one = pos
        keys.append(keys[-1] + (q << k) + (low >> (i * k) & ((1 << k) - 1)) + 1)
    return keys


def rice_encode_naive(keys, block_keys: int) -> list:
    """All blocks of ``keys`` back to back, as word ints."""
    keys = [int(x) for x in keys]
    out = []
    for lo in range(0, len(keys), block_keys):
        out += rice_encode_block_naive(keys[lo:lo + block_keys])
    return out


# ---- set operations for oracles, by sort + compare: numpy 2.4's np.unique /
# np.union1d / np.setdiff1d hash before they sort and take ~1.4 us/key on the AMD
# hosts (np.sort ~20 ns/key), which made a 33M-key oracle cost two minutes.

def uniq(a) -> np.ndarray:
    """np.unique(a) (sorted distinct values, flattened)."""
    a = np.sort(np.asarray(a).ravel())
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if len(a) else a


def union(a, b) -> np.ndarray:
    """np.union1d(a, b)."""
    return uniq(np.concatenate([np.asarray(a).ravel(), np.asarray(b).ravel()]))


def setdiff(a, b) -> np.ndarray:
    """np.setdiff1d(a, b): the sorted distinct values of a not in b."""
    ua, ub = uniq(a), uniq(b)
    if not len(ub) or not len(ua):
        return ua
    i = np.minimum(np.searchsorted(ub, ua), len(ub) - 1)
    return ua[ub[i] != ua]
