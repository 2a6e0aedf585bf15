"""What a store directory holds, by name, and the two seams every step shares.

Names: ``run_name`` (``sNNNN-gGGGGGGGGGG.run``), MANIFEST (manifest.py), BLOOM and
its layers, LOCK, temporary files; ``remove_leftovers`` deletes what an interrupted
batch, compaction or upgrade left. ``io_error`` turns an OSError into the typed
error of a failed write (nothing committed). ``fault`` is the crash-test seam:
``SEENSTORE_FAULT=point[@n]`` SIGKILLs the process at the n-th pass through
``point`` (tests/system/crash/test_crash.py); ``arm_fault`` sets it in a running process.
"""

from __future__ import annotations

import errno
import shutil
import os
import re

from seenstore.errors import DiskFullError, SeenStoreError, StoreIOError
from seenstore.store.lock import NAME as LOCK_NAME

BLOOM_NAME = "BLOOM"
RUN_RE = re.compile(r"^s(\d{4})-g(\d{10})\.run$")
TMP_RE = re.compile(r"^(MANIFEST\.tmp|BLOOM(\.L\d+)?\.tmp\.\d+|evidence\.log\.tmp)$")
# kept-URL files (store/kepturls.py; .tmp: being written) and evidence snapshots
URL_RE = re.compile(r"^u-g\d{10}(-m[0-9a-f]+)?\.url(\.tmp)?$")
VALUE_RE = re.compile(r"^v-q\d{10}(-\d{10})?\.val(\.tmp)?$")  # store/valuefiles.py
EVIDENCE_LOG = "evidence.log"  # store/evidencelog.py (its .tmp: TMP_RE)
EVIDENCE_RE = re.compile(r"^e-g\d{10}(-[0-9a-f]+)?\.evd(\.tmp)?$")
TOMB_RE = re.compile(r"^t-g\d{10}-[0-9a-f]{8}\.tomb(\.tmp)?$")  # store/tombstones.py
BLOOM_RE = re.compile(r"^BLOOM(\.L\d+)?$")
# test seam: "point" or "point@n" -> SIGKILL self at the (n-th) pass through there
_FAULT, _, _FAULT_AT = os.environ.get("SEENSTORE_FAULT", "").partition("@")
_fault_hits: dict = {}


def arm_fault(point: str) -> None:
    """Tests only: crash at the next pass through ``point`` from now on in this
    process, as ``SEENSTORE_FAULT=point`` set at its start would."""
    global _FAULT, _FAULT_AT
    _FAULT, _FAULT_AT = point, ""
    _fault_hits.pop(point, None)


def fault(point: str) -> None:
    """Crash on purpose at a named step (tests only; see tests/system/crash/test_crash.py)."""
    if _FAULT == point:
        _fault_hits[point] = _fault_hits.get(point, 0) + 1
        if _fault_hits[point] >= int(_FAULT_AT or 1):
            import signal
            os.kill(os.getpid(), signal.SIGKILL)


def run_name(shard: int, generation: int) -> str:
    return f"s{shard:04d}-g{generation:010d}.run"


def io_error(e: OSError, what: str) -> SeenStoreError:
    if e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return DiskFullError(f"{what}: {e.strerror}; nothing was committed")
    return StoreIOError(f"{what}: {e.strerror or e}; nothing was committed")


def write_replacing(path: str, parts, sync: bool = True) -> None:
    """Write the bytes of ``parts`` to ``path``.tmp (fsynced with ``sync``) and rename it
    over ``path``: a reader sees the old file or the whole new one."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for part in parts:
            f.write(part)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def size(path: str, missing=0):
    """Size of ``path`` in bytes, or ``missing`` when it does not exist (any more)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return missing


def stray_files(path: str) -> list:
    """Names in directory ``path`` that no store (nor an interrupted creation) holds."""
    names = os.listdir(path) if os.path.isdir(path) else []
    return [n for n in names if not (RUN_RE.match(n) or TMP_RE.match(n) or n == LOCK_NAME
                                     or SPILL_RE.match(n) or URL_RE.match(n)
                                     or EVIDENCE_RE.match(n) or n == EVIDENCE_LOG
                                     or TOMB_RE.match(n) or VALUE_RE.match(n))]


def remove_leftovers(path: str, live: set) -> None:
    """Delete files of an interrupted merge, compaction or upgrade: runs, kept-URL,
    evidence, tombstone and value files not in ``live`` (the manifest's), temporary
    manifests and Bloom files, the spill folders of a batch bigger than memory
    (``add_new_file``)."""
    _remove_spill_dirs(path)
    for name in os.listdir(path):
        if ((RUN_RE.match(name) or URL_RE.match(name) or EVIDENCE_RE.match(name)
             or TOMB_RE.match(name) or VALUE_RE.match(name))
                and name not in live) or TMP_RE.match(name):
            try:
                os.unlink(os.path.join(path, name))
            except OSError as e:
                raise io_error(e, f"{name}: cannot remove leftover") from e


SPILL_RE = re.compile(r"^spill\.tmp\.\d+(\.new)?$")  # a folder; .new: merge --memory's new keys


def spill_dir(store_path: str) -> str:
    return os.path.join(store_path, f"spill.tmp.{os.getpid()}")


def _remove_spill_dirs(store_path: str) -> None:
    """Delete spill folders an interrupted batch left (called by a writer's open)."""
    for name in os.listdir(store_path):
        if SPILL_RE.match(name):
            p = os.path.join(store_path, name)
            if os.path.isdir(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                os.unlink(p)
