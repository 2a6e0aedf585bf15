import os
import sys

import numpy as np

# The suite tests the numba kernels at every size: the small-input numpy twins
# (seenstore/dispatch.py) are tested against them in tests/test_dispatch.py.
os.environ.setdefault("SEENSTORE_JIT_MIN", "0")
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # tests/naive.py and friends

EDGE_KEYS = [0, 1, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1]


@pytest.fixture
def store_dir(tmp_path):
    return str(tmp_path / "store")


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
