"""seenstore: has this URL been seen before?

Data flows one way: normalise -> fingerprint -> batch -> bloom -> merge -> store.

The package face::

    from seenstore import (SeenStore, DedupStage, normalise, try_normalise,
                           normalise_many, fingerprint, fingerprint_many, Policy, errors,
                           page_digest, page_simhash, Client, AsyncClient)

``fingerprint``/``fingerprint_many`` here normalise first (any URL in, or
URLRejected); ``seenstore.url.fingerprint`` has the reference hash over URLs
already canonical.

Names are imported on first use (PEP 562), so ``import seenstore`` stays cheap
(about 10 ms) and numba loads only with the store, the stage or a batch kernel.
"""

from __future__ import annotations

import importlib

from seenstore.errors import SeenStoreError
from seenstore.layout import DEFAULT_LAYOUT, Layout

__version__ = "0.1.0"

_LAZY = {
    "SeenStore": "seenstore.store",
    "State": "seenstore.frontier.state",
    "DedupStage": "seenstore.stage",
    "normalise": "seenstore.url.normalise",
    "try_normalise": "seenstore.url.normalise",
    "normalise_many": "seenstore.url.fastpath",
    "Rejection": "seenstore.url.normalise",
    "fingerprint": "seenstore.url.urlkeys",
    "fingerprint_many": "seenstore.url.urlkeys",
    "page_digest": "seenstore.evidence.digest",
    "page_simhash": "seenstore.evidence.digest",
    "Policy": "seenstore.url.policy",
    "load_policy": "seenstore.url.policy",
    "Client": "seenstore.serve.client",
    "AsyncClient": "seenstore.serve.client",
}

__all__ = ["SeenStore", "State", "DedupStage", "normalise", "try_normalise", "normalise_many",
           "Rejection", "fingerprint", "fingerprint_many", "Policy", "load_policy", "errors",
           "page_digest", "page_simhash", "Client", "AsyncClient",
           "SeenStoreError", "Layout", "DEFAULT_LAYOUT", "__version__"]


def __getattr__(name: str):
    if name == "errors":
        return importlib.import_module(".errors", __name__)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'seenstore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
