"""Status codes of the URL kernel (kernels/url.py), in a module without numba so the
callers' small paths (dispatch.py) can read them without importing the JIT."""

OK, ROUTE, SCHEME = 0, 1, 2
