"""Sub-commands beyond `model`, registered here to keep cli.py small."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rdusim.errors import SpecError


def _write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file so that nothing is left half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def dump_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False) + "\n"


def _cmd_map(args: argparse.Namespace) -> int:
    from rdusim.api import run_mapping
    from rdusim.report.mapping_report import render_map_report

    run = run_mapping(args.mapping, args.set, trace=bool(args.trace))
    report = run.report
    if args.trace:
        from rdusim.sim.trace import chrome_trace

        assert run.result is not None
        _write_atomic(Path(args.trace), json.dumps(chrome_trace(run.result)))
    if args.out:
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise SpecError("exists and is not a directory", file=str(out), key="--out",
                            fix="name a directory")
        _write_atomic(out / "report.json", dump_json(report))
    print(dump_json(report) if args.json else render_map_report(report), end="" if args.json else "\n")
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the mapping, simulation and reproduction commands."""
    m = sub.add_parser("map", help="compile and simulate a mapping (the main command)")
    m.add_argument("mapping", help="mappings/*.yaml")
    m.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a mapping field by dotted path, e.g. --set seq_len=65536")
    m.add_argument("--json", action="store_true", help="print the JSON report")
    m.add_argument("--out", metavar="DIR", help="also write DIR/report.json")
    m.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace (ui.perfetto.dev)")
    m.set_defaults(func=_cmd_map)
