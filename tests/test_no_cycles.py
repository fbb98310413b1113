"""No import cycles between rdusim's units: its subpackages and its top-level modules.

A unit is `rdusim.X` for each subpackage or module directly under `rdusim/` (`rdusim.ir`,
`rdusim.api`). Unit A depends on unit B when any module of A imports any module of B; every
import statement counts (module level, inside functions, under `TYPE_CHECKING`). The units must
form a DAG, so each can be read, tested and reused above the ones it depends on, and a change
low down cannot be needed by itself through a loop.

`TOLERATED` lists the cycles that are known and not yet broken; a cycle may only shrink within
one of them, and any other fails the test with the imports that make it. It is empty: a new
cycle is broken by moving code to the layer it belongs to, not listed here. Modules, too, import
without a cycle, within a unit as between units.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

import networkx as nx

import rdusim

PACKAGE_DIR = Path(rdusim.__file__).resolve().parent

TOLERATED: tuple[frozenset[str], ...] = ()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def unit_of(module: str) -> str:
    """`rdusim.ir.builders.gqa` -> `rdusim.ir`; `rdusim.api` -> `rdusim.api`."""
    return ".".join(module.split(".")[:2])


def units() -> set[str]:
    """Every unit: `rdusim` itself, and each package or module directly under it."""
    return {unit_of(_module_name(path)) for path in PACKAGE_DIR.rglob("*.py")}


def imported(module: str, source: str, is_package: bool = False) -> Iterator[str]:
    """Dotted names of the rdusim modules (or their members) that `source` imports, relative
    imports resolved against `module`."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        yield from (n for n in names if n == "rdusim" or n.startswith("rdusim."))


def unit_graph() -> nx.DiGraph:
    """Units and their dependencies; each edge keeps the module imports that make it."""
    g = nx.DiGraph()
    known = units()
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        module = _module_name(path)
        src = unit_of(module)
        g.add_node(src)
        source = path.read_text(encoding="utf-8")
        for name in imported(module, source, path.name == "__init__.py"):
            dst = unit_of(name)
            # `from rdusim import __version__` names a member of rdusim itself, not a unit
            if dst in (src, "rdusim") or dst not in known:
                continue
            g.add_edge(src, dst)
            g.edges[src, dst].setdefault("via", set()).add(f"{module} imports {name}")
    return g


def cycles(g: nx.DiGraph) -> list[frozenset[str]]:
    """The strongly connected groups of more than one unit: each is one or more cycles."""
    return [frozenset(c) for c in nx.strongly_connected_components(g) if len(c) > 1]


def _explain(g: nx.DiGraph, group: frozenset[str]) -> str:
    edges = [(a, b) for a, b in g.edges if a in group and b in group]
    lines = [f"{a} -> {b}: {', '.join(sorted(g.edges[a, b]['via']))}" for a, b in sorted(edges)]
    return "\n    ".join(lines)


def test_the_units_were_found():
    g = unit_graph()
    assert {"rdusim.ir", "rdusim.compiler", "rdusim.sim", "rdusim.snapstream"} <= set(g)
    assert g.has_edge("rdusim.compiler", "rdusim.ir")


def test_no_import_cycles_between_units():
    g = unit_graph()
    found = [c for c in cycles(g) if not any(c <= allowed for allowed in TOLERATED)]
    report = "\n  ".join(f"{sorted(c)}:\n    {_explain(g, c)}" for c in found)
    assert not found, f"import cycles between rdusim's units:\n  {report}"


def module_graph() -> nx.DiGraph:
    """rdusim's modules and the modules each imports (a member imported from a module counts as
    the module; `rdusim` itself, the package's entry, is left out)."""
    modules = {_module_name(path): path for path in PACKAGE_DIR.rglob("*.py")}
    g = nx.DiGraph()
    for module, path in sorted(modules.items()):
        g.add_node(module)
        source = path.read_text(encoding="utf-8")
        for name in imported(module, source, path.name == "__init__.py"):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name not in (module, "rdusim"):
                g.add_edge(module, name)
    return g


def test_no_import_cycles_between_modules():
    """Within a unit too, modules import in one direction (`rdusim.ir.graph` used to import
    `rdusim.ir.ops` inside a property while `ops` imports `graph`)."""
    g = module_graph()
    assert {"rdusim.ir.graph", "rdusim.ir.ops", "rdusim.cli.commands.map"} <= set(g)
    assert g.has_edge("rdusim.ir.ops", "rdusim.ir.graph")
    found = sorted(sorted(c) for c in cycles(g))
    assert not found, f"import cycles between rdusim's modules: {found}"


def test_every_node_is_a_unit():
    """A name imported from `rdusim` itself (`from rdusim import __version__`) is no unit."""
    g = unit_graph()
    assert set(g) == units()
    assert "rdusim.__version__" not in g


def test_the_api_stands_between_the_report_and_the_studies():
    """The cycle {api, mapping_api, report, serving, validation} is gone. The report renders
    results and imports none of the layers that produce them; serving simulates requests on
    compiled graphs without the API; validation runs the API on the evidence; the studies (a
    sweep, the paper's tables) run the API and compare with the evidence; the command line runs
    them all."""
    g = unit_graph()
    chain = ["rdusim.cli", "rdusim.studies", "rdusim.validation", "rdusim.api", "rdusim.report"]
    assert list(nx.topological_sort(g.subgraph(chain))) == chain
    assert all(g.has_edge(a, b) for a, b in itertools.pairwise(chain))
    for lower in ("rdusim.report", "rdusim.serving", "rdusim.mapping_api"):
        assert not nx.has_path(g, lower, "rdusim.api"), lower


def test_the_ir_snapstream_and_compiler_stand_in_order():
    """The cycle spec -> snapstream -> compiler -> ir -> snapstream is gone: SnapStream's
    configuration and arithmetic sit below the IR, its IR ops are built in `rdusim.ir.builders`
    and its on-chip sizes come from the compiled program, not from the compiler's modules."""
    g = unit_graph()
    assert not g.has_edge("rdusim.snapstream", "rdusim.ir")
    assert not g.has_edge("rdusim.snapstream", "rdusim.compiler")
    order = list(nx.topological_sort(g.subgraph(["rdusim.spec", "rdusim.ir", "rdusim.compiler"])))
    assert order == ["rdusim.compiler", "rdusim.ir", "rdusim.spec"]


def test_the_checker_finds_a_cycle_through_any_kind_of_import():
    """A function-local and a relative import close a loop as surely as a module-level one."""
    a = "def f():\n    from rdusim.beta import thing\n"
    b = "from ..alpha.core import other\n"
    g = nx.DiGraph()
    for module, source in (("rdusim.alpha.core", a), ("rdusim.beta.mod", b)):
        for name in imported(module, source):
            g.add_edge(unit_of(module), unit_of(name))
    assert cycles(g) == [frozenset({"rdusim.alpha", "rdusim.beta"})]


def test_every_folder_of_modules_is_a_regular_package():
    """A folder of rdusim that holds modules has an `__init__.py`: a namespace package is
    skipped by import-graph tools (grimp, import-linter) and hides its imports from them."""
    folders = {path.parent for path in PACKAGE_DIR.rglob("*.py")}
    assert (
        sorted(
            str(f.relative_to(PACKAGE_DIR)) for f in folders if not (f / "__init__.py").is_file()
        )
        == []
    )
