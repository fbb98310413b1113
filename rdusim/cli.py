"""The `rdusim` command line. User mistakes exit with code 2 and one clear message.

Never a traceback for what a user can cause: spec and option mistakes (`RdusimError`) and
operating-system refusals (a file that cannot be read or written) exit 2 with a message; a reader
that closes the output early (`rdusim map ... | head`) ends the command quietly with 141, the
shell's code for SIGPIPE.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from collections.abc import Sequence

from rdusim.errors import RdusimError, SpecError, shown_path

EXIT_USER_ERROR = 2
EXIT_BROKEN_PIPE = 128 + 13  # 128 + SIGPIPE, as a shell reports a process killed by it
EXIT_INTERRUPTED = 130


def _check_bound(value: int, limit: int, flag: str) -> None:
    if value > limit:
        raise SpecError(
            f"must be at most {limit}, got {value}",
            key=flag,
            fix=f"pass a value from 1 to {limit} (rdusim's limit for {flag})",
        )


def _cmd_model(args: argparse.Namespace) -> int:
    from rdusim.report.model_report import model_report, render_model_report
    from rdusim.spec.limits import MAX_BATCH, MAX_SEQ_LEN

    _check_bound(args.seq_len, MAX_SEQ_LEN, "--seq-len")
    _check_bound(args.batch, MAX_BATCH, "--batch")
    report = model_report(args.model, phase=args.phase, seq_len=args.seq_len, batch=args.batch)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render_model_report(report))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rdusim",
        description="Simulator and mapping compiler for SN40L dataflow accelerators.",
    )
    from rdusim import __version__

    p.add_argument("--version", action="version", version=f"rdusim {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    m = sub.add_parser("model", help="parameter counts, KV bytes per token and one layer's ops")
    m.add_argument(
        "model",
        help="a model YAML, a Hugging Face config.json, or a shipped model's name (rdusim list)",
    )
    m.add_argument(
        "--phase",
        choices=("prefill", "decode"),
        default="prefill",
        help="which graph's layer to list: prefill (the whole prompt at once; MLA decompressed) "
        "or decode (one token per sequence against the cache; MLA absorbed) (default: prefill)",
    )
    m.add_argument(
        "--seq-len",
        type=int,
        default=4096,
        help="prompt length (prefill) or cache length (decode) (default: 4096)",
    )
    m.add_argument(
        "--batch",
        type=int,
        default=1,
        help="sequences processed together, scaling the table's FLOPs and bytes (default: 1)",
    )
    m.add_argument("--json", action="store_true", help="print the JSON report")
    m.set_defaults(func=_cmd_model)

    from rdusim import cli_commands, cli_evidence, cli_serve

    cli_commands.register(sub)
    cli_evidence.register(sub)
    cli_serve.register(sub)
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
    return _dispatch(args)


def main(argv: Sequence[str] | None = None) -> int:
    _printable_output()
    try:
        return _run(argv)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
