"""Fusion pass: assign every op of a layer graph to exactly one kernel, in an order that respects
the graph's dependencies."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from rdusim.errors import SpecError
from rdusim.ir.graph import Graph
from rdusim.spec.mapping import KernelSpec
from rdusim.spec.yamlio import dotted


@dataclass(frozen=True)
class FusedKernel:
    spec: KernelSpec
    index: int  # position in the mapping's list (for error key paths)
    ops: tuple[str, ...]


def _where(kind: str, i: int, *rest: str | int) -> tuple[str | int, ...]:
    return ("kernels", kind, i, *rest)


def fuse(
    graph: Graph, kernels: list[KernelSpec], kind: str, known_ops: set[str] | None = None
) -> list[FusedKernel]:
    """Place each op of `graph` in one kernel.

    `known_ops` are op names that may appear in a mapping but are absent from this graph (the
    SnapStream ops when SnapStream is disabled); kernels left with no op are dropped.
    """
    known = set(graph.ops) | (known_ops or set())
    owner: dict[str, int] = {}
    placed: list[list[str]] = []
    for i, k in enumerate(kernels):
        ops: list[str] = []
        for j, pattern in enumerate(k.ops):
            hits = [n for n in graph.order() if fnmatch.fnmatchcase(n, pattern)]
            if not hits and not any(fnmatch.fnmatchcase(n, pattern) for n in known):
                path = _where(kind, i, "ops", j)
                raise SpecError(
                    f"no op named {pattern!r} in the {kind} layer",
                    key=dotted(path),
                    path=path,
                    fix="use an op name from `rdusim model MODEL --phase PHASE` (patterns like "
                    "'q_*' are allowed)",
                )
            for n in hits:
                if n in owner and owner[n] != i:
                    path = _where(kind, i, "ops", j)
                    raise SpecError(
                        f"op {n!r} is already in kernel {kernels[owner[n]].name!r}",
                        key=dotted(path),
                        path=path,
                        fix="list each op in exactly one kernel",
                    )
                if n not in owner:
                    owner[n] = i
                    ops.append(n)
        placed.append(ops)
    missing = [n for n in graph.order() if n not in owner]
    if missing:
        path = ("kernels", kind)
        raise SpecError(
            f"ops in no kernel: {', '.join(missing)}",
            key=dotted(path),
            path=path,
            fix="add them to a kernel's ops (or a pattern that matches them)",
        )
    for src, dst in graph.dag.edges:
        if owner[src] > owner[dst]:
            path = _where(kind, owner[dst], "ops")
            raise SpecError(
                f"op {dst!r} in kernel {kernels[owner[dst]].name!r} needs {src!r}, which runs "
                f"later in kernel {kernels[owner[src]].name!r}",
                key=dotted(path),
                path=path,
                fix="move one of them, or reorder the kernels",
            )
    order = {n: i for i, n in enumerate(graph.order())}
    return [
        FusedKernel(k, i, tuple(sorted(ops, key=order.__getitem__)))
        for i, (k, ops) in enumerate(zip(kernels, placed, strict=True))
        if ops
    ]
