"""seenstore: has this URL been seen before?

Data flows one way: normalise -> fingerprint -> batch -> bloom -> merge -> store.

The package face::

    from seenstore import (SeenStore, DedupStage, normalise, try_normalise,
                           normalise_many, fingerprint, fingerprint_many, Policy, errors)

Names are imported on first use (PEP 562), so ``import seenstore`` stays cheap
(about 10 ms) and numba loads only with the store, the stage or a batch kernel.
"""

from __future__ import annotations

import importlib
import sys
import types

from .errors import SeenStoreError
from .layout import DEFAULT_LAYOUT, Layout

__version__ = "0.1.0"

_LAZY = {
    "SeenStore": "store",
    "DedupStage": "stage",
    "normalise": "normalise",
    "try_normalise": "normalise",
    "normalise_many": "normalise",
    "Rejection": "normalise",
    "fingerprint": "fingerprint",
    "fingerprint_many": "fingerprint",
    "Policy": "policy",
    "load_policy": "policy",
}

__all__ = ["SeenStore", "DedupStage", "normalise", "try_normalise", "normalise_many",
           "Rejection", "fingerprint", "fingerprint_many", "Policy", "load_policy", "errors",
           "SeenStoreError", "Layout", "DEFAULT_LAYOUT", "__version__"]


def __getattr__(name: str):
    if name == "errors":
        return importlib.import_module(".errors", __name__)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'seenstore' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def _function_over_submodule(name: str) -> property:
    """``seenstore.normalise`` / ``seenstore.fingerprint`` are functions named like the
    submodules that define them: importing a submodule sets the package attribute to
    the module, so the name is a data descriptor that ignores that and always gives
    the function (the submodules stay importable as ``seenstore.normalise``)."""

    def get(module):
        return getattr(importlib.import_module(f".{name}", __name__), name)

    def set_(module, value) -> None:
        if not isinstance(value, types.ModuleType):
            raise AttributeError(f"seenstore.{name} cannot be replaced")

    return property(get, set_)


class _Face(types.ModuleType):
    normalise = _function_over_submodule("normalise")
    fingerprint = _function_over_submodule("fingerprint")


sys.modules[__name__].__class__ = _Face
