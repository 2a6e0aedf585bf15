"""numba kernels: the only package where ``@njit`` appears.

Every kernel is ``@njit(cache=True, nogil=True)``, a pure function over arrays,
in a self-contained module (numba's cache only notices edits in the kernel's
own file). Each has a pure numpy/Python twin in the tests or in ``oracle``.
"""
