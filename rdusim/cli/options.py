"""Options several commands share, each declared here once, and the checks that go with them.

A command passes its own help text (and `--out` its default), so `rdusim CMD --help` says what
the option means there; the option's name, kind and metavar are the same everywhere.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from rdusim.spec.hardware import Hardware

# what `ArgumentParser.add_subparsers` returns, to which each command adds its parser
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

MAPPING_HELP = "a mapping YAML file, or the name of a shipped mapping (rdusim list)"


def add_mapping(p: argparse.ArgumentParser) -> None:
    """The mapping a command runs: a file or a shipped name."""
    p.add_argument("mapping", help=MAPPING_HELP)


def add_set(p: argparse.ArgumentParser, *, metavar: str, help: str) -> None:
    """`--set KEY=VALUE`, repeatable: a mapping field by dotted path (with several values, a
    grid)."""
    p.add_argument("--set", action="append", default=[], metavar=metavar, help=help)


def add_json(p: argparse.ArgumentParser, help: str = "print the JSON report") -> None:
    """`--json`: print JSON instead of text."""
    p.add_argument("--json", action="store_true", help=help)


def add_out(p: argparse.ArgumentParser, *, help: str, default: str | None = None) -> None:
    """`--out DIR`: the folder a command writes its files into."""
    p.add_argument("--out", metavar="DIR", default=default, help=help)


def add_hardware(p: argparse.ArgumentParser, *, help: str) -> None:
    """`--hardware PRESET_OR_FILE`: the hardware to run on instead of the mappings' own."""
    p.add_argument("--hardware", metavar="PRESET_OR_FILE", help=help)


def hardware_option(name_or_path: str | None) -> Hardware | None:
    """The hardware `--hardware` names (None when not given), its path checked first."""
    from rdusim.spec.hardware import load_hardware
    from rdusim.spec.yamlio import check_path

    if name_or_path is None:
        return None
    check_path(name_or_path, file=name_or_path, key="--hardware")
    return load_hardware(name_or_path) if name_or_path else None


def dump_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False) + "\n"
