"""Fusion pass: assign every op of a layer graph to exactly one kernel, in an order that respects
the graph's dependencies."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from rdusim.errors import SpecError
from rdusim.ir.graph import Graph
from rdusim.spec.mapping import KernelSpec
from rdusim.spec.yamlio import did_you_mean, dotted, kernel_key


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
                    key=kernel_key(path, k.name),
                    path=path,
                    fix=did_you_mean(pattern, known)
                    + "use an op name from `rdusim model MODEL --phase PHASE` (patterns like "
                    "'q_*' are allowed)",
                )
            for n in hits:
                if n in owner and owner[n] != i:
                    path = _where(kind, i, "ops", j)
                    raise SpecError(
                        f"op {n!r} is already in kernel {kernels[owner[n]].name!r}",
                        key=kernel_key(path, k.name),
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
    for src, dst in graph.edges():
        if owner[src] > owner[dst]:
            path = _where(kind, owner[dst], "ops")
            raise SpecError(
                f"op {dst!r} in kernel {kernels[owner[dst]].name!r} needs {src!r}, which runs "
                f"later in kernel {kernels[owner[src]].name!r}",
                key=kernel_key(path, kernels[owner[dst]].name),
                path=path,
                fix="move one of them, or reorder the kernels",
            )
    order = {n: i for i, n in enumerate(graph.order())}
    return [
        FusedKernel(k, i, tuple(sorted(ops, key=order.__getitem__)))
        for i, (k, ops) in enumerate(zip(kernels, placed, strict=True))
        if ops
    ]


def check_overrides(fused: list[FusedKernel], kind: str, known_ops: set[str] | None = None) -> None:
    """Every per-op override must match an op of its own kernel: one that matches nothing, or only
    ops another kernel runs, would be ignored and leave the op with the kernel's sharding.

    A pattern that matches only `known_ops` absent from the layer (SnapStream's, when it is
    disabled) is kept for when they are present.
    """
    layer_ops = {n: fk for fk in fused for n in fk.ops}
    absent = (known_ops or set()) - set(layer_ops)
    for fk in fused:
        for pattern in fk.spec.overrides:
            if any(fnmatch.fnmatchcase(n, pattern) for n in fk.ops):
                continue
            if any(fnmatch.fnmatchcase(n, pattern) for n in absent):
                continue
            raise _stray_override(fk, kind, pattern, layer_ops)


def _stray_override(
    fk: FusedKernel, kind: str, pattern: str, layer_ops: dict[str, FusedKernel]
) -> SpecError:
    """The error for an override matching no op of its kernel: where those ops are, if anywhere."""
    path = _where(kind, fk.index, "overrides", pattern)
    own = ", ".join(fk.ops)
    elsewhere = [n for n in layer_ops if fnmatch.fnmatchcase(n, pattern)]
    if elsewhere:
        where = ", ".join(f"{n} in {layer_ops[n].spec.name!r}" for n in elsewhere)
        problem = (
            f"override {pattern!r} matches only ops of other kernels ({where}), "
            f"none of kernel {fk.spec.name!r}"
        )
        fix = (
            did_you_mean(pattern, fk.ops)
            + f"move the override to that kernel, or key it by an op of this kernel: {own}"
        )
    else:
        problem = f"override {pattern!r} matches no op of kernel {fk.spec.name!r}"
        fix = did_you_mean(pattern, fk.ops) + f"key it by an op of this kernel: {own}"
    return SpecError(problem, key=kernel_key(path, fk.spec.name), path=path, fix=fix)
