"""The URL forms of the value calls (store/values.py): ``check_update_urls``,
``update_urls``, ``get_urls`` normalise under the store's policy (store/urls.py
``normalised``) and call the key forms with the fields re-aligned to the URLs that
normalised; ``urls_of`` turns keys back into the kept URLs (safe-rule form) for
``due_urls`` and ``select_urls``.
"""

from __future__ import annotations

import numpy as np

from seenstore.errors import NotSupportedError
from seenstore.store import kepturls, urls as urlcalls, values
from seenstore.url.fingerprint import fingerprint_many


def fields_at(fields: dict, positions: np.ndarray, n: int) -> dict:
    """Fields aligned with ``n`` URLs, re-aligned with the ones that normalised."""
    out = {}
    for name, v in fields.items():
        a = np.asarray(v)
        if a.ndim == 1 and len(a) == n:
            a = a[positions]
        out[name] = a
    return out


def check_update_urls(store, urls, base, initial: dict) -> np.ndarray:
    """``SeenStore.check_update_urls``'s body (its docstring)."""
    values.require(store)
    store._check_writable()
    nz = urlcalls.store_normalised(store, urls, base)
    mask = values.check_update(store, nz.keys, fields_at(initial, nz.positions, nz.n),
                               admit=lambda _: urlcalls.add_normalised(store, nz))
    return nz.aligned(mask)


def update_urls(store, urls, base, fields: dict) -> np.ndarray:
    """``SeenStore.update_urls``'s body (its docstring)."""
    values.require(store)
    nz = urlcalls.store_normalised(store, urls, base)
    return nz.aligned(values.update(store, nz.keys, fields_at(fields, nz.positions, nz.n)))


def get_urls(store, urls, base=None) -> np.ndarray:
    """``SeenStore.get_urls``'s body (its docstring)."""
    values.require(store)
    nz = urlcalls.store_normalised(store, urls, base)
    out = np.zeros(nz.n, dtype=values.GET_DTYPE)
    out[nz.positions] = values.get(store, nz.keys)
    return out


def urls_of(store, keys: np.ndarray) -> list:
    """The kept URL (safe-rule form, str) of each of ``keys`` that has one, in the
    order of ``keys``. Under a policy without rules a key is its kept URL's key, so
    only the kept-URL blocks whose key range holds one of ``keys`` are read; under
    rules every kept URL is normalised under the policy (its key may differ)."""
    values.require(store)
    if not store.keep_urls:
        raise NotSupportedError(f"{store.path}: the store keeps no URLs (keep_urls): "
                                "use due/select for keys")
    policy = urlcalls.store_policy(store)
    want = np.unique(np.asarray(keys, dtype=np.uint64))
    found: dict = {}
    for kf in kepturls.open_all(store.path, store._doc):
        if not len(want):
            break
        for lines in kf.iter_all() if policy.rules else kf.blocks_holding(want):
            text = [u.decode("utf-8") for u in lines]
            if policy.rules:
                nz = urlcalls.normalised(text, None, policy, store.layout, store.threads)
                got, text = nz.keys, [text[i] for i in nz.positions.tolist()]
            else:
                got = fingerprint_many(text, store.layout)
            at = np.minimum(np.searchsorted(want, got), len(want) - 1)
            for i in np.flatnonzero(want[at] == got).tolist():
                found.setdefault(int(got[i]), text[i])
    return [found[k] for k in np.asarray(keys, dtype=np.uint64).tolist() if k in found]
