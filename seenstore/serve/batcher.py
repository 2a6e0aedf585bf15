"""The group commit: every client's requests merged into one store batch (docs/serve.md).

Requests queue as ``Item``s (their keys, where those sit in the request's items,
the batch id and the request's digest). The batcher task takes what is queued
once the oldest item has waited ``max_delay`` seconds or the queue holds
``max_keys`` keys, and hands it to the ``Committer`` on its one thread (the store's
single writer), while new requests queue behind it. The committer checks the
group's keys against the store (``contains``: the answer, since nothing else
writes the store), marks each key's first occurrence in the group as new where the
store lacks it, writes the answers to the answer log (answers.py) and fsyncs it,
commits the keys (``store.add_new``, durable on return) and only then are the
answers released to the clients. So "new" goes to exactly one request in the
store's life, only once durable, and a batch id sent again gets the answer it got.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from seenstore.errors import CorruptionError, InvalidInputError, SeenStoreError
from seenstore.serve.answers import Answer, AnswerLog
from seenstore.store import manifest
from seenstore.store.urls import KeptLinesHook

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
SERIES_POINTS = 600  # points kept for the status page's plots
STATS_EVERY = 2.0    # seconds between refreshes of the store's figures


@dataclass
class Item:
    """One request to admit: ``keys`` (uint64) of its ``n`` items, key k belonging to
    item ``positions[k]`` (None: key k is item k)."""

    batch_id: str
    digest: int
    keys: np.ndarray
    n: int
    positions: np.ndarray | None = None
    future: asyncio.Future | None = field(default=None, repr=False)
    # the canonical URLs a mask over ``keys`` selects, newline-terminated (a URL
    # request's FastBatch.lines): what a store that keeps URLs keeps of the new ones
    lines: object = field(default=None, repr=False)
    # a check_update's records for its new keys: checked fields (values.check_fields),
    # scalars or arrays aligned with ``keys``
    initial: dict | None = field(default=None, repr=False)


class Histogram:
    """A Prometheus histogram's counts (cumulative on output)."""

    def __init__(self, buckets=LATENCY_BUCKETS):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, v: float) -> None:
        i = int(np.searchsorted(self.buckets, v))
        self.counts[i] += 1
        self.sum += v
        self.count += 1


def committed_batches(path: str) -> int:
    """The store's count of committed batches (its MANIFEST's ``counters.batches``)."""
    return int(manifest.read(path)["counters"].get("batches", 0))


class Committer:
    """The store's writer: commits groups one at a time on its own thread."""

    def __init__(self, store, log: AnswerLog):
        self.store = store
        self.log = log
        self.batches = committed_batches(store.path)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="seenstore-commit")
        self.lock = threading.Lock()
        self.latency = Histogram()
        self.series: deque = deque(maxlen=SERIES_POINTS)  # (unix time, keys, seconds, keys in)
        self.groups = 0
        self.requests = 0
        self.keys_offered = 0
        self.keys_new = 0
        self.errors = 0
        self.n_keys = len(store)
        self._stats: dict = {}
        self._stats_at = 0.0

    def commit(self, items: list[Item]) -> list[Answer]:
        """Commit one group; the answers, aligned with ``items``. Raises what the store
        raises (nothing was answered then)."""
        t0 = time.perf_counter()
        keys = (np.concatenate([it.keys for it in items]) if len(items) > 1
                else items[0].keys)
        new = np.zeros(len(keys), dtype=bool)
        if len(keys):
            seen = self.store.contains(keys)
            _, first = np.unique(keys, return_index=True)
            new[first] = ~seen[first]
        answers, at = [], 0
        for it in items:
            m = new[at: at + len(it.keys)]
            at += len(it.keys)
            if it.positions is not None:
                full = np.zeros(it.n, dtype=bool)
                full[it.positions] = m
                m = full
            answers.append(Answer(it.digest, m.copy()))
        entries = [(it.batch_id, a) for it, a in zip(items, answers)]
        if not len(keys):  # nothing to admit: the answers hold no news, nothing to log
            return answers
        rec = self.log.append(self.batches, entries)
        with_urls = [it for it in items if it.lines is not None]
        if self.store.keep_urls is not False and with_urls:  # keys-only requests keep none
            url_keys = np.concatenate([it.keys for it in with_urls])
            self.store._on_new = KeptLinesHook(self.store, url_keys, _lines(with_urls))
        initial = _group_initial(items, len(keys))
        try:
            if initial is None:
                got = self.store.add_new(keys)
            else:  # the same batch, with the new keys' records written for its commit
                from seenstore.store import values

                got = values.check_update(self.store, keys, initial, admit=self.store.add_new)
        except BaseException:
            if committed_batches(self.store.path) != self.batches + 1:
                self.errors += 1
                raise
            got = None  # committed after all (a failure after the commit point)
        finally:
            self.store._on_new = None
        if got is not None and len(got) != int(new.sum()):
            raise CorruptionError(f"{self.store.path}: the store admitted {len(got)} keys of "
                                  f"a group, its check found {int(new.sum())} new")
        self.batches += 1
        self.log.settle(rec, entries)
        dt = time.perf_counter() - t0
        with self.lock:
            self.groups += 1
            self.requests += len(items)
            self.keys_offered += len(keys)
            self.keys_new += int(new.sum())
            self.n_keys += int(new.sum())
            self.latency.observe(dt)
            self.series.append((time.time(), self.n_keys, dt, len(keys)))
        return answers

    def contains(self, keys: np.ndarray) -> np.ndarray:
        return self.store.contains(keys) if len(keys) else np.zeros(0, dtype=bool)

    def stats(self, fresh: bool = False) -> dict:
        """The store's ``stats()``, at most STATS_EVERY seconds old (run on the commit
        thread, between groups)."""
        now = time.monotonic()
        if fresh or now - self._stats_at > STATS_EVERY or not self._stats:
            self._stats = self.store.stats()
            self._stats_at = now
        return self._stats


def _group_initial(items: list[Item], n: int) -> dict | None:
    """The records of a group's check_update requests, as one set of fields aligned
    with the group's ``n`` keys (a key of a request that names no field, or not this
    one, gets 0 in it: QUEUED, nothing set); None when no request carries any."""
    names = sorted(set().union(*(it.initial for it in items if it.initial)))
    if not names:
        return None
    from seenstore.store.valuefiles import VALUE_DTYPE

    out = {}
    for name in names:
        col = np.zeros(n, dtype=VALUE_DTYPE[name])
        at = 0
        for it in items:
            if it.initial and name in it.initial:
                col[at:at + len(it.keys)] = it.initial[name]
            at += len(it.keys)
        out[name] = col
    return out


def _lines(items: list[Item]):
    """``lines(select)`` over the keys of ``items`` (each with URLs) concatenated."""
    cuts = np.cumsum([len(it.keys) for it in items])[:-1]

    def lines(select: np.ndarray) -> bytes:
        return b"".join(it.lines(part) for it, part in zip(items, np.split(select, cuts)))
    return lines


class Batcher:
    """The asyncio side: requests queue here; one task forms the groups."""

    def __init__(self, committer: Committer, max_delay: float = 0.005,
                 max_keys: int = 1 << 21):
        if max_delay < 0:
            raise InvalidInputError(f"max_delay must be >= 0, got {max_delay}")
        self.committer = committer
        self.max_delay = max_delay
        self.max_keys = max_keys
        self.queue: list[Item] = []
        self.queued_keys = 0
        self.inflight: dict[str, asyncio.Future] = {}
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task | None = None
        self.in_group = 0  # requests in the group being committed

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    @property
    def depth(self) -> int:
        return len(self.queue)

    async def submit(self, item: Item) -> Answer:
        """The answer to ``item``: the logged one for a batch id answered before (its
        digest must match), else a share of the next group's commit."""
        old = self.committer.log.lookup(item.batch_id)
        if old is None and item.batch_id in self.inflight:
            old = await asyncio.shield(self.inflight[item.batch_id])
        if old is not None:
            if old.digest != item.digest:
                raise InvalidInputError(f"batch id {item.batch_id!r} was used for another "
                                        f"request")
            return old
        if self._closing:
            raise ShuttingDown("the server is shutting down")
        item.future = asyncio.get_running_loop().create_future()
        self.inflight[item.batch_id] = item.future
        self.queue.append(item)
        self.queued_keys += len(item.keys)
        self._wake.set()
        try:
            return await asyncio.shield(item.future)
        finally:
            if item.future.done():
                self.inflight.pop(item.batch_id, None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self.queue:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
            t_first = time.monotonic()
            while (self.queued_keys < self.max_keys and not self._closing
                   and (left := self.max_delay - (time.monotonic() - t_first)) > 0):
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), left)
                except TimeoutError:
                    break
            group, self.queue, self.queued_keys = self.queue, [], 0
            self.in_group = len(group)
            try:
                answers = await loop.run_in_executor(self.committer.pool,
                                                     self.committer.commit, group)
            except BaseException as e:  # noqa: BLE001 (handed to every waiting request)
                for it in group:
                    if not it.future.done():
                        it.future.set_exception(e)
            else:
                for it, a in zip(group, answers):
                    if not it.future.done():
                        it.future.set_result(a)
            finally:
                self.in_group = 0
                for it in group:
                    self.inflight.pop(it.batch_id, None)

    async def drain(self) -> None:
        """Refuse new requests; commit and answer what is queued; return when done."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task


class ShuttingDown(SeenStoreError):
    """The server is draining (SIGTERM): the client should retry after its restart."""
