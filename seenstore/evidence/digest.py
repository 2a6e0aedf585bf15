"""Page fingerprints: an exact digest and a 64-bit SimHash of a response body.

Contract: ``page_digest(body)`` is the xxh3-64 of the body with every run of ASCII
whitespace folded to one space and the ends stripped. ``page_simhash(body)`` is a
SimHash over the page's visible words (feature set in docs/evidence.md), so pages that
differ only in a timestamp or an ad line come out a few bits apart.
``simhash_distance(a, b)`` counts the differing bits. All three are pure functions of
their inputs, stable across processes and platforms.
"""

from __future__ import annotations

import re

import numpy as np
import xxhash

# Markup that is not page content: comments; scripts, styles, frames and <ins> (ad
# slots) with their contents; any element whose class or id names an ad, up to the
# first close tag of its name.
_AD_NAME = rb"(?:ad|ads|advert\w*|banner\w*|sponsor\w*|promo\w*)"
_INVISIBLE = re.compile(
    rb"<!--.*?(?:-->|\Z)"
    rb"|<(script|style|noscript|template|iframe|ins)\b.*?(?:</\1\s*>|\Z)"
    rb"|<([a-z][a-z0-9]*)\b[^>]*?\b(?:class|id)\s*=\s*[\"']?[^\"'>]*?\b" + _AD_NAME
    + rb"\b[^>]*>.*?(?:</\2\s*>|\Z)",
    re.S | re.I)
_TAG = re.compile(rb"<[^>]*>?|&#?[A-Za-z0-9]+;")
_MONTH = rb"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?"
# Dates and times (ISO, d/m/y, h:m[:s] [am|pm], "May 1, 2024", "1 May 2024"): one word.
_TIMESTAMP = re.compile(
    rb"\b(?=[0-9JFMASONDjfmasond])"
    rb"(?:\d{4}-\d{1,2}-\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?"
    rb"(?:Z|[+-]\d{2}:?\d{2})?"
    rb"|\d{1,2}[/.]\d{1,2}[/.]\d{2,4}"
    rb"|\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:\s*[ap]\.?m\b\.?)?"
    rb"|" + _MONTH + rb"\s+\d{1,2}(?:st|nd|rd|th)?,?\s+\d{4}"
    rb"|\d{1,2}(?:st|nd|rd|th)?\s+" + _MONTH + rb",?\s+\d{4})\b",
    re.I)
_WORD = re.compile(r"\w+")
SHINGLE = 3  # words per feature


def page_digest(body: bytes) -> int:
    """xxh3-64 of ``body`` with ASCII whitespace runs folded to one space, stripped."""
    return xxhash.xxh3_64_intdigest(b" ".join(bytes(body).split()))


def page_words(body: bytes) -> list[str]:
    """The visible words of an HTML (or text) body: comments, scripts, styles, frames,
    ad containers, tags and character references removed, every date and time
    replaced by the word ``0``, decoded as UTF-8 (bad bytes replaced), lowercased,
    split into ``\\w+`` runs."""
    text = _TAG.sub(b" ", _INVISIBLE.sub(b" ", bytes(body)))
    text = _TIMESTAMP.sub(b" 0 ", text)
    return _WORD.findall(text.decode("utf-8", "replace").lower())


def features(words: list[str]) -> np.ndarray:
    """The distinct feature hashes of a word list, one per run of ``SHINGLE``
    consecutive words (a shorter list: one for all its words). A word's hash is the
    xxh3-64 of its UTF-8; a run's is ``fmix64(h0 ^ rotl(h1, 21) ^ rotl(h2, 42))`` (the
    MurmurHash3 finaliser over the word hashes rotated by their place)."""
    if not words:
        return np.zeros(0, dtype=np.uint64)
    ids: dict[str, int] = {}
    order = np.array([ids.setdefault(w, len(ids)) for w in words], dtype=np.intp)
    word_hash = np.fromiter((xxhash.xxh3_64_intdigest(w.encode()) for w in ids),
                            dtype=np.uint64, count=len(ids))[order]
    n = max(len(words) - SHINGLE + 1, 1)
    mixed = np.zeros(n, dtype=np.uint64)
    for k in range(min(SHINGLE, len(words))):
        mixed ^= _rotl(word_hash[k:k + n], 21 * k)
    return np.unique(_fmix64(mixed))


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    if r == 0:
        return x.copy()
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _fmix64(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xFF51AFD7ED558CCD)
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xC4CEB9FE1A85EC53)
    return x ^ (x >> np.uint64(33))


def simhash_of(hashes: np.ndarray) -> int:
    """SimHash of feature hashes, each weighing 1: bit i is set when more than half
    of the hashes have it set. No features: 0."""
    if not len(hashes):
        return 0
    bits = np.unpackbits(np.ascontiguousarray(hashes, dtype="<u8").view(np.uint8),
                         bitorder="little").reshape(len(hashes), 64)
    ones = bits.sum(axis=0, dtype=np.int64)
    return int.from_bytes(np.packbits(2 * ones > len(hashes), bitorder="little").tobytes(),
                          "little")


def page_simhash(body: bytes) -> int:
    """64-bit SimHash of the visible text of ``body`` (``page_words``, ``features``)."""
    return simhash_of(features(page_words(body)))


def simhash_distance(a: int, b: int) -> int:
    """Number of bits in which two SimHashes differ (0-64)."""
    return (int(a) ^ int(b)).bit_count()
