"""The layered (scalable) Bloom filter: grows by a layer, never forgets a key, keeps
its false-positive rate under the target, saves and loads its layers."""

import os

import numpy as np
import pytest

from seenstore.bloom import GROWTH, LayeredBloom, layer_path
from seenstore.errors import StoreNotFoundError
from seenstore.store import SeenStore
from naive import setdiff, union


def test_grows_by_layers_without_losing_keys_and_keeps_the_fpr(rng):
    target = 0.01
    bf = LayeredBloom.for_capacity(10_000, target)
    added = []
    for _ in range(12):  # 16x the first capacity, in uneven batches
        keys = rng.integers(0, 2**64, int(rng.integers(5_000, 25_000)), dtype=np.uint64)
        bf.reserve(len(keys))
        assert bf.layers[-1].n_added + len(keys) <= bf.layers[-1].capacity
        bf.add(keys)
        added.append(keys)
    everything = np.concatenate(added)
    assert len(bf.layers) >= 3
    assert bf.query(everything).all()  # no false negative, whatever layer holds a key
    for layer in bf.layers:
        assert layer.n_added <= layer.capacity  # no layer was ever overfilled
    probe = rng.integers(0, 2**64, 400_000, dtype=np.uint64)
    fpr = bf.query(probe).mean()
    assert fpr < target and bf.expected_fpr < target, (fpr, bf.expected_fpr)
    # the capacity grew geometrically: GROWTH x per layer unless a batch needed more
    assert bf.layers[1].capacity >= (GROWTH - 1) * bf.layers[0].capacity


def test_add_query_sees_every_layer(rng):
    bf = LayeredBloom.for_capacity(1000, 1e-3)
    a = rng.integers(0, 2**64, 1000, dtype=np.uint64)
    bf.add(a)
    bf.reserve(5000)
    assert len(bf.layers) == 2
    b = rng.integers(0, 2**64, 100, dtype=np.uint64)
    maybe = bf.add_query(np.concatenate([a[:50], b]))
    assert maybe[:50].all() and maybe[50:].mean() < 0.05
    assert bf.layers[1].query(b).all() and bf.query(b).all()


def test_save_load_layers_of_one_generation(tmp_path, rng):
    path = str(tmp_path / "BLOOM")
    bf = LayeredBloom.for_capacity(1000, 1e-3)
    keys = rng.integers(0, 2**64, 3000, dtype=np.uint64)
    for part in np.split(keys, 3):
        bf.reserve(len(part))
        bf.add(part)
    n = len(bf.layers)
    assert n >= 2
    bf.save(path, 7)
    got, gen = LayeredBloom.load(path)
    assert gen == 7 and len(got.layers) == n and got.query(keys).all()
    assert got.target_fpr == pytest.approx(1e-3)
    # a crash between layer files: a layer of another generation is refused
    got.layers[1].save(layer_path(path, 1), 6)
    with pytest.raises(StoreNotFoundError, match="generation"):
        LayeredBloom.load(path)
    # fewer layers saved later: the extra layer files go
    one = LayeredBloom.for_capacity(10_000, 1e-3)
    one.save(path, 8)
    assert not os.path.exists(layer_path(path, 1))
    assert len(LayeredBloom.load(path)[0].layers) == 1


def test_store_filter_grows_without_rebuild_and_stays_exact(tmp_path, rng):
    path = str(tmp_path / "s")
    everything = np.empty(0, np.uint64)
    with SeenStore.open(path, create=True, shard_bits=1, sync=False, bloom_capacity=2000) as s:
        for _ in range(5):
            b = rng.integers(0, 2**64, 3000, dtype=np.uint64)
            assert np.array_equal(s.add_new(b), setdiff(b, everything))
            everything = union(everything, b)
            assert s.last_timings["bloom_rebuild_s"] == 0.0
        assert s.last_timings["bloom_layers"] == len(s.bloom.layers) >= 2
        assert s.bloom.query(everything).all()
        assert s.stats()["bloom"]["layers"] == len(s.bloom.layers)
        layers = len(s.bloom.layers)
    with SeenStore.open(path, bloom_capacity=2000) as s:  # loaded as saved, all layers
        assert s._bloom_state == "loaded" and len(s.bloom.layers) == layers
        assert s.contains(everything).all()
    os.unlink(os.path.join(path, "BLOOM"))
    with SeenStore.open(path) as s:  # rebuilt from the runs: one layer again
        assert len(s.bloom.layers) == 1 and s.contains(everything).all()


def test_prepared_layer_is_the_one_reserve_makes(rng, monkeypatch):
    """A layer built ahead (prepare) is used by reserve and is bit for bit the layer
    reserve would have made; a failed build falls back to reserve's own."""
    from seenstore.bloom import layers as L

    batches = [rng.integers(0, 2**64, 4000, dtype=np.uint64) for _ in range(8)]
    plain, ahead = LayeredBloom.for_capacity(5000, 1e-3), LayeredBloom.for_capacity(5000, 1e-3)
    used = 0
    for keys in batches:
        plain.reserve(len(keys))
        plain.add(keys)
        nxt = ahead._next
        ahead.reserve(len(keys))
        if nxt is not None:  # the prepared layer became the newest one
            assert ahead._next is None and ahead.layers[-1] is nxt.layer
            used += 1
        ahead.add(keys)
        ahead.prepare(len(keys))
    assert used >= 2 and len(ahead.layers) == len(plain.layers) >= 3
    for a, b in zip(ahead.layers, plain.layers):
        assert (a.capacity, a.n_hashes) == (b.capacity, b.n_hashes)
        assert np.array_equal(a.words, b.words)
    assert ahead.query(np.concatenate(batches)).all()
    # nothing to prepare when the next batch fits
    assert not LayeredBloom.for_capacity(10**6, 1e-3).prepare(10)

    def no_memory(words):
        raise MemoryError("no room")

    monkeypatch.setattr(L, "prefault", no_memory)
    bf = LayeredBloom.for_capacity(1000, 1e-3)
    bf.add(batches[0][:900])
    assert bf.prepare(900)
    bf.reserve(900)
    assert len(bf.layers) == 2 and bf.layers[1].capacity == (GROWTH - 1) * 1000
    bf.add(batches[1][:900])
    assert bf.query(np.concatenate([batches[0][:900], batches[1][:900]])).all()


def test_store_builds_the_next_layer_between_batches(tmp_path, rng):
    """The store prepares the layer the next batch will need, uses it, and answers
    exactly (against a set) as its filter grows over several layers."""
    path = str(tmp_path / "s")
    seen: set = set()
    with SeenStore.open(path, create=True, shard_bits=1, sync=False, bloom_capacity=2000) as s:
        prepared = 0
        for _ in range(14):
            b = rng.integers(0, 2**64, 3000, dtype=np.uint64)
            b[:500] = rng.choice(np.fromiter(seen, np.uint64), 500) if seen else b[:500]
            nxt = s.bloom._next
            new = s.add_new(b)
            if nxt is not None:
                prepared += 1
                assert nxt.layer is not None and nxt.layer in s.bloom.layers
            assert set(new.tolist()) == set(b.tolist()) - seen
            seen |= set(b.tolist())
        assert prepared >= 2 and len(s.bloom.layers) >= 3
        everything = np.fromiter(seen, np.uint64)
        assert s.bloom.query(everything).all() and s.contains(everything).all()


def test_fill_adds_a_layer_only_for_keys_that_could_overfill_the_newest(rng):
    """A batch of mostly re-offered keys fills the last room without a new layer (the
    keeper's reserve(len(batch)) used to add one); keys that do overfill get a layer;
    no layer passes its capacity and no key is lost."""
    bf = LayeredBloom.for_capacity(200_000, 1e-3)
    first = rng.integers(0, 2**64, 150_000, dtype=np.uint64)
    bf.add(first)
    again = np.concatenate([first[:110_000], rng.integers(0, 2**64, 40_000, dtype=np.uint64)])
    pending = bf.add_in_background(again)
    fresh = pending.wait()
    assert len(bf.layers) == 1 and 39_900 <= fresh <= 40_000 and pending.cpu_s > 0
    more = rng.integers(0, 2**64, 100_000, dtype=np.uint64)
    pending = bf.add_in_background(more)
    assert pending.wait() >= 99_900 and len(bf.layers) == 2
    for layer in bf.layers:
        assert layer.n_added <= layer.capacity
    assert bf.query(np.concatenate([first, again, more])).all()


def test_fill_replaces_an_empty_first_layer_too_small_for_the_first_keys(rng):
    """A store opened empty has a small first layer (2^20 keys by default); a first
    insert of more keys than it holds replaces it by one large enough, instead of
    filling it and stacking a layer on it (one layer less to fault in and to probe)."""
    bf = LayeredBloom.for_capacity(1 << 17, 1e-3)
    keys = rng.integers(0, 2**64, 3 << 16, np.uint64, endpoint=False)  # > capacity, > a step
    bf.add(keys)
    assert len(bf.layers) == 1 and bf.layers[0].capacity >= len(keys)
    assert bf.query(keys).all()
    more = rng.integers(0, 2**64, bf.layers[0].capacity, np.uint64, endpoint=False)
    bf.add(more)  # the first layer holds keys now: grown by a layer, not replaced
    assert len(bf.layers) == 2 and bf.query(keys).all() and bf.query(more).all()
