"""numba kernels: the only package where ``@njit`` appears.

Every kernel is ``@njit(cache=True, nogil=True)``, a pure function over arrays,
in a self-contained module (numba's cache only notices edits in the kernel's
own file). Each has a slow, obviously correct numpy/Python twin: in kernels/twins/
(also run below ``dispatch.SMALL`` inputs), in tests/naive.py, or a reference
library (xxh3: the ``xxhash`` package).
"""
