"""make_fetch: canonical URLs, the grouping host, digests from a body, and its errors."""

import pytest

from seenstore.errors import InvalidInputError
from seenstore.evidence.digest import page_digest, page_simhash
from seenstore.evidence.record import Fetch, make_fetch

BODY = b'<html><head><link rel="canonical" href="/c"></head><body><p>hello there</p></body>'


def test_urls_are_safe_canonical_and_resolved():
    f = make_fetch("HTTP://WWW.Shop.Example:80/a/../b#x", 301, location="c?x=%7e")
    assert f == Fetch("http://www.shop.example/b", 301, "http://www.shop.example/c?x=~", None,
                      None, None, "shop.example")
    assert make_fetch("http://a.com/", 302, location="mailto:x").location is None
    assert make_fetch("http://a.com/", 200, canonical="http://[x").canonical is None
    assert make_fetch("http://a.com./", 200).host == "a.com"


def test_body_gives_digests_and_canonical():
    f = make_fetch("http://a.com/p", 200, body=BODY, digest=1, simhash=2)
    assert (f.digest, f.simhash) == (page_digest(BODY), page_simhash(BODY))
    assert f.canonical == "http://a.com/c"
    assert make_fetch("http://a.com/p", 200, digest=1, simhash=2).digest == 1
    assert make_fetch("http://a.com/p", 200, body=BODY, canonical="/d").canonical == \
        "http://a.com/d"
    head = '</c>; rel="canonical"'
    assert make_fetch("http://a.com/p", 200, body=BODY, link_header=head).canonical == \
        "http://a.com/c"
    assert make_fetch("http://a.com/p", 200, link_header='</e>; rel="canonical"').canonical \
        == "http://a.com/e"
    # header and HTML disagree: no canonical
    assert make_fetch("http://a.com/p", 200, body=BODY,
                      link_header='</e>; rel="canonical"').canonical is None
    assert make_fetch("http://a.com/p", 200, digest=2**64 - 1).digest == 2**64 - 1


@pytest.mark.parametrize("kwargs,needle", [
    (dict(url="mailto:x", status=200), "scheme"),
    (dict(url="http://a.com/", status=99), "status"),
    (dict(url="http://a.com/", status=600), "status"),
    (dict(url="http://a.com/", status=True), "status"),
    (dict(url="http://a.com/", status="200"), "status"),
    (dict(url="http://a.com/", status=200, digest=-1), "digest"),
    (dict(url="http://a.com/", status=200, digest=2**64), "digest"),
    (dict(url="http://a.com/", status=200, simhash=1.5), "simhash"),
    (dict(url="http://a.com/", status=200, body="text"), "body"),
])
def test_errors(kwargs, needle):
    with pytest.raises(InvalidInputError, match=needle) as e:
        make_fetch(**kwargs)
    assert "\n" not in str(e.value)
