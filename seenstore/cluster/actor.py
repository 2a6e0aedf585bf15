"""ShardActor: one shard of a ShardedStore, the single writer of one directory.

A plain class; ``sharded.py`` runs it as a Ray actor (restarts enabled, a few
threads so Bloom queries and ``contains`` run beside a merge). The directory holds
``SHARD`` (which key range: shard ``index`` of 2^``shard_bits``, its ``range`` of
the top 8 key bits, ranges.py),
``store/`` (a SeenStore, used through its public calls only) and ``answers/`` (the
answer log that makes batches exactly-once, answers.py). Every admission answers
with the sorted new keys; the client derives masks from them.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import threading
import time

import numpy as np
import xxhash

from seenstore import store as store_module
from seenstore.keys.batch import prepare
from seenstore.errors import (CorruptionError, InvalidInputError, MismatchError,
                              NotSupportedError, SeenStoreError, StoreNotFoundError)
from seenstore.layout import Layout
from seenstore.store import MAX_SHARD_BITS, SeenStore
from seenstore.store.runcache import default_budget
from seenstore.cluster.answers import AnswerLog
from seenstore.cluster.files import RANGE_MAJOR, read_sealed, write_sealed
from seenstore.cluster.ranges import equal_ranges, key_bounds, split_range

SHARD_NAME = "SHARD"
SHARD_FORMAT = "seenstore-shard"
STORE_DIR = "store"
INNER_BITS = 4  # each shard's store splits its range into 16 runs, as a plain store does


def inner_shard_bits(cluster_bits: int) -> int:
    """shard_bits of a shard's store: its own range in 2^4 runs (top bits shared)."""
    return min(cluster_bits + INNER_BITS, MAX_SHARD_BITS)


def digest(keys: np.ndarray, initial: dict | None = None) -> str:
    """A batch's identity for its id: its keys, and the initial records of a
    ``check_update`` (an id resent with other fields is another batch)."""
    h = xxhash.xxh3_64(np.ascontiguousarray(keys).view(np.uint8))
    for name in sorted(initial or {}):
        h.update(f"\0{name}=".encode())
        h.update(np.ascontiguousarray(np.asarray(initial[name])).tobytes())
    return h.hexdigest()


class ShardActor:
    """Requires: at most one live actor per directory (the store's lock enforces it)."""

    def __init__(self, directory: str, index: int, shard_bits: int, store_kwargs: dict,
                 key_range: list | None = None):
        self.dir = os.path.abspath(directory)
        self.index = index
        self.shard_bits = shard_bits
        # [lo, hi) of the top 8 key bits (default: equal ranges, the top bits = index)
        self.range = list(key_range or equal_ranges(1 << shard_bits)[index])
        self.kw = dict(store_kwargs)
        sharing = self.kw.pop("cache_sharing", None)
        if sharing and "cache_bytes" not in self.kw:
            # shards on one node share the store's default run cache budget (a quarter of
            # the node's available memory), instead of each taking a quarter
            self.kw["cache_bytes"] = default_budget() // sharing
        self.store: SeenStore | None = None
        self.log: AnswerLog | None = None
        self._lock = threading.Lock()  # one admission at a time (the answer log's rule)
        self._fault = ""
        self._admit_s = 0.0  # time inside the store's add_new / add_sorted, since start
        # time per step of admissions since start (the answer log's, the store's)
        self.timings = {"log_s": 0.0, "admit_s": 0.0, "batches": 0}
        self.store_timings: dict = {}  # the store's last_timings summed over batches
        self.last: dict = {}  # the last admission's figures (``last_admit``)
        self._error: SeenStoreError | None = None
        if os.path.exists(os.path.join(self.dir, SHARD_NAME)):
            try:  # a restart: reopen (the store's commit gives pre- or post-state)
                self._open()
            except SeenStoreError as e:  # raised by every call, not by the constructor
                self._error = e

    # ---------------------------------------------------------------- opening
    def create(self, layout: dict, policy_id: str, values: bool = False) -> dict:
        """Create this shard's directory and store (``values``: with a record per key),
        or accept an identical existing one."""
        with self._lock:
            if self._error is not None:
                raise self._error
            if self.store is None:
                path = os.path.join(self.dir, SHARD_NAME)
                if not os.path.exists(path):
                    SeenStore.open(os.path.join(self.dir, STORE_DIR), create=True,
                                   layout=Layout.from_dict(layout), policy_id=policy_id,
                                   shard_bits=inner_shard_bits(self.shard_bits),
                                   bloom=False, sync=self.kw.get("sync", True),
                                   values=values or None).close()
                    write_sealed(path, SHARD_FORMAT,
                                 {"index": self.index, "shard_bits": self.shard_bits,
                                  "range": self.range}, self.kw.get("sync", True), RANGE_MAJOR)
                self._open()
            return self.info()

    def _open(self) -> None:
        try:
            ident = read_sealed(os.path.join(self.dir, SHARD_NAME), SHARD_FORMAT, RANGE_MAJOR)
        except FileNotFoundError:
            raise StoreNotFoundError(f"{self.dir}: no shard here") from None
        if (ident["index"], ident["shard_bits"]) != (self.index, self.shard_bits):
            raise MismatchError(
                f"{self.dir}: holds shard {ident['index']} of {1 << ident['shard_bits']}, "
                f"not shard {self.index} of {1 << self.shard_bits}")
        if ident["major"] < RANGE_MAJOR:  # 1.x: equal ranges
            ident["range"] = equal_ranges(1 << ident["shard_bits"])[ident["index"]]
        if ident.get("range") != self.range:
            raise MismatchError(f"{self.dir}: holds key range {ident.get('range')} of the "
                                f"top 8 bits, not {self.range} (CLUSTER disagrees)")
        store = SeenStore.open(os.path.join(self.dir, STORE_DIR), **self.kw)
        try:
            log = AnswerLog(self.dir, sync=store.sync)
            log.resolve_all(store)  # before anything else commits
        except BaseException:
            store.close(save_bloom=False)  # the lock goes with it
            raise
        self.store, self.log = store, log

    def _need(self) -> SeenStore:
        if self._error is not None:
            raise self._error
        if self.store is None:
            raise StoreNotFoundError(f"{self.dir}: shard {self.index} was never created "
                                     "(or its directory is gone)")
        return self.store

    def info(self) -> dict:
        st = self._need()
        return {"index": self.index, "range": self.range, "dir": self.dir, "node_ip": _node_ip(),
                "pid": os.getpid(), "layout": st.layout.to_dict(),
                "policy_id": st.policy_id, "generation": st.generation,
                "values": st.values}

    # --------------------------------------------------------------- batches
    def admit(self, batch_id: str, keys: np.ndarray, sorted_unique: bool = False,
              acked: list = (), initial: dict | None = None) -> np.ndarray:
        """Admit ``keys`` (this shard's part of batch ``batch_id``); return the keys new
        to the store, sorted, each once. A retried ``batch_id`` gets the answer of its
        first run (until acknowledged). ``sorted_unique``: keys are sorted and unique.
        ``acked``: earlier batch ids whose answers the client has read (as ``ack``),
        dropped first, so their entries need not be resolved by this batch.
        ``initial``: a ``check_update`` (a store with values): the new keys' records,
        fields as ``SeenStore.check_update`` takes them, aligned with ``keys``."""
        t_in, c_in = time.time(), time.process_time()
        with self._lock:
            st = self._need()
            log = self.log
            if acked:
                log.forget(acked)
            dg = digest(keys, initial)
            e = log.find(batch_id)
            if e is not None:
                if e.meta["digest"] != dg:
                    raise InvalidInputError(f"batch id {batch_id!r} was used for other keys")
                log.resolve(e, st)  # pending: the latest entry, nothing committed after it
                if e.state == "committed":
                    return log.recompute(e, keys if sorted_unique else prepare(keys))
                log.forget([batch_id])  # void: nothing committed, a fresh batch
            t0 = time.perf_counter()
            e = log.begin(batch_id, dg, st)
            self._crash_if("after-pending")
            t1 = time.perf_counter()
            try:
                if initial is not None:
                    new = np.sort(keys[st.check_update(keys, **initial)])
                elif sorted_unique:
                    new = keys[st.add_sorted(keys)]
                else:
                    new = st.add_new(keys)
            except BaseException:
                log.resolve(e, st)  # void (or committed if the failure came after it)
                raise
            t2 = time.perf_counter()
            self.last = {"enter": t_in, "exit": time.time(), "log_s": t1 - t0,
                         "admit_s": t2 - t1, "cpu_s": time.process_time() - c_in,
                         "store": dict(st.last_timings)}
            self._admit_s += t2 - t1
            self.timings["log_s"] += t1 - t0
            self.timings["admit_s"] += t2 - t1
            self.timings["batches"] += 1
            for k, v in st.last_timings.items():
                if isinstance(v, float):
                    self.store_timings[k] = self.store_timings.get(k, 0.0) + v
            self._crash_if("after-commit")
            return new

    def last_admit(self) -> dict:
        """The last admission's figures: wall-clock ``enter`` and ``exit`` (time.time),
        seconds in the answer log and in the store, the process's CPU seconds over the
        call (every thread: the store's sorts and Bloom insert too), the store's
        ``last_timings``."""
        return self.last

    def ack(self, batch_ids: list) -> None:
        """The client has read these batches' answers: drop their entries and snapshots."""
        with self._lock:
            if self.log is not None:
                self.log.forget(batch_ids)

    def contains(self, keys: np.ndarray) -> np.ndarray:
        """The admitted keys among ``keys``: sorted, unique."""
        uniq = prepare(keys)
        return uniq[self._need().contains(uniq)]

    def forget(self, keys: np.ndarray) -> int:
        """Forget ``keys`` in this shard's store (``SeenStore.forget``: its own commit,
        which does not move the count of committed batches the answer log resolves
        pending entries by); the number forgotten. Idempotent: a retry forgets none."""
        with self._lock:
            return int(self._need().forget(keys))

    # ------------------------------------------------ values (a store with values)
    # Under the admission lock: a value read sweeps the value files, which a commit
    # of this shard (an admission's, an update's) may merge.
    def update(self, keys: np.ndarray, fields: dict) -> np.ndarray:
        """``SeenStore.update`` of this shard's keys: the mask of keys updated. Its own
        commit, which does not move the count of committed batches (the answer log's).
        Sets fields, so a retry changes nothing more."""
        with self._lock:
            return self._need().update(keys, **fields)

    def get(self, keys: np.ndarray) -> np.ndarray:
        with self._lock:
            return self._need().get(keys)

    def counts(self) -> dict:
        with self._lock:
            return {int(s): int(n) for s, n in self._need().counts().items()}

    def due(self, now: int, limit: int | None) -> tuple[np.ndarray, np.ndarray]:
        """This shard's ``SeenStore.due`` keys and their ``next_due`` (for the client's
        merge of every shard's, soonest first)."""
        with self._lock:
            return self._need().due(now, limit, times=True)

    def select(self, state: int, limit: int | None) -> np.ndarray:
        with self._lock:
            return self._need().select(state, limit)

    def maybe_contains(self, keys: np.ndarray) -> np.ndarray:
        """Mask over ``keys``: False where certainly never admitted (the Bloom filter;
        the runs when the store keeps none)."""
        st = self._need()
        bf = st.bloom
        return bf.query(keys) if bf is not None else st.contains(keys)

    def stats(self) -> dict:
        s = self._need().stats()
        s["shard_index"] = self.index
        s["node_ip"] = _node_ip()
        s["pid"] = os.getpid()
        s["answer_log_entries"] = len(self.log.entries)
        s["admit_s"] = self._admit_s
        s["timings"] = dict(self.timings, store=dict(self.store_timings))
        return s

    def verify(self) -> dict:
        with self._lock:
            st = self._need()
            v = st.verify()
            lo, hi = key_bounds(self.range)
            # every key within this shard's range: the store's smallest and largest
            ends = st.bounds()
            if ends is not None and (ends[0] < lo or ends[1] >= hi):
                raise CorruptionError(f"{self.dir}: the store holds keys outside shard "
                                      f"{self.index}'s range")
            v["shard_index"] = self.index
            return v

    def close(self, save_bloom: bool = True, acked: list = ()) -> None:
        """Close the store; ``acked``: batch ids to drop first (as ``ack``)."""
        with self._lock:
            if self.log is not None:
                if acked:
                    self.log.forget(acked)
                self.log.close()
            if self.store is not None:
                self.store.close(save_bloom=save_bloom)
            self.store = None

    def split_into(self, children: list[str], chunk_keys: int) -> dict:
        """Write this shard's keys into two new shard directories ``children`` (shards
        2i and 2i+1 of twice as many, each half of this shard's range), read from its
        store in ascending order (``SeenStore.iter_keys``) and committed ``chunk_keys``
        at a time; this shard is not modified. Leftovers at ``children`` are
        replaced. Raises CorruptionError if the children's counts do not add up to this
        shard's (keys outside its range included), InvalidInputError if its range is
        one group (cannot be halved)."""
        with self._lock:
            st = self._need()
            if st.values:
                raise NotSupportedError(f"{self.dir}: a shard with values cannot be split "
                                        "(the split copies keys, not their records)")
            bits = self.shard_bits + 1
            halves = split_range(self.range)
            kids = []
            try:
                for j, d in enumerate(children):
                    shutil.rmtree(d, ignore_errors=True)
                    kid = ShardActor(d, 2 * self.index + j, bits, dict(self.kw, bloom=False),
                                     halves[j])
                    kid.create(st.layout.to_dict(), st.policy_id)
                    kids.append(kid)
                size = max(1, min(chunk_keys, len(st)))
                for kid, half in zip(kids, halves):
                    for chunk in _regrouped(st.iter_keys(*key_bounds(half)), size):
                        kid.store.add_sorted(chunk)
                counts = [len(k.store) for k in kids]
            finally:
                for kid in kids:
                    kid.close()
            if sum(counts) != len(st):
                raise CorruptionError(f"{self.dir}: split wrote {sum(counts)} keys of "
                                      f"{len(st)}")
            return {"parent": len(st), "children": counts, "ranges": halves}

    def warm_up(self) -> float:
        """Load every kernel the store runs in this process (a throwaway store in this
        directory, removed after), as ``seenstore bench`` does before timing."""
        from seenstore.warmup import warm_up

        work = os.path.join(self.dir, "warm-up")
        os.makedirs(work, exist_ok=True)
        try:
            return warm_up(work, child=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def pid(self) -> int:
        return os.getpid()

    # ------------------------------------------------------------- test seam
    def arm_fault(self, point: str) -> None:
        """Tests only: SIGKILL this process at ``point`` of the next batch: one of the
        answer log's steps ("after-pending", "after-commit") or a
        store commit step ("before-manifest", "after-manifest"). A restart disarms."""
        self._fault = point
        store_module.files.arm_fault(point)  # the store's own commit seam (store/files.py)

    def _crash_if(self, point: str) -> None:
        if self._fault == point:
            os.kill(os.getpid(), signal.SIGKILL)


def _regrouped(chunks, size: int):
    """The keys of ``chunks`` (in order) again, in chunks of ``size`` keys (the last
    may be shorter): views of one reused buffer, each to be used before the next."""
    buf = np.empty(size, dtype=np.uint64)
    n = 0
    for chunk in chunks:
        at = 0
        while at < len(chunk):
            take = min(size - n, len(chunk) - at)
            buf[n:n + take] = chunk[at:at + take]
            n, at = n + take, at + take
            if n == size:
                yield buf
                n = 0
    if n:
        yield buf[:n]


def _node_ip() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # outside Ray (direct use in tests)
        return socket.gethostbyname(socket.gethostname())
