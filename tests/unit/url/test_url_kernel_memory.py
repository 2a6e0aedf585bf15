"""The URL kernel touches only memory it owns, shown where a stray access faults.

With ``MALLOC_MMAP_THRESHOLD_=0`` glibc maps every allocation on pages of its own
and unmaps it when freed, so a write through a pointer to a freed scratch array, or
a scan that walks off an array's start, faults at once instead of corrupting the
heap now and then (the 2026-12-01 CI crash: a relative or routed URL wrote into the
kernel's freed scratch; a base the kernel could not parse sent a scan backwards
off its buffer). Before the fix every case below died with SIGSEGV.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

CASES = [  # (url, base or None)
    ("abc", None), ("a", None), ("/x", None), ("http:x", None), ("a b", None),
    ("http://a.example/x", None), ("#f", "http://[bad/"), ("/x", "http://[bad/"),
    ("?q", "not a url"), ("rel/../y", "http://p.example/a/b"), ("a", "\u07ff+\\g~J"),
]

RUN = r"""
import json, sys
import numpy as np
from seenstore.kernels.url import normalise_batch
cases = json.loads(sys.argv[1])
out = []
for url, base in cases:
    u = url.encode()
    b = (base or "").encode()
    data = np.frombuffer(u, np.uint8).copy()
    bdata = np.frombuffer(b, np.uint8).copy()
    boffs = np.array([0, len(b)] if base is not None else [0], np.int64)
    ids = np.array([0 if base is not None else -1], np.int64)
    o = np.empty(4096, np.uint8)
    oo = np.zeros(2, np.int64)
    st = np.zeros(1, np.int8)
    keys = np.zeros(1, np.uint64)
    i, end = normalise_batch(data, np.array([0, len(u)], np.int64), bdata, boffs, ids,
                             2048, 20, o, oo, st, keys, 0, 0)
    out.append([int(i), int(st[0]), bytes(o[:end]).decode("utf-8", "replace"), int(keys[0])])
print(json.dumps(out))
"""


def _run(env_extra):
    env = dict(os.environ, **env_extra)
    r = subprocess.run([sys.executable, "-c", RUN, json.dumps(CASES)], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, f"kernel process died (rc {r.returncode}): {r.stderr[-2000:]}"
    return json.loads(r.stdout)


def test_url_kernel_never_touches_freed_or_foreign_memory():
    strict = _run({"MALLOC_MMAP_THRESHOLD_": "0"})
    assert strict == _run({})  # same answers as under the ordinary allocator
    assert all(i == 1 for i, *_ in strict)
    assert {st for _, st, *_ in strict} >= {0, 1}  # both accepted and routed URLs ran
