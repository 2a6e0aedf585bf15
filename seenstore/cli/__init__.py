"""The ``seenstore`` command line.

One click group; each command family lives in its own module and registers
itself on ``main``. Every ``SeenStoreError`` becomes a one-line message on
stderr (and a JSON object under --json) with the error kind's exit code (README,
"Errors and exit codes"), never a traceback.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import sys
import warnings

# The commands run no BLAS. numpy's OpenBLAS starts a thread per core as numpy loads,
# which spins (sched_yield) on the cores the command's own threads want: ~0.15 s of CPU
# of `seenstore add --pairs` on 6.5 M lines (perf: blas_thread_server). Only
# where numpy is not loaded yet and the user has not chosen (library users keep theirs).
if "numpy" not in sys.modules:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import click  # noqa: E402

from seenstore.kernels import dispatch  # noqa: E402
from seenstore.errors import (DiskFullError, InvalidInputError, SeenStoreError,  # noqa: E402
                      StoreIOError, UndeliveredError)

DEFAULT_STORE_ENV = "SEENSTORE_DIR"


def default_store_dir() -> str:
    """``$SEENSTORE_DIR`` if set, else ``./seenstore.db`` (documented in the README)."""
    return os.environ.get(DEFAULT_STORE_ENV) or os.path.join(os.getcwd(), "seenstore.db")


USAGE_EXIT = 2


def fail(message: str, code: int, kind: str = "SeenStoreError") -> "None":
    """Exit with one line on stderr; under ``--json`` also one JSON object on stdout
    (stderr when stdout carries data: ``--new-out -``)."""
    _say_error(message, code, kind)
    sys.exit(code)


def _say_error(message: str, code: int, kind: str) -> None:
    message = " ".join(str(message).split())  # one line, whatever the message held
    if _json_wanted():
        doc = json.dumps({"error": message, "kind": kind, "exit_code": code})
        try:
            click.echo(doc, err=_JSON_TO_STDERR[0])
        except OSError:
            pass
    try:
        click.echo(f"seenstore: error: {message}", err=True)
    except OSError:
        pass


_ARGS: list[list[str]] = [[]]
_JSON_TO_STDERR = [False]


def _json_wanted() -> bool:
    args = _ARGS[0]
    cut = args.index("--") if "--" in args else len(args)
    return "--json" in args[:cut]


def json_to_stderr() -> None:
    """Called by a command whose stdout carries data: its JSON goes to stderr."""
    _JSON_TO_STDERR[0] = True


def report_warc(report, as_json: bool) -> None:
    """Print what a WARC read found (an integrations.warc.WarcReport) on stderr: its
    summary line and a warning per problem, or one JSON object."""
    if as_json:
        click.echo(json.dumps(report.to_dict()), err=True)
        return
    click.echo(f"seenstore: {report.summary()}", err=True)
    for p in report.problems:
        click.echo(f"seenstore: warning: {p}", err=True)


def _say_compiling() -> None:
    click.echo("seenstore: compiling kernels, first run only "
               "(seenstore warmup does it ahead)", err=True)


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    click.echo(f"seenstore: warning: {message}", err=True)


def _quiet_stdout() -> None:
    """Stdout is gone (closed pipe, full disk): make the exit-time flush a no-op."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


class _Group(click.Group):
    """A group that turns every expected failure into one line on stderr (and a
    JSON object under ``--json``) with the documented exit code: click's usage
    errors included (2), never a traceback."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        _ARGS[0] = list(sys.argv[1:] if args is None else args)
        _JSON_TO_STDERR[0] = False
        warnings.showwarning = _one_line_warning
        dispatch.on_compile = _say_compiling
        dispatch.lean_numba = True
        try:
            return self._main(args, prog_name, complete_var, standalone_mode, **extra)
        finally:
            if standalone_mode and args is None:  # a process about to exit (not CliRunner)
                # the interpreter's last collections walk every object numba made (~0.3 s
                # of CPU, a fifth of a command's start-up): frozen, they are skipped
                gc.freeze()

    def _main(self, args, prog_name, complete_var, standalone_mode, **extra):
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            sys.stdout.flush()
        except click.exceptions.Exit as e:  # --help, --version
            code = e.exit_code
        except click.UsageError as e:
            hint = f" (see '{e.ctx.command_path} --help')" if e.ctx else ""
            fail(e.format_message() + hint, USAGE_EXIT, "UsageError")
        except click.exceptions.Abort:
            fail("interrupted; the store is as it was after the last committed batch", 130,
                 "Interrupted")
        except click.ClickException as e:
            fail(e.format_message(), e.exit_code, type(e).__name__)
        except SeenStoreError as e:
            if isinstance(e, UndeliveredError):
                _quiet_stdout()
            fail(str(e), e.exit_code, type(e).__name__)
        except KeyboardInterrupt:
            fail("interrupted; the store is as it was after the last committed batch", 130,
                 "Interrupted")
        except MemoryError:
            fail("out of memory (split the input into smaller batches); nothing was "
                 "committed by the batch that ran out", StoreIOError.exit_code, "MemoryError")
        except OSError as e:
            err = DiskFullError if e.errno in (errno.ENOSPC, errno.EFBIG) else StoreIOError
            if e.errno in (errno.ENOSPC, errno.EPIPE):
                _quiet_stdout()
            fail(f"{e.strerror or e} ({e.filename or ''})".strip(), err.exit_code, err.__name__)
        if standalone_mode:
            sys.exit(code or 0)
        return code

    def get_command(self, ctx, name):  # type: ignore[override]
        # a command's module is imported when it runs (`seenstore add` never imports
        # the bench, cluster or integration commands, nor the store's modules before
        # it needs them); a name not in _COMMAND_MODULES imports them all
        if name not in self.commands:
            _import_commands(_COMMAND_MODULES.get(name))
        return super().get_command(ctx, name)

    def list_commands(self, ctx):  # type: ignore[override]
        _import_commands()
        return super().list_commands(ctx)

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # The reader of our stdout went away (`| head`) and nothing committed was
            # lost (commands that commit deliver through deliver.py): not an error.
            _quiet_stdout()
            return 0


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="seenstore")
def main() -> None:
    """seenstore: has this URL been seen before?

    Normalises URLs, fingerprints them as 64-bit keys (host hash | URL hash) and
    keeps the set of every key ever admitted in a sorted, crash-safe store on
    disk. The store directory defaults to $SEENSTORE_DIR, else ./seenstore.db.
    """


class Count(click.ParamType):
    """A whole number >= ``minimum`` written as 1e9, 2.5e6, 1_000_000 or 1000000.
    Anything else is a usage error (exit 2), whether malformed or too small."""

    name = "N"

    def __init__(self, minimum: int = 0) -> None:
        self.minimum = minimum

    def convert(self, value, param, ctx):
        from seenstore.bench.units import parse_count

        try:
            n = value if isinstance(value, int) else parse_count(value)
        except InvalidInputError as e:
            self.fail(str(e), param, ctx)
        if n < self.minimum:
            self.fail(f"must be at least {self.minimum}, got {value}", param, ctx)
        return n


COUNT = Count()

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class Size(click.ParamType):
    """A size in bytes: 4G, 64M, 512K, 1.5G or a plain number (binary units; an
    optional trailing B or iB). Anything else is a usage error (exit 2)."""

    name = "SIZE"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        text = str(value).strip().upper().removesuffix("IB").removesuffix("B")
        unit = text[-1:] if text[-1:] in _UNITS and text[-1:] else ""
        try:
            n = int(float(text[: len(text) - len(unit)]) * _UNITS[unit])
        except ValueError:
            self.fail(f"not a size (like 4G, 64M): {value!r}", param, ctx)
        if n <= 0:
            self.fail(f"must be positive, got {value}", param, ctx)
        return n


SIZE = Size()


store_option = click.option(
    "--store",
    "store_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Store directory (default: $SEENSTORE_DIR, else ./seenstore.db).",
)

threads_option = click.option(
    "--threads", type=click.IntRange(min=1), default=None, metavar="N",
    help="Threads for the CPU-heavy stages (shard sorts side by side, the URL kernels "
         "over chunks; default: the cores this process may use). Answers never depend "
         "on it.")

# Command families register themselves on `main` when their module is imported,
# on first use (_Group.get_command): each command's module, so that a command
# loads only what it runs.
_COMMAND_MODULES = {
    "add": "url_cmds", "normalise": "url_cmds", "fingerprint": "url_cmds",
    "merge": "store_cmds", "stats": "store_cmds", "verify": "store_cmds",
    "compact": "store_cmds", "upgrade": "store_cmds", "warmup": "store_cmds",
    "replay": "store_cmds",
    "bench": "bench_cmd", "cluster": "cluster_cmds",
    "links": "integration_cmds", "check": "integration_cmds", "export": "integration_cmds",
    "dump-run": "integration_cmds", "serve": "serve_cmd",
    "policy": "policy_cmds", "rebuild": "policy_cmds", "learn": "policy_cmds",
    "duplicates": "policy_cmds", "hosts": "hosts_cmd",
    "select": "frontier_cmds", "due": "frontier_cmds", "forget": "frontier_cmds",
}


def _import_commands(module: str | None = None) -> None:
    """Import the command module ``module`` (None: every one)."""
    import importlib

    for m in [module] if module else dict.fromkeys(_COMMAND_MODULES.values()):
        importlib.import_module(f"{__name__}.{m}")
