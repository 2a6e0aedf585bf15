"""The store's Bloom filter: layers of blocked Bloom filters that grow without a rebuild.

A filter sized for C keys at rate p stops meeting p once more than C keys are in.
Rebuilding it 2x larger from the runs stops every batch for seconds (0.5-2.3 s at
1e8 keys). Instead, before a batch's keys would overfill the newest layer a new,
empty layer is added
(scalable Bloom filter, Almeida et al. 2007): its capacity is GROWTH - 1 times
all the layers before (the total grows GROWTH-fold) and its rate is RATIO times
the previous layer's. New keys go into the newest layer only; a key is maybe
present when any layer says so. Layer i has rate p0 * RATIO^i with p0 = target *
(1 - RATIO), so the union bound keeps the whole filter's rate below the target
however many layers come. No key is ever lost (a layer is never cleared), so a
negative is still certainly new (the exact-mode guarantee).

Cost: a query of a key not in the store probes every layer (one cache line each);
the layers collapse into one whenever the filter is rebuilt from the runs (an open
that finds BLOOM stale or missing). Files: layer 0 in BLOOM, layer i in BLOOM.Li,
each in the BLOOM format (docs/bloom.md) recording the generation; a load takes
the layers in order while they exist and carry the same generation.
"""

from __future__ import annotations

import os

import numpy as np

from seenstore.errors import StoreNotFoundError
from seenstore.bloom.filter import REGION_MIN_KEYS, BloomFilter, _as_keys
from seenstore.bloom.sizing import max_loads, prefault
from seenstore.runtime.worker import Worker

GROWTH = 4  # the filter's capacity grows GROWTH-fold per new layer
FILL_STEPS = 64  # ``fill`` inserts in steps of at least 1/FILL_STEPS of its keys
RATIO = 0.5  # each layer's rate is RATIO times the previous one's
MAX_LAYERS = 64


def layer_path(path: str, i: int) -> str:
    return path if i == 0 else f"{path}.L{i}"


def _ask(layers: list, out: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``out`` (one layer's answers) OR the answers of ``layers``, each asked only
    about the keys no layer asked before answered "maybe"."""
    for layer in layers:
        todo = np.flatnonzero(~out)
        if len(todo) == 0:
            break
        out[todo] = layer.query(np.ascontiguousarray(keys[todo]))
    return out


class _PendingLayers:
    """``add_in_background`` of a layered filter: ``LayeredBloom.fill`` on a Worker
    whose last step is the newest layer's own background insert (a PendingAdd, which
    the waiter helps); ``wait()`` returns the keys that set a bit, over all steps,
    and raises the fill's error. ``elapsed_s``/``cpu_s``: the fill's thread, plus
    the final step's once waited for."""

    def __init__(self, bf: "LayeredBloom", keys: np.ndarray) -> None:
        self.dropped = False  # set by an owner that gave up on the filter (keeper.py)
        self._fresh: int | None = None  # set by wait()
        self._last_s = self._last_cpu = 0.0  # the final step's, once waited for
        self._worker = Worker(lambda: bf.fill(keys, background=True), "bloom-fill")

    @property
    def elapsed_s(self) -> float:
        return self._worker.elapsed_s + self._last_s

    @property
    def cpu_s(self) -> float:
        return self._worker.cpu_s + self._last_cpu

    def wait(self) -> int:
        if self._fresh is None:
            fresh, last = self._worker.join()
            if last is not None:  # the final step: help it, then count it in
                try:
                    fresh += last.wait()
                finally:
                    self._last_cpu = last.cpu_s
                    self._last_s = last.elapsed_s  # its thread started as the fill steps ended
            self._fresh = fresh
        return self._fresh


class _NextLayer:
    """A layer for ``capacity`` keys at ``fpr``, allocated and faulted in on a Worker
    before a batch needs it (``LayeredBloom.prepare``)."""

    def __init__(self, capacity: int, fpr: float) -> None:
        self.capacity, self.fpr = capacity, fpr
        self._worker = Worker(self._build, "bloom-next-layer")

    def _build(self) -> BloomFilter:
        layer = BloomFilter.for_capacity(self.capacity, self.fpr)
        prefault(layer.words)
        return layer

    @property
    def layer(self) -> BloomFilter | None:
        """The layer once built; None while building or if building failed."""
        return self._worker.result

    def take(self) -> BloomFilter | None:
        """The layer (waiting for the thread), or None if building it failed (e.g.
        MemoryError: ``reserve`` then allocates it itself)."""
        return self._worker.join(raise_error=False)


class LayeredBloom:
    """Bloom filter layers (see the module docstring). The interface the store uses
    of a BloomFilter: ``query``, ``add``, ``add_query``, ``add_in_background``,
    ``reserve``, figures, ``save``/``load``. Same thread rules as BloomFilter."""

    def __init__(self, layers: list, target_fpr: float) -> None:
        self.layers = list(layers)
        self._target = float(target_fpr)
        self.binding = layers[0].binding  # what ``load`` found (docs/bloom.md)
        self._next: _NextLayer | None = None  # the next layer, built ahead (prepare)
        self._warm_next_size()

    def _warm_next_size(self) -> None:
        """Size the next layer's rate ahead, on a thread (sizing.max_loads: ~1,400
        FPR evaluations, 0.1-1 s, cached), so adding the layer costs microseconds."""
        fpr = self.layer_fpr(self._target, len(self.layers))
        # a warm-up nobody waits for: if it fails, reserve sizes the layer itself
        Worker(lambda: max_loads(fpr), "bloom-size")

    @staticmethod
    def layer_fpr(target_fpr: float, i: int) -> float:
        return target_fpr * (1 - RATIO) * RATIO**i

    @classmethod
    def for_capacity(cls, n_keys: int, fpr: float) -> "LayeredBloom":
        """One layer for ``n_keys`` at ``layer_fpr(fpr, 0)``; grows when full."""
        return cls([BloomFilter.for_capacity(int(n_keys), cls.layer_fpr(fpr, 0))], fpr)

    def reserve(self, n_keys: int) -> bool:
        """Make room for ``n_keys`` more keys before they are inserted: add an empty
        layer when the newest one would pass its capacity with them, sized for
        max(GROWTH - 1 times all layers so far, ``n_keys``) (an empty newest layer is
        replaced instead, by one GROWTH^k times larger, the least k that holds them).
        Costs an allocation (zeroed lazily by the OS), no pass over any key. Returns
        whether it grew."""
        top = self.layers[-1]
        if top.n_added + n_keys <= top.capacity or len(self.layers) >= MAX_LAYERS:
            return False
        if top.n_added == 0:  # nothing in it yet: replace it rather than stack on it
            # by the next size on its GROWTH ladder that holds the keys, not by their
            # count: the layers' sizes then follow the keys inserted, not how the
            # inserts were cut (one call of a first batch's 9 M keys made a 9 M layer,
            # then 27 M and 108 M: 359 MiB for the 49.5 M keys of the peers' stream,
            # where shard-sized calls had left layers of 1, 3, 12.6 and 50 M: 185 MiB)
            cap = GROWTH * top.capacity
            while cap < n_keys:
                cap *= GROWTH
            self.layers[-1] = BloomFilter.for_capacity(cap, top.target_fpr)
            return True
        grow = max((GROWTH - 1) * self.capacity, int(n_keys))
        fpr = self.layer_fpr(self._target, len(self.layers))
        ready, self._next = self._next, None
        layer = ready.take() if ready and (ready.capacity, ready.fpr) == (grow, fpr) else None
        self.layers.append(layer or BloomFilter.for_capacity(grow, fpr))
        self._warm_next_size()
        return True

    def prepare(self, n_keys: int) -> bool:
        """Expect ``n_keys`` more keys soon (the next batch): if ``reserve`` would then
        add a layer, allocate it and fault its pages in now, on a thread, so the
        batch's first insert into it does not stop for the page faults (0.5-4 s for a
        300 MB layer on a VM: it would make that batch the slowest). The layer is
        the one ``reserve`` would make (same capacity and rate: the filter is the
        same); its memory is taken one batch early. Returns whether it started one."""
        top = self.layers[-1]
        if (self._next is not None or top.n_added == 0 or len(self.layers) >= MAX_LAYERS
                or top.n_added + n_keys <= top.capacity):
            return False
        self._next = _NextLayer(max((GROWTH - 1) * self.capacity, int(n_keys)),
                                self.layer_fpr(self._target, len(self.layers)))
        return True

    # -- operations ----------------------------------------------------------
    def query(self, keys: np.ndarray) -> np.ndarray:
        return _ask(self.layers[-2::-1], self.layers[-1].query(keys), keys)

    def add(self, keys: np.ndarray) -> None:
        """Insert ``keys``, adding a layer only when they could overfill the newest
        (``fill``)."""
        self.fill(_as_keys(keys))

    def fill(self, keys: np.ndarray, background: bool = False) -> tuple:
        """Insert C-contiguous uint64 ``keys`` into the newest layer, adding a layer only
        when they could take it past its capacity; return ``(fresh, last)``: keys that
        set a bit, and (``background``) the PendingAdd of the final step, else None.

        A key sets at most one layer's worth of bits, so up to ``room`` (capacity less
        keys in) keys go in at once; the keys that set no bit (re-offered, repeated)
        leave room for more. Each step inserts up to ``room`` keys, until the keys left
        fit; once ``room`` is below 1/FILL_STEPS of the call, the keys left are asked
        of the layer (one probe each) and only those it lacks go on. Only if they do
        not fit does it grow (``reserve``), and only they go into the new layer. So no
        layer passes its capacity (the FPR target holds), and
        a batch of re-offered keys does not add a layer it would not fill (reserving
        room for the whole batch would add one for keys already in the filter)."""
        fresh, rest, asked = 0, keys, False
        step = max(len(keys) // FILL_STEPS, REGION_MIN_KEYS)
        while True:
            top = self.layers[-1]
            room = top.capacity - top.n_added
            if len(rest) <= max(room, 0) or len(self.layers) >= MAX_LAYERS:
                if background:
                    return fresh, top.add_in_background(rest)
                return fresh + top._add_counting(rest), None
            if top.n_added == 0 and len(self.layers) < MAX_LAYERS:
                self.reserve(len(rest))  # an empty newest layer: replaced by a larger one
                continue
            if room >= step:
                fresh += top._add_counting(rest[:room])
                rest = rest[room:]
                continue
            if not asked:  # room for few more: only the keys the layer lacks need it
                rest, asked = rest[~top.query(rest)], True
                continue
            self.reserve(len(rest))

    def add_query(self, keys: np.ndarray) -> np.ndarray:
        """Was each key maybe present before (any layer, or earlier in this call),
        then insert it into the newest layer."""
        return _ask(self.layers[-2::-1], self.layers[-1].add_query(keys), keys)

    def add_in_background(self, keys: np.ndarray) -> _PendingLayers:
        """``fill`` on another thread. ``wait()`` returns how many keys set a clear bit
        in the layer they went to: with one layer the keys certainly new, with more an
        upper bound of them (the older layers are not asked: that would cost a probe
        per layer and key on the batch's critical path)."""
        return _PendingLayers(self, _as_keys(keys))

    # -- figures ----------------------------------------------------------------
    @property
    def target_fpr(self) -> float:
        return self._target

    @property
    def capacity(self) -> int:
        return sum(layer.capacity for layer in self.layers)

    @property
    def n_added(self) -> int:
        return sum(layer.n_added for layer in self.layers)

    @property
    def nbytes(self) -> int:
        return sum(layer.nbytes for layer in self.layers)

    @property
    def n_bits(self) -> int:
        return sum(layer.n_bits for layer in self.layers)

    @property
    def n_hashes(self) -> int:
        return self.layers[0].n_hashes

    @property
    def fill_ratio(self) -> float:
        return sum(layer.fill_ratio * layer.n_bits for layer in self.layers) / self.n_bits

    @property
    def expected_fpr(self) -> float:
        """1 - prod(1 - fpr_i): a key is a false positive when any layer says so."""
        miss = 1.0
        for layer in self.layers:
            miss *= 1.0 - layer.expected_fpr
        return 1.0 - miss

    # -- persistence --------------------------------------------------------------
    def save(self, path: str, generation: int, binding=None) -> None:
        """Save every layer (BLOOM, BLOOM.L1, ...), the newest first and layer 0 last,
        after removing files of layers beyond the last. A crash part-way leaves files
        whose generations disagree (``load`` stops at the first mismatch: the filter
        is rebuilt) or an extra layer of the same generation (only extra positives)."""
        i = len(self.layers)
        while os.path.exists(layer_path(path, i)):
            os.unlink(layer_path(path, i))
            i += 1
        for i in range(len(self.layers) - 1, -1, -1):
            self.layers[i].save(layer_path(path, i), generation, binding)

    @classmethod
    def load(cls, path: str) -> tuple["LayeredBloom", int]:
        """Layers from BLOOM, BLOOM.L1, ... of one generation and binding; raises what
        BloomFilter.load raises for BLOOM itself."""
        first, gen = BloomFilter.load(path)
        target = first.target_fpr / (1 - RATIO)
        layers = [first]
        while len(layers) < MAX_LAYERS:
            try:
                layer, g = BloomFilter.load(layer_path(path, len(layers)))
            except StoreNotFoundError:
                break
            if g != gen or layer.binding != first.binding:
                raise StoreNotFoundError(f"{layer_path(path, len(layers))}: from generation "
                                         f"{g}, not {gen}, or bound to other runs")
            layers.append(layer)
        return cls(layers, target), gen

    def __repr__(self) -> str:
        return f"LayeredBloom({len(self.layers)} layers, {self.layers!r})"
