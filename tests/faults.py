"""The fault seam for reads: damage one byte of a store file at a random position
(flipped, or zeroed), run every read path against the damaged copy, and sort each
outcome into right (the answer of the undamaged store), error (CorruptionError or
NotSupportedError naming the damaged file; in the CLI exit 4 and one line naming
it) or wrong (any other answer, or any other failure). docs/format.md, "Damage".

``Stores.build`` makes small stores of every kind of file a reader touches: raw
runs of format 1.1 and 1.0, compressed runs (2.0), MANIFEST, BLOOM, a stage's WAL
segment. ``Trial`` damages one file and runs the paths. Used by
tests/system/crash/test_faults.py (a few hundred damages) and tools/fault_table.py
(1,000 and more, printing the table). Everything runs in this process (the CLI
through click's runner), so a trial costs milliseconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
from dataclasses import dataclass, field

import numpy as np
from click.testing import CliRunner

from seenstore.cli import main
from seenstore.errors import CorruptionError, NotSupportedError
from seenstore.store import SeenStore, buckets
from seenstore.store import wal as walmod
from seenstore.store.runs.reader import RunReader
from seenstore.store.runs.writer import RunWriter

KINDS = ("run 1.1", "run 2.0", "run 1.0", "MANIFEST", "BLOOM", "WAL")
# every read path: its name and what it reads (runs, manifest, Bloom filter, WAL)
PATHS = ("contains (read-only)", "contains (writer)", "check", "export", "dump-run", "verify",
         "merge", "merge (small: lookups)", "merge --memory (windows)", "compact",
         "stage", "upgrade")
OUTCOMES = ("right", "error", "wrong")
CLEAR = (CorruptionError, NotSupportedError)


@dataclass
class Store:
    """One prepared store: its directory, the keys it holds (runs), the WAL's keys
    (handed out, not merged), and the inputs and pristine answers of every path."""

    path: str
    stored: np.ndarray
    pending: np.ndarray
    answers: dict = field(default_factory=dict)


class Stores:
    """The stores every damage is made in: ``raw`` (runs 1.1), ``compressed`` (2.0),
    ``legacy`` (the raw store's runs rewritten as 1.0), each with ``shard_bits`` 2,
    two batches' runs per shard and a saved Bloom filter; ``wal``: the raw store and
    a WAL segment of keys a stage handed out (apart, so that the others' writers do
    not replay it: a replay is a batch, which would sweep every run first)."""

    def __init__(self, root: str, keys: int = 6000, seed: int = 41):
        self.root = root
        rng = np.random.default_rng(seed)
        every = np.unique(rng.integers(0, 2**64, 3 * keys, dtype=np.uint64))
        rng.shuffle(every)
        stored, pending, fresh = every[:keys], every[keys:keys + 200], every[keys + 200:]
        self.inputs = os.path.join(root, "inputs")
        os.makedirs(self.inputs, exist_ok=True)
        # probes: every stored and pending key and as many absent ones
        self.probe = np.concatenate([stored, pending, fresh[:keys]])
        self.batch = np.concatenate([stored[::3], pending[::2], fresh[keys:keys + keys // 3]])
        self.small = np.concatenate([stored[:10], pending[:3], fresh[-10:]])
        self.stage_keys = np.concatenate([stored[1::7], pending[1::5], fresh[-200:-100]])
        for name in ("probe", "batch"):
            getattr(self, name).astype("<u8").tofile(os.path.join(self.inputs, name + ".bin"))
        self.stores = {
            "raw": self._make("raw", stored, run_format=1),
            "compressed": self._make("compressed", stored, run_format=2),
        }
        legacy = os.path.join(root, "legacy")
        shutil.copytree(self.stores["raw"].path, legacy)
        for name in os.listdir(legacy):
            if name.endswith(".run"):
                _rewrite_as_1_0(os.path.join(legacy, name))
        self.stores["legacy"] = Store(legacy, np.sort(stored), np.empty(0, np.uint64))
        path = os.path.join(root, "wal")
        shutil.copytree(self.stores["raw"].path, path)
        w = walmod.WalWriter(path, 1, walmod.SYNC_NEVER)
        w.append(pending[:120])
        w.append(pending[120:])
        w.close()
        self.stores["wal"] = Store(path, np.sort(stored), np.sort(pending))
        for st in self.stores.values():
            st.answers = self.answers(st.path, pristine=True)
            st.answers["dump-run"] = {  # per run file
                os.path.join(st.path, n): _dump_run(self, st.path, os.path.join(st.path, n))
                for n in os.listdir(st.path) if n.endswith(".run")}

    def _make(self, name: str, stored, run_format: int) -> Store:
        path = os.path.join(self.root, name)
        half = len(stored) // 2
        with SeenStore.open(path, create=True, shard_bits=2, sync=False, run_format=run_format,
                            bloom_capacity=4 * len(stored)) as s:
            s.compact_between_batches = False
            s.add_new(stored[:half])
            s.add_new(stored[half:])
        return Store(path, np.sort(stored), np.empty(0, np.uint64))

    def files(self, kind: str) -> tuple[Store, list]:
        """The store a damage of ``kind`` goes into and its files of that kind."""
        store = self.stores[{"run 2.0": "compressed", "run 1.0": "legacy",
                             "WAL": "wal"}.get(kind, "raw")]
        names = sorted(os.listdir(store.path))
        if kind.startswith("run"):
            pick = [n for n in names if n.endswith(".run")]
        elif kind == "MANIFEST":
            pick = ["MANIFEST"]
        elif kind == "BLOOM":
            pick = [n for n in names if n.startswith("BLOOM")]
        else:
            pick = [n for n in names if n.endswith(".wal")]
        return store, [os.path.join(store.path, n) for n in pick]

    # ------------------------------------------------------------------- paths
    def answers(self, path: str, pristine: bool = False, file: str | None = None,
                only: tuple = PATHS) -> dict:
        """``{path name: answer or exception}`` of every read path on the store at
        ``path`` (writers on copies of it). ``file``: the damaged file (dump-run
        reads it when it is a run)."""
        out = {}
        for name in only:
            try:
                out[name] = _PATHS[name](self, path, file)
            except Exception as e:
                if pristine:
                    raise
                out[name] = e
        return out


def _rewrite_as_1_0(path: str) -> None:
    """Rewrite a 1.1 run as 1.0 (same keys, same body checksum: the manifest and
    the Bloom binding still hold), as seenstore before 1.1 wrote it."""
    r = RunReader(path)
    h, keys = r.header, np.array(r.keys)
    r.close()
    os.unlink(path)
    w = RunWriter(path, h.host_bits, h.shard_bits, h.shard, h.policy_digest, minor=0)
    w.write(keys)
    assert w.finish(sync=False).body_checksum == h.body_checksum


class CliFailed(Exception):
    """A CLI run that did not exit 0: its exit code and stderr."""

    def __init__(self, code: int, stderr: str):
        super().__init__(f"exit {code}: {stderr}")
        self.code, self.stderr = code, stderr


def _cli(args: list) -> str:
    r = CliRunner().invoke(main, args, catch_exceptions=True)
    if r.exit_code:
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            raise r.exception  # a traceback, not a one-line error: never clear
        raise CliFailed(r.exit_code, r.stderr)
    return r.stdout


@contextlib.contextmanager
def _copy(path: str):
    """A scratch copy of store ``path`` for a path that writes: hard links, since a
    writer never changes a file in place (runs are immutable, the manifest and the
    Bloom files are replaced by a rename, WAL segments deleted; only LOCK's text)."""
    target = path.rstrip("/") + ".w"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(path, target, copy_function=os.link)
    try:
        yield target
    finally:
        shutil.rmtree(target, ignore_errors=True)


def _contains_ro(st: Stores, path, file):
    with SeenStore.open(path, readonly=True) as s:
        return s.contains(st.probe).tobytes()


def _contains_rw(st: Stores, path, file):
    with _copy(path) as w, SeenStore.open(w, sync=False) as s:  # replays the WAL first
        return s.contains(st.probe).tobytes()


def _check(st: Stores, path, file):
    return _cli(["check", "--keys", os.path.join(st.inputs, "probe.bin"), "--store", path])


def _export(st: Stores, path, file):
    out = path.rstrip("/") + ".export"
    try:
        _cli(["export", "--store", path, "-o", out])
        with open(out, "rb") as f:
            return f.read()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(out)


def _dump_run(st: Stores, path, file):
    if file is None or not file.endswith(".run"):
        return None  # reads one run file: not this damage's
    return _cli(["dump-run", file, "-n", "100000", "--json"])


def _verify(st: Stores, path, file):
    doc = json.loads(_cli(["verify", "--store", path, "--json"]))
    doc.pop("seconds")
    return doc


def _merge(st: Stores, path, file):
    with _copy(path) as w:
        out = os.path.join(w, "new.bin")
        doc = json.loads(_cli(["merge", os.path.join(st.inputs, "batch.bin"), "--store", w,
                               "--new-out", out, "--json"]))
        with open(out, "rb") as f:
            return doc["new"], f.read()


def _merge_small(st: Stores, path, file):
    with _copy(path) as w, SeenStore.open(w, sync=False) as s:
        return s.add_new(st.small).tobytes()


class _TinySlices(buckets.Budget):
    """A spill budget whose slices hold 256 keys: every shard's bucket is checked in
    windows (check.check_window), each reading only the pages or blocks it needs."""

    def __init__(self, memory: int):
        super().__init__(memory)
        self.slice_keys = 256


def _merge_spilled(st: Stores, path, file):
    with _copy(path) as w, SeenStore.open(w, sync=False, bloom=False) as s:
        real = buckets.Budget
        buckets.Budget = _TinySlices
        try:
            out = os.path.join(w, "new.bin")
            fig = s.add_new_file(os.path.join(st.inputs, "batch.bin"), 16 << 20, new_out=out)
        finally:
            buckets.Budget = real
        with open(out, "rb") as f:
            return fig["new"], f.read()


def _stored_keys(s: SeenStore) -> bytes:
    return b"".join(np.ascontiguousarray(c).tobytes() for c in s.iter_keys())


def _compact(st: Stores, path, file):
    with _copy(path) as w, SeenStore.open(w, sync=False, bloom=False) as s:
        s.compact()
        return _stored_keys(s)


def _stage(st: Stores, path, file):
    from seenstore.stage import DedupStage

    with _copy(path) as w:
        stage = DedupStage.open(w, sync=False, wal_sync=walmod.SYNC_NEVER, budget_bytes=1 << 16,
                                cache_keys=1 << 10)
        try:
            got = [stage.offer(st.stage_keys).keys, stage.flush().keys]
        finally:
            stage.close(flush=False)
        return np.sort(np.concatenate(got)).tobytes()


def _upgrade(st: Stores, path, file):
    with _copy(path) as w, SeenStore.open(w, sync=False, bloom=False) as s:
        s.upgrade()
        return _stored_keys(s)


_PATHS = {"contains (read-only)": _contains_ro, "contains (writer)": _contains_rw,
          "check": _check, "export": _export, "dump-run": _dump_run, "verify": _verify,
          "merge": _merge, "merge (small: lookups)": _merge_small,
          "merge --memory (windows)": _merge_spilled, "compact": _compact, "stage": _stage,
          "upgrade": _upgrade}
assert tuple(_PATHS) == PATHS


# ------------------------------------------------------------------ damages
@dataclass
class Damage:
    kind: str
    file: str
    offset: int
    op: str  # "flip" (xor with a random non-zero byte) or "zero"
    old: int = 0
    new: int = 0


def damage(stores: Stores, kind: str, rng: random.Random) -> tuple[Store, Damage]:
    """Pick a file of ``kind`` and a byte of it, and say what it becomes."""
    store, files = stores.files(kind)
    file = rng.choice(files)
    offset = rng.randrange(os.path.getsize(file))
    op = rng.choice(("flip", "zero"))
    return store, Damage(kind, file, offset, op, 0, rng.randrange(1, 256))


@contextlib.contextmanager
def damaged(d: Damage):
    """The damage applied to its file (the store itself), undone afterwards."""
    with open(d.file, "r+b") as f:
        f.seek(d.offset)
        d.old = f.read(1)[0]
        value = 0 if d.op == "zero" else d.old ^ d.new
        f.seek(d.offset)
        f.write(bytes([value]))
    try:
        yield d
    finally:
        with open(d.file, "r+b") as f:
            f.seek(d.offset)
            f.write(bytes([d.old]))


def outcome(got, want, d: Damage) -> tuple[str, str]:
    """("right" | "error" | "wrong", why) for one path's result ``got``."""
    name = os.path.basename(d.file)
    if isinstance(got, CliFailed):
        lines = got.stderr.strip().splitlines()
        if got.code == 4 and len(lines) == 1 and name in lines[0]:
            return "error", lines[0]
        return "wrong", f"unclear CLI failure: exit {got.code}: {got.stderr.strip()!r}"
    if isinstance(got, CLEAR):
        if name in str(got):
            return "error", str(got)
        return "wrong", f"error not naming {name}: {got!r}"
    if isinstance(got, Exception):
        return "wrong", f"unexpected {got!r}"
    if _same(got, want):
        return "right", ""
    return "wrong", "a different answer"


def _same(a, b) -> bool:
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(_same, a, b))
    return a == b


def trial(stores: Stores, kind: str, rng: random.Random) -> tuple[Damage, dict]:
    """One damage of ``kind``: ``{path: (outcome, why)}``. ``verify`` answering "ok"
    while another path met damage is wrong too (it missed what a read noticed)."""
    store, d = damage(stores, kind, rng)
    with damaged(d):
        got = stores.answers(store.path, file=d.file)
    want = dict(store.answers, **{"dump-run": store.answers["dump-run"].get(d.file)})
    res = {p: outcome(got[p], want[p], d) for p in PATHS}
    if res["verify"][0] == "right" and any(o == "error" for o, _ in res.values()):
        res["verify"] = ("wrong", "verify passed a store a read found damaged")
    return d, res


def table(counts: dict, kinds=KINDS) -> str:
    """counts[(kind, path)][outcome] as a text table: a row per path, per kind
    "right/error/wrong"."""
    head = ["path"] + list(kinds)
    rows = [head]
    for p in PATHS:
        row = [p]
        for k in kinds:
            c = counts.get((k, p))
            row.append("-" if not c else "/".join(str(c.get(o, 0)) for o in OUTCOMES))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*r) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n(each cell: right / clear error / wrong)"


def run(stores: Stores, damages: int, seed: int = 0, kinds=KINDS, log=None):
    """``damages`` trials, the kinds in turn; returns (counts, damages by kind, the
    wrong outcomes as (damage, path, why))."""
    rng = random.Random(seed)
    counts: dict = {}
    per_kind: dict = {}
    wrong = []
    for i in range(damages):
        kind = kinds[i % len(kinds)]
        d, res = trial(stores, kind, rng)
        per_kind[kind] = per_kind.get(kind, 0) + 1
        for p, (o, why) in res.items():
            if p == "dump-run" and not d.file.endswith(".run"):
                continue  # reads a run file only
            c = counts.setdefault((kind, p), {})
            c[o] = c.get(o, 0) + 1
            if o == "wrong":
                wrong.append((d, p, why))
        if log is not None:
            log(i, d, res)
    return counts, per_kind, wrong


__all__ = ["KINDS", "PATHS", "Stores", "run", "table", "trial"]
