import os
import shutil
import sys

import numpy as np

# The suite tests the numba kernels at every size: the small-input numpy twins
# (seenstore/kernels/twins/) are tested against them in tests/unit/kernels/test_dispatch.py.
os.environ.setdefault("SEENSTORE_JIT_MIN", "0")
import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)  # the checkout: README, examples/, bench/
FIXTURES = os.path.join(TESTS, "fixtures")
DATA = os.path.join(TESTS, "data")
sys.path.insert(0, TESTS)  # tests/naive.py and friends

EDGE_KEYS = [0, 1, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1]


_CLEANUP: list = []


def request_cleanup(path):
    """Register ``path``, the tmp_path_factory folder of one hypothesis example (each
    holds stores with a 2 MiB Bloom file: hundreds of examples left ~600 MB, issue
    11.7): the folders of earlier examples go now, the last when the test ends.
    Returns ``path``. One call per example."""
    _remove_requested()
    _CLEANUP.append(path)
    return path


def _remove_requested():
    while _CLEANUP:
        shutil.rmtree(_CLEANUP.pop(), ignore_errors=True)


@pytest.fixture(autouse=True)
def _remove_requested_folders():
    yield
    _remove_requested()


@pytest.fixture
def store_dir(tmp_path):
    return str(tmp_path / "store")


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray for the whole session (127.0.0.1, 2 CPUs; its first start takes
    ~30 s): every cluster test shares it. Its processes (the shard actors) start
    without this suite's SEENSTORE_JIT_MIN=0, so their small calls take the numpy
    twins (equal to the kernels: tests/test_dispatch.py) instead of loading numba
    kernels in every fresh actor process (~1-2 s each); the test process keeps the
    kernels, so the cluster oracle compares the two."""
    import ray

    jit_min = os.environ.pop("SEENSTORE_JIT_MIN", None)  # the raylet's env: its workers'
    try:
        ray.init(num_cpus=2, include_dashboard=False, address="local",
                 logging_level="WARNING", log_to_driver=False, _node_ip_address="127.0.0.1")
    finally:
        if jit_min is not None:
            os.environ["SEENSTORE_JIT_MIN"] = jit_min
    yield ray
    ray.shutdown()


# ------------------------------------------------------------------ pytest -n 2
# The README's test command runs the suite on two pytest-xdist workers, whole files
# to one worker (--dist loadfile: a module's fixtures, the session's one Ray and the
# crash tests' stores are built once). Two processes compiling numba kernels into one
# cold cache: numba writes each cache file to a temp file renamed over it, but an
# index (.nbi) and its data files (.nbc) are two writes, so two processes saving
# different signatures of one kernel at the same moment could leave an index entry
# pointing at the other signature's data. Hence (1) the controller has the kernels
# the store and URL path run compiled before any worker starts (seenstore.warmup's
# steps, split over two processes, the store's step alone in one: the workers and
# their CLI subprocesses load them),
# and (2) each of these processes takes an exclusive lock beside a kernel's index
# while it saves a signature.

WARM = """
import shutil, sys, tempfile
sys.path.insert(0, sys.argv[1])
import conftest
conftest._serialise_numba_cache_saves()
from seenstore.warmup import warm_steps
d = tempfile.mkdtemp(prefix="seenstore-warmup-")
try:
    for name, step in warm_steps(d):  # lane 1: the store's step, the longest; lane 0 the rest
        if name.startswith("store") == (sys.argv[2] == "1"):
            step()
finally:
    shutil.rmtree(d, ignore_errors=True)
"""


def pytest_configure(config):
    _serialise_numba_cache_saves()
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        import subprocess

        here = os.path.dirname(os.path.abspath(__file__))
        procs = [subprocess.Popen([sys.executable, "-c", WARM, here, str(i)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                 for i in (0, 1)]
        for p in procs:
            out = p.communicate()[0]
            if p.returncode:
                raise pytest.UsageError("compiling the kernels failed:\n" + out.decode())


def _serialise_numba_cache_saves():
    from seenstore.kernels.jitcache import serialise_cache_saves

    serialise_cache_saves()
