"""``seenstore add`` on the batch fast path prints exactly what ``--scalar`` prints.

Oracle: the same command with ``--scalar`` (the reference path) on a copy of
the store. Input mixes kernel cases, routed cases, rejections, repeats, blank
and CRLF lines, a policy with rules, a base, and batch boundaries.
"""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import request_cleanup
from seenstore import parallel
from seenstore.cli import main
from seenstore.store import SeenStore

PIECES = ["http://a.example/x", "HTTP://A.example:80/x#f", "/rel?q=1", "rel/../y", "?q", "#f",
          "mailto:x@y", "http://é.example/", "http://1.2.3.4/", "http://u@a.example/", "a b",
          "http://a.example/%7e%41", "\x01", "https://www.b.example/?b=2&a=1&utm_source=z", ""]
POLICY = 'version = "t"\n[[rule]]\nhosts = ["b.example"]\nstrip_www = true\nsort_query = true\n'


def _add(store, text, extra):
    r = CliRunner().invoke(main, ["add", "-", "--store", store, *extra], input=text,
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.stdout, r.stderr.strip().splitlines()[-1]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=25), st.sampled_from([1, 3, 1000]),
       st.booleans(), st.booleans())
def test_add_fast_equals_scalar(tmp_path_factory, lines, batch, with_policy, crlf):
    d = tmp_path_factory.mktemp("s")
    request_cleanup(d)
    extra = ["--base", "http://base.example/d/", "--batch-lines", str(batch)]
    if with_policy:
        pol = d / "p.toml"
        pol.write_text(POLICY)
        extra += ["--policy", str(pol)]
    text = ("\r\n" if crlf else "\n").join(lines) + "\n"
    for _ in range(2):  # the second round finds everything already seen
        fast = _add(str(d / "fast"), text, extra)
        scalar = _add(str(d / "scalar"), text, extra + ["--scalar"])
        assert fast == scalar
    with SeenStore.open(str(d / "fast"), readonly=True) as a, \
            SeenStore.open(str(d / "scalar"), readonly=True) as b:
        assert a.policy_id == b.policy_id and len(a) == len(b)


BASES = ["", "http://p.example/a/b", "https://Q.example:443/x/", "not a url", "http://[bad/"]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(BASES), st.sampled_from(PIECES)), max_size=25),
       st.sampled_from([1, 4, 1000]))
def test_add_pairs_fast_equals_scalar(tmp_path_factory, pairs, batch):
    """--pairs: 'BASE<TAB>HREF' lines resolve each href against its own base."""
    d = tmp_path_factory.mktemp("p")
    request_cleanup(d)
    text = "".join((f"{b}\t{h}" if b else h) + "\n" for b, h in pairs)
    extra = ["--pairs", "--base", "http://base.example/d/", "--batch-lines", str(batch)]
    fast = _add(str(d / "fast"), text, extra)
    scalar = _add(str(d / "scalar"), text, extra + ["--scalar"])
    assert fast == scalar
    if ("http://p.example/a/b", "rel/../y") in pairs:
        assert "http://p.example/a/y\n" in fast[0]


REAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "real_links.tsv")


@pytest.mark.parametrize("threads", ["1", "2"])
def test_add_pairs_real_links_fast_equals_scalar(tmp_path, threads):
    """A sample of real links (tools/gather_links.py over the docs installed on a dev
    machine: 300 random lines and every line the kernel routes, each with the line
    after it): fast == scalar, byte for byte, with tiny chunks so that two threads
    really split the batches."""
    with open(REAL, "rb") as f:
        text = f.read().decode("utf-8", "surrogateescape")
    old = parallel.MIN_CHUNK
    parallel.MIN_CHUNK = 7
    try:
        extra = ["--pairs", "--batch-lines", "500", "--threads", threads]
        fast = _add(str(tmp_path / "fast"), text, extra)
        scalar = _add(str(tmp_path / "scalar"), text, extra + ["--scalar"])
    finally:
        parallel.MIN_CHUNK = old
    assert fast == scalar and fast[0].count("\n") > 300
