"""No import cycles between rdusim's units: its subpackages and its top-level modules.

A unit is `rdusim.X` for each subpackage or module directly under `rdusim/` (`rdusim.ir`,
`rdusim.api`). Unit A depends on unit B when any module of A imports any module of B; every
import statement counts (module level, inside functions, under `TYPE_CHECKING`). The units must
form a DAG, so each can be read, tested and reused above the ones it depends on, and a change
low down cannot be needed by itself through a loop.

`TOLERATED` lists the cycles that are known and not yet broken; a cycle may only shrink within
one of them, and any other fails the test with the imports that make it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import networkx as nx

import rdusim

PACKAGE_DIR = Path(rdusim.__file__).resolve().parent

# The Python API and the serving, reporting and validation layers call each other: the API runs
# serving's max batch and builds the report, while serving's sweep and validation's paper figures
# run the API. Breaking it means moving those two callers above the API.
TOLERATED: tuple[frozenset[str], ...] = (
    frozenset(
        {
            "rdusim.api",
            "rdusim.mapping_api",
            "rdusim.report",
            "rdusim.serving",
            "rdusim.validation",
        }
    ),
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def unit_of(module: str) -> str:
    """`rdusim.ir.builders.gqa` -> `rdusim.ir`; `rdusim.api` -> `rdusim.api`."""
    return ".".join(module.split(".")[:2])


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
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        module = _module_name(path)
        src = unit_of(module)
        g.add_node(src)
        source = path.read_text(encoding="utf-8")
        for name in imported(module, source, path.name == "__init__.py"):
            dst = unit_of(name)
            if dst in (src, "rdusim"):
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
