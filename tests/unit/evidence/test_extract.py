"""Declared canonicals from HTML and from the Link header."""

import pytest

from seenstore.errors import InvalidInputError
from seenstore.evidence.extract import HEAD_BYTES, canonical_from_html, canonical_from_link_header

PAGE = "http://Shop.example/a/b?x=1"


@pytest.mark.parametrize("html,expected", [
    ('<link rel="canonical" href="http://shop.example/c">', "http://shop.example/c"),
    ("<LINK HREF='/c?x=1&amp;y=2' REL='canonical'>", "http://shop.example/c?x=1&y=2"),
    ("<link href=c rel=canonical />", "http://shop.example/a/c"),
    ('<link rel="alternate canonical" href="/c#frag">', "http://shop.example/c"),
    ('<link\nrel = "Canonical"\nhref = "HTTPS://WWW.Shop.Example:443/c">',
     "https://www.shop.example/c"),
    ('<base href="http://other.example/d/"><link rel=canonical href=c>',
     "http://other.example/d/c"),
    ('<link rel=canonical href=/c><link rel="canonical" href="http://shop.example/c">',
     "http://shop.example/c"),                           # the same one twice
    ('<link rel=canonical href=/c><link rel=canonical href=/d>', None),  # ambiguous
    ('<link rel="canonicalx" href="/c">', None),
    ('<link rel="alternate" href="/c">', None),
    ('<link rel="canonical">', None),
    ('<link rel="canonical" href="mailto:x@y">', None),
    ('<link rel="canonical" href="http://[bad/">', None),
    ('<!-- <link rel="canonical" href="/c"> -->', None),
    ('<body><link rel="canonical" href="/c">', None),    # only the head counts
    ('<link rel="canonical" href="/c', None),             # unterminated tag
    ('<link rel="canonical" href="/\xe9">', "http://shop.example/%C3%A9"),
])
def test_canonical_from_html(html, expected):
    assert canonical_from_html(html.encode(), PAGE) == expected


def test_only_the_first_64_kib_are_read():
    tag = b'<link rel="canonical" href="/c">'
    assert canonical_from_html(b" " * (HEAD_BYTES - len(tag)) + tag, PAGE) is not None
    assert canonical_from_html(b" " * (HEAD_BYTES - len(tag) + 1) + tag, PAGE) is None
    assert canonical_from_html(b'<link rel=canonical href="/\xff">', PAGE) is None
    with pytest.raises(InvalidInputError):
        canonical_from_html(b"", "not a url")


@pytest.mark.parametrize("value,expected", [
    ('<http://shop.example/c>; rel="canonical"', "http://shop.example/c"),
    ("</c>; rel=canonical", "http://shop.example/c"),
    ('<https://x.example/de>; rel="alternate"; hreflang=de, </c?a=1>; title="a, \\"b"; '
     'rel="Canonical Other"', "http://shop.example/c?a=1"),
    ('</c>; rel="alternate", </d>; rel=alternate', None),
    ('</c>; rel=alternate; rel=canonical', None),          # only the first rel counts
    ('</c>; REL = "canonical"', "http://shop.example/c"),
    ('</c>; rel="canonical", </d>; rel="canonical"', None),
    ("garbage, </c>; rel=canonical", None),
    ("", None),
])
def test_canonical_from_link_header(value, expected):
    assert canonical_from_link_header(value, PAGE) == expected
