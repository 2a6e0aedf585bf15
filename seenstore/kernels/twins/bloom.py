"""numpy twins of kernels/bloom.py: the same bits set in the same filter words and
the same answers, for small inputs and as the kernel tests' oracle."""

from __future__ import annotations

import numpy as np

_U = np.uint64


def fmix64(x):
    x = x ^ (x >> _U(33))
    x = x * _U(0xFF51AFD7ED558CCD)
    x = x ^ (x >> _U(33))
    x = x * _U(0xC4CEB9FE1A85EC53)
    return x ^ (x >> _U(33))


def stream_word(seed, j: int):
    z = seed + _U(j) * _U(0x9E3779B97F4A7C15)
    z = (z ^ (z >> _U(30))) * _U(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> _U(27))) * _U(0x94D049BB133111EB)
    return z ^ (z >> _U(31))


def locate(words, keys, k):
    """Scheme 1 (kernels/bloom.py ``locate``) for all keys: (word index int64, bit
    number uint64, bit mask uint64), each of shape (n, k)."""
    with np.errstate(over="ignore"):
        seed = fmix64(np.asarray(keys, dtype=_U))
        w = stream_word(seed, 1)
        block = ((w >> _U(32)) * _U(len(words) >> 3)) >> _U(32)
        pool, avail, j = w & _U(0xFFFFFFFF), 32, 1
        pos = np.empty((len(keys), k), dtype=_U)
        for p in range(k):
            if avail < 9:
                j += 1
                pool, avail = stream_word(seed, j), 64
            pos[:, p] = pool & _U(511)
            pool = pool >> _U(9)
            avail -= 9
    word = ((block << _U(3))[:, None] + (pos >> _U(6))).astype(np.int64)
    bit = pos & _U(63)
    return word, bit, _U(1) << bit


def bloom_add_query(words, keys, k, group, out, want_out):
    n = len(keys)
    if n == 0:
        return 0
    word, bit, mask = locate(words, keys, k)
    flat_bit = (word * 64 + bit.astype(np.int64)).ravel()
    was_set = (words[word] & mask) != 0
    _, first = np.unique(flat_bit, return_index=True)  # first key (in order) to touch a bit
    sets_clear = first[~was_set.ravel()[first]]
    changed = np.zeros(n, dtype=bool)
    changed[sets_clear // k] = True
    np.bitwise_or.at(words, word.ravel(), mask.ravel())
    if want_out:
        out[:] = ~changed
    return int(changed.sum())


def bloom_query(words, keys, k, group, out):
    if len(keys):
        word, _, mask = locate(words, keys, k)
        out[:] = np.all((words[word] & mask) != 0, axis=1)


def bloom_add_regions(words, keys, k, group, region_bits, tmp):
    return bloom_add_query(words, keys, k, group, np.empty(0, np.bool_), False)


def block_fill_histogram(words, words_per_block, hist):
    step = words_per_block * 8192
    for s in range(0, len(words), step):
        bits = np.unpackbits(words[s : s + step].view(np.uint8))
        counts = bits.reshape(-1, 64 * words_per_block).sum(axis=1, dtype=np.int64)
        hist += np.bincount(counts, minlength=len(hist))[: len(hist)]
