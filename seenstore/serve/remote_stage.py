"""``RemoteStage``: the DedupStage calls over a ``seenstore serve`` server, for a
crawler process that shares a store with others (``DedupStage.open("http://...")``
returns one; docs/serve.md, docs/stage.md).

``offer(items)`` sends the keys or URLs in one admitting request (``Client.add`` /
``add_urls``): the server group-commits them with every client's and answers each
item new to exactly one caller in the store's life, durably, so what ``offer``
returns is handed out as a local stage's ``now`` items are, and nothing is ever
held for a later call (``poll``/``flush`` return nothing). URL payloads default to
the URL as offered in its safe-rule form (normalised here; what has no canonical
form is in ``rejected``, not sent), and ``Admitted.keys`` are those forms' keys
(the server's keys under a policy with rules can differ). ``record_fetch`` and
``learn`` go to the server's store, and so do the frontier calls ``mark``, ``counts``
and ``requeue`` on a store with values. A request the server cannot answer raises
``ServerError`` after the client's retries (the same batch id each time).
"""

from __future__ import annotations


import numpy as np

from seenstore.admitted import Admitted, offered_items
from seenstore.errors import ClosedError, InvalidInputError
from seenstore.keys.batch import as_keys
from seenstore.serve.client import Client
from seenstore.url.fastpath import normalise_many
from seenstore.url.fingerprint import fingerprint_many

_EMPTY = np.empty(0, dtype=np.uint64)


class RemoteStage:
    """DedupStage's calls over ``client`` (see the module docstring)."""

    def __init__(self, client: Client):
        self.client = client
        self._closed = False
        self._stats = dict.fromkeys(("offered", "urls_offered", "rejected_urls",
                                     "admitted_now", "requests"), 0)

    @classmethod
    def open(cls, url: str, token: str | None = None, **client_options) -> RemoteStage:
        return cls(Client(url, token, **client_options))

    def offer(self, items, payloads=None, *, base: str | None = None) -> Admitted:
        if self._closed:
            raise ClosedError("the dedup stage is closed")
        items, is_urls = offered_items(items)
        if payloads is not None and len(payloads) != len(items):
            raise InvalidInputError("payloads must have one entry per offered item")
        self._stats["offered"] += len(items)
        self._stats["requests"] += 1
        if not is_urls:
            keys = as_keys(items)
            new = self.client.add(keys) if len(keys) else np.zeros(0, dtype=bool)
            pl = None if payloads is None else [p for p, m in zip(payloads, new) if m]
            self._stats["admitted_now"] += int(new.sum())
            return Admitted(keys[new], pl, int(new.sum()), [])
        nb = normalise_many(list(items), base)
        self._stats["urls_offered"] += len(items)
        self._stats["rejected_urls"] += len(nb.rejected)
        if not nb.urls:
            return Admitted(_EMPTY, [] if payloads is not None else None, 0, nb.rejected)
        new = self.client.add_urls(nb.urls)
        keys = fingerprint_many(nb.urls)
        chosen = [i for i, m in enumerate(new.tolist()) if m]
        pl = ([nb.urls[i] for i in chosen] if payloads is None
              else [payloads[nb.positions[i]] for i in chosen])
        self._stats["admitted_now"] += len(chosen)
        return Admitted(keys[new], pl, len(chosen), nb.rejected)

    async def offer_async(self, items, payloads=None, *, base: str | None = None) -> Admitted:
        """``offer`` on a worker thread (the HTTP call blocks)."""
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: self.offer(items, payloads, base=base))

    def poll(self) -> Admitted:
        return Admitted(_EMPTY, None, 0, [])

    def flush(self) -> Admitted:
        return self.poll()

    def record_fetch(self, url, status, **fields) -> dict:
        rec = {"url": url, "status": status, **{k: v for k, v in fields.items()
                                                 if v is not None}}
        return self.client.record_fetches([rec])

    def learn(self, apply: bool = True) -> dict:
        return self.client.learn(apply)

    # ------------------------------------------- the frontier (a store with values)
    def mark(self, items, state, **fields) -> int:
        """``DedupStage.mark`` on the server's store: set the ``state`` (and other
        ``fields``) of URLs (normalised by the server under its policy) or keys;
        returns how many stored keys were marked. Everything ``offer`` returned is
        stored already (the server commits before it answers). Under a policy with
        rules, mark URLs: ``Admitted.keys`` are the safe-rule forms' keys."""
        from seenstore.frontier.state import parse_state

        if self._closed:
            raise ClosedError("the dedup stage is closed")
        state = parse_state(state)
        items, is_urls = offered_items(items)  # checked as offers are, as a local stage's
        if is_urls:
            return int(self.client.update_urls(items, state=int(state), **fields).sum())
        keys = as_keys(items)
        if not len(keys):
            return 0
        return int(self.client.update(keys, state=int(state), **fields).sum())

    def counts(self) -> dict:
        """The server's store's keys per ``State`` (every client's)."""
        return self.client.counts()

    def requeue(self, limit: int | None = None) -> list:
        """What is IN_FLIGHT in the server's store, marked QUEUED again and returned:
        the URLs where the store keeps them, else the keys. The store is shared: this
        takes every client's IN_FLIGHT keys, so call it when the whole fleet restarts
        (or when this crawler is the only one)."""
        from seenstore.frontier.state import State
        from seenstore.serve.client import ServerError

        keys = self.client.select(State.IN_FLIGHT, limit)
        try:
            out = self.client.select_urls(State.IN_FLIGHT, limit)
        except ServerError as e:
            if e.status != 409:  # 409: the store keeps no URLs
                raise
            out = keys
        if len(keys):
            self.client.update(keys, state=int(State.QUEUED))
        return out

    def stats(self) -> dict:
        return dict(self._stats, server=self.client.url, retries=self.client.retries)

    def close(self, flush: bool = True) -> Admitted:
        if not self._closed:
            self._closed = True
            self.client.close()
        return self.poll()

    def __enter__(self) -> RemoteStage:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
