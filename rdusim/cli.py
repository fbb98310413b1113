"""The `rdusim` command line. User mistakes exit with code 2 and one clear message."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from rdusim.errors import RdusimError


def _cmd_model(args: argparse.Namespace) -> int:
    from rdusim.report.model_report import model_report, render_model_report

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
    sub = p.add_subparsers(dest="command", required=True)

    m = sub.add_parser("model", help="parameter counts, KV bytes per token and one layer's ops")
    m.add_argument("model", help="models/*.yaml or a Hugging Face config.json")
    m.add_argument("--phase", choices=("prefill", "decode"), default="prefill")
    m.add_argument(
        "--seq-len", type=int, default=4096, help="prompt length (prefill) or cache length (decode)"
    )
    m.add_argument("--batch", type=int, default=1)
    m.add_argument("--json", action="store_true", help="print the JSON report")
    m.set_defaults(func=_cmd_model)

    from rdusim import cli_commands

    cli_commands.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed its usage message
        return int(exc.code) if isinstance(exc.code, int) else 2
    try:
        code: int = args.func(args)
        return code
    except RdusimError as exc:
        print(f"rdusim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rdusim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
