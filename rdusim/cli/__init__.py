"""The `rdusim` command line. User mistakes exit with code 2 and one clear message.

Never a traceback for what a user can cause: spec and option mistakes (`RdusimError`) and
operating-system refusals (a file that cannot be read or written) exit 2 with a message; a reader
that closes the output early (`rdusim map ... | head`) ends the command quietly with 141, the
shell's code for SIGPIPE.

Each command is a module of `rdusim.cli.commands` with a `register` that declares its options
(through the shared helpers of `rdusim.cli.options`) and a function that runs it. Declaring them
imports nothing heavy: the compiler, simulator, numpy and pydantic load when a command runs, so
`rdusim --version` and `--help` answer at once (benchmarks/bench_startup.py).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from collections.abc import Sequence

from rdusim.errors import RdusimError, shown_path

EXIT_USER_ERROR = 2
EXIT_BROKEN_PIPE = 128 + 13  # 128 + SIGPIPE, as a shell reports a process killed by it
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    from rdusim import __version__
    from rdusim.cli.commands import COMMANDS

    p = argparse.ArgumentParser(
        prog="rdusim",
        description="Simulator and mapping compiler for SN40L dataflow accelerators.",
    )
    p.add_argument("--version", action="version", version=f"rdusim {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return p


def _say(text: str) -> None:
    """Print a message on stderr; a closed stderr is not worth a traceback."""
    with contextlib.suppress(OSError, ValueError):
        print(text, file=sys.stderr)


def _os_error(exc: OSError) -> str:
    """A user-facing message for an operating-system refusal outside the checked paths."""
    name = exc.filename if isinstance(exc.filename, str) else None
    where = f"{shown_path(name)}: " if name else ""
    return (
        f"{where}{exc.strerror or exc}\n"
        "  fix: check the path, that its directories exist and that you may read or write there"
    )


def _printable_output() -> None:
    """Print text that cannot be encoded (a surrogate from undecodable command-line bytes) as
    an escape instead of failing halfway through the output."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            with contextlib.suppress(ValueError, OSError):
                stream.reconfigure(errors="backslashreplace")


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at devnull so that the interpreter's final flush does
    not fail again (the recipe in the Python docs' note on SIGPIPE)."""
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _dispatch(args: argparse.Namespace) -> int:
    """Run the sub-command and flush its output, so that a closed pipe surfaces here."""
    try:
        code: int = args.func(args)
        sys.stdout.flush()
        return code
    except RdusimError as exc:
        _say(f"rdusim: error: {exc}")
        return EXIT_USER_ERROR
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        _say(f"rdusim: error: {_os_error(exc)}")
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        _say("rdusim: interrupted")
        return EXIT_INTERRUPTED


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed its usage message
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USER_ERROR
    if not getattr(args, "python_collector", False):
        _collect_less_often()
    return _dispatch(args)


# The cyclic garbage collector's first threshold for a command: a simulation makes and drops
# hundreds of thousands of small objects (events, tuples), and at Python's default of 700 the
# collector runs hundreds of times a command over everything allocated so far. Nothing rdusim
# computes depends on when unreachable cycles are freed. `serve` keeps Python's own threshold
# (its parser sets `python_collector`): a long run's finished processes leave cycles, and
# collecting them less often raised a million requests' peak memory from 850 to 1,015 MB
# to save 4% of the time.
GC_THRESHOLD = 10_000


def _collect_less_often() -> None:
    """Raise the collector's first threshold to `GC_THRESHOLD` (never lowering a higher one)."""
    import gc

    first, *older = gc.get_threshold()
    gc.set_threshold(max(first, GC_THRESHOLD), *older)


# rdusim's numpy work is on small arrays (the calibration ensemble's 64 members, a few hundred
# rows), where a BLAS thread pool does not help and its idle threads still spin on the CPU
# (0.1 s of a 0.5 s `rdusim map` on two cores). A command runs with one BLAS thread unless the
# user has set these.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")


def _one_blas_thread() -> None:
    """Ask numpy's BLAS for one thread, before anything imports numpy."""
    for name in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(name, "1")


def main(argv: Sequence[str] | None = None) -> int:
    _one_blas_thread()
    _printable_output()
    try:
        return _run(argv)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
