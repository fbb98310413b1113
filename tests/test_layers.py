"""The import layers of rdusim, checked on the source of every module.

- `rdusim.ir` (the graph IR and its cost formulas) imports nothing from the compiler, simulator,
  serving or report layers, so the IR can be reused and tested on its own;
- `rdusim.sim` times the compiler's output (`rdusim.compiler.program`) but runs none of the
  compiler passes, so the simulator cannot quietly re-decide a mapping;
- `rdusim.cost` (the closed-form kernel cost) neither runs the simulator nor a compiler pass, so
  the search's ranking and the simulator's answer stay two independent models;
- `rdusim.report` renders results and runs nothing that produces them: no API, serving,
  validation or study, so the API can build its report without a loop back to itself;
- `rdusim.serving` simulates requests on compiled graphs without the Python API (a sweep that
  runs the API belongs to `rdusim.studies`);
- only the command line imports `rdusim.studies` (sweeps, the paper's tables), which runs the
  API many times;
- nothing imports `rdusim.cli`: the command line sits on top of everything.

Every import statement counts (module level, inside functions, under `TYPE_CHECKING`), and so do
indirect imports through other rdusim modules; a violation names the chain.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import rdusim

PACKAGE_DIR = Path(rdusim.__file__).resolve().parent
COMPILER_PASSES = ("fusion", "sharding", "allocate", "memory", "auto", "compile")


@dataclass(frozen=True)
class Contract:
    name: str
    sources: tuple[str, ...]  # these modules and their submodules ...
    forbidden: tuple[str, ...]  # ... must not import these or their submodules
    exempt: tuple[str, ...] = ()  # modules the contract does not constrain


CONTRACTS = (
    Contract(
        "ir-below-compiler-sim-serving-report",
        ("rdusim.ir",),
        ("rdusim.compiler", "rdusim.sim", "rdusim.serving", "rdusim.report"),
    ),
    Contract(
        "sim-uses-no-compiler-pass",
        ("rdusim.sim",),
        tuple(f"rdusim.compiler.{name}" for name in COMPILER_PASSES),
    ),
    Contract(
        "cost-model-simulates-nothing",
        ("rdusim.cost",),
        ("rdusim.sim", *(f"rdusim.compiler.{name}" for name in COMPILER_PASSES)),
    ),
    Contract(
        "report-runs-nothing",
        ("rdusim.report",),
        (
            "rdusim.api",
            "rdusim.mapping_api",
            "rdusim.serving",
            "rdusim.validation",
            "rdusim.studies",
        ),
    ),
    Contract(
        "serving-calls-no-api",
        ("rdusim.serving",),
        ("rdusim.api", "rdusim.mapping_api", "rdusim.validation", "rdusim.studies"),
    ),
    Contract(
        "only-the-cli-imports-studies",
        ("rdusim",),
        ("rdusim.studies",),
        exempt=("rdusim.studies", "rdusim.cli", "rdusim.__main__"),
    ),
    Contract(
        "nothing-imports-cli",
        ("rdusim",),
        ("rdusim.cli",),
        exempt=("rdusim.cli", "rdusim.__main__"),
    ),
)


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its `__init__.py`)."""
    out: dict[str, Path] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imported(module: str, path: Path) -> Iterator[str]:
    """Dotted names of the rdusim modules `module` imports (relative imports resolved)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import name` imports the submodule pkg.name when there is one
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        yield from (_owning_module(n) for n in names if _within(n, ("rdusim",)))


def _owning_module(name: str) -> str:
    """`name` if it is a module, else the module that defines it (`pkg.mod.func` -> `pkg.mod`)."""
    while name not in MODULES and "." in name:
        name = name.rpartition(".")[0]
    return name


GRAPH = {m: sorted(set(_imported(m, p)) - {m}) for m, p in MODULES.items()}


def _chains(start: str, forbidden: tuple[str, ...]) -> list[list[str]]:
    """Shortest import chains from `start` to each forbidden module it reaches."""
    parent: dict[str, str | None] = {start: None}
    frontier = [start]
    hits: list[str] = []
    while frontier:
        nxt = []
        for mod in frontier:
            for dep in GRAPH.get(mod, []):
                if dep in parent:
                    continue
                parent[dep] = mod
                if _within(dep, forbidden):
                    hits.append(dep)  # report it, and do not walk through it
                else:
                    nxt.append(dep)
        frontier = nxt
    chains = []
    for hit in hits:
        chain = [hit]
        while (up := parent[chain[-1]]) is not None:
            chain.append(up)
        chains.append(chain[::-1])
    return chains


def violations(contract: Contract) -> list[str]:
    """Each forbidden import as `a -> b -> c`, for the modules the contract constrains."""
    out = []
    for module in MODULES:
        if _within(module, contract.sources) and not _within(module, contract.exempt):
            out += [" -> ".join(chain) for chain in _chains(module, contract.forbidden)]
    return out


def test_the_package_was_found() -> None:
    assert "rdusim.ir.graph" in MODULES and "rdusim.sim.engine" in MODULES
    assert "rdusim.cli" in MODULES


@pytest.mark.parametrize("contract", CONTRACTS, ids=[c.name for c in CONTRACTS])
def test_import_contract(contract: Contract) -> None:
    found = violations(contract)
    assert not found, f"{contract.name} is broken by:\n  " + "\n  ".join(found)


def test_the_checker_sees_every_kind_of_import(tmp_path: Path) -> None:
    """A plain, a from-, a relative and a function-local import are all found."""
    source = (
        "from __future__ import annotations\n"
        "import rdusim.compiler.fusion\n"
        "from rdusim.compiler import sharding\n"
        "from ..compiler.allocate import plan\n"
        "def f():\n"
        "    from rdusim import cli\n"
    )
    path = tmp_path / "probe.py"
    path.write_text(source, encoding="utf-8")
    found = set(_imported("rdusim.sim.probe", path))
    assert {
        "rdusim.compiler.fusion",
        "rdusim.compiler.sharding",
        "rdusim.compiler.allocate",
        "rdusim.cli",
    } <= found
