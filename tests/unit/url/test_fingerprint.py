"""Fingerprint layout, host extraction, batch == scalar, and the collision formula."""

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from seenstore.errors import InvalidInputError
from seenstore.url.fingerprint import (expected_collisions, expected_pairs, fingerprint, fingerprint_many, url_host)
from seenstore.layout import DEFAULT_LAYOUT, Layout
from seenstore.url.normalise import host_span, normalise


def oracle(url: str, host: str, h: int) -> int:
    """The key written out bit by bit: H bits of the host hash, then 64-H of the URL's."""
    hb = format(xxhash.xxh3_64(host.encode(), seed=0).intdigest(), "064b")
    ub = format(xxhash.xxh3_64(url.encode(), seed=0).intdigest(), "064b")
    return int(hb[:h] + ub[h:], 2)


@pytest.mark.parametrize("url,host", [
    ("http://example.com/", "example.com"),
    ("https://example.com:8443/a?b#c", "example.com"),
    ("http://user:pa:ss@example.com:81/", "example.com"),
    ("http://a@b@c.com/", "c.com"),                # last '@' wins
    ("http://[::1]:8080/x", "[::1]"),
    ("http://[2001:db8::1]/", "[2001:db8::1]"),
    ("http://example.com./", "example.com."),
    ("http://127.0.0.1/", "127.0.0.1"),
    ("http://xn--mnchen-3ya.de/", "xn--mnchen-3ya.de"),
    ("http://h.com?x=@y", "h.com"),                # authority ends at ?
    ("http://h.com#@y", "h.com"),                  # ... or #
    ("http://h.com/p@q:r", "h.com"),               # '@' and ':' in the path are not host
    ("http://h.com", "h.com"),
    ("h.com/x", "h.com"),                          # no '://': from the start
    ("", ""),
])
def test_url_host(url, host):
    assert url_host(url) == host


def test_host_is_scheme_independent_and_from_the_canonical_form():
    a = fingerprint(normalise("http://Example.COM:80/x"))
    b = fingerprint(normalise("https://example.com/y"))
    assert a >> 44 == b >> 44
    assert url_host(normalise("http://u:p@MÜNCHEN.de:8080/")) == "xn--mnchen-3ya.de"


@pytest.mark.parametrize("h", [0, 1, 8, 20, 31, 32])
def test_layout_matches_the_bitwise_oracle(h):
    layout = Layout(host_bits=h)
    for url in ["http://example.com/", "https://a.b.c/x?y=1", "http://[::1]/", "http://é.com/ä"]:
        assert fingerprint(url, layout) == oracle(url, url_host(url), h)


def test_known_values():
    # Written out from xxh3_64 so a change of hash, seed or bit order is caught.
    url = "http://example.com/"
    hh = xxhash.xxh3_64_intdigest(b"example.com")
    uh = xxhash.xxh3_64_intdigest(url.encode())
    assert fingerprint(url) == (hh >> 44 << 44) | (uh & (2**44 - 1))
    assert fingerprint(url, Layout(host_bits=0)) == uh
    assert DEFAULT_LAYOUT.host_bits == 20


@pytest.mark.parametrize("url,key20", [  # the table of docs/fingerprint.md
    ("http://example.com/", 0x8B66110E03AF1E2B),
    ("https://example.com/a?b=1", 0x8B6613F0DC5E381F),
    ("http://u:p@[::1]:8080/x", 0xF0CEC19CBEC181A6),
    ("http://xn--mnchen-3ya.de./%C3%A4", 0x22516118AC1434CC),
])
def test_documented_key_values(url, key20):
    assert fingerprint(url) == key20


def test_same_host_shares_top_bits_different_hosts_rarely_do():
    keys = fingerprint_many([f"http://h.com/{i}" for i in range(1000)])
    assert len(set((keys >> np.uint64(44)).tolist())) == 1
    assert len(set(keys.tolist())) == 1000
    others = fingerprint_many([f"http://h{i}.com/" for i in range(1000)])
    assert len(set((others >> np.uint64(44)).tolist())) > 990


urls = st.text(max_size=60).map(lambda s: "http://" + s)


@settings(max_examples=300, deadline=None)
@given(st.lists(urls, max_size=20), st.integers(0, 32))
def test_batch_equals_scalar(us, h):
    layout = Layout(host_bits=h)
    expected = [fingerprint(u, layout) for u in us]
    got = fingerprint_many(us, layout)
    assert got.dtype == np.uint64 and got.shape == (len(us),)
    assert got.tolist() == expected
    assert all(0 <= k < 2**64 for k in expected)


def test_batch_of_nothing_and_bad_items():
    assert fingerprint_many([]).dtype == np.uint64 and len(fingerprint_many([])) == 0
    with pytest.raises(InvalidInputError):
        fingerprint_many(["http://a/", None])
    with pytest.raises(InvalidInputError):
        fingerprint("http://a/\ud800")


@pytest.mark.parametrize("n,bits", [(1000, 16), (300, 12), (5000, 20)])
def test_collision_formula_against_simulation(n, bits):
    rng = np.random.default_rng(n + bits)
    trials = 400
    lost = [n - len(np.unique(rng.integers(0, 2**bits, n))) for _ in range(trials)]
    mean, sd = float(np.mean(lost)), float(np.std(lost)) / trials ** 0.5
    assert abs(expected_collisions(n, bits) - mean) < 4 * sd + 0.02


def test_collision_formula_small_n_is_the_birthday_bound():
    for n in (1e3, 1e6, 1e8):
        e, p = expected_collisions(n, 44), expected_pairs(n, 44)
        assert abs(e - p) / p < 1e-3
    assert expected_collisions(1, 44) == 0.0
    assert expected_collisions(10, 0) == 9.0
    assert expected_collisions(2**20, 20) == pytest.approx(2**20 / np.e, rel=1e-4)


def host_span_steps(url: str) -> tuple[int, int]:
    """docs/fingerprint.md "Host extraction", step by step (the oracle of host_span)."""
    start = url.find("://")
    start = 0 if start < 0 else start + 3
    end = min([i for i in (url.find(c, start) for c in "/?#") if i >= 0], default=len(url))
    at = url.rfind("@", start, end)
    if at >= 0:
        start = at + 1
    if url[start:start + 1] == "[":
        close = url.find("]", start, end)
        return start, (end if close < 0 else close + 1)
    colon = url.find(":", start, end)
    return start, (end if colon < 0 else colon)


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet=":/?#@[]ab.1", max_size=24))
def test_host_span_follows_the_documented_steps(s):
    for url in (s, "http://" + s):
        assert host_span(url) == host_span_steps(url)
