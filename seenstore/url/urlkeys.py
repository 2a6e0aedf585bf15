"""The package face's ``fingerprint`` and ``fingerprint_many``: any URL in, its key out.

Unlike seenstore.url.fingerprint (the reference hash over canonical URLs, which
the engine calls on what it normalised itself), these normalise first, with the
safe rules or a ``policy`` (for a store's keys: ``store.policy``), so
``contains(fingerprint_many(['HTTP://Example.com:80/p#x']))`` asks for the
key the store holds for ``http://example.com/p``; a URL with no canonical
http(s) form is refused (URLRejected, naming it), never given a key.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from seenstore.url.normalise import URLRejected
from seenstore.layout import DEFAULT_LAYOUT, Layout
from seenstore.url import fingerprint as ref
from seenstore.url.fastpath import normalise_many
from seenstore.url.normalise import normalise
from seenstore.url.policy import Policy


def fingerprint(url, layout: Layout = DEFAULT_LAYOUT, *, base: str | None = None,
                policy: Policy | None = None) -> int:
    """The key of ``url`` (str/bytes; relative ones resolved against ``base``) after
    normalisation under ``policy`` (default: the safe rules), as an int in
    [0, 2**64). Raises URLRejected for a URL with no canonical form."""
    return ref.fingerprint(normalise(url, base, policy), layout)


def fingerprint_many(urls: Iterable, layout: Layout = DEFAULT_LAYOUT, *,
                     base: str | None = None, policy: Policy | None = None,
                     threads: int | None = None) -> np.ndarray:
    """Keys of ``urls`` aligned with the input, each as ``fingerprint`` gives it.
    Raises URLRejected for the first URL with no canonical form (none is skipped:
    the keys stay aligned with the input)."""
    urls = list(urls)
    nb = normalise_many(urls, base, policy, threads=threads)
    if nb.rejected:
        i, reason = nb.rejected[0]
        raise URLRejected(reason, urls[i])
    return ref.fingerprint_many(nb.urls, layout, threads)
