"""Values beside keys: a record per stored key (state, retries, status, fetched_at,
next_due, digest) for a store created with ``values=True`` (docs/frontier.md,
"Values"; the files: valuefiles.py, docs/format.md "Value files").

A key with no record holds the all-zero record (QUEUED, nothing set), so a plain
``add`` writes nothing here. Each commit that sets values writes one value file
(entries sorted by key, each with the mask of fields it sets) before the commit and
the commit names it, last in the manifest's ``value_files``: a field's value is the
one of the newest file whose entry sets it (newest wins per field, by commit
sequence ``value_seq``). ``check_update`` writes the new keys' records with the
batch's own commit (a hook beside the kept-URL one, like kept URLs); ``update``
commits alone. Only consecutive files are merged (``maybe_merge``), so file order
stays commit order.

Counters: the manifest's ``value_counts`` holds, per state other than QUEUED, the
present keys in it, kept by every commit that changes a state; QUEUED is
``len(store)`` minus their sum, so the counts always sum to ``len(store)`` and
every path that admits keys without records (add, add_new, add_sorted,
add_new_file, a DedupStage) counts them QUEUED without a pass here. ``recount``
recomputes them.

This module is imported by the facade's value calls only: a store without values
never loads it.
"""

from __future__ import annotations

import os

import numpy as np

from seenstore.errors import InvalidInputError, NotSupportedError
from seenstore.frontier.state import State, parse_state
from seenstore.keys.batch import as_keys
from seenstore.store import check
from seenstore.store.files import fault
from seenstore.store.valuefiles import (FIELDS, FULL_MASK, GET_DTYPE, VALUE_DTYPE, ValueFile,
                                        columns, file_name, open_all, write_file)

__all__ = ["VALUE_DTYPE", "GET_DTYPE", "FIELDS", "State", "check_fields", "named_states",
           "check_update", "update", "get", "counts", "recount", "due", "select",
           "reset_records", "on_forget", "on_rebuild", "maybe_merge", "merge_value_files"]

MAX_VALUE_FILES = 16  # more value files than this: MERGE_FILES consecutive ones merged
MERGE_FILES = 8
N_STATES = len(State)


# ------------------------------------------------------------------ the manifest
def require(store) -> None:
    """NotSupportedError unless ``store`` was created with values."""
    store._check_open()
    if not store._doc.get("values"):
        raise NotSupportedError(
            f"{store.path}: the store keeps no values (create it with values=True)")


def _current(store, name: str, default):
    """A manifest field as the next commit will write it (staged, else committed)."""
    staged = store._batch_fields or {}
    return staged.get(name, store._doc.get(name, default))


def _stage(store, fields: dict) -> None:
    store._batch_fields = {**(store._batch_fields or {}), **fields}


def _moved(store, old_states: np.ndarray, new_states: np.ndarray | None) -> dict:
    """``value_counts`` after keys left ``old_states`` for ``new_states`` (None: the
    keys are no longer present)."""
    c = np.zeros(N_STATES, dtype=np.int64)
    for k, v in _current(store, "value_counts", {}).items():
        c[int(k)] = v
    c -= np.bincount(old_states, minlength=N_STATES)[:N_STATES]
    if new_states is not None:
        c += np.bincount(new_states, minlength=N_STATES)[:N_STATES]
    return {str(s): int(c[s]) for s in range(1, N_STATES) if c[s]}


def _write(store, keys: np.ndarray, mask: int, cols: dict) -> dict:
    """Write the next commit's value file (``keys`` sorted unique, every entry with
    field mask ``mask``, ``cols`` from ``_columns``) and return the manifest fields
    naming it after the files already named."""
    seq = int(_current(store, "value_seq", 0)) + 1
    path = os.path.join(store.path, file_name(seq))
    entry = write_file(path, keys, np.array(mask, dtype=np.uint8), cols, seq, seq,
                       sync=store.sync, threads=store.threads)
    store._kept_written.append(path)  # deleted if the commit does not happen
    return {"value_files": list(_current(store, "value_files", [])) + [entry],
            "value_seq": seq}


# ------------------------------------------------------------------ field values
def check_fields(given: dict, n: int, what: str) -> dict:
    """``given`` checked: known field names, each a scalar or an array of ``n``, cast
    to its dtype (``state``: a State, its number or its name, or a list of them).
    Public for callers that check before any store sets one (a ShardedStore's shards
    each set their part; the server checks before a request queues)."""
    out = {}
    for name, v in given.items():
        if name not in FIELDS:
            raise InvalidInputError(f"{what}: unknown value field {name!r} (fields: "
                                    f"{', '.join(FIELDS)})")
        if name == "state":
            v = named_states(v)
        a = np.asarray(v)
        if a.ndim not in (0, 1) or (a.ndim == 1 and len(a) != n):
            raise InvalidInputError(f"{what}: field {name!r} must be a scalar or an array "
                                    f"aligned with the {n} keys")
        if a.dtype.kind not in "biuf":
            raise InvalidInputError(f"{what}: field {name!r} must be numbers")
        if a.dtype.kind == "f" and not np.isfinite(a).all():  # NaN would cast to 0
            raise InvalidInputError(f"{what}: field {name!r} must be finite numbers")
        info = np.iinfo(VALUE_DTYPE[name])
        top = N_STATES - 1 if name == "state" else info.max
        if a.size and (a.min() < info.min or a.max() > top):
            raise InvalidInputError(f"{what}: field {name!r} out of range ({info.min}..{top})")
        out[name] = a.astype(VALUE_DTYPE[name])
    return out


def named_states(v):
    """``state`` as numbers where it is given by name ("DONE"): a name alone, or in a
    list, tuple or array (of names, or names among States and numbers)."""
    if isinstance(v, str):
        return int(parse_state(v))
    if isinstance(v, (list, tuple)) or (isinstance(v, np.ndarray) and v.dtype.kind in "USO"):
        return [int(parse_state(x)) if isinstance(x, str) else x for x in v]
    return v



def _columns(fields: dict, pick=None) -> dict:
    """Every field's column for ``write_file``: ``fields``' (arrays indexed by
    ``pick``, scalars as they are), the others 0 for every entry."""
    return {name: (fields[name] if fields[name].ndim == 0 or pick is None
                   else fields[name][pick]) if name in fields
            else np.zeros((), dtype=VALUE_DTYPE[name]) for name in FIELDS}


def _states(cols: dict, n: int) -> np.ndarray:
    """The ``n`` entries' states of ``_columns``' ``cols``."""
    st = cols["state"]
    return np.full(n, st, dtype=np.uint8) if st.ndim == 0 else st


def _mask_bits(names) -> int:
    return sum(1 << FIELDS.index(n) for n in names)


# ------------------------------------------------------------------ the sweeps
def _gather(store, uniq: np.ndarray, fields=FIELDS) -> np.ndarray:
    """The merged records of ``uniq`` (sorted unique keys): one pass over the value
    files, oldest first, decoding only the blocks that hold one of them, and in
    them only ``fields`` (the others stay 0)."""
    out = np.zeros(len(uniq), dtype=VALUE_DTYPE)
    if not len(uniq):
        return out
    for vf in open_all(store.path, store._doc):
        for k, m, r in vf.iter_blocks(vf.blocks_meeting(uniq), fields):
            # the keys asked for in this block's range, looked up in the block alone
            # (it stays in the cache; a search over a whole file's keys does not)
            lo, hi = np.searchsorted(uniq, [k[0], k[-1]])
            hi += hi < len(uniq) and uniq[hi] == k[-1]
            at = np.searchsorted(k, uniq[lo:hi])
            hit = np.flatnonzero(k[at] == uniq[lo:hi])
            at, got, hit = at[hit], m[at[hit]], hit + lo
            for name in fields:
                sets = ((got >> FIELDS.index(name)) & 1).astype(np.bool_)
                out[name][hit[sets]] = r[name][at[sets]]
    return out


def _merge(parts: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Entries of several files (``(keys, masks, recs)``, oldest first) as one: a key
    once, its mask the union, each field from its newest entry that sets it."""
    if not parts:
        return (np.zeros(0, np.uint64), np.zeros(0, np.uint8), np.zeros(0, VALUE_DTYPE))
    k = np.concatenate([p[0] for p in parts])
    m = np.concatenate([p[1] for p in parts])
    r = np.concatenate([p[2] for p in parts])
    order = np.argsort(k, kind="stable")  # within a key: file order, oldest first
    k, m, r = k[order], m[order], r[order]
    first = np.ones(len(k), dtype=np.bool_)
    first[1:] = k[1:] != k[:-1]
    starts = np.flatnonzero(first)
    group = np.cumsum(first) - 1
    keys = k[starts]
    masks = np.bitwise_or.reduceat(m, starts) if len(k) else m
    recs = np.zeros(len(keys), dtype=VALUE_DTYPE)
    for bit, name in enumerate(FIELDS):
        sel = np.flatnonzero((m >> bit) & 1)
        if len(sel):
            g = group[sel]
            last = sel[np.append(g[1:] != g[:-1], True)]  # each key's newest
            recs[name][group[last]] = r[name][last]
    return keys, masks.astype(np.uint8), recs


def _newest(store, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(keys, values): field ``name`` of every key that some value file sets, from
    its newest file (one sweep over the files; keys ascending)."""
    bit = np.uint8(1 << FIELDS.index(name))
    ks, vs = [], []
    for vf in open_all(store.path, store._doc):  # oldest first
        k, m, r = vf.read_blocks(fields=(name,))
        sets = (m & bit) != 0
        ks.append(k[sets])
        vs.append(r[name][sets])
    if not ks:
        return np.zeros(0, np.uint64), np.zeros(0, VALUE_DTYPE[name])
    k, v = np.concatenate(ks), np.concatenate(vs)
    order = np.argsort(k, kind="stable")  # within a key: file order, oldest first
    k, v = k[order], v[order]
    last = np.append(k[1:] != k[:-1], True)[:len(k)]  # each key's newest entry
    return k[last], v[last]


# ------------------------------------------------------------------ writing
class ValuesHook:
    """The values hook of ``store.add(keys)`` for ``check_update``: admission calls
    it with the batch's new keys (unique, sorted per shard) and generation before the
    commit; it writes their records (the first occurrence's fields) to a value file
    and stages the manifest fields for the batch's commit."""

    def __init__(self, store, keys: np.ndarray, fields: dict):
        self.store, self.keys, self.fields = store, keys, fields

    def __call__(self, new_keys: np.ndarray, gen: int) -> None:
        if not len(new_keys):
            return
        if not bool(np.all(new_keys[1:] >= new_keys[:-1])):  # sorted within each shard
            new_keys = np.sort(new_keys)
        if all(a.ndim == 0 for a in self.fields.values()):
            cols = _columns(self.fields)  # no alignment needed
        else:
            mask = self.store._admission.mask_of(self.keys, new_keys)  # what add() returns
            pos = np.flatnonzero(mask)
            pos = pos[np.argsort(self.keys[pos])]  # unique keys: any sort will do
            cols = _columns(self.fields, pos)
        fields = _write(self.store, new_keys, FULL_MASK, cols)
        if cols["state"].any():
            fields["value_counts"] = _moved(self.store, np.zeros(0, np.uint8),
                                            _states(cols, len(new_keys)))
        _stage(self.store, fields)


def check_update(store, keys, initial: dict, admit=None) -> np.ndarray:
    """``SeenStore.check_update``'s body (its docstring). ``admit(keys)``: the batch
    call that admits (default ``store.add``; a URL batch passes its own)."""
    require(store)
    keys = as_keys(keys)
    fields = {n: a for n, a in check_fields(initial, len(keys), "check_update").items() if a.any()}
    store._on_values = ValuesHook(store, keys, fields) if fields else None
    try:
        mask = (admit or store.add)(keys)
    finally:
        store._on_values = None
    maybe_merge(store)
    return mask


def update(store, keys, fields: dict) -> np.ndarray:
    """``SeenStore.update``'s body (its docstring)."""
    require(store)
    store._check_writable()
    keys = as_keys(keys)
    if not fields:
        raise InvalidInputError("update needs at least one field to set")
    given = check_fields(fields, len(keys), "update")
    with store._mutex:
        store._join_compactor(stop=True)  # its commits must not race this one
        mask = check.contains(store, keys)  # every occurrence of a stored key
        pos = np.flatnonzero(mask)
        if len(pos):
            order = np.argsort(keys[pos])  # not stable: the last is taken by position
            pos = pos[order]
            sk = keys[pos]
            starts = np.flatnonzero(np.append(True, sk[1:] != sk[:-1]))
            uk = sk[starts]
            pos = np.maximum.reduceat(pos, starts)  # repeated keys: the last occurrence wins
        if len(pos):
            cols = _columns(given, pos)
            staged = {}
            if "state" in given:
                old = _gather(store, uk, ("state",))["state"]
                staged["value_counts"] = _moved(store, old, _states(cols, len(uk)))
            staged.update(_write(store, uk, _mask_bits(given), cols))
            _stage(store, staged)
            try:
                store._live.commit_counters(0, batches=0, fields=store._take_fields())
            except BaseException:
                store._drop_kept()
                raise
        _maybe_merge(store)
    return mask


def reset_records(store, keys, gen: int | None = None) -> None:
    """For forgetting (store/tombstones.py's caller): write a value file giving
    ``keys`` the all-zero record in every field, and stage it for the next commit
    (the forget's: it must take ``store._take_fields()``), so a forgotten key that
    is admitted again starts QUEUED with nothing set. ``gen`` is unused (the file
    is ordered by ``value_seq``). Call ``on_forget`` first (it reads the old states)."""
    require(store)
    uniq = np.unique(as_keys(keys))
    if len(uniq):
        _stage(store, _write(store, uniq, FULL_MASK, _columns({})))


def on_forget(store, keys) -> None:
    """For forgetting: ``keys`` (each present, about to be forgotten) leave the
    state counters; staged for the forget's commit. Call before ``reset_records``."""
    require(store)
    uniq = np.unique(as_keys(keys))
    if len(uniq):
        old = _gather(store, uniq, ("state",))["state"]
        _stage(store, {"value_counts": _moved(store, old, None)})


def on_rebuild(store, removed: np.ndarray, pairs: tuple[np.ndarray, np.ndarray] | None,
               entering: np.ndarray) -> None:
    """For a rebuild (store/rebuild.py, before its commit): the rebuilt hosts' stored
    keys ``removed`` leave, the keys ``entering`` (sorted unique: its new keys that
    were not stored and are not forgotten) come in. ``pairs``: (old key, new key) of
    each kept URL (None: the old keys are not known). A new key takes the record of
    the old key of its URLs that was fetched last (largest ``fetched_at``, then the
    higher state); an entering key without one starts QUEUED, a removed key that does
    not come back gets the all-zero record (as a forgotten one). Written to the next
    commit's value file, the counters moved; staged for the rebuild's commit (which
    must take ``store._take_fields()``)."""
    require(store)
    removed = np.unique(as_keys(removed))
    old = _gather(store, removed)
    recs = np.zeros(len(entering), dtype=VALUE_DTYPE)
    if pairs is not None and len(removed) and len(entering):
        o, n = pairs
        at = np.searchsorted(removed, o).clip(0, len(removed) - 1)
        to = np.searchsorted(entering, n).clip(0, len(entering) - 1)
        ok = (removed[at] == o) & (entering[to] == n)
        at, to = at[ok], to[ok]
        r = old[at]
        # per new key, the pair whose old record was fetched last, then the higher state
        order = np.lexsort((-r["state"].astype(np.int64), -r["fetched_at"], to))
        grouped = to[order]
        first = np.ones(len(order), dtype=np.bool_)
        first[1:] = grouped[1:] != grouped[:-1]
        pick = order[first]
        recs[to[pick]] = r[pick]
    # only what changes is written: a key that comes back with its own record (most
    # keys of a rebuilt host: the new policy changes few spellings) and a leaving key
    # whose record is already all zero keep the record the value files give them
    changed = np.ones(len(entering), dtype=np.bool_)
    if len(removed) and len(entering):
        at = np.searchsorted(removed, entering).clip(0, len(removed) - 1)
        changed = (removed[at] != entering) | (old[at] != recs)
    gone = np.isin(removed, entering, assume_unique=True, invert=True)
    dead = removed[gone & (old != np.zeros(1, dtype=VALUE_DTYPE))]
    keys = np.union1d(entering[changed], dead)
    cols = {name: np.zeros(len(keys), dtype=VALUE_DTYPE[name]) for name in FIELDS}
    at = np.searchsorted(keys, entering[changed])
    for name in FIELDS:
        cols[name][at] = recs[name][changed]
    staged = {}
    if len(keys):
        staged.update(_write(store, keys, FULL_MASK, cols))
    staged["value_counts"] = _moved(store, old["state"], recs["state"])
    _stage(store, staged)


# ------------------------------------------------------------------ merging
def maybe_merge(store) -> None:
    """Between batches: merge value files while more than ``MAX_VALUE_FILES``."""
    if len(store._doc.get("value_files", ())) > MAX_VALUE_FILES:
        with store._mutex:
            store._join_compactor(stop=True)
            _maybe_merge(store)


def _maybe_merge(store) -> None:
    while len(store._doc.get("value_files", ())) > MAX_VALUE_FILES:
        entries = store._doc["value_files"]
        sizes = np.array([e["bytes"] for e in entries], dtype=np.int64)
        window = np.convolve(sizes, np.ones(MERGE_FILES, dtype=np.int64), "valid")
        i = int(np.argmin(window))
        _merge_files(store, i, i + MERGE_FILES)


def merge_value_files(store) -> None:
    """Merge every value file into one (its own commit); nothing if at most one."""
    require(store)
    store._check_writable()
    with store._mutex:
        store._join_compactor(stop=True)
        n = len(store._doc.get("value_files", ()))
        if n > 1:
            _merge_files(store, 0, n)


def _merge_files(store, i: int, j: int) -> None:
    """Merge the consecutive value files ``i..j-1`` into one, committed alone (the
    runs do not change); the merged files are deleted after the commit."""
    entries = store._doc["value_files"]
    group = entries[i:j]
    keys, masks, recs = _merge([ValueFile(os.path.join(store.path, e["file"]), e).read_blocks()
                                for e in group])
    lo, hi = group[0]["seq"][0], group[-1]["seq"][1]
    path = os.path.join(store.path, file_name(lo, hi))
    entry = write_file(path, keys, masks, columns(recs), lo, hi, sync=store.sync,
                       threads=store.threads)
    fault("values-merge-written")
    files = entries[:i] + [entry] + entries[j:]
    try:
        store._live.commit_counters(0, batches=0, fields={"value_files": files})
    except BaseException:
        os.unlink(path)
        raise
    fault("values-merge-committed")
    for e in group:
        try:
            os.unlink(os.path.join(store.path, e["file"]))
        except OSError:
            pass  # a leftover the next open removes


# ------------------------------------------------------------------ reading
def get(store, keys) -> np.ndarray:
    """``SeenStore.get``'s body (its docstring)."""
    require(store)
    keys = as_keys(keys)
    uniq, inv = np.unique(keys, return_inverse=True)
    present = check.contains(store, uniq)
    out = np.zeros(len(uniq), dtype=GET_DTYPE)
    out["present"] = present
    recs = _gather(store, uniq[present])
    for name in FIELDS:
        out[name][present] = recs[name]
    return out[inv]


def counts(store) -> dict:
    """``SeenStore.counts``'s body: from the manifest's counters."""
    require(store)
    c = {State(int(k)): v for k, v in store._doc.get("value_counts", {}).items()}
    out = {s: c.get(s, 0) for s in State}
    out[State.QUEUED] = len(store) - sum(c.values())
    return out


def recount(store) -> dict:
    """The counts recomputed from the value files and the runs (one sweep of each):
    what ``counts`` must equal."""
    require(store)
    keys, states = _newest(store, "state")
    nq = states != 0
    keys, states = keys[nq], states[nq]
    states = states[check.contains(store, keys)]
    got = np.bincount(states, minlength=N_STATES)
    out = {s: int(got[s]) for s in State}
    out[State.QUEUED] = len(store) - int(got[1:].sum())
    return out


def check_now(now) -> int:
    """``now`` of ``due`` as whole seconds (an int or a finite float, truncated) within
    int64, the field's type; InvalidInputError otherwise (NaN, infinity, out of range,
    not a number)."""
    try:
        sec = int(now)
    except (TypeError, ValueError, OverflowError):
        raise InvalidInputError(f"due: now must be a number of seconds, got {now!r}") from None
    if not -(1 << 63) <= sec < (1 << 63):
        raise InvalidInputError(f"due: now {now!r} is out of range (a 64-bit count of seconds)")
    return sec


def check_limit(limit, what: str) -> int | None:
    """``limit`` of ``due``/``select``: None (no limit) or a whole number >= 0;
    InvalidInputError otherwise (a negative one would cut from the end)."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 0:
        raise InvalidInputError(f"{what}: limit must be None or a whole number >= 0, "
                                f"got {limit!r}")
    return int(limit)


def due(store, now: int, limit: int | None = None, times: bool = False):
    """``SeenStore.due``'s body (its docstring)."""
    require(store)
    now = check_now(now)
    limit = check_limit(limit, "due")
    keys, nd = _newest(store, "next_due")
    sel = (nd != 0) & (nd <= np.int64(now))
    keys, nd = keys[sel], nd[sel]
    here = check.contains(store, keys)
    keys, nd = keys[here], nd[here]
    order = np.lexsort((keys, nd))[:limit]
    return (keys[order], nd[order]) if times else keys[order]


def select(store, state, limit: int | None = None) -> np.ndarray:
    """``SeenStore.select``'s body (its docstring)."""
    require(store)
    state = parse_state(state)
    limit = check_limit(limit, "select")
    keys, st = _newest(store, "state")
    if state != State.QUEUED:
        keys = keys[st == state]
        keys = keys[check.contains(store, keys)]
        return keys[:limit]
    other = keys[st != 0]  # keys whose merged state is not QUEUED
    out, n = [], 0
    for chunk in store.iter_keys():
        if limit is not None and n >= limit:
            break
        at = np.minimum(np.searchsorted(other, chunk), max(len(other) - 1, 0))
        keep = chunk if not len(other) else chunk[other[at] != chunk]
        if limit is not None:
            keep = keep[:limit - n]
        out.append(keep.copy())
        n += len(keep)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.uint64)
