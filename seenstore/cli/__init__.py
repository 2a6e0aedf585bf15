"""The ``seenstore`` command line.

One click group; each command family lives in its own module and registers
itself on ``main``. Every ``SeenStoreError`` becomes a one-line message on
stderr and the error kind's exit code (see docs/cli.md), never a traceback.
"""

from __future__ import annotations

import errno
import os
import sys
import warnings

import click

from ..errors import DiskFullError, SeenStoreError, StoreIOError

DEFAULT_STORE_ENV = "SEENSTORE_DIR"


def default_store_dir() -> str:
    """``$SEENSTORE_DIR`` if set, else ``./seenstore.db`` (documented in the README)."""
    return os.environ.get(DEFAULT_STORE_ENV) or os.path.join(os.getcwd(), "seenstore.db")


def fail(message: str, code: int) -> "None":
    click.echo(f"seenstore: error: {message}", err=True)
    sys.exit(code)


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    click.echo(f"seenstore: warning: {message}", err=True)


class _Group(click.Group):
    """A group that turns expected failures into one-line errors."""

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        warnings.showwarning = _one_line_warning
        try:
            return super().invoke(ctx)
        except SeenStoreError as e:
            fail(str(e), e.exit_code)
        except BrokenPipeError:
            # The reader of our stdout went away (e.g. `| head`): not an error of ours.
            try:
                sys.stdout = open(os.devnull, "w")
            finally:
                sys.exit(0)
        except KeyboardInterrupt:
            fail("interrupted; the store is as it was after the last committed batch", 130)
        except OSError as e:
            err = DiskFullError if e.errno in (errno.ENOSPC, errno.EFBIG) else StoreIOError
            fail(f"{e.strerror or e} ({e.filename or ''})".strip(), err.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="seenstore")
def main() -> None:
    """seenstore: has this URL been seen before?

    Normalises URLs, fingerprints them as 64-bit keys (host hash | URL hash) and
    keeps the set of every key ever admitted in a sorted, crash-safe store on
    disk. The store directory defaults to $SEENSTORE_DIR, else ./seenstore.db.
    """


store_option = click.option(
    "--store",
    "store_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Store directory (default: $SEENSTORE_DIR, else ./seenstore.db).",
)

# Command families register themselves on `main` when imported.
from . import store_cmds  # noqa: E402,F401
from . import url_cmds  # noqa: E402,F401
from . import bench_cmd  # noqa: E402,F401
from . import integration_cmds  # noqa: E402,F401
