"""Trap shapes (seenstore/frontier/traps.py): templates, each shape detected and
bounded, what must never be flagged (a 10^5-product catalogue), record and load."""

from __future__ import annotations

import datetime
import random

import pytest
from hypothesis import given, settings, strategies as st

from seenstore.frontier.traps import Trap, TrapGuard, template

NOW = datetime.date(2026, 12, 4)


def guard(limit=10, **kw) -> TrapGuard:
    return TrapGuard(limit, now=NOW, **kw)


def let_through(g: TrapGuard, urls) -> int:
    return sum(v is None for v in g.check(urls))


@pytest.mark.parametrize("url, want", [
    ("http://a.test/product/12345", "/product/{n}"),
    ("http://a.test/", "/"),
    ("http://a.test/news/2024/05/12/slug-7.html", "/news/{yyyy}/{mm}/{dd}/slug-{n}.html"),
    ("http://a.test/product/2031", "/product/{n}"),          # a year alone is a number
    ("http://a.test/cal/2031/07/", "/cal/{yyyy}/{mm}/"),
    ("http://a.test/d/2024-05-01.html", "/d/{date}.html"),
    ("http://a.test/m/2024-05", "/m/{ym}"),
    ("http://a.test/(S(abc123def))/page.aspx", "/{sid}/page.aspx"),
    ("http://a.test/s(abcdef12)/x", "/{sid}/x"),
    ("http://a.test/x;jsessionid=ABCDEF0123?b=2&a=1", "/x;jsessionid={sid}?a={n}&b={n}"),
    ("http://a.test/ev?year=2031&month=7&view=grid", "/ev?month={mm}&view={v}&year={yyyy}"),
    ("http://a.test/ev?date=20310701", "/ev?date={date}"),
    ("http://a.test/s/0123456789abcdef0123/p1", "/s/{hex}/p{n}"),
    ("http://a.test/t/AbCdEfGhIjKlMnOpQrSt12/x", "/t/{b64}/x"),
    ("http://a.test/f/1/2/3/", "/f/{n}/{n}/{n}/"),
])
def test_template_vocabulary(url, want):
    assert template(url) == want


def test_repeated_segments_are_bounded_at_the_limit():
    g = guard(10)
    urls = ["http://t.test/a/b/" + "a/b/" * i for i in range(40)]
    assert let_through(g, urls) == 1 + 10  # /a/b/ itself is no repeat
    [t] = [t for t in g.traps() if t.shape == "repeat"]  # past 16 segments: deep too
    assert (t.host, t.pattern, t.count, t.refused) == ("t.test", "/(a/b)+/…", 10, 29)
    odd = guard(10)  # a trailing part of the unit, or anything after the run: one pattern
    urls = [f"http://t.test/a/{'b/a/' * i}{tail}" for i in range(2, 30) for tail in ("", "x")]
    assert let_through(odd, urls) == 10
    assert [t.pattern for t in odd.traps()] == ["/(a/b)+/…"]
    one = guard(10)  # one segment repeated: three times make the shape
    assert let_through(one, [f"http://t.test/x/{'y/' * i}" for i in range(1, 40)]) == 2 + 10


def test_depth_growing_along_one_template():
    g = guard(10)
    urls = ["http://d.test/f/" + "/".join(str(j) for j in range(i)) for i in range(1, 60)]
    assert let_through(g, urls) <= 10 + 1
    assert [t.shape for t in g.traps()] == ["deep"]
    assert g.traps()[0].pattern == "/f/({n})+"
    deep = guard(10, max_depth=8)  # literal segments, ever deeper
    urls = ["http://d.test/" + "/".join(f"w{chr(97 + j % 26)}x" for j in range(i))
            for i in range(1, 40)]
    assert let_through(deep, urls) <= 8 + 10


def test_calendar_next_month_forever():
    g = guard(30)
    start = NOW.year * 12 + NOW.month - 1
    months = [start] + [start + i * s for i in range(1, 200) for s in (1, -1)]  # next, prev
    urls = [f"http://c.test/cal/{m // 12}/{m % 12 + 1:02d}/" for m in months]
    # 25 months pass before the first one a year ahead shows the shape: under the limit
    assert let_through(g, urls) == 30
    [t] = g.traps()
    assert (t.shape, t.pattern) == ("calendar", "/cal/{yyyy}/{mm}/")
    q = guard(30)
    urls = [f"http://c.test/events?month={m // 12}-{m % 12 + 1:02d}" for m in months]
    assert let_through(q, urls) == 30
    assert "calendar" in {t.shape for t in q.traps()}


def test_news_archive_in_the_window_is_not_a_calendar():
    g = guard(5)
    urls = [f"http://n.test/news/{y}/{m:02d}/{d:02d}/story-{y}{m}{d}"
            for y in range(2000, 2026) for m in range(1, 13) for d in (1, 15)]
    urls += [f"http://n.test/archive/{y}/{m:02d}/" for y in range(1995, 2027) for m in range(1, 13)]
    assert let_through(g, urls) == len(urls)
    assert g.traps() == []


def test_session_ids_in_paths_one_spelling_per_page():
    g = guard(10)
    rnd = random.Random(1)
    urls = [f"http://s.test/(S({rnd.getrandbits(60):015x}))/page-{p}.aspx"
            for _ in range(20) for p in range(30)]
    assert let_through(g, urls) == 30  # every page once
    assert [t.shape for t in g.traps()] == ["session"]
    j = guard(10)
    urls = [f"http://j.test/item{p};jsessionid={rnd.getrandbits(64):016X}" for _ in range(5)
            for p in range(7)]
    assert let_through(j, urls) == 7


def test_hex_ids_that_vary_while_the_rest_stays():
    g = guard(10)
    rnd = random.Random(2)
    urls = [f"http://h.test/{rnd.getrandbits(96):024x}/docs/p{p}" for _ in range(10)
            for p in range(20)]
    # each page: its first 3 spellings pass until the third shows the shape, then none
    assert let_through(g, urls) <= 20 * 3
    assert {t.shape for t in g.traps()} == {"session"}


def test_hex_ids_as_the_last_segment_are_a_catalogue():
    g = guard(5)
    rnd = random.Random(3)
    urls = [f"http://git.test/repo/commit/{rnd.getrandbits(160):040x}" for _ in range(5000)]
    assert let_through(g, urls) == len(urls)
    assert g.traps() == []


def test_infinite_facet_space_by_its_parameter_sets():
    g = guard(25)
    names = ["color", "size", "brand", "price", "sort", "material"]
    rnd = random.Random(4)
    urls = []
    for _ in range(2000):
        picked = sorted(rnd.sample(names, rnd.randint(1, len(names))))
        urls.append("http://f.test/shop?" + "&".join(f"{n}={rnd.randint(1, 9)}" for n in picked))
    assert let_through(g, urls) <= 25 + 16
    [t] = g.traps()
    assert (t.shape, t.pattern) == ("params", "/shop?…")


def test_a_parameter_growing_while_the_content_repeats():
    g = guard(30)
    urls = [f"http://p.test/list?page={i}" for i in range(500)]
    passed = 0
    for i, u in enumerate(urls):
        if g.check([u])[0] is None:
            passed += 1
            # pages past the fifth are the same "no more items" page
            g.observe_fetch(u, 200, 1000 + i if i < 5 else 7)
    assert passed == 30
    assert [t.shape for t in g.traps()] == ["params"]


def test_a_large_catalogue_is_never_flagged():
    """10^5 distinct products under one template, with distinct content: no shape."""
    g = guard(10)
    paths = [f"http://shop.test/product/{i}" for i in range(100_000)]
    assert let_through(g, paths) == 100_000
    ids = [f"http://shop2.test/item?id={i}" for i in range(100_000)]
    assert let_through(g, ids) == 100_000
    for i, u in enumerate(ids[:20_000]):
        g.observe_fetch(u, 200, i)  # distinct pages
    slugs = [f"http://shop3.test/p/{i % 97}/widget-{i}.html" for i in range(100_000)]
    assert let_through(g, slugs) == 100_000
    assert let_through(g, ids[20_000:20_010]) == 10
    assert g.traps() == [] and g.refused == 0


@settings(max_examples=50, deadline=None)
@given(ids=st.lists(st.integers(0, 10**12), min_size=1, max_size=100, unique=True),
       word=st.sampled_from(["product", "item", "p", "news", "x-y"]))
def test_distinct_ids_under_one_template_pass(ids, word):
    g = guard(3)
    urls = [f"http://x.test/{word}/{i}" for i in ids]
    assert let_through(g, urls) == len(urls)
    assert {template(u) for u in urls} == {f"/{word}/{{n}}"}


@settings(max_examples=50, deadline=None)
@given(unit=st.lists(st.sampled_from("abc"), min_size=2, max_size=4),
       limit=st.integers(1, 8), prefix=st.sampled_from(["", "a", "b", "x/y"]))
def test_any_repeated_unit_is_bounded(unit, limit, prefix):
    g = guard(limit)
    base = f"http://r.test/{prefix}/" if prefix else "http://r.test/"
    urls = [base + "/".join(unit * i) + "/" for i in range(2, 2 + 3 * limit)]
    assert let_through(g, urls) == limit


def test_record_and_load_keep_refusing():
    g = guard(5)
    g.check(["http://t.test/a/b/" + "a/b/" * i for i in range(10)])
    saved = g.record()
    assert saved == [{"host": "t.test", "shape": "repeat", "pattern": "/(a/b)+/…", "count": 5,
                      "refused": 4, "bound": 5}]
    again = guard(5)
    again.load(saved)
    assert again.check(["http://t.test/a/b/" + "a/b/" * 20]) == ["repeat t.test/(a/b)+/…"]
    assert again.traps() == [Trap("t.test", "repeat", "/(a/b)+/…", 5, 5, 5)]


@settings(max_examples=20, deadline=None)
@given(counts=st.lists(st.integers(0, 40), min_size=0, max_size=1500))
def test_record_keeps_the_largest_tracked_counts(counts):
    """Past RECORD_TRACKED patterns not detected yet, ``record`` keeps the largest
    counts (then host, pattern): the oracle sorts them all."""
    from seenstore.frontier.traps import RECORD_TRACKED

    g = guard(5)
    g.load([{"host": f"h{i % 7}.test", "shape": "deep", "pattern": f"/p{i}/<n>",
             "count": c, "detected": False} for i, c in enumerate(counts)])
    want = sorted(((c, f"h{i % 7}.test", f"deep /p{i}/<n>") for i, c in enumerate(counts)
                   if c > 1), reverse=True)[:RECORD_TRACKED]
    got = [(e["count"], e["host"], f"{e['shape']} {e['pattern']}") for e in g.record()
           if e.get("detected") is False]
    assert got == want


def test_per_host_bounds_and_bad_arguments():
    g = guard(5, per_host={"www.big.test": 50})
    urls = lambda h: [f"http://{h}/a/b/" + "a/b/" * i for i in range(100)]  # noqa: E731
    assert let_through(g, urls("big.test")) == 51
    assert let_through(g, urls("small.test")) == 6
    with pytest.raises(ValueError):
        TrapGuard(0)
