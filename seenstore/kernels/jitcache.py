"""Loading numba's cached kernels without the compiler's start-up.

numba refreshes its target context before every cache load (``Cache.load_overload``),
and the first refresh of a process imports and installs every lowering registry
numba has (numpy, unicode, typed containers, random, ...): about 0.5 s of CPU, some
40 % of a ``seenstore add`` start-up (docs/fastpath.md). Only compiling needs those
registries: a cached kernel is machine code that needs the code generator and numba's
runtime (NRT), nothing more. ``light_cache_loads()`` makes cache loads initialise just the
runtime; a cache miss still compiles through numba's compiler, whose
``CompilerBase`` refreshes the full context first, so a compilation never sees the
lighter state. numba's per-LLVM-call timing events are dropped too.

Process-wide and idempotent; only the CLI asks for it (``dispatch.lean_numba``).
Skipped (returns False) on a numba whose ``Cache.load_overload`` is not the one
this was written against (0.5x/0.6x): the refresh then happens as usual.

Also here: where the cache is, told without importing numba (``surely_cold``,
``cache_dir_guess``: a first run says it compiles before numba's ~0.5-1 s import),
and ``serialise_cache_saves`` for processes that compile into one cache at once.
"""

from __future__ import annotations

import hashlib
import os

_done = [False]
_KERNELS = os.path.dirname(os.path.abspath(__file__))


def cache_dir() -> str:
    """The folder numba caches this package's kernels in (kernels/__init__.py: the
    package's ``__pycache__``, numba's user cache, or ``$SEENSTORE_CACHE_DIR``).
    Imports numba."""
    from seenstore.kernels import merge

    return merge.is_strictly_increasing._cache._cache_path


def cache_dir_guess() -> str:
    """Where numba caches this package's kernels, worked out without importing numba
    as numba 0.5x/0.6x does (numba.core.caching's locators): ``$NUMBA_CACHE_DIR``
    (which ``$SEENSTORE_CACHE_DIR`` sets) joined with the kernels folder's name and
    SHA-1; else the ``__pycache__`` beside the kernels when writable; else numba's
    user-wide cache. ``cache_dir()`` is the exact answer (it imports numba)."""
    root = os.environ.get("NUMBA_CACHE_DIR")
    sub = "_".join([os.path.basename(_KERNELS), hashlib.sha1(_KERNELS.encode()).hexdigest()])
    if root:
        return os.path.join(root, sub)
    in_tree = os.path.join(_KERNELS, "__pycache__")
    if os.access(in_tree if os.path.isdir(in_tree) else _KERNELS, os.W_OK):
        return in_tree
    user = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(user, "numba", sub)


def surely_cold(modules: tuple[str, ...] = ("sort", "bloom", "batch")) -> bool:
    """True when the cache holds no index of any kernel of ``modules`` (numba's
    ``<module>.<kernel>-<line>.py*.nbi`` files) at ``cache_dir_guess()``: the next
    kernel call compiles. No numba import, a directory listing. False does not mean
    warm (an index may be stale, or for another signature): ``dispatch.cold`` says."""
    try:
        names = os.listdir(cache_dir_guess())
    except OSError:
        return True
    return not any(n.endswith(".nbi") and n.split(".", 1)[0] in modules for n in names)


def serialise_cache_saves() -> None:
    """Make this process's saves to numba's cache take an exclusive lock beside the
    kernel's index (``<index>.lock``). numba writes each cache file to a temp file
    renamed over it, but an index (.nbi) and its data (.nbc) are two writes: two
    processes saving different signatures of one kernel at once could leave an index
    entry naming the other's data. Processes that compile into one cache together
    (the warm-up's lanes, a test run's workers) each call this first. Idempotent."""
    import fcntl

    from numba.core import caching

    save = caching.IndexDataCacheFile.save
    if getattr(save, "_locked", False):
        return

    def locked_save(self, key, data):
        with open(self._index_path + ".lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
            return save(self, key, data)

    locked_save._locked = True
    caching.IndexDataCacheFile.save = locked_save


def light_cache_loads() -> bool:
    """Make numba's cache loads skip the full target-context refresh; True if in
    effect (now or already)."""
    if _done[0]:
        return True
    import numba
    from numba.core import caching
    from numba.core.runtime import rtsys

    cache = getattr(caching, "Cache", None)
    original = getattr(cache, "load_overload", None)
    if (not numba.__version__.startswith(("0.5", "0.6")) or original is None
            or not hasattr(cache, "_guard_against_spurious_io_errors")
            or not hasattr(cache, "_load_overload")):
        return False

    def load_overload(self, sig, target_context):
        # as numba's, with the refresh cut to what running a loaded kernel needs
        rtsys.initialize(target_context)
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)
        return None  # the guard swallowed an I/O error: numba compiles instead

    load_overload.__doc__ = original.__doc__
    cache.load_overload = load_overload
    _drop_llvm_lock_events()
    _done[0] = True
    return True


def _drop_llvm_lock_events() -> None:
    """numba times its compiler by an event on every LLVM call (llvmlite's lock
    callbacks, numba.core.base): a cache load makes ~300 such calls per kernel, and
    the events cost ~35 ms of CPU over the add path's kernels. Only numba's
    compile timers read them (then they show no LLVM lock time)."""
    from llvmlite.binding import ffi

    lock = getattr(getattr(ffi, "lib", None), "_lock", None)
    for acquire, release in list(getattr(lock, "_cblist", ())):
        if getattr(acquire, "__module__", "") == "numba.core.base":
            ffi.unregister_lock_callback(acquire, release)
