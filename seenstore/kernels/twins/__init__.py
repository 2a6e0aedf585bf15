"""numpy twins of the numba kernels, one module per kernel module: the same
contract and outputs. ``kernels/dispatch.py`` runs a twin for small inputs while
the kernel is not compiled; the tests use each twin as its kernel's oracle."""
