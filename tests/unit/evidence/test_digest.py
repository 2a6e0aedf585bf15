"""Page digests and SimHash: the exact digest's whitespace folding, the SimHash against a
bit-by-bit twin, and near/far on generated pages."""

import random

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import EDGE_KEYS
from seenstore.evidence.digest import (features, page_digest, page_simhash, page_words,
                                       simhash_distance, simhash_of)

import numpy as np

u64 = st.one_of(st.sampled_from(EDGE_KEYS), st.integers(0, 2**64 - 1))


def test_digest_folds_ascii_whitespace_only():
    a = page_digest(b"<p>Hello   world</p>\n")
    assert a == page_digest(b" \t<p>Hello\r\n\x0bworld</p>") == \
        xxhash.xxh3_64_intdigest(b"<p>Hello world</p>")
    assert a != page_digest(b"<p>Hello world</p >")
    assert page_digest(b"a\xc2\xa0b") != page_digest(b"a b")  # NBSP is not ASCII space
    assert page_digest(b"") == page_digest(b" \n ") == xxhash.xxh3_64_intdigest(b"")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([b"a", b"<p>", b" ", b"\t", b"\n\r", b"\x0c", b"\xc3\xa9"])))
def test_digest_is_xxh3_of_the_folded_body(chunks):
    body = b"".join(chunks)
    words = [w for w in body.replace(b"\x0c", b" ").replace(b"\x0b", b" ").split()]
    assert page_digest(body) == xxhash.xxh3_64_intdigest(b" ".join(words))


def naive_simhash(hashes: list[int]) -> int:
    out = 0
    for bit in range(64):
        ones = sum((h >> bit) & 1 for h in hashes)
        if 2 * ones > len(hashes):
            out |= 1 << bit
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(u64, max_size=40))
def test_simhash_of_matches_its_twin(hashes):
    assert simhash_of(np.array(hashes, dtype=np.uint64)) == naive_simhash(hashes)


@given(u64, u64)
def test_distance_counts_differing_bits(a, b):
    assert simhash_distance(a, b) == bin(a ^ b).count("1") == simhash_distance(b, a)


def test_visible_words():
    body = (b"<html><head><title>T</title><style>p{x:1}</style><script>var a=1</script>"
            b"</head><body><!-- hidden --><p>Hello &amp; Welt, caf\xc3\xa9!</p>"
            b"<div class='x ad-slot'>Buy</div><iframe>frame</iframe><ins>ad</ins>"
            b"<p class=header>Updated 2024-05-01T12:00:00Z at 9:05 pm, 3 May 2024</p></body>")
    assert page_words(body) == ["t", "hello", "welt", "café", "updated", "0",
                                "at", "0", "0"]
    assert features([]).size == 0 and simhash_of(features([])) == 0
    assert features(["a", "b"]).size == 1  # fewer words than a shingle: one feature
    assert features(["a", "b", "c", "a", "b", "c"]).size == 3  # distinct shingles


VOCAB = [f"w{i}x" for i in range(3000)]


def page(seed: int, n: int, stamp: str = "2024-05-01 12:34:56", ad: str = "") -> bytes:
    r = random.Random(seed)
    words = [r.choice(VOCAB) for _ in range(n)]
    paras = "".join("<p>" + " ".join(words[i:i + 40]) + "</p>\n" for i in range(0, n, 40))
    return (f"<html><head><script>var t={r.random()}</script></head><body>"
            f"<div>Updated {stamp}</div>{paras}<div class=\"banner ad\">{ad}</div>"
            f"</body></html>").encode()


@pytest.mark.parametrize("n", [60, 300])
def test_timestamp_and_ad_variants_are_near_unrelated_pages_far(n):
    for seed in range(40):
        a = page_simhash(page(seed, n))
        stamp = f"2025-{seed % 12 + 1:02d}-{seed % 28 + 1:02d} {seed % 24}:{seed:02d}:07"
        b = page_simhash(page(seed, n, stamp=stamp))
        c = page_simhash(page(seed, n, ad=f"Cheap flights to city {seed} book now"))
        d = page_simhash(page(seed + 1000, n))
        assert simhash_distance(a, b) <= 3 and simhash_distance(a, c) <= 3
        assert simhash_distance(a, d) > 10
        assert page_digest(page(seed, n)) != page_digest(page(seed, n, ad="x"))


@pytest.mark.parametrize("one,other", [
    ("May 3, 2024 9:05 pm", "Jun 21, 2025 11:58 am"),
    ("3 May 2024", "21 June 2025"),
    ("03/05/2024 09:05", "21.06.2025 11:58"),
    ("2024-05-03T09:05:00+02:00", "2025-06-21T11:58:59.123Z"),
])
def test_a_timestamp_is_one_word_whatever_its_value(one, other):
    assert page_words(f"<p>Updated {one}.</p>".encode()) == \
        page_words(f"<p>Updated {other}.</p>".encode())


def test_a_changed_paragraph_on_a_long_page_stays_near():
    base = page(1, 3000)
    edited = base.replace(b"<p>", b"<p>one new sentence in this paragraph ", 1)
    assert simhash_distance(page_simhash(base), page_simhash(edited)) <= 3
