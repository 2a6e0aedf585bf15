"""Kept URLs and the URL calls: ``add_urls``/``contains_urls`` against a set oracle
of canonical URLs, the kept-URL file format (round trip, damage refused), what a
store keeps and when, and the files a crash leaves."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import request_cleanup
from seenstore.errors import CorruptionError, InvalidInputError, MismatchError
from seenstore.store import SeenStore, kepturls
from seenstore.store.urls import kept_files, merge_url_files
from seenstore.url.fingerprint import fingerprint_many
from seenstore.url.normalise import Rejection, try_normalise

HOSTS = ["a.test", "B.test", "www.c.test", "d.test:80", "[::1]"]
PATHS = ["/", "/x", "/x/./y", "/%7e", "/Q?b=1&a=2", "/#frag", "/a/../b"]
url_st = st.one_of(
    st.builds(lambda s, h, p: f"{s}://{h}{p}", st.sampled_from(["http", "HTTP", "https"]),
              st.sampled_from(HOSTS), st.sampled_from(PATHS)),
    st.sampled_from(["mailto:x@y", "", "http://", "ftp://a.test/", "javascript:1"]),
)


def kept(store) -> list[str]:
    return [u.decode() for f in kept_files(store) for b in f.iter_all() for u in b]


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.lists(url_st, max_size=30), min_size=1, max_size=4))
def test_add_urls_matches_a_set_of_canonical_urls(tmp_path_factory, batches):
    path = str(request_cleanup(tmp_path_factory.mktemp("s")) / "s")
    seen: set = set()
    with SeenStore.open(path, create=True, sync=False) as store:
        for batch in batches:
            want = []
            for u in batch:
                c = try_normalise(u)
                if isinstance(c, Rejection):
                    want.append(False)
                else:
                    want.append(c not in seen)
                    seen.add(c)
            assert store.add_urls(batch).tolist() == want
            assert store.contains_urls(batch).tolist() == [
                not isinstance(try_normalise(u), Rejection) for u in batch]
        assert sorted(kept(store)) == sorted(seen)
        assert store.keep_urls is True  # the first batch was URLs


def test_keep_urls_is_decided_by_the_first_batch(tmp_path):
    with SeenStore.open(str(tmp_path / "k"), create=True, sync=False) as store:
        store.add([1, 2])
        store.add_urls(["http://a.test/"])
        assert store.keep_urls is False and kept(store) == []
    with SeenStore.open(str(tmp_path / "u"), create=True, sync=False) as store:
        store.add_urls(["http://a.test/"])
    with SeenStore.open(str(tmp_path / "u"), sync=False) as store:
        assert store.keep_urls is True and kept(store) == ["http://a.test/"]
        with pytest.raises(MismatchError, match="keep_urls"):
            SeenStore.open(str(tmp_path / "u"), keep_urls=False, readonly=True)
    with pytest.raises(InvalidInputError, match="keep_urls"):
        SeenStore.open(str(tmp_path / "v"), create=True, keep_urls="yes")
    with pytest.raises(InvalidInputError, match="str or bytes"):
        with SeenStore.open(str(tmp_path / "w"), create=True, sync=False) as store:
            store.add_urls(["http://a.test/", 7])


def test_kept_file_round_trip_range_reads_and_damage(tmp_path):
    urls = [f"http://h{i % 37}.test/p/{i}".encode() for i in range(20000)]
    keys = fingerprint_many([u.decode() for u in urls])
    entry = kepturls.write_file(str(tmp_path / "u-g0000000001.url"), keys, urls)
    f = kepturls.KeptUrls(str(tmp_path / "u-g0000000001.url"), entry)
    assert f.count == len(urls) and len(f.index) > 1
    every = [u for b in f.iter_all() for u in b]
    assert sorted(every) == sorted(urls)
    assert np.all(np.diff(fingerprint_many([u.decode() for u in every]).astype(np.float64)) >= 0)
    lo, hi = int(keys[5]) >> 40 << 40, (int(keys[5]) >> 40 << 40) + (1 << 40) - 1
    got = set(f.read_range(lo, hi))
    assert {u for u, k in zip(urls, keys.tolist()) if lo <= k <= hi} <= got
    raw = bytearray(open(f.path, "rb").read())
    raw[kepturls.HEADER.size + 10] ^= 0xFF  # a flipped byte in the first block
    open(f.path, "wb").write(raw)
    with pytest.raises(CorruptionError, match="damaged"):
        list(kepturls.KeptUrls(f.path, entry).iter_all())
    open(f.path, "wb").write(raw[:100])
    with pytest.raises(CorruptionError):
        kepturls.KeptUrls(f.path, entry)
    open(f.path, "wb").write(b"NOTAFILE" + bytes(100))
    with pytest.raises(CorruptionError, match="magic"):
        kepturls.KeptUrls(f.path, entry)


def test_kept_files_merge_and_leftovers_are_removed(tmp_path):
    path = str(tmp_path / "s")
    with SeenStore.open(path, create=True, sync=False) as store:
        for i in range(20):
            store.add_urls([f"http://m{i}.test/{j}" for j in range(i + 1)])
        assert len(store._doc["url_files"]) <= 17
        merge_url_files(store, everything=True)
        assert len(store._doc["url_files"]) == 1
        assert len(kept(store)) == sum(range(1, 21))
    open(os.path.join(path, "u-g0000000099.url"), "wb").write(b"junk")
    open(os.path.join(path, "u-g0000000098.url.tmp"), "wb").write(b"junk")
    with SeenStore.open(path, sync=False) as store:
        assert len(kept(store)) == sum(range(1, 21))
    assert not os.path.exists(os.path.join(path, "u-g0000000099.url"))
    assert not os.path.exists(os.path.join(path, "u-g0000000098.url.tmp"))


def test_a_failed_url_batch_keeps_no_file(tmp_path, monkeypatch):
    path = str(tmp_path / "s")
    with SeenStore.open(path, create=True, sync=False) as store:
        store.add_urls(["http://a.test/"])

        def boom(*a, **k):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(store._live, "commit", boom)
        with pytest.raises(Exception, match="No space|space"):
            store.add_urls(["http://b.test/"])
        monkeypatch.undo()
        assert kept(store) == ["http://a.test/"]
        assert store.add_urls(["http://b.test/"]).tolist() == [True]
        assert sorted(kept(store)) == ["http://a.test/", "http://b.test/"]
    assert sorted(n for n in os.listdir(path) if n.endswith(".url")) == sorted(
        e["file"] for e in SeenStore.open(path, readonly=True)._doc["url_files"])
