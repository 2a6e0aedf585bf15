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
"""

from __future__ import annotations

_done = [False]


def cache_dir() -> str:
    """The folder numba caches this package's kernels in (kernels/__init__.py: the
    package's ``__pycache__``, numba's user cache, or ``$SEENSTORE_CACHE_DIR``).
    Imports numba."""
    from seenstore.kernels import merge

    return merge.is_strictly_increasing._cache._cache_path


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
