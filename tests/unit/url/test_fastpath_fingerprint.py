"""The fingerprint kernel equals the scalar ``seenstore.url.fingerprint.fingerprint``.

Oracle: the scalar reference (xxhash package + ``host_span``). Strings are built
from URL delimiters so every branch of the host span is hit (``://``, ``@``,
``[...]``, ``:port``, ``/ ? #``), at the layouts H = 0, 1, 20, 32.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seenstore.url.fingerprint import fingerprint
from seenstore.kernels.fingerprint import fingerprint_batch
from seenstore.layout import Layout
from seenstore.url.buffer import URLBuffer

PIECES = ["http", "https", "://", ":", "/", "?", "#", "@", "[", "]", "::1", "a", "B", "ex.com",
          "80", "x" * 20, "%41", "é", "..", "www.", "-", "_"]
url_like = st.lists(st.sampled_from(PIECES), max_size=14).map("".join)


def _kernel(urls: list[str], host_bits: int) -> list[int]:
    ub = URLBuffer.from_strs(urls)
    return [int(k) for k in fingerprint_batch(ub.data, ub.offsets, host_bits)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(url_like, st.text(max_size=40)), max_size=20),
       st.sampled_from([0, 1, 20, 32]))
def test_kernel_equals_scalar(urls, host_bits):
    layout = Layout(host_bits=host_bits)
    assert _kernel(urls, host_bits) == [fingerprint(u, layout) for u in urls]


def test_fixed_examples_and_layout_split():
    urls = ["http://example.com/", "https://example.com/a?b#c", "http://u:p@[::1]:8080/x",
            "http://a.b:81", "", "no-scheme/path", "http://@/", "http://[::1/"]
    for h in (0, 20, 32):
        got = _kernel(urls, h)
        assert got == [fingerprint(u, Layout(host_bits=h)) for u in urls]
    # Same host => same top 20 bits; http and https of one host share them.
    k = _kernel(["http://example.com/a", "https://example.com/b", "http://other.org/a"], 20)
    assert k[0] >> 44 == k[1] >> 44
    assert k[0] >> 44 != k[2] >> 44
    assert all(0 <= x < 2**64 for x in k)


def test_empty_batch():
    out = fingerprint_batch(np.zeros(0, np.uint8), np.zeros(1, np.int64), 20)
    assert out.dtype == np.uint64 and out.shape == (0,)


def test_scheme_prefix_shortcut_edges():
    """The kernel skips the search for ``://`` when a URL starts ``http://`` or
    ``https://``: inputs at and around that prefix (too short, misspelt, a second
    ``://``, nothing after it) still give the scalar's host."""
    urls = ["http://", "https://", "http:/", "https:/", "https:", "http", "http:/x", "https:///",
            "http://@", "http://a@b:1/c", "httpss://a/", "http:://a/", "https//x://h/",
            "HTTP://a/", "https://[::1]:80/", "http://:://x", "ftp://h/", "xhttp://h/"]
    for h in (0, 20, 32):
        assert _kernel(urls, h) == [fingerprint(u, Layout(host_bits=h)) for u in urls]
