"""Op kinds and their cost formulas: FLOPs (or SIMD element operations), bytes read and written.

Weights are counted separately (`Op.weight_bytes`), because whether they come from HBM each time
is a property of the mapping, not of the math.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rdusim.ir.graph import CostClass, Op, Workload

if TYPE_CHECKING:
    from rdusim.ir.graph import Graph

OP_KINDS: dict[str, CostClass] = {
    "gemm": CostClass.SYSTOLIC,
    "attention": CostClass.ATTENTION,
    "norm": CostClass.SIMD,
    "elementwise": CostClass.SIMD,
    "rope": CostClass.SIMD,
    "softmax": CostClass.SIMD,
    "reduce": CostClass.SIMD,
    "pool": CostClass.SIMD,
    "topk": CostClass.SIMD,
    "router": CostClass.SIMD,
    "sort": CostClass.SIMD,
    "gather": CostClass.MEMORY,
    "scatter": CostClass.MEMORY,
    "concat": CostClass.MEMORY,
    "embed": CostClass.MEMORY,
}

# SIMD element operations per element, by kind (multiply-adds count as two, like GEMM FLOPs).
SIMD_OPS_PER_ELEMENT = {
    "norm": 4.0,  # square, accumulate, rsqrt-scale, weight multiply
    "elementwise": 1.0,
    "rope": 6.0,  # rotate pairs: 4 multiplies + 2 adds
    "softmax": 5.0,  # max, subtract, exp, sum, divide
    "reduce": 1.0,
    "router": 8.0,  # sigmoid, bias add, group scores, selection, normalisation
}


def cost_class_of(op: Op) -> CostClass:
    try:
        return OP_KINDS[op.kind]
    except KeyError:
        raise ValueError(f"op {op.name} has unknown kind {op.kind!r}") from None


def _dims(dims: tuple, env: dict[str, int]) -> float:
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


def _windowed(op: Op, env: dict[str, int]) -> dict[str, int]:
    """The shape symbols an op's reads see: a sliding window (`window`) caps the key positions
    T at W."""
    window = op.attrs.get("window")
    return env if window is None else {**env, "T": min(env["T"], window)}


def flops(op: Op, graph: Graph, wl: Workload) -> float:
    """Arithmetic of one op: FLOPs for systolic/attention ops, element operations for SIMD ops."""
    env = wl.env()
    a = op.attrs
    kind = op.kind
    if kind == "gemm":
        n = a["n"] * _dims(a.get("n_dims", ()), env)
        return 2.0 * _dims(a["m"], env) * a["k"] * n * a.get("count", 1)
    if kind == "attention":
        pairs = attention_pairs(env["S"], env["T"], a.get("causal", True), a.get("window"))
        return 2.0 * env["B"] * a["heads"] * pairs * (a["qk_dim"] + a["v_dim"])
    if kind in SIMD_OPS_PER_ELEMENT:
        elements = graph.tensors[op.inputs[0]].numel(env)
        return SIMD_OPS_PER_ELEMENT[kind] * elements * a.get("ops_scale", 1.0)
    if kind == "pool":
        return graph.tensors[op.inputs[0]].numel(env) * a["kernel"]
    if kind in ("topk", "sort"):
        # a bitonic-style selection over n candidates per row: n * log2(n) compare-exchanges
        elements = graph.tensors[op.inputs[0]].numel(env)
        n = a["n"] if isinstance(a["n"], int) else env[a["n"]]
        return elements * max(1.0, math.log2(max(n, 2)))
    return 0.0  # data movement only


def bytes_read(op: Op, graph: Graph, wl: Workload) -> float:
    """Activation and cache bytes an op reads (weights excluded)."""
    env = wl.env()
    if "read_shape" in op.attrs:
        shape = op.attrs["read_shape"]
        return _dims(shape, _windowed(op, env)) * op.attrs.get("read_dtype_bytes", 2.0)
    return sum(graph.tensors[t].nbytes(env) for t in op.inputs)


def bytes_written(op: Op, graph: Graph, wl: Workload) -> float:
    env = wl.env()
    if "write_shape" in op.attrs:
        return _dims(op.attrs["write_shape"], env) * op.attrs.get("write_dtype_bytes", 2.0)
    return sum(graph.tensors[t].nbytes(env) for t in op.outputs)


def op_table(graph: Graph, wl: Workload) -> list[dict[str, float | str]]:
    """One row per op: the figures `rdusim model` prints."""
    rows: list[dict[str, float | str]] = []
    for op in graph:
        rows.append(
            {
                "op": op.name,
                "kind": op.kind,
                "class": op.cost_class.value,
                "flops": flops(op, graph, wl),
                "bytes_read": bytes_read(op, graph, wl),
                "bytes_written": bytes_written(op, graph, wl),
                "weight_bytes": op.weight_bytes(),
                "weight_params": op.weight_params(),
            }
        )
    return rows
