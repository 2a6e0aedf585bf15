"""The server's URL requests as key batches: ``url_batch`` normalises a request's URLs
under the store's policy and fingerprints them in the store's layout (the batch
fast path: ``normalise_urls``), so the batcher can group the keys of many requests
into one store batch; ``aligned`` maps a mask over its keys back to its inputs (a
URL with no canonical form: False). The store's own ``add_urls``/``contains_urls``
do the same for one caller.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

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
