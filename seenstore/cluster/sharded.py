"""ShardedStore: a SeenStore's calls over N shard actors on a Ray cluster.

The key space is cut into N = 2^b ranges of the top 8 key bits (ranges.py: equal,
the top b bits, or balanced by a sample of keys); shard i (a ShardActor, actor.py)
owns the keys of range i, in its own directory on its node's disk. A batch is
partitioned on the caller's side by its top 8 bits (keys/partition.py: one counting
and one scatter pass, no Python loop per key), each part is put once into Ray's object
store (the actor reads it without a copy), the shards merge in parallel, and the
answers (each shard's sorted new keys) are reassembled in the caller's order.
Every batch carries an id: a retry after a timeout or an actor restart gets the
answer of the first run (answers.py). See docs/cluster.md.
"""

from __future__ import annotations

import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from seenstore.keys.batch import as_keys
from seenstore.errors import (ClosedError, CorruptionError, InvalidInputError, MismatchError,
                              NotAStoreError, NotSupportedError, SeenStoreError,
                              StoreIOError, StoreNotFoundError)
from seenstore.kernels.batch import mark_first_new, mark_members
from seenstore.layout import DEFAULT_LAYOUT, Layout
from seenstore.keys.partition import partition
from seenstore.runtime.parallel import default_threads
from seenstore.store import DEFAULT_POLICY_ID
from seenstore.store.runcache import check_budget
from seenstore.cluster.actor import ShardActor
from seenstore.cluster.files import RANGE_MAJOR, read_sealed, write_sealed
from seenstore.cluster.ranges import (GROUPS, RANGE_BITS, balanced_ranges, check_ranges,
                                      equal_ranges, key_bounds, shard_of_group)

CLUSTER_NAME = "CLUSTER"
CLUSTER_FORMAT = "seenstore-cluster"
MAX_CLUSTER_BITS = 8
DEFAULT_RESTARTS = 4
DEFAULT_RETRIES = 8
PARALLEL_MIN_KEYS = 1 << 20  # keys below which the parts are put on one thread


def shard_dir_name(index: int, n: int) -> str:
    return f"shard-{index:04d}-of-{n:04d}"


def cluster_bits(n) -> int:
    """log2 of a shard count; InvalidInputError unless a power of 2 in 1..256."""
    if not isinstance(n, (int, np.integer)) or n < 1 or n & (n - 1) or n > 1 << MAX_CLUSTER_BITS:
        raise InvalidInputError(f"shards must be a power of 2 from 1 to "
                                f"{1 << MAX_CLUSTER_BITS}, got {n!r}")
    return int(n).bit_length() - 1


def read_cluster(root: str) -> dict:
    """The CLUSTER document of ``root`` (StoreNotFoundError when there is none), every
    shard's ``range`` filled in (a 1.x file: equal ranges) and checked."""
    path = os.path.join(root, CLUSTER_NAME)
    try:
        doc = read_sealed(path, CLUSTER_FORMAT, RANGE_MAJOR)
    except FileNotFoundError:
        if os.path.isdir(root):
            raise NotAStoreError(f"{root}: not a seenstore cluster (no {CLUSTER_NAME})") from None
        raise StoreNotFoundError(f"{root}: no cluster here (create one with create=True)") from None
    shards = doc.get("shards")
    n = len(shards) if isinstance(shards, list) else 0
    if not n or n & (n - 1) or n > 1 << MAX_CLUSTER_BITS or not all(
            isinstance(s, dict) and isinstance(s.get("dir"), str) for s in shards):
        raise CorruptionError(f"{path}: its shards are not a list of 2^b directories")
    if doc["major"] < RANGE_MAJOR:
        ranges = equal_ranges(1 << cluster_bits(n))
    else:
        ranges = check_ranges([s.get("range") for s in shards], n, path)
    doc["shards"] = [dict(s, range=r) for s, r in zip(shards, ranges)]
    return doc


def write_cluster(root: str, doc: dict, sync: bool = True) -> None:
    write_sealed(os.path.join(root, CLUSTER_NAME), CLUSTER_FORMAT, doc, sync, RANGE_MAJOR)


def ensure_ray(address: str | None):
    """Import Ray and connect (``address``) or start a local instance when none is up."""
    try:
        import ray
    except ImportError:
        raise InvalidInputError("the cluster needs Ray: pip install 'seenstore[cluster]'") from None
    if not ray.is_initialized():
        # No address: a new local instance, asked for the loopback address (Ray 2.60
        # resolves 127.0.0.1 to this machine's own interface address and listens on
        # every interface all the same: docs/cluster.md); an address joins that cluster.
        # Its workers (the shard actors: the store's own work) at the caller's
        # priority, not Ray's default niceness 15 (docs/cluster.md).
        local = {"address": "local", "_node_ip_address": "127.0.0.1",
                 "_system_config": {"worker_niceness": 0}} if address is None else {}
        ray.init(**({"address": address} | local), include_dashboard=False,
                 logging_level="WARNING", log_to_driver=False)
    return ray


def node_id(ray, ip: str | None) -> str | None:
    """The id of the live Ray node at address ``ip``, or None when there is none."""
    for n in ray.nodes():
        if n.get("Alive") and n.get("NodeManagerAddress") == ip:
            return n["NodeID"]
    return None


def _node_shares(ray, shards: list) -> tuple[int, int]:
    """``(threads, sharing)``: sort threads for each shard's store, the fewest CPUs of a
    node over the shards on it, at least 1; and the most shards one node holds
    (recorded nodes; else the shards spread evenly over the live nodes)."""
    nodes = {n.get("NodeManagerAddress"): int(n.get("Resources", {}).get("CPU", 1))
             for n in ray.nodes() if n.get("Alive")}
    ips = [s.get("node_ip") for s in shards]
    if nodes and all(ip in nodes for ip in ips):
        per = {ip: ips.count(ip) for ip in ips}
        return max(1, min(nodes[ip] // per[ip] for ip in per)), max(per.values())
    per_node = -(-len(shards) // max(1, len(nodes)))
    return max(1, min(nodes.values(), default=1) // per_node), per_node


class _BloomProxy:
    """What DedupStage asks of ``store.bloom``: ``query(keys)`` -> maybe-seen mask."""

    def __init__(self, sharded: "ShardedStore"):
        self._s = sharded

    def query(self, keys: np.ndarray) -> np.ndarray:
        return self._s.maybe_contains(keys)


class ShardedStore:
    """Open with ``ShardedStore.open``. One client (the writer) at a time; its calls
    are not for two threads at once, except Bloom queries beside an admission."""

    def __init__(self, ray, actors: list, dirs: list, root: str | None, doc: dict,
                 options: dict, store_kwargs: dict, wal_dir: str | None):
        self._ray = ray
        self.actors = actors
        self.dirs = dirs
        self.root = root
        self.shard_bits = cluster_bits(len(actors))
        self.ranges = [s["range"] for s in doc["shards"]]
        self._shard_of = shard_of_group(self.ranges)  # top 8 bits -> shard
        self._cuts = np.array([r[0] for r in self.ranges] + [GROUPS])
        self.layout = Layout.from_dict(doc["layout"])
        self.policy_id = doc["policy_id"]
        self.path = wal_dir or root  # where a DedupStage on top keeps its write-ahead log
        self.sync = store_kwargs.get("sync", True)
        self.bloom = _BloomProxy(self) if store_kwargs.get("bloom", True) else None
        # threads of this process's own sorts (a DedupStage on top sorts its buffers)
        self.threads = default_threads()
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="shard-client")
        self._options = options
        self._store_kwargs = store_kwargs
        self.retries = options.pop("retries")
        self._owner = True  # this client started the actors (and may start them anew)
        self.last_timings: dict = {}
        self.values = False  # every shard's store keeps a record per key (set by open)
        self.keep_urls = False  # shards keep keys only (what a DedupStage on top asks)
        self._unacked: dict[int, list] = {}  # shard -> batch ids read, not yet told
        self.counters = {"batches": 0, "retries": 0, "revived": 0,
                         "object_store_bytes_in": 0, "object_store_bytes_out": 0}

    def __getstate__(self) -> dict:
        """A copy for Ray tasks (``dedup``): the same actors, no Ray module, and it
        never starts actors of its own (the opening client owns them)."""
        return dict(self.__dict__, _ray=None, _owner=False, _pool=None)

    def __setstate__(self, state: dict) -> None:
        import ray

        self.__dict__.update(state, _ray=ray, _pool=ThreadPoolExecutor(
            state["threads"], thread_name_prefix="shard-client"))

    # ---------------------------------------------------------------- opening
    @classmethod
    def open(cls, paths_or_uri, shards: int | None = None, create: bool = False,
             ray_address: str | None = None, *, layout: Layout | None = None,
             policy_id: str | None = None, bloom: bool = True,
             bloom_fpr: float | None = None, bloom_capacity: int | None = None,
             sync: bool = True, wait: float | None = 0.0, max_restarts: int = DEFAULT_RESTARTS,
             retries: int = DEFAULT_RETRIES, wal_dir: str | None = None,
             pin_nodes: bool = True, threads: int | None = None,
             cache_bytes: int | None = None, sample=None,
             values: bool | None = None) -> "ShardedStore":
        """Open (``create=True``: create) a sharded store and start its shard actors.

        ``paths_or_uri``: a cluster root directory (str; it holds ``CLUSTER``, which
        names the shard directories, by default ``ROOT/shard-IIII-of-NNNN``), or a
        list of shard directories, one per shard in key order (no CLUSTER; cannot be
        split). ``shards``: N, a power of 2 (needed to create; checked otherwise).
        ``ray_address``: the Ray cluster to join (default: the one this process is
        connected to, else a new local one). ``bloom_capacity`` is for the whole
        store (each shard gets 1/N); other options as ``SeenStore.open``.
        ``max_restarts``: restarts Ray gives each actor; ``retries``: how often a
        call is resent (same batch id) before StoreIOError. ``pin_nodes``: start
        each shard on the node CLUSTER recorded for it (its directory is there);
        False places them anew and records the new nodes (directories on shared
        storage, or moved by hand: docs/cluster.md). ``threads``: each shard
        store's sort threads (default: its node's CPUs over the shards placed on
        that node, at least 1, so shards sharing a node do not oversubscribe it).
        ``cache_bytes``: each shard store's run cache (``SeenStore.open``); default:
        the store's default budget (a quarter of the node's available memory) over
        the most shards one node holds, so shards sharing a node share that quarter
        rather than each taking one.
        ``sample``: with ``create`` (of a cluster root), keys like those the store
        will get (e.g. its first batch): the shards' key ranges are cut so that each
        gets about the same share of them (default: equal ranges; ranges.py).
        ``values``: as ``SeenStore.open`` (with ``create``, every shard's store keeps a
        record per key; True on a cluster without values: MismatchError).
        Raises what ``SeenStore.open`` raises, plus InvalidInputError."""
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise InvalidInputError(f"threads must be a whole number >= 1, got {threads!r}")
        check_budget(cache_bytes)
        ray = ensure_ray(ray_address)
        root = None
        if isinstance(paths_or_uri, (str, os.PathLike)):
            root = os.path.abspath(os.fspath(paths_or_uri))
            doc = cls._cluster_doc(root, shards, create, layout, policy_id, sync, sample)
            dirs = [s["dir"] for s in doc["shards"]]
            if not pin_nodes:
                doc["shards"] = [dict(s, node_ip=None) for s in doc["shards"]]
        else:
            dirs = [os.path.abspath(os.fspath(p)) for p in paths_or_uri]
            if shards is not None and shards != len(dirs):
                raise MismatchError(f"{len(dirs)} shard directories given for shards={shards}")
            if sample is not None:
                raise InvalidInputError("sample= needs a cluster root (its CLUSTER records "
                                        "the ranges); shard directories get equal ranges")
            doc = {"layout": (layout or DEFAULT_LAYOUT).to_dict(),
                   "policy_id": policy_id or DEFAULT_POLICY_ID,
                   "shards": [{"dir": d, "node_ip": None, "range": r}
                              for d, r in zip(dirs, equal_ranges(1 << cluster_bits(len(dirs))))]}
        n = len(dirs)
        per_shard, sharing = _node_shares(ray, doc["shards"])
        if values not in (None, True, False):
            raise InvalidInputError(f"values must be True, False or None, got {values!r}")
        kw = {"bloom": bloom, "bloom_fpr": bloom_fpr, "sync": sync, "wait": wait,
              "values": values or None,
              "bloom_capacity": -(-bloom_capacity // n) if bloom_capacity else None,
              "threads": threads or per_shard}
        if cache_bytes is not None:
            kw["cache_bytes"] = cache_bytes
        else:  # the actor divides its own node's default budget (actor.py)
            kw["cache_sharing"] = sharing
        options = {"max_restarts": max_restarts, "max_task_retries": max_restarts,
                   "max_concurrency": 4, "num_cpus": 0, "retries": retries}
        st = cls(ray, [None] * n, dirs, root, doc, options, kw, wal_dir)
        try:
            for i in range(n):
                st.actors[i] = st._start(i, doc["shards"][i].get("node_ip"))
            if create:
                infos = st._call(range(n), lambda i: st.actors[i].create.remote(
                    doc["layout"], doc["policy_id"], bool(values)))
            else:
                infos = st._call(range(n), lambda i: st.actors[i].info.remote())
            for i, info in infos.items():
                st._check_info(i, info, layout, policy_id)
            if len({bool(info.get("values")) for info in infos.values()}) > 1:
                raise MismatchError("some shards keep values and some do not")
            st.values = bool(infos[0].get("values")) if infos else False
            if root is not None and any(doc["shards"][i].get("node_ip") != infos[i]["node_ip"]
                                        for i in range(n)):
                for i in range(n):  # remember each shard's node: its directory is there
                    doc["shards"][i]["node_ip"] = infos[i]["node_ip"]
                write_cluster(root, doc, sync)
        except BaseException:
            st._kill_all()
            raise
        return st

    @staticmethod
    def _cluster_doc(root, shards, create, layout, policy_id, sync, sample) -> dict:
        if os.path.exists(os.path.join(root, CLUSTER_NAME)) or not create:
            doc = read_cluster(root)  # an existing cluster keeps its ranges (sample unused)
            if shards is not None and shards != len(doc["shards"]):
                raise MismatchError(f"{root}: cluster has {len(doc['shards'])} shards, "
                                    f"not {shards}")
            return doc
        if shards is None:
            raise InvalidInputError("creating a cluster needs shards=N")
        n = 1 << cluster_bits(shards)
        if os.path.isdir(root) and os.listdir(root):
            raise NotAStoreError(f"{root}: directory is not empty and holds no cluster")
        try:
            os.makedirs(root, exist_ok=True)
        except OSError as e:
            raise StoreIOError(f"{root}: cannot create: {e.strerror}") from e
        ranges = equal_ranges(n) if sample is None else balanced_ranges(as_keys(sample), n)
        doc = {"layout": (layout or DEFAULT_LAYOUT).to_dict(),
               "policy_id": policy_id or DEFAULT_POLICY_ID, "epoch": 0,
               "shards": [{"dir": os.path.join(root, shard_dir_name(i, n)), "node_ip": None,
                           "range": ranges[i]} for i in range(n)]}
        write_cluster(root, doc, sync)
        return doc

    def _check_info(self, i: int, info: dict, layout, policy_id) -> None:
        if layout is not None and Layout.from_dict(info["layout"]) != layout:
            raise MismatchError(f"{info['dir']}: shard uses another fingerprint layout")
        if policy_id is not None and info["policy_id"] != policy_id:
            raise MismatchError(f"{info['dir']}: shard uses policy {info['policy_id']!r}")
        if info["layout"] != self.layout.to_dict() or info["policy_id"] != self.policy_id:
            raise MismatchError(f"{info['dir']}: shard {i}'s layout or policy differs "
                                "from the cluster's")

    def _start(self, i: int, node_ip: str | None):
        """A new actor for shard i: on the node its directory was placed on, else spread."""
        ray = self._ray
        opts = {k: v for k, v in self._options.items()}
        if node_ip is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            node = node_id(ray, node_ip)
            if node is None:
                raise StoreIOError(f"{self.dirs[i]}: shard {i}'s node {node_ip} is not in the "
                                   "Ray cluster (start it, or see docs/cluster.md: moving a shard)")
            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
        else:
            opts["scheduling_strategy"] = "SPREAD"
        return ray.remote(ShardActor).options(**opts).remote(
            self.dirs[i], i, self.shard_bits, self._store_kwargs, self.ranges[i])

    # ------------------------------------------------------------ remote calls
    def _call(self, shards, submit) -> dict:
        """Run ``submit(i)`` (returns an ObjectRef) for every shard and gather the
        results; an actor that died or is restarting gets the same call again (the
        batch id inside makes it exactly-once); a dead actor is started anew on its
        directory. Errors raised by a shard come back as themselves."""
        from ray.exceptions import ActorDiedError, GetTimeoutError, RayActorError, RayTaskError

        self._check_open()
        refs = {i: submit(i) for i in shards}
        out, tries = {}, {}
        while refs:
            for i in list(refs):
                try:
                    out[i] = self._ray.get(refs[i])
                except RayTaskError as e:
                    if isinstance(e.cause, SeenStoreError):
                        raise e.cause from None
                    raise
                except (RayActorError, GetTimeoutError) as e:
                    tries[i] = tries.get(i, 0) + 1
                    self.counters["retries"] += 1
                    if tries[i] > self.retries:
                        raise StoreIOError(f"shard {i} ({self.dirs[i]}) unavailable after "
                                           f"{self.retries} retries: {type(e).__name__}") from e
                    time.sleep(min(0.05 * 2 ** tries[i], 2.0))
                    if isinstance(e, ActorDiedError) and self._owner:
                        self._revive(i)
                    refs[i] = submit(i)
                    continue
                del refs[i]
        return out

    def _revive(self, i: int) -> None:
        """Start shard i again in a new process (its restarts were used up or it was
        killed for good): the store reopens and the answer log resolves the batch."""
        try:
            self._ray.kill(self.actors[i], no_restart=True)
        except Exception:
            pass
        ip = None
        if self.root is not None:
            ip = read_cluster(self.root)["shards"][i].get("node_ip")
        self.actors[i] = self._start(i, ip)
        self.counters["revived"] += 1

    def _parts(self, keys: np.ndarray, sorted_unique: bool) -> tuple[np.ndarray, np.ndarray]:
        """(keys grouped by shard, start of each shard's group + the end)."""
        if len(self.ranges) == 1:
            return keys, np.array([0, len(keys)], dtype=np.int64)
        if sorted_unique:
            starts = np.array([key_bounds(r)[0] for r in self.ranges], dtype=np.uint64)
            return keys, np.append(np.searchsorted(keys, starts), len(keys)).astype(np.int64)
        # grouped by the top 8 bits (as fast as by 1, whose scatter is a chain of stores
        # to 2 slots); a shard's part is its ranges' groups, consecutive
        part, bounds = partition(keys, RANGE_BITS, self.threads, pool=self._pool)
        return part, bounds[self._cuts]

    def _put(self, parts: dict) -> dict:
        """Each part into Ray's object store (a copy each), on the client's threads."""
        if len(parts) < 2 or sum(len(p) for p in parts.values()) < PARALLEL_MIN_KEYS:
            return {i: self._ray.put(p) for i, p in parts.items()}
        return dict(zip(parts, self._pool.map(self._ray.put, parts.values())))

    def _check_open(self) -> None:
        """A closed store (its actors stopped; or a copy taken after that) has no shard
        to ask: every call raises rather than answer from none."""
        if not self.actors:
            raise ClosedError("the sharded store is closed (its shard actors are stopped)")

    def _admit(self, keys: np.ndarray, batch_id: str | None, sorted_unique: bool,
               initial: dict | None = None):
        """Send each shard its part of the batch; return (grouped keys, bounds, the
        answer of every shard that got keys: sorted new keys). ``initial``: checked
        fields of a ``check_update``, each shard gets its keys' part of them."""
        self._check_open()
        bid = batch_id or uuid.uuid4().hex
        t0 = time.perf_counter()
        if initial is None:
            part, bounds = self._parts(keys, sorted_unique)
            parts = {}
        else:  # the fields follow the keys: a stable grouping keeps first occurrences
            order, part, bounds = self._grouped(keys)
            parts = _field_parts(initial, order, bounds)
        t1 = time.perf_counter()
        jobs = [i for i in range(len(self.actors)) if bounds[i] < bounds[i + 1]]
        refs = self._put({i: part[bounds[i]:bounds[i + 1]] for i in jobs})
        t2 = time.perf_counter()
        acked = {i: self._unacked.pop(i, []) for i in jobs}
        answers = self._call(jobs, lambda i: self.actors[i].admit.remote(
            bid, refs[i], sorted_unique, acked[i], parts.get(i)))
        t3 = time.perf_counter()
        for i in jobs:  # read: the shard may drop the batch's entry
            if self._owner:  # told with this client's next call to the shard
                self._unacked[i] = [bid]
            else:  # a copy in a Ray task has no next call: now (not waited for)
                self.actors[i].ack.remote([bid])
        n_out = sum(a.nbytes for a in answers.values())
        self.counters["batches"] += 1
        self.counters["object_store_bytes_in"] += 8 * len(keys)
        self.counters["object_store_bytes_out"] += n_out
        self.last_timings = {"batch_id": bid, "partition_s": t1 - t0, "put_s": t2 - t1,
                             "shards_s": t3 - t2, "offered": len(keys),
                             "object_store_bytes": 8 * len(keys) + n_out,
                             "shard_keys": {i: int(bounds[i + 1] - bounds[i]) for i in jobs}}
        return part, bounds, answers

    def _new_sorted(self, answers: dict) -> np.ndarray:
        parts = [answers[i] for i in sorted(answers)]  # shards ascend: so do their keys
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)

    # ------------------------------------------------------------------ calls
    def add(self, keys, *, batch_id: str | None = None) -> np.ndarray:
        """``SeenStore.add`` over the shards: a mask aligned with ``keys``, True exactly
        where the key was never admitted before and this is its first occurrence.
        ``batch_id``: give the id of a call that raised to retry it exactly once
        (default: a new id; the id used is in ``last_timings["batch_id"]``)."""
        keys = as_keys(keys)
        _, _, answers = self._admit(keys, batch_id, False)
        t = time.perf_counter()
        mask = mark_first_new(keys, self._new_sorted(answers))
        self.last_timings["align_s"] = time.perf_counter() - t
        return mask

    def add_new(self, keys, *, batch_id: str | None = None) -> np.ndarray:
        """``SeenStore.add_new`` over the shards: the new keys, sorted, each once."""
        keys = as_keys(keys)
        _, _, answers = self._admit(keys, batch_id, False)
        return self._new_sorted(answers)

    def add_sorted(self, uniq: np.ndarray, progress=None, *, approx_answered: int = 0,
                   batch_id: str | None = None) -> np.ndarray:
        """``SeenStore.add_sorted`` (DedupStage's call): mask of the new keys among
        sorted unique ``uniq``. ``approx_answered`` is not recorded by shards."""
        uniq = as_keys(uniq)
        mask = np.zeros(len(uniq), dtype=np.bool_)
        part, bounds, answers = self._admit(uniq, batch_id, True)
        for i, new in answers.items():
            lo, hi = int(bounds[i]), int(bounds[i + 1])
            mask[lo + np.searchsorted(part[lo:hi], new)] = True
        return mask

    def contains(self, keys) -> np.ndarray:
        """Mask over ``keys``: True where the key has been admitted. Reads only."""
        keys = as_keys(keys)
        part, bounds = self._parts(keys, False)
        jobs = [i for i in range(len(self.actors)) if bounds[i] < bounds[i + 1]]
        refs = self._put({i: part[bounds[i]:bounds[i + 1]] for i in jobs})
        found = self._call(jobs, lambda i: self.actors[i].contains.remote(refs[i]))
        return mark_members(keys, self._new_sorted(found))

    def forget(self, keys) -> int:
        """``SeenStore.forget`` over the shards: each stored key among ``keys`` becomes
        absent (``contains`` False, out of ``len``) and new again when offered; keys not
        stored are ignored. One commit per shard holding any of them; returns the number
        forgotten. Idempotent, so a call repeated after a failure forgets nothing twice
        (a retried batch id still gets its first answer: docs/cluster.md)."""
        keys = as_keys(keys)
        part, bounds = self._parts(keys, False)
        jobs = [i for i in range(len(self.actors)) if bounds[i] < bounds[i + 1]]
        refs = self._put({i: part[bounds[i]:bounds[i + 1]] for i in jobs})
        done = self._call(jobs, lambda i: self.actors[i].forget.remote(refs[i]))
        return sum(int(n) for n in done.values())

    def maybe_contains(self, keys) -> np.ndarray:
        """Mask over ``keys``: False where certainly never admitted (each shard's Bloom
        filter). What a DedupStage on top asks as ``store.bloom.query``."""
        return self._by_shard(as_keys(keys), "maybe_contains", np.bool_)

    def _grouped(self, keys: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
        """(order, keys[order], bounds): ``keys`` grouped by shard, stable (a key's
        occurrences keep their order), shard i's at ``bounds[i]:bounds[i + 1]``;
        order None when it is the identity."""
        n = len(self.ranges)
        if n == 1 or len(keys) == 0:
            bounds = np.zeros(n + 1, dtype=np.int64)
            if n == 1:
                bounds[1] = len(keys)
            return None, keys, bounds
        sid = self._shard_of[(keys >> np.uint64(64 - RANGE_BITS)).astype(np.int64)]
        order = np.argsort(sid, kind="stable")
        return order, keys[order], np.searchsorted(sid[order], np.arange(n + 1))

    def _by_shard(self, keys: np.ndarray, method: str, dtype,
                  fields: dict | None = None) -> np.ndarray:
        """Shard method ``method`` on each shard's part of ``keys`` (for every shard
        holding any), its answers (arrays aligned with the part) aligned with ``keys``.
        ``fields``: checked fields (scalars, or arrays aligned with ``keys``), each
        shard's part passed after its keys."""
        order, part, bounds = self._grouped(keys)
        jobs = [i for i in range(len(self.actors)) if bounds[i] < bounds[i + 1]]
        extra = {} if fields is None else _field_parts(fields, order, bounds)
        res = self._call(jobs, lambda i: getattr(self.actors[i], method).remote(
            part[bounds[i]:bounds[i + 1]], *([extra[i]] if fields is not None else [])))
        return _ungrouped(res, order, bounds, len(keys), dtype)

    # ------------------------------------------------ values (a store with values)
    def _need_values(self) -> None:
        if not self.values:
            raise NotSupportedError("the sharded store keeps no values (create it with "
                                    "values=True)")

    def check_update(self, keys, *, batch_id: str | None = None, **initial) -> np.ndarray:
        """``SeenStore.check_update`` over the shards: admit ``keys`` as ``add`` does
        and give each new key a full record (``initial``: fields as scalars or arrays
        aligned with ``keys``; a new key takes its first occurrence's). Returns the
        mask of ``add``. One batch per shard; ``batch_id`` as ``add`` (a retry gets the
        first answer, and the records written by the first run stay)."""
        from seenstore.store.values import check_fields

        self._need_values()
        keys = as_keys(keys)
        fields = check_fields(initial, len(keys), "check_update")
        _, _, answers = self._admit(keys, batch_id, False, fields)
        return mark_first_new(keys, self._new_sorted(answers))

    def update(self, keys, **fields) -> np.ndarray:
        """``SeenStore.update`` over the shards: set the named fields of the stored
        ``keys``; the mask of keys updated. One commit per shard holding any; fields
        are checked before any shard sets one. Sets fields, so a retry after a failure
        changes nothing more."""
        from seenstore.store.values import check_fields

        self._need_values()
        keys = as_keys(keys)
        if not fields:
            raise InvalidInputError("update needs at least one field to set")
        return self._by_shard(keys, "update", np.bool_,
                              check_fields(fields, len(keys), "update"))

    def get(self, keys) -> np.ndarray:
        """``SeenStore.get`` over the shards: records aligned with ``keys``."""
        from seenstore.store.values import GET_DTYPE

        self._need_values()
        keys = as_keys(keys)
        return self._by_shard(keys, "get", GET_DTYPE)

    def counts(self) -> dict:
        """{State: stored keys in it} over the shards, summing to ``len(self)``."""
        from seenstore.frontier.state import State

        self._need_values()
        res = self._call(range(len(self.actors)), lambda i: self.actors[i].counts.remote())
        return {s: sum(int(r.get(int(s), 0)) for r in res.values()) for s in State}

    def due(self, now: int, limit: int | None = None) -> np.ndarray:
        """``SeenStore.due`` over the shards: keys whose ``next_due`` is set and <=
        ``now``, by ``next_due`` then key, at most ``limit``."""
        from seenstore.store.values import check_limit, check_now

        self._need_values()
        now, limit = check_now(now), check_limit(limit, "due")
        res = self._call(range(len(self.actors)),
                         lambda i: self.actors[i].due.remote(now, limit))
        keys = np.concatenate([res[i][0] for i in sorted(res)])
        nd = np.concatenate([res[i][1] for i in sorted(res)])
        return keys[np.lexsort((keys, nd))[:limit]]

    def select(self, state, limit: int | None = None) -> np.ndarray:
        """``SeenStore.select`` over the shards: keys in ``state``, ascending (shards
        hold ascending key ranges), at most ``limit``."""
        from seenstore.frontier.state import parse_state
        from seenstore.store.values import check_limit

        self._need_values()
        state, limit = int(parse_state(state)), check_limit(limit, "select")
        res = self._call(range(len(self.actors)),
                         lambda i: self.actors[i].select.remote(state, limit))
        out = np.concatenate([res[i] for i in sorted(res)])
        return out[:limit]

    def __len__(self) -> int:
        return sum(s["keys"] for s in self.shard_stats())

    def shard_stats(self) -> list[dict]:
        res = self._call(range(len(self.actors)), lambda i: self.actors[i].stats.remote())
        return [res[i] for i in range(len(self.actors))]

    def stats(self) -> dict:
        """Totals over the shards, each shard's own ``stats``, and the client's counters."""
        per = self.shard_stats()
        keys = sum(s["keys"] for s in per)
        disk = sum(s["bytes_on_disk"] for s in per)
        return {"root": self.root, "shards": len(per), "shard_bits": self.shard_bits,
                "keys": keys, "bytes_on_disk": disk,
                "bytes_per_key": disk / keys if keys else None,
                "layout": self.layout.describe(), "policy_id": self.policy_id,
                "largest_shard_keys": max(s["keys"] for s in per),
                "ranges": [list(r) for r in self.ranges],
                "client": dict(self.counters), "per_shard": per}

    def verify(self) -> dict:
        """Every shard's full check (runs, checksums, its key range). Raises
        CorruptionError on the first fault."""
        res = self._call(range(len(self.actors)), lambda i: self.actors[i].verify.remote())
        return {"keys": sum(r["keys"] for r in res.values()), "shards": len(res),
                "per_shard": [res[i] for i in range(len(res))]}

    def close(self, save_bloom: bool = True) -> None:
        """Close every shard's store (saving Bloom filters) and stop the actors."""
        self._pool.shutdown(wait=False)
        if not self.actors or not self._owner:
            return
        try:
            self._call(range(len(self.actors)), lambda i: self.actors[i].close.remote(
                save_bloom, self._unacked.get(i, [])))
            self._unacked = {}
        finally:
            self._kill_all()

    def _kill_all(self) -> None:
        for a in self.actors:
            if a is not None:
                try:
                    self._ray.kill(a, no_restart=True)
                except Exception:
                    pass
        self.actors = []

    def __enter__(self) -> "ShardedStore":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(save_bloom=exc_type is None)


def _ungrouped(res: dict, order, bounds, n: int, dtype) -> np.ndarray:
    """Shard answers (``res[i]`` aligned with shard i's grouped keys) aligned with the
    caller's keys again."""
    out = np.zeros(n, dtype=dtype)
    for i, r in res.items():
        out[bounds[i]:bounds[i + 1]] = r
    if order is not None:
        out[order] = out.copy()
    return out


def _field_parts(fields: dict, order, bounds) -> dict:
    """Checked fields (scalars, or arrays aligned with the caller's keys) cut for each
    shard holding keys of the grouping (``order``, ``bounds``): {shard: fields}."""
    grouped = {k: v if v.ndim == 0 or order is None else v[order] for k, v in fields.items()}
    return {i: {k: v if v.ndim == 0 else v[bounds[i]:bounds[i + 1]]
                for k, v in grouped.items()}
            for i in range(len(bounds) - 1) if bounds[i] < bounds[i + 1]}
