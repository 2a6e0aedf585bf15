"""Status codes of the URL kernel (kernels/url.py) and of the k-way merge
(kernels/merge.py ``kway_step``), in a module without numba so the callers' small
paths (url/fastpath.py, store/runs/live.py, kernels/twins/) can read them without
importing the JIT."""

OK, ROUTE, SCHEME = 0, 1, 2

KWAY_FULL = -1  # ``out`` is full: flush it and call again
KWAY_DONE = -2  # every row is used up and was its run's last chunk
KWAY_BAD = -3  # the merged output would not be strictly increasing
