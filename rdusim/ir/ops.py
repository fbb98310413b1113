"""Op kinds and their cost formulas: FLOPs (or SIMD element operations), bytes read and written.

One table (`COSTS`) gives each kind its cost class and its three formulas, so a new kind is one
row. Weights are counted separately (`Op.weight_bytes`), because whether they come from HBM each
time is a property of the mapping, not of the math.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from rdusim.ir.attrs import (
    AttentionAttrs,
    Dim,
    ElementwiseAttrs,
    GemmAttrs,
    OpAttrs,
    OpKind,
    PoolAttrs,
    SortAttrs,
    TopkAttrs,
    window_of,
)
from rdusim.ir.graph import CostClass, Graph, Op, Workload

Env = dict[str, int]
CostFormula = Callable[[Op, Graph, Env], float]
A = TypeVar("A", bound=OpAttrs)

# SIMD element operations per element, by kind (multiply-adds count as two, like GEMM FLOPs).
SIMD_OPS_PER_ELEMENT: dict[OpKind, float] = {
    OpKind.NORM: 4.0,  # square, accumulate, rsqrt-scale, weight multiply
    OpKind.ELEMENTWISE: 1.0,
    OpKind.ROPE: 6.0,  # rotate pairs: 4 multiplies + 2 adds
    OpKind.SOFTMAX: 5.0,  # max, subtract, exp, sum, divide
    OpKind.REDUCE: 1.0,
    OpKind.ROUTER: 8.0,  # sigmoid, bias add, group scores, selection, normalisation
}


def attrs_as(op: Op, cls: type[A]) -> A:
    """`op.attrs` as its kind's attribute class (a formula is only ever given its own kind)."""
    if not isinstance(op.attrs, cls):
        raise TypeError(f"op {op.name} ({op.kind}) has no {cls.__name__}")
    return op.attrs


def _dims(dims: tuple[Dim, ...], env: Env) -> int:
    return math.prod(env[d] if isinstance(d, str) else d for d in dims)


def attention_pairs(s: int, t: int, causal: bool, window: int | None = None) -> float:
    """(query, key) pairs scored per head and sequence.

    Causal prefill (S == T) scores the lower triangle, S(S+1)/2. A decode step's S new tokens
    attend to the T cached positions (the causal triangle among the S is negligible). A sliding
    window of W keys caps each query at W: the triangle's first W rows, then W keys a row; in
    decode, min(T, W) positions.
    """
    if causal and s == t:
        if window is None or s <= window:
            return s * (s + 1) / 2
        return window * (window + 1) / 2 + (s - window) * window
    return float(s * (t if window is None else min(t, window)))


def _windowed(op: Op, env: Env) -> Env:
    """The shape symbols an op's reads see: a sliding window caps the key positions T at W."""
    window = window_of(op.attrs)
    return env if window is None else {**env, "T": min(env["T"], window)}


def _first_input_elements(op: Op, graph: Graph, env: Env) -> float:
    return graph.tensors[op.inputs[0]].numel(env)


# FLOPs by kind ----------------------------------------------------------------------------------


def _gemm_flops(op: Op, graph: Graph, env: Env) -> float:
    a = attrs_as(op, GemmAttrs)
    n = a.n * _dims(a.n_dims, env)
    return 2.0 * _dims(a.m, env) * a.k * n * a.count


def _attention_flops(op: Op, graph: Graph, env: Env) -> float:
    a = attrs_as(op, AttentionAttrs)
    pairs = attention_pairs(env["S"], env["T"], a.causal, a.window)
    return 2.0 * env["B"] * a.heads * pairs * (a.qk_dim + a.v_dim)


def _simd_flops(op: Op, graph: Graph, env: Env) -> float:
    scale = op.attrs.ops_scale if isinstance(op.attrs, ElementwiseAttrs) else 1.0
    return SIMD_OPS_PER_ELEMENT[op.kind] * _first_input_elements(op, graph, env) * scale


def _pool_flops(op: Op, graph: Graph, env: Env) -> float:
    return _first_input_elements(op, graph, env) * attrs_as(op, PoolAttrs).kernel


def _selection_flops(op: Op, graph: Graph, env: Env) -> float:
    """A bitonic-style selection over n candidates per row: n * log2(n) compare-exchanges."""
    a = op.attrs
    if not isinstance(a, TopkAttrs | SortAttrs):
        raise TypeError(f"op {op.name} ({op.kind}) is not a selection")
    n = a.n if isinstance(a.n, int) else env[a.n]
    return _first_input_elements(op, graph, env) * max(1.0, math.log2(max(n, 2)))


def _no_flops(op: Op, graph: Graph, env: Env) -> float:
    return 0.0  # data movement only


# bytes, the same rule for every kind -------------------------------------------------------------


def _read_bytes(op: Op, graph: Graph, env: Env) -> float:
    """The explicit read if the op has one (within its window), else its input tensors."""
    read = op.read
    if read is not None:
        return _dims(read.shape, _windowed(op, env)) * read.dtype_bytes
    return sum(graph.tensors[t].nbytes(env) for t in op.inputs)


def _written_bytes(op: Op, graph: Graph, env: Env) -> float:
    """The explicit write if the op has one, else its output tensors."""
    write = op.write
    if write is not None:
        return _dims(write.shape, env) * write.dtype_bytes
    return sum(graph.tensors[t].nbytes(env) for t in op.outputs)


@dataclass(frozen=True)
class KindCosts:
    """A kind's cost class and its formulas, each of (op, graph, shape symbols)."""

    cost_class: CostClass
    flops: CostFormula
    bytes_read: CostFormula = _read_bytes
    bytes_written: CostFormula = _written_bytes


COSTS: dict[OpKind, KindCosts] = {
    OpKind.GEMM: KindCosts(CostClass.SYSTOLIC, _gemm_flops),
    OpKind.ATTENTION: KindCosts(CostClass.ATTENTION, _attention_flops),
    OpKind.NORM: KindCosts(CostClass.SIMD, _simd_flops),
    OpKind.ELEMENTWISE: KindCosts(CostClass.SIMD, _simd_flops),
    OpKind.ROPE: KindCosts(CostClass.SIMD, _simd_flops),
    OpKind.SOFTMAX: KindCosts(CostClass.SIMD, _simd_flops),
    OpKind.REDUCE: KindCosts(CostClass.SIMD, _simd_flops),
    OpKind.POOL: KindCosts(CostClass.SIMD, _pool_flops),
    OpKind.TOPK: KindCosts(CostClass.SIMD, _selection_flops),
    OpKind.ROUTER: KindCosts(CostClass.SIMD, _simd_flops),
    OpKind.SORT: KindCosts(CostClass.SIMD, _selection_flops),
    OpKind.GATHER: KindCosts(CostClass.MEMORY, _no_flops),
    OpKind.SCATTER: KindCosts(CostClass.MEMORY, _no_flops),
    OpKind.CONCAT: KindCosts(CostClass.MEMORY, _no_flops),
    OpKind.EMBED: KindCosts(CostClass.MEMORY, _no_flops),
}

OP_KINDS: dict[OpKind, CostClass] = {kind: c.cost_class for kind, c in COSTS.items()}


def cost_class_of(op: Op) -> CostClass:
    return COSTS[op.kind].cost_class


def flops(op: Op, graph: Graph, wl: Workload) -> float:
    """Arithmetic of one op: FLOPs for systolic/attention ops, element operations for SIMD ops."""
    return COSTS[op.kind].flops(op, graph, wl.env())


def bytes_read(op: Op, graph: Graph, wl: Workload) -> float:
    """Activation and cache bytes an op reads (weights excluded)."""
    return COSTS[op.kind].bytes_read(op, graph, wl.env())


def bytes_written(op: Op, graph: Graph, wl: Workload) -> float:
    return COSTS[op.kind].bytes_written(op, graph, wl.env())


def op_table(graph: Graph, wl: Workload) -> list[dict[str, float | str]]:
    """One row per op: the figures `rdusim model` prints."""
    rows: list[dict[str, float | str]] = []
    for op in graph:
        rows.append(
            {
                "op": op.name,
                "kind": op.kind.value,
                "class": cost_class_of(op).value,
                "flops": flops(op, graph, wl),
                "bytes_read": bytes_read(op, graph, wl),
                "bytes_written": bytes_written(op, graph, wl),
                "weight_bytes": op.weight_bytes(),
                "weight_params": op.weight_params(),
            }
        )
    return rows
