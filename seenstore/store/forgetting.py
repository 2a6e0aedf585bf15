"""``SeenStore.forget`` and ``drop_host``: stored keys join the tombstone set T
(tombstones.py) in a commit of their own; docs/frontier.md, "Forgetting".

Requires nothing of the caller: each call takes the writer's mutex and stops the
background compaction (its commits must not race this one) before it reads T.
"""

from __future__ import annotations

import numpy as np

from seenstore.errors import InvalidInputError, NotSupportedError
from seenstore.keys.batch import as_keys, prepare
from seenstore.store import check, kepturls, tombstones
from seenstore.store.files import fault, io_error
from seenstore.store.rebuild import host_prefixes
from seenstore.store.urls import store_normalised
from seenstore.url.fingerprint import fingerprint_many, url_host
from seenstore.url.normalise import Rejection, try_normalise
from seenstore.url.policy import DEFAULT_POLICY


def forget(store, keys) -> int:
    """``SeenStore.forget``'s body (its docstring)."""
    store._check_writable()
    uniq = prepare(as_keys(keys), store.threads)
    with store._mutex:
        store._join_compactor(stop=True)
        store._keeper.ready()  # a deferred insert's batch is committed: its keys stored
        doc, runs, t = tombstones.snapshot(store)
        cand = np.delete(uniq, tombstones.in_sorted(t, uniq))
        newly = cand[check.in_runs(store, runs, cand)] if len(cand) else cand
        if not len(newly):
            return 0
        gen = store.generation + 1
        tombstones.on_forgotten(store, newly, gen)
        try:
            entry = store._tomb.write(tombstones.joined(t, newly), gen, store.sync)
        except OSError as e:
            raise io_error(e, f"{store.path}: writing tombstones") from e
        try:
            fault("forget-written")
            fields = {**(store._take_fields() or {}), tombstones.FIELD: entry}
            store._commit(gen, [], [], {"forgotten": len(newly)}, step="forget-",
                          fields=fields)
        except BaseException:
            store._tomb.discard(entry)
            raise
        store._tomb.retire(doc.get(tombstones.FIELD), entry)
    if store.values:  # the reset records went to a value file: merge past the limit
        from seenstore.store import values
        values.maybe_merge(store)
    return int(len(newly))


def canonical_host(host: str) -> str:
    """``host`` as kept URLs spell it (lowercase, punycode, no port). Raises
    InvalidInputError for a string that is no host."""
    if not isinstance(host, str) or not host or "/" in host:
        raise InvalidInputError(f"drop_host needs a host name, got {host!r}")
    form = try_normalise(f"http://{host}/", None, DEFAULT_POLICY)
    if isinstance(form, Rejection):
        raise InvalidInputError(f"drop_host: {host!r} is not a host name ({form.name})")
    return url_host(form)


def host_urls(store, host: str) -> list[str]:
    """The kept URLs (safe-rule forms) whose host is ``host`` (canonical): only the
    blocks of the kept-URL files whose keys carry one of the host's hash prefixes
    are read."""
    layout = store.layout
    ub = layout.url_bits
    prefixes = host_prefixes([host], ub)
    out: list[bytes] = []
    for f in kepturls.open_all(store.path, store._doc):
        for p in prefixes.tolist():
            out.extend(f.read_range(p << ub, ((p + 1) << ub) - 1))
    urls = list(dict.fromkeys(u.decode("utf-8") for u in out))
    if not urls:
        return urls
    keys = fingerprint_many(urls, layout)  # a block may hold neighbours' URLs
    near = np.isin(keys >> np.uint64(ub), prefixes).tolist()
    return [u for u, k in zip(urls, near) if k and url_host(u) == host]


def drop_host(store, host: str) -> int:
    """``SeenStore.drop_host``'s body (its docstring)."""
    store._check_writable()
    if store.keep_urls is not True:
        raise NotSupportedError(
            f"{store.path}: drop_host needs kept URLs (this store keeps none: created with "
            "keep_urls=False or first fed keys); forget the host's keys with forget(keys)")
    urls = host_urls(store, canonical_host(host))
    if not urls:
        return 0
    keys = store_normalised(store, urls).keys
    return forget(store, keys)
