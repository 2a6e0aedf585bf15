"""DedupStage: the streaming dedup stage a crawler embeds (docs/stage.md).

``offer(keys or URLs)`` returns at once the items certainly new, each handed out
exactly once in the store's life with its payload beside it. Check and claim are
one synchronous step under one lock (no await): an exact cache of recent keys
drops repeats, the store's Bloom filter admits negatives, positives are held
until the next merge, which runs in a background thread while offers fill the
other buffer. Admitted keys sit in a write-ahead log (store/wal.py) until merged.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Mapping
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Self

import numpy as np

from seenstore.store import buckets
from seenstore.store.files import spill_dir
from seenstore.store import wal as walmod
from seenstore.keys.batch import as_keys, unique_first
from seenstore.bloom import BloomFilter
from seenstore.errors import ClosedError, CorruptionError, InvalidInputError, MismatchError
from seenstore.kernels.dispatch import batch as _kernels
from seenstore.keys.sort import sort_keys, sort_unique_keys
from seenstore.runtime.parallel import check_threads
from seenstore.url.policy import DEFAULT_POLICY, Policy
from seenstore.admitted import Admitted, offered_items
from seenstore.store import BLOOM_NAME, SeenStore
from seenstore.store import urls as urlcalls
from seenstore.store.files import EVIDENCE_LOG
from seenstore.frontier.traps import MANIFEST_FIELD, TrapGuard

unique_sorted = _kernels.unique_sorted  # numpy twin below dispatch.SMALL keys

MODES = ("exact", "approximate")
DEFAULT_LEARN_EVERY = 200        # record_fetch calls between online learning rounds
DEFAULT_BUDGET_BYTES = 64 << 20  # keys of one buffer, 8 bytes each: 8 Mi keys
DEFAULT_CACHE_KEYS = 1 << 22     # recent-key cache entries, 8 bytes each: 32 MiB
CLAIM_FPR = 1e-3                 # a buffer's claim filter; a false positive only holds a key
MAX_CAP_BITS = 24                # host buckets for caps: top min(H, 24) bits of the key
SPILL_BUFFERS = 2                # a buffer past this many budgets merges spilled (store/spill.py)
_MIX = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: slot = (key * _MIX) >> (64 - bits)
_EMPTY = np.empty(0, dtype=np.uint64)


class _Buffer:
    """Keys claimed since the last swap. ``admitted``: handed out, logged in WAL
    segment ``wal_seq``; ``consumed``: certainly new, refused by a host cap (merged,
    never handed out); ``held``: maybe seen, ``held_payloads`` aligned with their
    concatenation; ``claims``: a Bloom filter holding every key of the three."""

    def __init__(self, claim_shape: tuple[int, int, int]):
        self.admitted: list[np.ndarray] = []
        self.consumed: list[np.ndarray] = []
        self.held: list[np.ndarray] = []
        self.held_payloads: list = []
        self.held_urls: list = []  # aligned with held_payloads when traps are on
        self.any_payload = False
        self.n_keys = 0
        self.n_held = 0
        self.n_approx = 0  # keys answered seen by the Bloom filter alone (approximate mode)
        n_blocks, k, capacity = claim_shape
        self.claims = BloomFilter(n_blocks, k, capacity=capacity, target_fpr=CLAIM_FPR)
        self.wal_seq: int | None = None


def _slots(keys: np.ndarray, bits: int) -> np.ndarray:
    """Top ``bits`` bits of ``key * _MIX`` as intp indices. Requires: 1 <= bits <= 62."""
    h = np.multiply(keys, _MIX)
    np.right_shift(h, np.uint64(64 - bits), out=h)
    return h.view(np.int64)


class DedupStage:
    """Open with ``DedupStage.open``. Thread-safe; from asyncio, call ``offer`` (or
    ``offer_async``) from the loop: the check-and-claim inside is one synchronous step."""

    def __init__(self, store: SeenStore, *, mode: str, budget_bytes: int, cache_keys: int,
                 host_cap: int | None, wal_sync, policy: Policy | None, replay: dict,
                 threads: int | None = None, traps: TrapGuard | None = None):
        self.store = store
        self.threads = check_threads(threads)
        self.mode = mode
        self.policy = policy
        self.layout = store.layout
        self.budget_bytes = budget_bytes
        self.buffer_keys = max(1, budget_bytes // 8)
        self.replay = replay
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="seenstore-merge")
        self._wal = walmod.WalWriter(store.path, replay["next_seq"], wal_sync)
        shape = BloomFilter.for_capacity(max(self.buffer_keys, 1024), CLAIM_FPR)
        self._claim_shape = (shape.n_blocks, shape.n_hashes, shape.capacity)
        self._cur = _Buffer(self._claim_shape)
        self._merging: _Buffer | None = None
        self._future: Future | None = None
        self._swaps = 0
        self._merged = 0
        self._ready: list[tuple[np.ndarray, list | None]] = []
        self._error: BaseException | None = None
        self._closed = False
        self._scratch = np.empty(0, dtype=np.int64)
        self.cache_keys = 0 if cache_keys < 2 else 1 << (int(cache_keys) - 1).bit_length()
        self._cache_bits = self.cache_keys.bit_length() - 1
        self._cache = None
        if self.cache_keys:
            self._cache = np.zeros(self.cache_keys, dtype=np.uint64)
            self._cache[0] = 1  # empty slot s holds a key whose slot is not s (slot(0) = 0)
        self._spellings: dict[int, str] = {}  # key -> safe-rule URL, until merged
        self.learning = False
        self.learn_every = DEFAULT_LEARN_EVERY
        self._since_learn = 0
        self.last_findings: list = []
        self.host_cap = host_cap
        self._cap_bits = min(self.layout.host_bits, MAX_CAP_BITS)
        self._counts = (np.zeros(1 << self._cap_bits, dtype=np.int64)
                        if host_cap is not None else None)
        self._stats = dict.fromkeys(
            ("offered", "urls_offered", "rejected_urls", "in_call_duplicates", "cache_lookups",
             "cache_hits", "admitted_now", "admitted_after_merge", "held", "held_seen",
             "approx_answered", "refused_by_cap", "merges", "merged_keys", "anomalies",
             "spilled_merges", "trapped"), 0)
        self.traps = traps
        self._trapped_ready: list = []  # (URL, label) refused after a merge, not reported yet
        self._stats.update(merge_s=0.0, blocked_s=0.0, flush_wait_s=0.0, last_merge_s=0.0)

    # ----------------------------------------------------------------- opening
    @classmethod
    def open(cls, store_dir: str, create: bool = False, *, mode: str = "exact",
             budget_bytes: int = DEFAULT_BUDGET_BYTES, cache_keys: int = DEFAULT_CACHE_KEYS,
             host_cap: int | None = None, wal_sync: str | float = walmod.SYNC_ALWAYS,
             policy: Policy | None = None, layout=None, shard_bits: int | None = None,
             sync: bool = True, wait: float | None = 0.0, bloom_fpr: float | None = None,
             bloom_capacity: int | None = None, threads: int | None = None,
             learn: bool = False, learn_every: int = DEFAULT_LEARN_EVERY,
             keep_urls: bool | None = None, traps=None,
             token: str | None = None, values: bool | None = None) -> DedupStage:
        """Open the store at ``store_dir`` as its one writer; the store's open
        replays the WAL (``SeenStore.open``, figures in ``stats()["replay"]``).

        ``mode``: "exact" (Bloom positives are held for the merge) or "approximate"
        (a Bloom positive counts as seen at once). ``budget_bytes``: keys per buffer
        x 8 (two buffers exist; a merge starts when one fills). ``cache_keys``:
        recent-key cache entries (rounded up to a power of 2; 0 = none).
        ``host_cap``: refuse keys of a host bucket beyond this many admitted since
        open (None = no cap). ``wal_sync``: "always" | seconds | "never"
        (docs/stage.md). ``policy``: the URL policy (its identity must be the
        store's; by default the policy the store holds). ``learn``: learn rules
        online from ``record_fetch`` (every ``learn_every`` records: the store's
        ``learn(apply=True)``, so later offers use them). ``keep_urls``: as for
        ``SeenStore.open`` (URL offers keep their new URLs for rebuilds).
        ``values``: as for ``SeenStore.open`` (a new store keeps a state per key:
        what the stage hands out is QUEUED; ``mark``, ``counts``, ``requeue``).
        ``threads``: threads of the URL kernels (None: the cores; results do not
        depend on it). ``traps``: bound trap shapes among offered URLs
        (docs/frontier.md): True (a ``TrapGuard()``), an int (its
        ``limit_per_template``), a dict of ``TrapGuard`` arguments or a
        ``TrapGuard``; None/False: off. It starts from the patterns the store
        recorded and the fetch evidence it holds. Other arguments go to
        ``SeenStore.open``. Raises what it raises (LockedError for a second writer)
        and InvalidInputError.

        ``store_dir`` an ``http://`` or ``https://`` address: a ``seenstore serve``
        server's store, shared with other processes (``RemoteStage``: the same
        calls over ``seenstore.Client``, ``token`` its bearer token; the local
        store's options do not apply)."""
        if isinstance(store_dir, str) and store_dir.startswith(("http://", "https://")):
            from seenstore.serve.remote_stage import RemoteStage

            return RemoteStage.open(store_dir, token)
        if mode not in MODES:
            raise InvalidInputError(f"mode must be one of {MODES}, got {mode!r}")
        for name, v, lo in (("budget_bytes", budget_bytes, 8), ("cache_keys", cache_keys, 0)):
            if not isinstance(v, (int, np.integer)) or v < lo:
                raise InvalidInputError(f"{name} must be an int >= {lo}, got {v!r}")
        if host_cap is not None and (not isinstance(host_cap, (int, np.integer)) or host_cap < 0):
            raise InvalidInputError(f"host_cap must be None or an int >= 0, got {host_cap!r}")
        check_threads(threads)
        guard = _trap_guard(traps)
        if cache_keys > 1 << 40:
            raise InvalidInputError(f"cache_keys too large: {cache_keys}")
        # The store always runs exact: the stage answers Bloom positives itself in
        # approximate mode, so every key it hands the store is merged (docs/stage.md).
        if not isinstance(learn_every, int) or learn_every < 1:
            raise InvalidInputError(f"learn_every must be an int >= 1, got {learn_every!r}")
        store = SeenStore.open(store_dir, create, layout=layout, shard_bits=shard_bits,
                               policy=policy, keep_urls=keep_urls, wait=wait,
                               mode="exact", bloom=True, bloom_fpr=bloom_fpr,
                               bloom_capacity=bloom_capacity, sync=sync, values=values)
        try:
            replay = store.wal_replay
            stage = cls(store, mode=mode, budget_bytes=int(budget_bytes),
                        cache_keys=int(cache_keys), host_cap=host_cap, wal_sync=wal_sync,
                        policy=policy, replay=replay, threads=threads, traps=guard)
            if guard is not None:
                _prime_guard(guard, store)
            stage.learning = bool(learn)
            stage.learn_every = learn_every
            return stage
        except BaseException:
            store.close(save_bloom=False)
            raise

    # ------------------------------------------------------------------ offers
    def offer(self, items, payloads=None, *, base: str | None = None) -> Admitted:
        """Offer keys (uint64 array or ints) or URLs (str/bytes; a single str is
        one URL; relative ones are resolved against ``base``). Returns at once the
        items admitted now (certainly new, durable per ``wal_sync``) plus any held
        items a finished merge found new. ``payloads``: one per item (default for
        URLs: the URL as offered, absolute, in its safe-rule form: what to fetch;
        the key is made from its canonical form under the policy, which a risky
        rule may have made a spelling the site never served).
        May block only when both buffers are full (a merge in flight)."""
        keys, pl, rejected, urls = self._prepare(items, payloads, base)
        self._make_room()
        now_keys, now_pl, lsn, trapped = self._claim_and_log(keys, pl, urls)
        if lsn and self._wal.sync == walmod.SYNC_ALWAYS:
            self._guard(self._wal.sync_upto, lsn)
        return self._result(now_keys, now_pl, rejected, trapped)

    async def offer_async(self, items, payloads=None, *, base: str | None = None) -> Admitted:
        """``offer`` that never blocks the event loop: it awaits a merge in flight
        when both buffers are full, then checks and claims synchronously (no await
        between them), then awaits the WAL fsync (group commit) before returning."""
        keys, pl, rejected, urls = self._prepare(items, payloads, base)
        while (fut := self._room_or_future()) is not None:
            await asyncio.wrap_future(fut)
        # no await from check to claim
        now_keys, now_pl, lsn, trapped = self._claim_and_log(keys, pl, urls)
        if lsn and self._wal.sync == walmod.SYNC_ALWAYS:
            await asyncio.get_running_loop().run_in_executor(
                None, self._guard, self._wal.sync_upto, lsn)
        return self._result(now_keys, now_pl, rejected, trapped)

    def poll(self) -> Admitted:
        """Held items that finished merges found new since the last call. Never blocks."""
        if self._closed:
            raise ClosedError("the dedup stage is closed")
        return self._result(_EMPTY, None, [])

    def flush(self) -> Admitted:
        """Merge everything offered before this call; return every item not yet
        handed out. Afterwards every key offered before is in the store (durable)."""
        self._wait_merged()
        return self._result(_EMPTY, None, [])

    async def flush_async(self) -> Admitted:
        """``flush`` awaiting the merges instead of blocking the event loop."""
        target = self._flush_target()
        while (fut := self._flush_step(target)) is not None:
            await asyncio.wrap_future(fut)
        return self._result(_EMPTY, None, [])

    # ------------------------------------------------------------ frontier state
    def _wait_merged(self) -> None:
        """Wait until every key offered before this call is merged (its merge
        committed); the items that merges found new stay for the next
        ``offer``/``poll``/``flush``."""
        target = self._flush_target()
        while (fut := self._flush_step(target)) is not None:
            self._wait(fut, "flush_wait_s")

    def _keys_of(self, items) -> np.ndarray:
        """The keys of URLs (under the stage's policy) or keys, checked as offers are."""
        items, is_urls = offered_items(items)
        if is_urls:
            return urlcalls.normalised(items, None, self._url_policy(), self.layout,
                                       self.threads).keys
        return as_keys(items)

    def mark(self, items, state, **fields) -> int:
        """Record the frontier state of URLs (under the stage's policy) or keys handed
        out: ``state`` a ``seenstore.State`` (IN_FLIGHT, DONE, FAILED, SKIPPED, or
        QUEUED again), ``fields`` other values to set (``fetched_at``, ``next_due``,
        ``retries``, ``status``, ``digest``). Needs a store with values. Keys not merged
        yet are merged first (one batch). Returns how many stored keys were marked."""
        from seenstore.frontier.state import parse_state

        self._check()
        state = parse_state(state)  # checked before anything merges
        keys = self._keys_of(items)
        self._wait_merged()
        return int(self.store.update(keys, state=state, **fields).sum())

    def counts(self) -> dict:
        """Keys per ``State``, adding up to every distinct key handed out or stored
        (merges under way are waited for first). Needs a store with values."""
        self._check()
        self._wait_merged()
        return self.store.counts()

    def requeue(self, limit: int | None = None) -> list:
        """After a crash: what was IN_FLIGHT, marked QUEUED again and returned to be
        fetched again: the URLs where the store keeps them, else the keys (uint64
        array). Needs a store with values."""
        from seenstore.frontier.state import State

        self._check()
        self._wait_merged()
        keys = self.store.select(State.IN_FLIGHT, limit=limit)
        out = (self.store.select_urls(State.IN_FLIGHT, limit=limit)
               if self.store.keep_urls else keys)
        if len(keys):
            self.store.update(keys, state=State.QUEUED)
        return out

    # ---------------------------------------------------------------- internals
    def _prepare(self, items, payloads, base) -> tuple[np.ndarray, list | None, list,
                                                       list | None]:
        """Keys, payloads aligned with them (or None), URL rejections and, when traps
        are on and URLs are offered, their safe-rule forms aligned with the keys
        (else None). Validates only.
        ``items``: a uint64 array, or any iterable (list, generator ...) of ints, or
        of URLs (str/bytes), not both; a single str/bytes is one URL."""
        if self._closed:
            raise ClosedError("the dedup stage is closed")
        items, is_urls = offered_items(items)
        if payloads is not None and (not hasattr(payloads, "__len__")
                                     or len(payloads) != len(items)):
            raise InvalidInputError("payloads must have one entry per offered item")
        if not is_urls:
            keys = as_keys(items)
            return keys, (list(payloads) if payloads is not None else None), [], None
        policy = self._url_policy()
        nz = urlcalls.normalised(items, base, policy, self.layout, self.threads)
        keys, positions, rejected = nz.keys, nz.positions, nz.rejected
        if getattr(self.store, "keep_urls", False) is not False:  # safe forms kept too
            with self._lock:
                for k, u in zip(keys.tolist(), nz.safe):
                    self._spellings.setdefault(k, u)
        with self._lock:
            self._stats["urls_offered"] += len(items)
            self._stats["rejected_urls"] += len(rejected)
        urls = nz.safe if self.traps is not None else None
        if payloads is None:  # the spelling offered (safe rules), fetchable as it is
            return keys, nz.safe, rejected, urls
        return keys, [payloads[i] for i in np.asarray(positions).tolist()], rejected, urls

    def _url_policy(self) -> Policy:
        """The store's policy (it follows what ``learn`` applies)."""
        policy = getattr(self.store, "policy", None)  # a ShardedStore holds none
        if policy is None and self.policy is not None:
            return self.policy
        if policy is None and self.store.policy_id == DEFAULT_POLICY.identity:
            return DEFAULT_POLICY
        if policy is None:
            raise MismatchError(
                f"{self.store.path}: store was built with policy {self.store.policy_id!r}; "
                "open the stage with that policy to offer URLs")
        return policy

    def _check(self) -> None:
        """Requires: lock held. Raise the error that stopped the stage, if any."""
        if self._closed:
            raise ClosedError("the dedup stage is closed")
        if self._error is not None:
            raise self._error

    def _guard(self, fn, *args):
        """Run ``fn`` (lock not held); a failure stops the stage (keys may be
        claimed and not handed out): every later call raises it."""
        try:
            return fn(*args)
        except BaseException as e:
            with self._lock:
                self._error = self._error or e
            raise

    def _guard_locked(self, fn, *args):
        """``_guard`` for a caller that holds the lock (it is not re-entrant: taking
        it again here would hang the stage on a failed WAL write)."""
        try:
            return fn(*args)
        except BaseException as e:
            self._error = self._error or e
            raise

    def _room_or_future(self) -> Future | None:
        """None when the current buffer has room (swapping if it is full and no
        merge runs), else the future of the merge in flight to wait for."""
        with self._lock:
            self._check()
            if self._cur.n_keys < self.buffer_keys:
                return None
            if self._merging is None:
                self._guard_locked(self._swap_locked)
                return None
            return self._future

    def _make_room(self) -> None:
        while (fut := self._room_or_future()) is not None:
            self._wait(fut, "blocked_s")

    def _wait(self, fut: Future, counter: str) -> None:
        t = time.perf_counter()
        wait([fut])
        with self._lock:
            self._stats[counter] += time.perf_counter() - t

    def _claim_and_log(self, keys, payloads, urls=None):
        with self._lock:
            self._check()
            out = self._guard_locked(self._claim, keys, payloads, urls)
            if self._cur.n_keys >= self.buffer_keys and self._merging is None:
                self._guard_locked(self._swap_locked)
            return out

    def _first_occurrences(self, keys: np.ndarray) -> np.ndarray:
        """True where no earlier position holds the same key, as far as one scatter
        into a 2n-slot table shows (a missed repeat is caught by the claim filter)."""
        n = len(keys)
        if n < 2:
            return np.ones(n, dtype=np.bool_)
        bits = (2 * n - 1).bit_length()
        if len(self._scratch) < 1 << bits:
            self._scratch = np.empty(1 << bits, dtype=np.int64)
        slot = _slots(keys, bits)
        pos = np.arange(n)
        self._scratch[slot[::-1]] = pos[::-1]  # last write wins: the first occurrence
        owner = self._scratch[slot]
        return (owner == pos) | (keys[owner] != keys)

    def _claim(self, keys: np.ndarray, payloads: list | None, urls: list | None = None):
        """Check and claim ``keys`` (lock held); return (admitted keys, their
        payloads, WAL position to sync or 0, trapped (URL, label) pairs). The one
        place keys are claimed. ``urls``: the keys' safe-rule URLs (traps on)."""
        st = self._stats
        n = len(keys)
        st["offered"] += n
        trapped: list = []
        if n == 0:
            return _EMPTY, ([] if payloads is not None else None), 0, trapped
        idx = np.flatnonzero(self._first_occurrences(keys))
        k = keys[idx]
        st["in_call_duplicates"] += n - len(idx)
        cslot = None
        if self._cache is not None:
            cslot = _slots(k, self._cache_bits)
            miss = np.flatnonzero(self._cache[cslot] != k)
            st["cache_lookups"] += len(k)
            st["cache_hits"] += len(k) - len(miss)
            idx, k, cslot = idx[miss], k[miss], cslot[miss]
        seen_k, buf = k, self._cur
        in_store = self.store.bloom.query(k)
        if self.mode == "approximate":  # a Bloom positive counts as seen, unless forgotten
            if hasattr(self.store, "forgotten"):  # (the filter still holds forgotten keys)
                in_store &= ~self.store.forgotten(k)
            st["approx_answered"] += int(in_store.sum())
            buf.n_approx += int(in_store.sum())  # made durable by this buffer's merge
            keep = np.flatnonzero(~in_store)
            idx, k, in_store = idx[keep], k[keep], in_store[keep]
        pending = buf.claims.add_query(k)  # claims every key, in-call repeats included
        if self._merging is not None:
            pending |= self._merging.claims.query(k)
        held = pending | in_store
        a_idx, a_keys = idx[~held], k[~held]
        if urls is not None and len(a_keys):
            ok = self._trap_allow([urls[i] for i in a_idx.tolist()], trapped)
            if not ok.all():
                buf.consumed.append(a_keys[~ok])
                a_idx, a_keys = a_idx[ok], a_keys[ok]
        if self._counts is not None and len(a_keys):
            ok = self._cap_allow(a_keys)
            if not ok.all():
                buf.consumed.append(a_keys[~ok])
                st["refused_by_cap"] += int(len(ok) - ok.sum())
                a_idx, a_keys = a_idx[ok], a_keys[ok]
        if held.any():
            h_idx = idx[held]
            buf.held.append(k[held])
            if payloads is not None:
                buf.any_payload = True
                buf.held_payloads.extend([payloads[i] for i in h_idx.tolist()])
            else:
                buf.held_payloads.extend([None] * len(h_idx))
            if self.traps is not None:
                buf.held_urls.extend([urls[i] for i in h_idx.tolist()] if urls is not None
                                     else [None] * len(h_idx))
            buf.n_held += len(h_idx)
            st["held"] += len(h_idx)
        if cslot is not None:
            self._cache[cslot] = seen_k
        buf.n_keys += len(k)
        st["admitted_now"] += len(a_keys)
        lsn = 0
        if len(a_keys):
            buf.admitted.append(a_keys)
            lsn = self._wal.append(a_keys)
        a_pl = [payloads[i] for i in a_idx.tolist()] if payloads is not None else None
        return a_keys, a_pl, lsn, trapped

    def _trap_allow(self, urls: list, trapped: list) -> np.ndarray:
        """Mask of the new ``urls`` the trap guard lets through (it counts them); the
        refused go to ``trapped`` as (URL, label). Requires: lock held, traps on."""
        idx = [i for i, u in enumerate(urls) if u is not None]  # None: offered as a key
        ok = np.ones(len(urls), dtype=np.bool_)
        for i, v in zip(idx, self.traps.check([urls[i] for i in idx])):
            if v is not None:
                ok[i] = False
                trapped.append((urls[i], v))
        self._stats["trapped"] += int(len(ok) - ok.sum())
        return ok

    def _cap_allow(self, keys: np.ndarray) -> np.ndarray:
        """Mask of ``keys`` (in order) their host bucket still has room for; counts them.
        Requires: lock held, caps on."""
        n = len(keys)
        if self._cap_bits:
            b = (keys >> np.uint64(64 - self._cap_bits)).astype(np.int64)
        else:
            b = np.zeros(n, dtype=np.int64)
        order = np.argsort(b, kind="stable")
        sb = b[order]
        starts = np.flatnonzero(np.r_[True, sb[1:] != sb[:-1]])
        rank = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
        ok = np.empty(n, dtype=np.bool_)
        ok[order] = self._counts[sb] + rank < self.host_cap
        ub, c = np.unique(b[ok], return_counts=True)
        self._counts[ub] += c
        return ok

    # ------------------------------------------------------------------ merges
    def _swap_locked(self) -> None:
        """Start merging the current buffer. Requires: lock held, no merge in flight."""
        buf = self._cur
        buf.wal_seq = self._wal.rotate()
        self._cur = _Buffer(self._claim_shape)
        self._merging = buf
        self._swaps += 1
        self._future = self._pool.submit(self._merge_job, buf)

    def _flush_target(self) -> int:
        with self._lock:
            self._check()
            return self._swaps + (1 if self._cur.n_keys or self._cur.n_approx else 0)

    def _flush_step(self, target: int) -> Future | None:
        """The merge to wait for before swap number ``target`` is merged, or None."""
        with self._lock:
            self._check()
            if self._merged >= target:
                return None
            if self._merging is None:
                self._guard_locked(self._swap_locked)
            return self._future

    def _merge_job(self, buf: _Buffer) -> None:
        try:
            t0 = time.perf_counter()
            keys, order, anomalies, n_merged, n_held_seen = self._merge(buf)
            payloads = urls = None
            if order is not None and buf.any_payload:
                payloads = [buf.held_payloads[i] for i in order.tolist()]
            if order is not None and buf.held_urls:
                urls = [buf.held_urls[i] for i in order.tolist()]
            with self._lock:
                if urls is not None and len(keys):
                    ok = self._trap_allow(urls, self._trapped_ready)
                    if payloads is not None:
                        payloads = [p for p, o in zip(payloads, ok.tolist()) if o]
                    keys = keys[ok]
                if self._counts is not None and len(keys):
                    ok = self._cap_allow(keys)
                    self._stats["refused_by_cap"] += int(len(ok) - ok.sum())
                    if payloads is not None:
                        payloads = [p for p, o in zip(payloads, ok.tolist()) if o]
                    keys = keys[ok]
                if len(keys):
                    self._ready.append((keys, payloads))
                st = self._stats
                st["admitted_after_merge"] += len(keys)
                st["held_seen"] += n_held_seen
                st["anomalies"] += anomalies
                st["merges"] += 1
                st["merged_keys"] += n_merged
                st["last_merge_s"] = time.perf_counter() - t0
                st["merge_s"] += st["last_merge_s"]
                self._merging = None
                self._merged += 1
                if anomalies:
                    self._error = self._error or self._anomaly(anomalies)
            self._wal.remove(buf.wal_seq)  # its keys are committed
        except BaseException as e:
            with self._lock:
                self._error = self._error or e
            raise

    def _anomaly(self, n: int) -> CorruptionError:
        """A merge found ``n`` keys stored that the stage had handed out as certainly new:
        only a Bloom filter missing stored keys does that, which its binding to the
        store (docs/bloom.md) prevents short of a forged file. Stop the stage, and
        remove the saved filter so the next open rebuilds it from the runs."""
        try:
            os.unlink(os.path.join(self.store.path, BLOOM_NAME))
        except OSError:
            pass
        return CorruptionError(
            f"{self.store.path}: {n} keys handed out as new were already stored: the "
            "Bloom filter does not match the store; the stage stopped and the saved filter "
            "was removed (the next open rebuilds it from the runs)")

    def _merge(self, buf: _Buffer):
        """Merge ``buf`` into the store (committed on return) and resolve its held
        keys: new in the store, not claimed as certain in ``buf``, first holder wins.
        Returns (keys found new in offer order, their indices among the buffer's held
        items or None, anomalies, merged, held seen)."""
        # the merge owns the keys now: drop the buffer's lists as they are copied
        parts, buf.admitted, buf.consumed = buf.admitted + buf.consumed, [], []
        certain = np.concatenate(parts) if parts else _EMPTY
        parts, buf.held = buf.held, []
        held = np.concatenate(parts) if parts else _EMPTY
        del parts
        # spilled merges need a single store's add_new_file (a ShardedStore has none)
        if (getattr(self.store, "mode", None) == "exact" and not buf.n_approx
                and hasattr(self.store, "add_new_file")
                and len(certain) + len(held) > SPILL_BUFFERS * self.buffer_keys):
            return self._merge_spilled(certain, held, buf)
        every = np.concatenate([certain, held])
        uniq = every[:sort_unique_keys(every, self.store.threads)]
        del every
        self._stage_traps()
        if self._spellings:
            self.store._on_new = self._keep_spellings
        try:
            is_new = self.store.add_sorted(uniq, approx_answered=buf.n_approx)
        finally:
            self.store._on_new = None
            self._forget_spellings(uniq)
        sort_keys(certain, self.store.threads)
        # a certainly-new key the store already held: must never happen (counted)
        anomalies = int(len(certain) - is_new[np.searchsorted(uniq, certain)].sum())
        if len(held) == 0:
            return _EMPTY, None, anomalies, len(uniq), 0
        hu, first = unique_first(held)
        new = is_new[np.searchsorted(uniq, hu)]
        if len(certain):
            p = np.minimum(np.searchsorted(certain, hu), len(certain) - 1)
            new &= certain[p] != hu
        order = np.sort(first[new])
        return held[order], order, anomalies, len(uniq), int(len(hu) - new.sum())

    def _stage_traps(self) -> None:
        """Stage the detected trap patterns (and their counts) as the manifest field
        the next commit takes (a merge's batch, or the store's close)."""
        if self.traps is None:
            return
        with self._lock:
            if not self.traps.changed:
                return
            entries = self.traps.record()
        self.store._batch_fields = {**(self.store._batch_fields or {}),
                                    MANIFEST_FIELD: entries}

    def _keep_spellings(self, new_keys: np.ndarray, gen: int) -> None:
        """A merge's hook (store/urls.py): the new keys' URLs, as first offered, go to
        the store's kept-URL file for the batch. Keys offered as keys have none."""
        with self._lock:
            got = [(k, self._spellings.get(k)) for k in new_keys.tolist()]
        got = [(k, u) for k, u in got if u is not None]
        if got:
            urlcalls.keep_new(self.store, [u for _, u in got], gen)

    def _forget_spellings(self, keys: np.ndarray) -> None:
        with self._lock:
            for k in keys.tolist():
                self._spellings.pop(k, None)

    def _merge_spilled(self, certain: np.ndarray, held: np.ndarray, buf: _Buffer):
        """``_merge`` of a backlog larger than the stage's memory budget (one offer of
        many more keys than a buffer holds): through ``SeenStore.add_new_file`` with
        the budget as its memory (DRUM-style, store/spill.py), so the merge needs the budget
        beside the buffer's own keys, not a few copies of them. The new keys come back
        sorted in a file of the store's spill folder, read in chunks to resolve the
        held keys and count anomalies; the result is the in-memory merge's."""
        memory = max(buckets.MIN_MEMORY, self.budget_bytes)
        new_path = spill_dir(self.store.path) + ".new"
        self._stage_traps()
        sort_keys(certain, self.store.threads)
        hu, first = unique_first(held) if len(held) else (_EMPTY, None)
        in_new_c = np.zeros(len(certain), dtype=np.bool_)
        in_new_h = np.zeros(len(hu), dtype=np.bool_)
        try:
            fig = self.store.add_new_file([certain, held], memory=memory, new_out=new_path)
            for chunk in buckets.source_chunks(new_path, max(1 << 16, memory // 32)):
                _mark_sorted(certain, chunk, in_new_c)
                _mark_sorted(hu, chunk, in_new_h)
        finally:
            try:
                os.unlink(new_path)
            except OSError:
                pass
        with self._lock:
            self._stats["spilled_merges"] += 1
        anomalies = int(len(certain) - in_new_c.sum())
        if len(held) == 0:
            return _EMPTY, None, anomalies, int(fig["unique"]), 0
        new = in_new_h
        if len(certain):
            p = np.minimum(np.searchsorted(certain, hu), len(certain) - 1)
            new &= certain[p] != hu
        order = np.sort(first[new])
        return held[order], order, anomalies, int(fig["unique"]), int(len(hu) - new.sum())

    def _result(self, now_keys: np.ndarray, now_pl: list | None, rejected: list,
                trapped: list | None = None, raise_error: bool = True) -> Admitted:
        """``Admitted`` of this call's keys plus every ready merge result (taken once)."""
        with self._lock:
            if raise_error and self._error is not None and not self._ready and not len(now_keys):
                raise self._error
            ready, self._ready = self._ready, []
            trapped = (trapped or []) + self._trapped_ready
            self._trapped_ready = []
        if not ready:
            return Admitted(now_keys, now_pl, len(now_keys), rejected, trapped)
        keys = np.concatenate([now_keys] + [k for k, _ in ready])
        if now_pl is None and all(p is None for _, p in ready):
            return Admitted(keys, None, len(now_keys), rejected, trapped)
        pl = list(now_pl) if now_pl is not None else [None] * len(now_keys)
        for k, p in ready:
            pl.extend(p if p is not None else [None] * len(k))
        return Admitted(keys, pl, len(now_keys), rejected, trapped)

    # --------------------------------------------------------------- evidence
    def record_fetch(self, url, status, *, location=None, canonical=None, digest=None,
                     body=None, simhash=None, link_header=None):
        """Keep what fetching ``url`` revealed (``SeenStore.record_fetch``). With
        ``learn=True``, every ``learn_every`` records the stage learns (``learn``)."""
        with self._lock:
            self._check()
        rec = self.store.record_fetch(url, status, location=location, canonical=canonical,
                                      digest=digest, body=body, simhash=simhash,
                                      link_header=link_header)
        if self.traps is not None:
            with self._lock:
                self.traps.observe_fetch(rec.url, rec.status, rec.digest)
        self._since_learn += 1
        if self.learning and self._since_learn >= self.learn_every:
            self.learn()
        return rec

    def learn(self, apply: bool = True, config=None) -> list:
        """Learn rules from the evidence recorded (``SeenStore.learn``). With ``apply``:
        everything offered so far is merged first (what it hands out is kept for the
        next offer or ``poll``), the store's policy changes and rebuilds what it
        changes, and the recent-key cache is emptied (its keys were made under the
        old policy); later offers use the new rules. Returns the findings."""
        self._since_learn = 0
        while True:
            if apply:
                target = self._flush_target()
                while (fut := self._flush_step(target)) is not None:
                    self._wait(fut, "flush_wait_s")
            with self._lock:
                self._check()
                fut = self._future if self._merging is not None else None
                if fut is None:  # no merge holds the store (its hook takes our lock)
                    before = self.store.policy_id
                    findings = self.store.learn(apply=apply, config=config)
                    if self.store.policy_id != before and self._cache is not None:
                        self._cache[:] = 0
                        self._cache[0] = 1
                    break
            self._wait(fut, "flush_wait_s")
        self.last_findings = findings
        return findings

    # ------------------------------------------------------------ maintenance
    def stats(self) -> dict:
        """Counters since open, current buffers, WAL and configuration (docs/stage.md)."""
        with self._lock:
            if self._closed:
                raise ClosedError("the dedup stage is closed")
            s = dict(self._stats)
            s["buffer_keys"] = self._cur.n_keys
            s["held_pending"] = self._cur.n_held + (self._merging.n_held if self._merging else 0)
            s["merging"] = self._merging is not None
            s["hosts_at_cap"] = (int(np.count_nonzero(self._counts >= self.host_cap))
                                 if self._counts is not None else 0)
            s["trap_patterns"] = len(self.traps.traps()) if self.traps is not None else 0
        s["cache_hit_rate"] = s["cache_hits"] / s["cache_lookups"] if s["cache_lookups"] else None
        s["answered_without_waiting"] = (1 - s["held"] / s["offered"]) if s["offered"] else None
        handed = s["admitted_now"] + s["admitted_after_merge"]
        s["new_without_waiting"] = s["admitted_now"] / handed if handed else None
        s.update(wal_bytes=self._wal.live_bytes, wal_bytes_written=self._wal.bytes_written,
                 wal_records=self._wal.records, wal_fsyncs=self._wal.fsyncs,
                 replay=dict(self.replay), store_keys=len(self.store), mode=self.mode,
                 budget_bytes=self.budget_bytes, buffer_capacity_keys=self.buffer_keys,
                 cache_keys=self.cache_keys, host_cap=self.host_cap, wal_sync=self._wal.sync)
        return s

    def close(self, flush: bool = True) -> Admitted:
        """Merge what is buffered (``flush=True``), stop the merge thread, close the
        WAL and the store; return every item not yet handed out. ``flush=False``
        keeps the buffered admitted keys in the WAL for the next open and forgets
        held ones (they were never handed out; offer them again)."""
        if self._closed:
            return Admitted(_EMPTY)
        res = Admitted(_EMPTY)
        try:
            if flush and self._error is None:
                res = self.flush()
        finally:
            self._pool.shutdown(wait=True)
            with self._lock:
                self._closed = True
            try:
                self._wal.close()
            finally:
                try:
                    if self._error is None:
                        self._stage_traps()  # committed by the store's close
                finally:
                    self.store.close(save_bloom=self._error is None)
        # plus what the merge in flight found (flush=False or after an error)
        return self._result(res.keys, res.payloads, [], res.trapped, raise_error=False)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        res = self.close(flush=exc_type is None)
        if exc_type is None and len(res):
            warnings.warn(f"DedupStage closed by a with block dropped {len(res)} new items "
                          "(call flush() and use its result before leaving)", stacklevel=2)


def _trap_guard(traps) -> TrapGuard | None:
    """``DedupStage.open``'s ``traps`` argument as a guard (None: off)."""
    if traps is None or traps is False:
        return None
    if isinstance(traps, TrapGuard):
        return traps
    try:
        if traps is True:
            return TrapGuard()
        if isinstance(traps, (int, np.integer)) and not isinstance(traps, bool):
            return TrapGuard(int(traps))
        if isinstance(traps, Mapping):
            return TrapGuard(**traps)
    except (TypeError, ValueError) as e:
        raise InvalidInputError(f"traps: {e}") from None
    raise InvalidInputError(f"traps must be True, an int, a dict of TrapGuard arguments or "
                            f"a TrapGuard; got {type(traps).__name__}")


def _prime_guard(guard: TrapGuard, store: SeenStore) -> None:
    """The patterns the store recorded, and the content its fetch evidence shows."""
    from seenstore.store.learning import evidence as evidence_of  # read only with traps on

    guard.load(store._doc.get(MANIFEST_FIELD))
    if store._doc.get("evidence") is not None or os.path.exists(
            os.path.join(store.path, EVIDENCE_LOG)):
        for rec in evidence_of(store):
            guard.observe_fetch(rec.url, rec.status, rec.digest)
    guard.changed = False


def _mark_sorted(needles: np.ndarray, chunk: np.ndarray, out: np.ndarray) -> None:
    """Set ``out`` where sorted ``needles`` occur in sorted ``chunk`` (one piece of a
    sorted stream: only the needles in its key range are looked at)."""
    if not (len(needles) and len(chunk)):
        return
    a = int(np.searchsorted(needles, chunk[0]))
    b = int(np.searchsorted(needles, chunk[-1], side="right"))
    if a < b:
        sub = needles[a:b]
        p = np.minimum(np.searchsorted(chunk, sub), len(chunk) - 1)
        out[a:b] |= chunk[p] == sub


__all__ = ["Admitted", "DedupStage"]
