"""No function in rdusim is longer than `MAX_BODY_LINES`.

A function's length is the lines of its body, from its first statement (the docstring counts) to
its last line; the signature and decorators do not count. A longer function is split into named
steps, each of which can be read, and tested, on its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rdusim

PACKAGE_DIR = Path(rdusim.__file__).resolve().parent
MAX_BODY_LINES = 80


def body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement of `node`'s body to its last line."""
    assert node.end_lineno is not None
    return node.end_lineno - node.body[0].lineno + 1


def long_functions(max_lines: int = MAX_BODY_LINES) -> list[str]:
    """`path:line name (n lines)` for every function of rdusim whose body is over `max_lines`."""
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = body_lines(node)
                if n > max_lines:
                    where = path.relative_to(PACKAGE_DIR.parent)
                    found.append(f"{where}:{node.lineno} {node.name} ({n} lines)")
    return found


def test_no_function_is_over_the_limit() -> None:
    offenders = long_functions()
    assert not offenders, f"functions over {MAX_BODY_LINES} lines:\n" + "\n".join(offenders)


def test_the_measure_counts_the_body_with_its_docstring() -> None:
    source = 'def f(\n    a,\n):\n    """doc"""\n    x = 1\n\n    return x\n'
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef)
    assert body_lines(node) == 4


def test_the_scan_finds_a_long_function() -> None:
    # the limit is live: at 20 lines, rdusim has long functions, and each is named with its place
    found = long_functions(20)
    assert found
    assert all(".py:" in row and row.endswith(" lines)") for row in found)
