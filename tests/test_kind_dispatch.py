"""Op-kind behaviour is dispatched through the op-kind tables, not by comparing kinds.

What an op kind implies lives in the per-kind tables of `rdusim.ir.attrs` (`ATTRS_OF`, `TRAITS`)
and `rdusim.ir.ops` (`COSTS`, `SIMD_OPS_PER_ELEMENT`), so a new kind with its own attributes
touches only its entries there. Anywhere else, code asks an op's `traits` (or its attributes)
instead of writing `op.kind == OpKind.ATTENTION`. This test finds every comparison (`==`, `!=`,
`in`, `not in`, `is`, a `match` case) of an op kind, written as an `OpKind` member or as a
`.kind` against a kind's name, outside the table modules.

`ALLOWED` lists the functions that still compare kinds, each with the trait that replaces it;
an entry whose comparisons are gone must be removed, so the list only shrinks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import rdusim
from rdusim.ir.attrs import TRAITS, OpKind

PACKAGE_DIR = Path(rdusim.__file__).resolve().parent
TABLES = {"rdusim/ir/attrs.py", "rdusim/ir/ops.py"}
KIND_NAMES = {kind.value for kind in OpKind}

ALLOWED: dict[tuple[str, str], str] = {}


def _is_kind_member(node: ast.expr) -> bool:
    """`OpKind.X` (or `attrs.OpKind.X`)."""
    if not isinstance(node, ast.Attribute):
        return False
    owner = node.value
    return (isinstance(owner, ast.Name) and owner.id == "OpKind") or (
        isinstance(owner, ast.Attribute) and owner.attr == "OpKind"
    )


def _is_kind_name(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value in KIND_NAMES


def _elements(node: ast.expr) -> list[ast.expr]:
    """A compared operand, or the elements of a tuple, list or set of them."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return list(node.elts)
    return [node]


def _compares_kind(node: ast.Compare) -> bool:
    operands = [node.left, *node.comparators]
    flat = [e for operand in operands for e in _elements(operand)]
    if any(_is_kind_member(e) for e in flat):
        return True
    reads_kind = any(isinstance(o, ast.Attribute) and o.attr == "kind" for o in operands)
    return reads_kind and any(_is_kind_name(e) for e in flat)


def _matches_kind(node: ast.match_case) -> bool:
    return any(
        isinstance(p, ast.MatchValue) and (_is_kind_member(p.value) or _is_kind_name(p.value))
        for p in ast.walk(node.pattern)
    )


def kind_comparisons(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """(enclosing function, line) of every op-kind comparison in `tree`."""

    def visit(node: ast.AST, where: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = child.name
            if isinstance(child, ast.Compare) and _compares_kind(child):
                yield where, child.lineno
            if isinstance(child, ast.match_case) and _matches_kind(child):
                yield where, child.pattern.lineno
            yield from visit(child, inner)

    yield from visit(tree, "<module>")


def comparisons() -> dict[tuple[str, str], list[int]]:
    """(module path, function) -> lines, for every op-kind comparison outside the tables."""
    found: dict[tuple[str, str], list[int]] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = path.relative_to(PACKAGE_DIR.parent).as_posix()
        if rel in TABLES:
            continue
        for where, line in kind_comparisons(ast.parse(path.read_text(encoding="utf-8"))):
            found.setdefault((rel, where), []).append(line)
    return found


def test_no_kind_comparison_outside_the_tables() -> None:
    found = comparisons()
    new = [f"{p}:{lines[0]} in {f}" for (p, f), lines in found.items() if (p, f) not in ALLOWED]
    assert not new, (
        "op kinds compared outside the op-kind tables; give the kind a property in "
        "rdusim/ir/attrs.py TRAITS and ask op.traits instead:\n" + "\n".join(new)
    )


def test_the_allow_list_only_shrinks() -> None:
    stale = sorted(set(ALLOWED) - set(comparisons()))
    assert not stale, f"no kind comparison left in {stale}: remove them from ALLOWED"


def test_every_kind_has_traits() -> None:
    assert set(TRAITS) == set(OpKind)


def test_the_scan_finds_each_form_of_comparison() -> None:
    source = """
def a(op):
    return op.kind == OpKind.ATTENTION
def b(op):
    return op.kind in (OpKind.GATHER, OpKind.GEMM)
def c(op):
    return op.kind != "scatter"
def d(op):
    match op.kind:
        case OpKind.SORT:
            return 1
def e(t):
    return t.kind == TensorKind.CACHE or t.kind == "moe" or t.dtype == "gemm"
"""
    found = [where for where, _ in kind_comparisons(ast.parse(source))]
    assert found == ["a", "b", "c", "d"]
