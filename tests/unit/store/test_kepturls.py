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


def kept_file_naive(keys, urls: list[bytes]) -> bytes:
    """docs/format.md, "Kept URL files", written the plain way: URLs sorted by key
    (stably), a block started once the URLs before it in its block reach
    BLOCK_BYTES of text (each with its newline), each block raw DEFLATE at LEVEL."""
    import struct
    import zlib

    import xxhash

    pairs = sorted(zip(keys.tolist(), urls), key=lambda p: p[0])
    blocks, cur, size = [], [], 0
    for k, u in pairs:
        if cur and size >= kepturls.BLOCK_BYTES:
            blocks.append(cur)
            cur, size = [], 0
        cur.append((k, u))
        size += len(u) + 1
    blocks += [cur] if cur else []
    body, index = b"", []
    for b in blocks:
        c = zlib.compressobj(kepturls.LEVEL, zlib.DEFLATED, -15)
        z = c.compress(b"\n".join(u for _, u in b)) + c.flush()
        index.append((b[0][0], b[-1][0], 64 + len(body), len(z), len(b),
                      xxhash.xxh3_64_intdigest(z)))
        body += z
    idx = np.array(index, dtype=kepturls.INDEX).tobytes()
    head = struct.pack("<8sHHIQQQ16x", b"SEENURLS", 1, 0, len(blocks), len(pairs),
                       64 + len(body), xxhash.xxh3_64_intdigest(idx))
    return head + struct.pack("<Q", xxhash.xxh3_64_intdigest(head)) + body + idx


@settings(max_examples=25, deadline=None)
@given(urls=st.lists(st.binary(max_size=300).map(lambda b: b.replace(b"\n", b"")),
                     max_size=800),
       spread=st.sampled_from([3, 1 << 20, 2**64 - 1]))
def test_kept_file_bytes_from_a_list_or_one_text_match_the_format(tmp_path_factory, urls,
                                                                   spread):
    """The same file, byte for byte, from a list of URLs, from the newline-terminated
    text a batch prints, and from the format written out plainly (repeated keys,
    blocks cut at BLOCK_BYTES, URLs of up to 300 bytes)."""
    keys = (np.arange(len(urls), dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) \
        % np.uint64(spread)
    d = tmp_path_factory.mktemp("k")
    want = kept_file_naive(keys, urls)
    text = b"".join(u + b"\n" for u in urls)
    for name, given_urls in (("list", list(urls)), ("text", text)):
        path = str(d / f"{name}.url")
        entry = kepturls.write_file(path, keys.copy(), given_urls, sync=False)
        assert open(path, "rb").read() == want, name
        assert entry["count"] == len(urls)
        f = kepturls.KeptUrls(path, entry)
        assert sorted(u for b in f.iter_all() for u in b) == sorted(urls)


def test_kept_file_refuses_urls_that_do_not_pair_with_the_keys(tmp_path):
    keys = np.array([5, 1], dtype=np.uint64)
    path = str(tmp_path / "u.url")
    with pytest.raises(ValueError, match="2 keys but 3 URLs"):
        kepturls.write_file(path, keys, [b"http://a.test/", b"http://b.test/\nx"])
    with pytest.raises(ValueError, match="unterminated"):
        kepturls.write_file(path, keys, b"http://a.test/\nhttp://b.test/")
    assert not os.path.exists(path) and not os.path.exists(path + ".tmp")


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


@pytest.mark.parametrize("repeats", [False, True])
def test_the_mask_a_hook_asks_for_is_the_mask_add_returns(tmp_path, monkeypatch, repeats):
    """A batch's ``_on_new`` hook asks ``mask_of`` for the mask of its keys (what a
    kept-URL hook gathers the lines of): add() then returns that very mask, made the
    way add() makes it (over the distinct keys when it dropped the batch's repeats);
    asked for other keys, mask_of joins those and add() makes its own."""
    from naive import add_naive
    from seenstore.kernels import dispatch
    from seenstore.store import admission

    monkeypatch.setattr(dispatch, "SMALL", 64)
    monkeypatch.setattr(admission, "REPEATS_MIN_KEYS", 64)
    seen: set = set()
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False, keep_urls=False) as store:
        first = np.arange(0, 3000, 3, dtype=np.uint64)
        add_naive(seen, first)
        store.add(first)
        keys = (np.arange(2000, dtype=np.uint64) * np.uint64(7)) % np.uint64(
            300 if repeats else 1 << 40)
        want = add_naive(seen, keys)
        asked = []
        store._on_new = lambda new, gen: asked.append(
            (store._admission.mask_of(keys, np.unique(new)),
             store._admission.mask_of(keys.copy(), np.unique(new))))
        try:
            mask = store.add(keys)
        finally:
            store._on_new = None
        assert (store._admission._distinct is not None) == repeats
        assert len(asked) == 1 and mask is asked[0][0]
        for m in (mask, asked[0][1]):
            assert np.array_equal(m, want)
        assert store._admission._adding is None and store._admission._mask_made is None


def test_a_kept_url_batch_frees_its_lines_without_the_cyclic_collector(tmp_path):
    """The kept-URL hook holds the batch (through ``lines_of``) only while the batch
    runs: with the cyclic collector off, the batch is freed once admit_lines returns
    (a hook in a reference cycle kept every batch's text until a collection), and
    what it kept and returned are the batch's new URLs."""
    import gc
    import weakref

    from seenstore.pipeline import admit_lines

    class Batch:  # stands for a FastBatch: what lines_of reads
        def __init__(self, urls):
            self.urls = urls

    urls = [f"http://h{i % 5}.test/{i % 40}".encode() for i in range(100)]
    keys = fingerprint_many([u.decode() for u in urls])
    gc.disable()
    try:
        with SeenStore.open(str(tmp_path / "s"), create=True, sync=False,
                            keep_urls=True) as store:
            batch = Batch(urls)
            gone = weakref.ref(batch)

            def lines_of(select, batch=batch):
                return b"".join(u + b"\n" for u, s in zip(batch.urls, select.tolist()) if s)

            mask, text = admit_lines(store, keys, lines_of)
            del batch, lines_of
            assert gone() is None
            new = sorted(set(urls))
            assert int(mask.sum()) == 40 and sorted(text.split(b"\n")[:-1]) == new
            assert sorted(u.encode() for u in kept(store)) == new
    finally:
        gc.enable()
