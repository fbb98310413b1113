"""Op cost formulas: FLOPs, SIMD element operations, bytes, and their scaling laws."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.ir.attrs import (
    Access,
    AttentionAttrs,
    ElementwiseAttrs,
    GemmAttrs,
    OpKind,
    PoolAttrs,
    RowAttrs,
    ScatterAttrs,
    TopkAttrs,
    default_attrs,
)
from rdusim.ir.builders import deepseek, llama
from rdusim.ir.graph import CostClass, Graph, Op, Tensor, Workload
from rdusim.ir.ops import (
    COSTS,
    OP_KINDS,
    SIMD_OPS_PER_ELEMENT,
    attention_pairs,
    bytes_read,
    bytes_written,
    flops,
    op_table,
)

PROPERTY = settings(max_examples=40, deadline=None)


def graph_with(*tensors: Tensor) -> Graph:
    g = Graph("t")
    for t in tensors:
        g.tensor(t)
    return g


# --------------------------------------------------------------------------------------------
# cost classes


def test_cost_classes():
    assert OP_KINDS["gemm"] == CostClass.SYSTOLIC  # a kind compares equal to its name
    assert OP_KINDS[OpKind.ATTENTION] == CostClass.ATTENTION
    for kind in ("norm", "elementwise", "rope", "softmax", "reduce", "pool", "topk", "router"):
        assert OP_KINDS[OpKind(kind)] == CostClass.SIMD, kind
    for kind in ("gather", "scatter", "concat", "embed"):
        assert OP_KINDS[OpKind(kind)] == CostClass.MEMORY, kind
    assert set(SIMD_OPS_PER_ELEMENT) <= set(OP_KINDS)


def test_every_kind_has_costs():
    assert set(COSTS) == set(OpKind)


def test_unknown_kind_is_an_error():
    with pytest.raises(ValueError, match="unknown kind"):
        Op("o", "fft", (), (), ElementwiseAttrs())  # type: ignore[arg-type]


def test_attrs_must_be_the_kinds_own():
    with pytest.raises(TypeError, match="GemmAttrs"):
        Op("o", OpKind.GEMM, (), (), ElementwiseAttrs())
    with pytest.raises(ValueError, match="GemmAttrs"):
        default_attrs(OpKind.GEMM)  # a GEMM's sizes have no defaults


# --------------------------------------------------------------------------------------------
# formulas on hand-built ops


def test_attention_pairs():
    assert attention_pairs(4, 4, causal=True) == 10  # lower triangle with the diagonal
    assert attention_pairs(4, 4, causal=False) == 16
    assert attention_pairs(1, 100, causal=True) == 100  # decode: one query, whole cache
    assert attention_pairs(3, 100, causal=False) == 300


def test_gemm_flops():
    g = graph_with(Tensor("x", ("B", "S", 64), 2.0), Tensor("y", ("B", "S", 32), 2.0))
    op = Op("mm", OpKind.GEMM, ("x",), ("y",), GemmAttrs(("B", "S"), 64, 32))
    assert flops(op, g, Workload(3, 5, 5)) == 2 * 3 * 5 * 64 * 32
    op.attrs = GemmAttrs(("B", "S"), 64, 32, count=8)
    assert flops(op, g, Workload(3, 5, 5)) == 8 * 2 * 3 * 5 * 64 * 32
    op.attrs = GemmAttrs(("B", "S"), 64, 32, count=8, n_dims=("E",))  # n = 32 x E
    assert flops(op, g, Workload(3, 5, 5, evict=7)) == 8 * 2 * 3 * 5 * 64 * 32 * 7


def test_attention_flops():
    g = graph_with(Tensor("q", ("B", "S", 2, 8), 2.0), Tensor("o", ("B", "S", 2, 4), 2.0))
    op = Op("att", OpKind.ATTENTION, ("q",), ("o",), AttentionAttrs(heads=2, qk_dim=8, v_dim=4))
    assert flops(op, g, Workload(3, 10, 10)) == 2 * 3 * 2 * 55 * (8 + 4)  # causal by default
    op.attrs = AttentionAttrs(heads=2, qk_dim=8, v_dim=4, causal=False)
    assert flops(op, g, Workload(3, 1, 10)) == 2 * 3 * 2 * 10 * (8 + 4)


def test_simd_flops():
    g = graph_with(Tensor("x", ("B", "S", 16), 2.0), Tensor("y", ("B", "S", 16), 2.0))
    wl = Workload(2, 3, 3)
    n = 2 * 3 * 16
    for kind, per in SIMD_OPS_PER_ELEMENT.items():
        assert flops(Op("o", kind, ("x",), ("y",), default_attrs(kind)), g, wl) == per * n
    scaled = Op("o", OpKind.ELEMENTWISE, ("x",), ("y",), ElementwiseAttrs(ops_scale=5.0))
    assert flops(scaled, g, wl) == 5.0 * n
    assert flops(Op("o", OpKind.POOL, ("x",), ("y",), PoolAttrs(7)), g, wl) == 7 * n
    assert flops(Op("o", OpKind.SOFTMAX, ("x",), ("y",), RowAttrs(blocking=True)), g, wl) == 5 * n


def test_topk_flops_use_n_log_n():
    g = graph_with(Tensor("x", ("B", "E"), 4.0), Tensor("i", ("B", 8), 4.0))
    op = Op("o", OpKind.TOPK, ("x",), ("i",), TopkAttrs("E"))
    wl = Workload(2, 1, 1, evict=1024)
    assert flops(op, g, wl) == 2 * 1024 * math.log2(1024)
    op.attrs = TopkAttrs(1)  # never below one compare per element
    assert flops(op, g, wl) == 2 * 1024


def test_data_movement_has_no_flops_but_bytes():
    g = graph_with(Tensor("a", ("B", "S", 4), 2.0), Tensor("b", ("B", "S", 4), 1.0))
    wl = Workload(2, 3, 3)
    for kind in (OpKind.GATHER, OpKind.SCATTER, OpKind.CONCAT, OpKind.EMBED):
        op = Op("o", kind, ("a",), ("b",), default_attrs(kind))
        assert flops(op, g, wl) == 0.0
        assert bytes_read(op, g, wl) == 2 * 3 * 4 * 2
        assert bytes_written(op, g, wl) == 2 * 3 * 4 * 1


def test_read_and_write_shapes_override_tensor_sizes():
    g = graph_with(Tensor("a", ("B", "T", 4), 2.0), Tensor("b", ("B", 1), 2.0))
    op = Op(
        "o",
        OpKind.SCATTER,
        ("a",),
        ("b",),
        ScatterAttrs(read=Access(("B", "S", 4), 1.0), write=Access(("B", "S", 4))),
    )
    wl = Workload(2, 1, 1000)
    assert bytes_read(op, g, wl) == 2 * 1 * 4 * 1.0
    assert bytes_written(op, g, wl) == 2 * 1 * 4 * 2.0  # write dtype defaults to 2 bytes


def test_op_table_rows(r1):
    g = deepseek.build_layer(r1, "moe", "prefill")
    s = 128
    rows = op_table(g, Workload(1, s, s))
    assert [r["op"] for r in rows] == g.order()
    keys = {"op", "kind", "class", "flops", "bytes_read", "bytes_written"}
    assert keys | {"weight_bytes", "weight_params"} <= set(rows[0])
    by_op = {r["op"]: r for r in rows}
    for row in rows:
        assert row["class"] == OP_KINDS[row["kind"]].value
    # MLA projections and the top-8 routed experts from the model's dimensions: a (k x n)
    # projection costs 2 k n FLOPs per token and holds k n parameters
    h, heads = r1.hidden_size, r1.num_attention_heads
    qk, v = r1.qk_nope_head_dim + r1.qk_rope_head_dim, r1.v_head_dim
    ffn, experts, top = r1.moe_intermediate_size, r1.n_routed_experts, r1.num_experts_per_tok
    projections = {
        "q_a_proj": (h, r1.q_lora_rank, 1, 1),
        "q_b_proj": (r1.q_lora_rank, heads * qk, 1, 1),
        "kv_a_proj": (h, r1.kv_lora_rank + r1.qk_rope_head_dim, 1, 1),
        "kv_b_proj": (r1.kv_lora_rank, heads * (r1.qk_nope_head_dim + v), 1, 1),
        "o_proj": (heads * v, h, 1, 1),
        "experts_up_proj": (h, 2 * ffn, top, experts),  # gate and up, fused
        "experts_down_proj": (ffn, h, top, experts),
    }
    for name, (k, n, active, held) in projections.items():
        assert by_op[name]["flops"] == 2 * s * k * n * active, name
        assert by_op[name]["weight_params"] == k * n * held, name
    # causal attention: s (s + 1) / 2 query-key pairs per head, each QK^T and PV
    assert by_op["attention"]["flops"] == 2 * heads * (s * (s + 1) // 2) * (qk + v)
    assert by_op["attention"]["weight_params"] == 0


# --------------------------------------------------------------------------------------------
# scaling laws on the real layers


@PROPERTY
@given(b=st.integers(1, 64), s=st.integers(1, 4096))
def test_gemm_flops_are_linear_in_tokens(r1, b, s):
    """Every projection's FLOPs are (2 k n count) per token: linear in batch x seq."""
    for phase in ("prefill", "decode"):
        g = deepseek.build_layer(r1, "moe", phase)
        for op in g.ops.values():
            if not isinstance(op.attrs, GemmAttrs) or op.attrs.m != ("B", "S"):
                continue
            one = flops(op, g, Workload(1, 1, 1))
            assert flops(op, g, Workload(b, s, s)) == pytest.approx(b * s * one), op.name


@PROPERTY
@given(s1=st.integers(1, 1 << 17), s2=st.integers(1, 1 << 17), b=st.integers(1, 16))
def test_prefill_attention_is_monotone_in_seq_and_linear_in_batch(r1, llama8b, s1, s2, b):
    for g in (
        deepseek.build_layer(r1, "moe", "prefill"),
        llama.build_layer(llama8b, "dense", "prefill"),
    ):
        att = g.ops["attention"]
        lo, hi = sorted((s1, s2))
        f_lo = flops(att, g, Workload(1, lo, lo))
        f_hi = flops(att, g, Workload(1, hi, hi))
        assert f_lo <= f_hi
        if lo < hi:
            assert f_lo < f_hi
        assert flops(att, g, Workload(b, hi, hi)) == pytest.approx(b * f_hi)
        # causal scores s(s+1)/2 of the s^2 (query, key) pairs: at least half, at most all
        full = flops(att, g, Workload(1, 1, hi)) * hi
        assert full / 2 <= f_hi <= full


@PROPERTY
@given(t=st.integers(1, 1 << 18), b=st.integers(1, 256))
def test_decode_attention_is_linear_in_cache_and_batch(r1, llama8b, t, b):
    for g in (
        deepseek.build_layer(r1, "moe", "decode"),
        llama.build_layer(llama8b, "dense", "decode"),
    ):
        att = g.ops["attention"]
        unit = flops(att, g, Workload(1, 1, 1))
        assert flops(att, g, Workload(b, 1, t)) == pytest.approx(b * t * unit)
        # the cache read grows the same way
        assert bytes_read(att, g, Workload(b, 1, t)) == pytest.approx(
            b * t * bytes_read(att, g, Workload(1, 1, 1))
        )


@PROPERTY
@given(b=st.integers(1, 32), s=st.integers(1, 8192))
def test_simd_and_memory_ops_scale_with_tokens(llama8b, b, s):
    g = llama.build_layer(llama8b, "dense", "prefill")
    for name in ("attn_norm", "rope_q", "ffn_silu_mul", "ffn_residual", "kv_cache_write"):
        op = g.ops[name]
        one = Workload(1, 1, 1)
        wl = Workload(b, s, s)
        assert flops(op, g, wl) == pytest.approx(b * s * flops(op, g, one)), name
        assert bytes_written(op, g, wl) == pytest.approx(b * s * bytes_written(op, g, one)), name
