"""URL calls over a store: ``add_urls`` and ``contains_urls`` (masks aligned with the input).

Each URL is normalised under the store's policy and fingerprinted in the store's
layout (the batch fast path: ``normalise_urls``, the numba kernel or its twin,
and the scalar normaliser for what it routes there). A URL with no canonical form
is rejected: False in either mask. ``add_urls`` admits the keys as one store batch
(``store.add``), so the mask is True exactly where the URL's canonical form was
never admitted before and this is its first occurrence in the call.

These two are what the store itself gains as ``SeenStore.add_urls`` /
``SeenStore.contains_urls`` (issue 38); the server and these functions then call
those methods.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seenstore.errors import MismatchError
from seenstore.url.fastpath import FastBatch, normalise_urls
from seenstore.url.policy import DEFAULT_POLICY, Policy


def url_batch(urls: Sequence[str | bytes], layout, policy: Policy | None = None,
              base: str | None = None, threads: int | None = None) -> FastBatch:
    """The canonical forms and keys of ``urls`` (str or bytes items, a list) under
    ``policy`` (default: the safe rules) in ``layout``; ``positions`` say which input
    each key belongs to. Raises InvalidInputError for a bad ``base``."""
    return normalise_urls(urls if isinstance(urls, list) else list(urls), base,
                          policy or DEFAULT_POLICY, layout, threads=threads)


def aligned(fb: FastBatch, key_mask: np.ndarray) -> np.ndarray:
    """A mask over ``fb``'s inputs from one over its keys (rejected inputs: False)."""
    out = np.zeros(fb.n, dtype=bool)
    if len(fb.positions):
        out[fb.positions] = key_mask
    return out


def _check_policy(store, policy: Policy | None) -> Policy:
    policy = policy or DEFAULT_POLICY
    if policy.identity != store.policy_id:
        raise MismatchError(f"{store.path}: store was built with policy {store.policy_id!r}, "
                            f"not {policy.identity!r}")
    return policy


def add_urls(store, urls: Sequence[str | bytes], base: str | None = None,
             policy: Policy | None = None) -> np.ndarray:
    """Admit ``urls`` into ``store`` (one batch); a bool mask aligned with ``urls``: True
    where the canonical URL is new (first occurrence in the call), False where seen
    or rejected. ``policy`` must be the store's (MismatchError)."""
    fb = url_batch(urls, store.layout, _check_policy(store, policy), base)
    return aligned(fb, store.add(fb.keys) if len(fb.keys) else np.zeros(0, dtype=bool))


def contains_urls(store, urls: Sequence[str | bytes], base: str | None = None,
                  policy: Policy | None = None) -> np.ndarray:
    """A bool mask aligned with ``urls``: True where the canonical URL is in ``store``
    (rejected: False). Reads only."""
    fb = url_batch(urls, store.layout, _check_policy(store, policy), base)
    return aligned(fb, store.contains(fb.keys) if len(fb.keys) else np.zeros(0, dtype=bool))
