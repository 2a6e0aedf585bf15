"""seenstore: has this URL been seen before?

Data flows one way: normalise -> fingerprint -> batch -> bloom -> merge -> store.
"""

from .errors import SeenStoreError
from .layout import DEFAULT_LAYOUT, Layout

__version__ = "0.1.0"

__all__ = ["SeenStoreError", "Layout", "DEFAULT_LAYOUT", "__version__"]
