"""numba kernels: the only package where ``@njit`` appears.

Every kernel is ``@njit(cache=True, nogil=True)``, a pure function over arrays,
in a self-contained module (numba's cache only notices edits in the kernel's
own file). Each has a slow, obviously correct numpy/Python twin: in kernels/twins/
(also run below ``dispatch.SMALL`` inputs), in tests/naive.py, or a reference
library (xxh3: the ``xxhash`` package).

Compiled kernels are cached where numba caches (``__pycache__`` beside this
package, else numba's user cache), or in ``$SEENSTORE_CACHE_DIR`` when it is set
(it sets numba's ``NUMBA_CACHE_DIR`` for the process: other numba code of the same
process caches there too). ``jitcache.cache_dir()`` names the folder in effect.
"""

import os as _os
import sys as _sys

if _os.environ.get("SEENSTORE_CACHE_DIR"):
    _os.environ["NUMBA_CACHE_DIR"] = _os.environ["SEENSTORE_CACHE_DIR"]
    if "numba" in _sys.modules:  # numba read its configuration already
        _sys.modules["numba"].config.CACHE_DIR = _os.environ["SEENSTORE_CACHE_DIR"]
