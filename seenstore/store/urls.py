"""URL calls on a store: ``add_urls`` and ``contains_urls`` under the policy the store
holds, and the kept URLs a URL batch writes (store/kepturls.py).

A URL is normalised with the safe rules first (its kept, safe-rule form and that
form's key, which orders the kept-URL file), then, when its host has a rule in the
store's policy, under the policy (the key the store admits). ``add_urls`` returns
a mask aligned with the input: True for the first occurrence of a URL whose key
was new; rejected URLs are False. When the store keeps URLs, the batch's new URLs
(in safe-rule form, one per new key: its first spelling in the batch) are written
to a kept-URL file before the batch commits and named by the same commit; a batch
that fails before its commit deletes it (the store's ``_drop_kept``).
Kept-URL files are merged size-tiered (``MAX_URL_FILES``) between batches.
"""

from __future__ import annotations

import os
import secrets

import numpy as np

from seenstore.errors import InvalidInputError, MismatchError
from seenstore.store import kepturls
from seenstore.url.fastpath import normalise_urls
from seenstore.url.fingerprint import fingerprint_many, url_host
from seenstore.url.normalise import FAST_PATH_MIN, NormalisedBatch, Rejection, try_normalise
from seenstore.url.policy import DEFAULT_POLICY, Policy

MAX_URL_FILES = 16  # more kept-URL files than this: the MERGE_FILES smallest are merged
MERGE_FILES = 8


class Normalised:
    """One URL batch under a policy: ``keys`` and ``canonical`` (the policy's forms),
    ``safe_keys`` and ``safe`` (the safe-rule forms) aligned, ``positions`` their
    input indices, ``n`` the inputs."""

    def __init__(self, keys, safe_keys, safe, positions, n, canonical=None):
        self.keys, self.safe_keys, self.safe, self.positions, self.n = (
            keys, safe_keys, safe, positions, n)
        self.canonical = safe if canonical is None else canonical

    def aligned(self, mask: np.ndarray) -> np.ndarray:
        out = np.zeros(self.n, dtype=np.bool_)
        out[self.positions] = mask
        return out


def normalised(urls, base: str | None, policy: Policy, layout, threads=None) -> Normalised:
    """``urls`` (a list of str/bytes, or a single str) under ``policy`` (see the
    module docstring). Raises InvalidInputError for a non-URL item or a bad base."""
    if isinstance(urls, (str, bytes)):
        urls = [urls]
    urls = list(urls)
    if not all(isinstance(u, (str, bytes)) for u in urls):
        raise InvalidInputError("URL calls take str or bytes URLs (use add/contains for keys)")
    if len(urls) >= FAST_PATH_MIN:
        fb = normalise_urls(urls, base, DEFAULT_POLICY, layout, threads=threads)
        safe, safe_keys, positions, rejected = fb.urls, fb.keys, fb.positions, fb.rejected
    else:
        from seenstore.url.normalise import check_base
        check_base(base)
        nb = NormalisedBatch.of(try_normalise(u, base, DEFAULT_POLICY) for u in urls)
        safe, rejected = nb.urls, nb.rejected
        safe_keys = fingerprint_many(safe, layout)
        positions = np.asarray(nb.positions, dtype=np.int64)
    keys, canonical = safe_keys, safe
    if policy.rules and len(safe):
        ruled = [i for i, u in enumerate(safe) if policy.rule_for(url_host(u)) is not None]
        if ruled:
            keys, canonical = safe_keys.copy(), list(safe)
            forms = [try_normalise(safe[i], None, policy) for i in ruled]
            ok = [not isinstance(f, Rejection) for f in forms]
            good = [i for i, o in zip(ruled, ok) if o]
            keys[good] = fingerprint_many([f for f, o in zip(forms, ok) if o], layout)
            for i, f, o in zip(ruled, forms, ok):
                if o:
                    canonical[i] = f
            if not all(ok):  # grew past the length limit under the policy: rejected
                pos = np.asarray(positions)
                rejected = sorted(list(rejected) + [(int(pos[i]), Rejection.TOO_LONG)
                                                    for i, o in zip(ruled, ok) if not o])
                keep = np.ones(len(safe), dtype=np.bool_)
                keep[[i for i, o in zip(ruled, ok) if not o]] = False
                kl = keep.tolist()
                safe = [u for u, k in zip(safe, kl) if k]
                canonical = [u for u, k in zip(canonical, kl) if k]
                keys, safe_keys = keys[keep], safe_keys[keep]
                positions = np.asarray(positions)[keep]
    out = Normalised(keys, safe_keys, safe, np.asarray(positions, dtype=np.int64), len(urls),
                     canonical)
    out.rejected = list(rejected)
    return out


def store_policy(store) -> Policy:
    policy = store.policy
    if policy is None:
        raise MismatchError(
            f"{store.path}: the store records only its policy's identity "
            f"({store.policy_id!r}), not the policy: open it with that policy "
            "(SeenStore.open(..., policy=...) or --policy) to offer URLs")
    return policy


def store_normalised(store, urls, base: str | None = None) -> Normalised:
    """``urls`` normalised under the policy ``store`` holds (``normalised``)."""
    return normalised(urls, base, store_policy(store), store.layout, store.threads)


def add_urls(store, urls, base: str | None = None) -> np.ndarray:
    """``SeenStore.add_urls``'s body (its docstring)."""
    store._check_writable()
    nz = store_normalised(store, urls, base)
    return nz.aligned(add_normalised(store, nz))


def add_normalised(store, nz: Normalised) -> np.ndarray:
    """Admit a normalised URL batch; return the mask over ``nz.keys`` (first
    occurrences of new keys), keeping the new URLs when the store keeps URLs."""
    keep = store.keep_urls
    if keep is None:  # decided by the store's first batch: URLs are kept if it is one
        keep = len(store) == 0
        store._batch_fields = {**(store._batch_fields or {}), "keep_urls": keep}
    if keep:
        store._on_new = KeptLinesHook(
            store, nz.keys, lambda m: [nz.safe[i] for i in np.flatnonzero(m).tolist()],
            nz.safe_keys)
    try:
        mask = store.add(nz.keys)
    finally:
        store._on_new = None
    if keep and len(store._doc.get("url_files", ())) > MAX_URL_FILES:
        merge_url_files(store)
    return mask


class KeptLinesHook:
    """The ``_on_new`` hook of ``store.add(keys)`` for a batch of URLs (admission
    calls it with the batch's new keys before the commit): ``lines_of(select)`` gives
    the URLs ``select`` (a mask over ``keys``) picks, in input order, as one bytes
    object of newline-terminated lines (pipeline.py's FastBatch) or a list;
    ``safe_keys`` are the keys of their safe-rule forms (default ``keys``: a batch
    made under a policy without rules is its safe-rule forms). It keeps the first
    occurrence of each new key; ``lines`` is then ``(mask, what lines_of gave)``,
    which is what the batch prints (the caller need not gather them again).

    An object, not a closure that sets an attribute on itself: such a function sits
    in a reference cycle (it names itself), so the batch it holds through
    ``lines_of`` (a crawl batch's normalised text, ~100 MB) lived on until the cyclic
    collector ran, and the process grew by a few batches of it."""

    def __init__(self, store, keys: np.ndarray, lines_of, safe_keys=None):
        self.store, self.keys, self.lines_of = store, keys, lines_of
        self.safe_keys = keys if safe_keys is None else safe_keys
        self.lines = None

    def __call__(self, new_keys: np.ndarray, gen: int) -> None:
        if not len(new_keys):
            return
        if len(new_keys) > 1 and not bool(np.all(new_keys[1:] > new_keys[:-1])):
            new_keys = np.unique(new_keys)
        mask = self.store._admission.mask_of(self.keys, new_keys)  # what add() will return
        text = self.lines_of(mask)
        self.lines = (mask, text)
        keep_new(self.store, text, gen, self.safe_keys[mask])


def contains_urls(store, urls, base: str | None = None) -> np.ndarray:
    """``SeenStore.contains_urls``'s body (its docstring)."""
    store._check_open()
    nz = store_normalised(store, urls, base)
    return nz.aligned(store.contains(nz.keys))


def keep_new(store, safe_urls, gen: int, safe_keys=None) -> str:
    """Write batch ``gen``'s new URLs (safe-rule forms: a list of str or UTF-8 bytes,
    or one bytes object of them each ending in a newline; ``safe_keys`` their keys,
    or computed) to its kept-URL file and stage the manifest fields naming it, for
    the batch's commit to take. Returns its path."""
    if isinstance(safe_urls, bytes) and safe_keys is None:
        safe_urls = safe_urls.split(b"\n")[:-1]
    raw = safe_urls if isinstance(safe_urls, bytes) else \
        [u.encode("utf-8") if isinstance(u, str) else u for u in safe_urls]
    if safe_keys is None:
        safe_keys = fingerprint_many([u.decode("utf-8") for u in raw], store.layout)
    path = os.path.join(store.path, kepturls.file_name(gen))
    entry = kepturls.write_file(path, safe_keys, raw, sync=store.sync)
    files = list(store._doc.get("url_files", [])) + [entry]
    store._batch_fields = {**(store._batch_fields or {}), "url_files": files,
                           "keep_urls": True}
    store._kept_written.append(path)
    return path


def kept_files(store) -> list:
    """The store's kept-URL files, opened and checked."""
    return kepturls.open_all(store.path, store._doc)


def merge_url_files(store, everything: bool = False) -> None:
    """Merge the ``MERGE_FILES`` smallest kept-URL files (``everything``: all) into one,
    committed alone (the runs do not change); the merged files are deleted after."""
    with store._mutex:
        store._join_compactor(stop=True)  # its commits must not race this one
        _merge_url_files(store, everything)


def _merge_url_files(store, everything: bool) -> None:
    entries = sorted(store._doc.get("url_files", []), key=lambda e: e["count"])
    group = entries if everything else entries[:MERGE_FILES]
    if len(group) < 2:
        return
    urls: list[bytes] = []
    for e in group:
        for lines in kepturls.KeptUrls(os.path.join(store.path, e["file"]), e).iter_all():
            urls.extend(lines)
    keys = fingerprint_many([u.decode("utf-8") for u in urls], store.layout)
    name = kepturls.file_name(store.generation, secrets.token_hex(4))
    path = os.path.join(store.path, name)
    entry = kepturls.write_file(path, keys, urls, sync=store.sync)
    gone = {e["file"] for e in group}
    files = [e for e in store._doc["url_files"] if e["file"] not in gone] + [entry]
    try:
        store._live.commit_counters(0, batches=0, fields={"url_files": files})
    except BaseException:
        os.unlink(path)
        raise
    for f in gone:
        try:
            os.unlink(os.path.join(store.path, f))
        except OSError:
            pass  # a leftover the next open removes
