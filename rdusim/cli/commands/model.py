"""`rdusim model`: a model's parameter counts, KV bytes per token and one layer's ops."""

from __future__ import annotations

import argparse
import json

from rdusim.cli.options import Subparsers, add_json
from rdusim.errors import SpecError


def register(sub: Subparsers) -> None:
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
    add_json(m)
    m.set_defaults(func=model_command)


def model_command(args: argparse.Namespace) -> int:
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


def _check_bound(value: int, limit: int, flag: str) -> None:
    if value > limit:
        raise SpecError(
            f"must be at most {limit}, got {value}",
            key=flag,
            fix=f"pass a value from 1 to {limit} (rdusim's limit for {flag})",
        )
