"""``seenstore add`` on the batch fast path prints exactly what ``--scalar`` prints.

Oracle: the same command with ``--scalar`` (the reference path) on a copy of
the store. Input mixes kernel cases, routed cases, rejections, repeats, blank
and CRLF lines, a policy with rules, a base, and batch boundaries.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import request_cleanup, FIXTURES
from seenstore.runtime import parallel
from seenstore.cli import main
from seenstore.store import SeenStore

PIECES = ["http://a.example/x", "HTTP://A.example:80/x#f", "/rel?q=1", "rel/../y", "?q", "#f",
          "mailto:x@y", "http://é.example/", "http://1.2.3.4/", "http://u@a.example/", "a b",
          "http://a.example/%7e%41", "\x01", "https://www.b.example/?b=2&a=1&utm_source=z", ""]
POLICY = 'version = "t"\n[[rule]]\nhosts = ["b.example"]\nstrip_www = true\nsort_query = true\n'


def _add(store, text, extra):
    r = CliRunner().invoke(main, ["add", "-", "--store", store, *extra], input=text,
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.stdout, r.stderr.strip().splitlines()[-1]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=25), st.sampled_from([1, 3, 1000]),
       st.booleans(), st.booleans())
def test_add_fast_equals_scalar(tmp_path_factory, lines, batch, with_policy, crlf):
    d = tmp_path_factory.mktemp("s")
    request_cleanup(d)
    extra = ["--base", "http://base.example/d/", "--batch-lines", str(batch)]
    if with_policy:
        pol = d / "p.toml"
        pol.write_text(POLICY)
        extra += ["--policy", str(pol)]
    text = ("\r\n" if crlf else "\n").join(lines) + "\n"
    for _ in range(2):  # the second round finds everything already seen
        fast = _add(str(d / "fast"), text, extra)
        scalar = _add(str(d / "scalar"), text, extra + ["--scalar"])
        assert fast == scalar
    with SeenStore.open(str(d / "fast"), readonly=True) as a, \
            SeenStore.open(str(d / "scalar"), readonly=True) as b:
        assert a.policy_id == b.policy_id and len(a) == len(b)


BASES = ["", "http://p.example/a/b", "https://Q.example:443/x/", "not a url", "http://[bad/"]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(BASES), st.sampled_from(PIECES)), max_size=25),
       st.sampled_from([1, 4, 1000]))
def test_add_pairs_fast_equals_scalar(tmp_path_factory, pairs, batch):
    """--pairs: 'BASE<TAB>HREF' lines resolve each href against its own base."""
    d = tmp_path_factory.mktemp("p")
    request_cleanup(d)
    text = "".join((f"{b}\t{h}" if b else h) + "\n" for b, h in pairs)
    extra = ["--pairs", "--base", "http://base.example/d/", "--batch-lines", str(batch)]
    fast = _add(str(d / "fast"), text, extra)
    scalar = _add(str(d / "scalar"), text, extra + ["--scalar"])
    assert fast == scalar
    if ("http://p.example/a/b", "rel/../y") in pairs:
        assert "http://p.example/a/y\n" in fast[0]


REAL = os.path.join(FIXTURES, "real_links.tsv")


@pytest.mark.parametrize("threads", ["1", "2"])
def test_add_pairs_real_links_fast_equals_scalar(tmp_path, threads):
    """A sample of real links (tools/gather_links.py over the docs installed on a dev
    machine: 300 random lines and every line the kernel routes, each with the line
    after it): fast == scalar, byte for byte, with tiny chunks so that two threads
    really split the batches."""
    with open(REAL, "rb") as f:
        text = f.read().decode("utf-8", "surrogateescape")
    old = parallel.MIN_CHUNK
    parallel.MIN_CHUNK = 7
    try:
        extra = ["--pairs", "--batch-lines", "500", "--threads", threads]
        fast = _add(str(tmp_path / "fast"), text, extra)
        scalar = _add(str(tmp_path / "scalar"), text, extra + ["--scalar"])
    finally:
        parallel.MIN_CHUNK = old
    assert fast == scalar and fast[0].count("\n") > 300


def test_cli_loads_numba_without_scipy_and_leaves_it_importable():
    """The CLI's lean numba start-up (dispatch.lean_numba): in a fresh interpreter, a
    kernel loads and runs without importing scipy, and scipy (when installed) can
    still be imported afterwards."""
    code = (
        "import sys\n"
        "from seenstore.kernels import dispatch\n"
        "dispatch.lean_numba = True\n"
        "dispatch.lines.kernel('split_lines')\n"
        "from seenstore.url.buffer import URLBuffer\n"
        "dispatch._set_small(0)\n"
        "assert len(URLBuffer.from_bytes(b'http://a.example/\\tx\\n', pairs=True)) == 1\n"
        "assert 'scipy' not in sys.modules, 'scipy imported'\n"
        "try:\n"
        "    import scipy.linalg\n"
        "except ModuleNotFoundError as e:\n"
        "    assert e.name == 'scipy', e\n"
        "print('ok')\n")
    r = _python(code)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_add_imports_only_its_own_command_module():
    """cli._Group.get_command: `seenstore add --help` imports the URL commands only
    (not the store, bench, cluster or integration commands, nor numba), and the
    group's help still lists every command."""
    code = (
        "import sys\n"
        "from seenstore.cli import main\n"
        "try:\n"
        "    main(['add', '--help'], standalone_mode=False)\n"
        "except SystemExit:\n"
        "    pass\n"
        "mods = [m for m in ('seenstore.cli.store_cmds', 'seenstore.cli.bench_cmd',\n"
        "        'seenstore.cli.cluster_cmds', 'seenstore.cli.integration_cmds',\n"
        "        'seenstore.store', 'numba') if m in sys.modules]\n"
        "assert not mods, mods\n"
        "main(['--help'], standalone_mode=False)\n")
    r = _python(code)
    assert r.returncode == 0, r.stderr
    for name in ("add", "bench", "cluster", "dump-run", "merge", "warmup"):
        assert f"  {name} " in r.stdout


def test_cached_kernel_loads_without_numba_compiler_start_up(tmp_path):
    """jitcache.light_cache_loads: a kernel loaded from numba's cache runs (its NRT
    arrays included) without numba's full lowering registries (numpy's ufunc
    lowering, npyimpl, stays unimported), and a later compilation in the same
    process still works (the compiler refreshes the context itself)."""
    mod = tmp_path / "tiny_kernel.py"
    mod.write_text("import numpy as np\nfrom numba import njit\n"
                   "@njit(cache=True)\ndef tiny(n):\n    a = np.arange(n)\n    return a.sum()\n")
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from seenstore.kernels.jitcache import light_cache_loads\n"
        "assert light_cache_loads()\n"
        "import tiny_kernel\n"
        "assert tiny_kernel.tiny(10) == 45\n"
        "print('npyimpl' if 'numba.np.npyimpl' in sys.modules else 'light')\n"
        "from llvmlite.binding import ffi\n"
        "assert not [c for c in ffi.lib._lock._cblist if c[0].__module__ == 'numba.core.base']\n"
        "from numba import njit\n"
        "import numpy as np\n"
        "f = njit(lambda x: np.sqrt(x).sum())\n"
        "assert f(np.full(4, 4.0)) == 8.0\n")
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    first = _python(code, env)  # compiles (and caches) tiny: the full refresh
    assert first.returncode == 0 and first.stdout.strip() == "npyimpl", first.stderr
    second = _python(code, env)  # loads tiny from the cache
    assert second.returncode == 0 and second.stdout.strip() == "light", second.stderr


def _python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``code`` run by a fresh interpreter that imports this seenstore."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **(env or {}))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)


def test_cli_process_freezes_gc_before_exit_but_cli_runner_does_not():
    """A command run as a program freezes the garbage collector as it returns (the
    interpreter's final collections then skip numba's objects: ~0.3 s of CPU);
    CliRunner (args given) leaves the test process's collector alone."""
    import gc

    CliRunner().invoke(main, ["--version"])
    assert gc.get_freeze_count() == 0
    code = ("import atexit, gc, sys\n"
            "from seenstore.cli import main\n"
            "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0))\n"
            "sys.argv = ['seenstore', '--version']\n"
            "main()\n")
    r = _python(code)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "frozen True", r.stderr


def test_cli_process_keeps_openblas_to_one_thread_unless_the_user_chose():
    """The commands run no BLAS: loading the CLI before numpy sets
    OPENBLAS_NUM_THREADS=1, so numpy's OpenBLAS starts no threads that spin beside
    the command's own (the process has its main thread only); a value the user set
    is kept."""
    code = ("import os, seenstore.cli, numpy\n"
            "print(os.environ.get('OPENBLAS_NUM_THREADS'), len(os.listdir('/proc/self/task')))\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(env, PYTHONPATH=os.pathsep.join(sys.path)))
    assert r.returncode == 0 and r.stdout.split() == ["1", "1"], r.stderr
    r = _python(code, {"OPENBLAS_NUM_THREADS": "2"})
    assert r.returncode == 0 and r.stdout.split()[0] == "2", r.stderr
