"""The WHATWG URL test data (web-platform-tests urltestdata.json) run against normalise.

For every valid http(s) case the canonical URL must equal the expected ``href`` after
the documented adjustments (fragment removed, RFC 3986 escape normalisation). The only
allowed differences are the listed ones (docs/normalise.md, "Differences from WHATWG").
Every case the standard calls a failure must be rejected.
"""

import json
import os
import re

import pytest

from seenstore.errors import InvalidInputError
from seenstore.url.normalise import Rejection, normalise, try_normalise
from conftest import REPO

# The vectors live in tests/data (README there: source, version, licence); override
# with SEENSTORE_VECTORS=DIR. A missing file fails the test: it is never skipped.
VECTORS = os.environ.get("SEENSTORE_VECTORS", os.path.join(REPO, "tests", "data"))
PATH = os.path.join(VECTORS, "urltestdata.json")
UNRESERVED = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

# Intentional differences: inputs holding a control character other than TAB/LF/CR
# (WHATWG strips or escapes them; we reject them). Keyed by input, checked exactly.
CONTROL_CASES = {
    "http://example.com/foo\t\x91%91",
    "\x00\x1b\x04\x12 http://example.com/\x1f \r ",
    "http://foo.bar/baz?qux#foo\x08bar",
    "http://example.org/test?a#b\x00c",
    "https://www.example.com/path{\x7fpath.html?query'\x7f=query#fragment<\x7ffragment",
    "https://user:pass[\x7f@foo/bar",
    "https://x/\x00y",
    "https://x/?\x00y",
    "https://x/?#\x00y",
}


def load():
    with open(PATH, encoding="utf-8") as f:
        return [t for t in json.load(f) if isinstance(t, dict)]


def adjusted(href: str) -> str:
    """The vectors README's rule: drop '#...', decode unreserved escapes, uppercase hex."""
    def one(m):
        c = chr(int(m.group(1), 16))
        return c if c in UNRESERVED else "%" + m.group(1).upper()
    return re.sub(r"%([0-9A-Fa-f]{2})", one, href.split("#", 1)[0])


TESTS = load()
HTTP = [t for t in TESTS if not t.get("failure") and t["href"].startswith(("http:", "https:"))]
OTHER = [t for t in TESTS if not t.get("failure") and t not in HTTP]
FAILURES = [t for t in TESTS if t.get("failure")]


def test_file_is_the_documented_one():
    assert len(TESTS) == 891 and len(HTTP) == 247 and len(FAILURES) == 267


def test_valid_http_cases():
    passed, differ = 0, []
    for t in HTTP:
        got = try_normalise(t["input"], t["base"])
        if got == adjusted(t["href"]):
            passed += 1
            assert try_normalise(got) == got
        else:
            differ.append((t["input"], got))
    assert all(inp in CONTROL_CASES and got is Rejection.CONTROL for inp, got in differ), differ
    assert {inp for inp, _ in differ} == CONTROL_CASES
    assert passed == len(HTTP) - len(CONTROL_CASES) == 238


def test_other_schemes_are_rejected():
    for t in OTHER:
        assert try_normalise(t["input"], t["base"]) in (Rejection.SCHEME, Rejection.CONTROL), t


@pytest.mark.parametrize("t", FAILURES, ids=lambda t: repr(t["input"])[:40])
def test_failures_are_rejected(t):
    with pytest.raises(InvalidInputError):  # URLRejected, or a bad base
        normalise(t["input"], base=t["base"])
