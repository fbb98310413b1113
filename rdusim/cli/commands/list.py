"""`rdusim list`: what ships with rdusim and can be named instead of a path: hardware presets,
models and mappings."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rdusim.cli.options import Subparsers, add_json, dump_json


def register(sub: Subparsers) -> None:
    ls = sub.add_parser("list", help="the shipped hardware presets, models and mappings, by name")
    add_json(ls, help="print them as JSON")
    ls.set_defaults(func=list_command)


def list_command(args: argparse.Namespace) -> int:
    cat = _catalog()
    if args.json:
        print(dump_json(cat), end="")
    else:
        print(_render_catalog(cat))
    return 0


def _mapping_row(name: str, path: Path) -> dict[str, Any]:
    """A shipped mapping's phase, model and hardware, read from its YAML (nothing compiled)."""
    from rdusim.spec.catalog import resolve_model
    from rdusim.spec.yamlio import read_document, to_plain

    data = to_plain(read_document(path))
    model = Path(resolve_model(str(data["model"]), path.parent)).name.removesuffix(".yaml")
    return {
        "name": name,
        "phase": data["phase"],
        "model": model,
        "hardware": data["hardware"],
        "file": str(path),
    }


def _catalog() -> dict[str, list[dict[str, Any]]]:
    """What ships with rdusim and can be named instead of a path: presets, models, mappings."""
    from rdusim.ir.model import summarize
    from rdusim.spec.catalog import shipped_mappings, shipped_models, shipped_presets
    from rdusim.spec.hardware import load_hardware
    from rdusim.spec.model import load_model_config

    hardware = [
        {"name": n, "sockets": load_hardware(n).sockets, "file": str(path)}
        for n, path in shipped_presets().items()
    ]
    models = []
    for name, path in shipped_models().items():
        s = summarize(load_model_config(path))
        row = {"name": name, "family": s.family, "params_total": int(s.params_total)}
        models.append(row | {"file": str(path)})
    mappings = [_mapping_row(n, p) for n, p in shipped_mappings().items()]
    return {"hardware": hardware, "models": models, "mappings": mappings}


def _render_catalog(cat: Mapping[str, list[dict[str, Any]]]) -> str:
    """Three compact tables, then how to use the names."""
    from rdusim.report.console import si, table

    hw = table(["hardware", "sockets"], [[h["name"], h["sockets"]] for h in cat["hardware"]])
    models = table(
        ["model", "family", "parameters"],
        [[m["name"], m["family"], si(m["params_total"])] for m in cat["models"]],
        "<<>",
    )
    keys = ("name", "phase", "model", "hardware")
    rows = [[m[k] for k in keys] for m in cat["mappings"]]
    mappings = table(["mapping", *keys[1:]], rows, "<<<<")
    note = "name any of these instead of a path: rdusim map r1_prefill, rdusim model deepseek-r1"
    return "\n\n".join([hw, models, mappings, note])
