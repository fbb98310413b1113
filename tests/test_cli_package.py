"""The shape of `rdusim.cli`: one module per command, the shared options declared once, no long
function, and a start-up that loads none of the heavy libraries (`rdusim --help` answers at
once; benchmarks/bench_startup.py times it)."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

import pytest

import rdusim.cli
from rdusim.cli.commands import COMMANDS, Command

CLI_DIR = Path(rdusim.cli.__file__).resolve().parent
SOURCES = sorted(CLI_DIR.rglob("*.py"))
SHARED = ("--set", "--json", "--out", "--hardware")
MAX_FUNCTION_LINES = 80
HEAVY = ("pydantic", "numpy", "scipy", "simpy", "matplotlib", "networkx", "ruamel", "tqdm")


def _add_argument_calls() -> list[tuple[str, str]]:
    """(file, option) for every `add_argument("--option", ...)` under rdusim/cli."""
    found = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                found.append((path.name, str(node.args[0].value)))
    return found


@pytest.mark.parametrize("option", SHARED)
def test_a_shared_option_is_declared_once_in_options(option: str) -> None:
    assert [f for f, o in _add_argument_calls() if o == option] == ["options.py"]


def test_every_function_is_short() -> None:
    long = [
        f"{path.relative_to(CLI_DIR)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in SOURCES
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, long


def test_every_command_module_registers_its_commands() -> None:
    registered = {cmd: sorted(_registered(cmd)) for cmd in COMMANDS}
    names = [n for ns in registered.values() for n in ns]
    assert len(names) == len(set(names))
    assert set(names) == {
        "model",
        "map",
        "sweep",
        "list",
        "reproduce",
        "validate",
        "calibrate",
        "serve",
        "fit",
    }


def test_each_command_has_its_own_module() -> None:
    """`rdusim.cli.commands.X` registers the command `X`, and only it."""
    for cmd in COMMANDS:
        module = getattr(cmd, "__name__", "")
        assert _registered(cmd) == [module.rpartition(".")[2]], module


def _registered(command: Command) -> list[str]:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    command.register(sub)
    return list(sub.choices)


def test_help_loads_no_heavy_library() -> None:
    probe = (
        "import sys\n"
        "from rdusim.cli import build_parser\n"
        "build_parser()\n"
        f"print(*sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split() == [], done.stdout


# what `rdusim map` of a written-out mapping must not load: the search, serving, plotting and
# tables, the parallel executors, scipy (calibration and the search's expert-parallel tails)
NOT_FOR_MAP = (
    "networkx",
    "scipy",
    "matplotlib",
    "pandas",
    "dask",
    "tqdm",
    "multiprocessing",
    "concurrent.futures",
    "rdusim.search.mapper",
    "rdusim.serving",
)


def test_map_loads_only_what_it_uses() -> None:
    """What rdusim itself loads: a module the libraries `map` needs already bring in (some
    pydantic-core versions import asyncio, and with it concurrent.futures) does not count."""
    probe = (
        "import contextlib, io, sys\n"
        "import numpy, pydantic, ruamel.yaml, simpy\n"
        "before = set(sys.modules)\n"
        "from rdusim.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['map', 'r1_prefill']) == 0\n"
        f"print(*sorted(m for m in {NOT_FOR_MAP!r} if m in sys.modules and m not in before))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split() == [], done.stdout


@pytest.mark.parametrize("entry", [["-m", "rdusim"], ["-m", "rdusim.cli"]])
def test_both_module_entries_run_the_command(entry: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, *entry, "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.startswith("rdusim "), done
