"""Sharding: collective volumes, layouts, the collectives a layout change needs, and per-socket
work under tp, dp and ep."""

from __future__ import annotations

import math

import pytest

from rdusim.compiler.compile import build_kernels, workload_for
from rdusim.compiler.fusion import fuse
from rdusim.compiler.sharding import collective_cost, resolve_sharding, shard
from rdusim.errors import SpecError
from rdusim.ir import ops as costs
from rdusim.ir.builders import deepseek, llama
from rdusim.ir.graph import TensorKind
from rdusim.spec.hardware import load_hardware
from rdusim.spec.mapping import KernelSpec, Sharding

HW = load_hardware("sn40l-16")
X = 3.0e6  # bytes of the whole tensor


# --------------------------------------------------------------------------------------------
# collective volumes and steps


@pytest.mark.parametrize("d", [2, 4, 8, 16])
def test_collective_volumes_and_steps(d):
    hops = int(math.log2(d))
    assert collective_cost("all-reduce", X, d) == pytest.approx((2 * X * (d - 1) / d, 2 * hops))
    assert collective_cost("all-gather", X, d) == pytest.approx((X * (d - 1) / d, hops))
    assert collective_cost("reduce-scatter", X, d) == pytest.approx((X * (d - 1) / d, hops))
    assert collective_cost("all-to-all", X, d) == pytest.approx((X * (d - 1) / d**2, d - 1))


def test_collective_steps_round_up_for_other_degrees():
    assert collective_cost("all-gather", X, 6)[1] == 3
    assert collective_cost("all-reduce", X, 3)[1] == 4


def test_one_socket_moves_nothing():
    for kind in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
        assert collective_cost(kind, X, 1) == (0.0, 0)


def test_unknown_collective():
    with pytest.raises(ValueError):
        collective_cost("broadcast", X, 4)


# --------------------------------------------------------------------------------------------
# layouts and the collectives between them


def one_kernel(graph, kind, sharding=None, overrides=None):
    sharding = {"tp": 16} if sharding is None else sharding
    spec = KernelSpec(
        name="all",
        ops=["*"],
        sharding=Sharding(**sharding),
        overrides={k: Sharding(**v) for k, v in (overrides or {}).items()},
    )
    return fuse(graph, [spec], kind)


def collectives_of(layer, tensor):
    return [c for c in layer.collectives if c.tensor == tensor]


def test_row_parallel_o_proj_then_token_op_prefill_reduce_scatters(r1):
    g = deepseek.build_layer(r1, "dense", "prefill")
    wl = workload_for("prefill", 1, 4096, None)
    layer = shard(g, one_kernel(g, "dense"), "dense", wl, 16, {})
    (out,) = g.ops["o_proj"].outputs
    assert layer.layouts[out] == "P"
    (c,) = collectives_of(layer, out)
    assert (c.kind, c.src, c.dst) == ("reduce-scatter", "o_proj", "attn_residual")
    assert (c.bytes, c.steps) == collective_cost(
        "reduce-scatter", g.tensors[out].nbytes(wl.env()), 16
    )
    # sequence parallel: the residual stream is split by tokens
    assert layer.ops["attn_residual"].out_layout == "T"


def test_row_parallel_o_proj_then_token_op_decode_all_reduces(r1):
    g = deepseek.build_layer(r1, "dense", "decode")
    wl = workload_for("decode", 16, 8192, None)
    layer = shard(g, one_kernel(g, "dense"), "dense", wl, 16, {})
    (out,) = g.ops["o_proj"].outputs
    (c,) = collectives_of(layer, out)
    assert (c.kind, c.src, c.dst) == ("all-reduce", "o_proj", "attn_residual")
    assert (c.bytes, c.steps) == collective_cost("all-reduce", g.tensors[out].nbytes(wl.env()), 16)
    assert layer.ops["attn_residual"].out_layout == "R"


def test_layouts_follow_each_ops_split(llama8b):
    g = llama.build_layer(llama8b, "dense", "prefill")
    wl = workload_for("prefill", 1, 4096, None)
    layer = shard(g, one_kernel(g, "dense"), "dense", wl, 16, {})
    ops = layer.ops
    assert ops["q_proj"].in_layouts == ("R",) and ops["q_proj"].out_layout == "F"  # column
    assert ops["rope_q"].out_layout == "F"  # local: keeps its input's split
    assert ops["attention"].out_layout == "F"  # heads
    assert ops["o_proj"].in_layouts == ("F",) and ops["o_proj"].out_layout == "P"  # row
    assert ops["ffn_norm"].out_layout == "T"  # token-wise, sequence parallel
    assert ops["ffn_down_proj"].out_layout == "P"
    # a column GEMM needs whole rows: the sequence-split norm output is gathered first
    (ag,) = collectives_of(layer, g.ops["ffn_norm"].outputs[0])
    assert ag.kind == "all-gather" and ag.dst == "ffn_up_proj"
    # the layer's input arrives as the previous layer left its output (second pass)
    (x,) = [t for t in g.graph_inputs() if g.tensors[t].kind != TensorKind.CACHE]
    outs = [t for t in g.graph_outputs() if g.tensors[t].kind != TensorKind.CACHE]
    assert [layer.layouts[t] for t in outs] == ["T"]
    assert layer.layouts[x] == "T"


def test_a_replicated_layer_needs_no_collectives(llama8b):
    g = llama.build_layer(llama8b, "dense", "prefill")
    wl = workload_for("prefill", 1, 4096, None)
    layer = shard(g, one_kernel(g, "dense", sharding={}), "dense", wl, 16, {})
    assert layer.collectives == []
    assert set(layer.layouts.values()) == {"R"}
    for op in g:
        p = layer.ops[op.name]
        assert (p.strategy, p.degree) == ("replicate", 1)
        assert p.flops == costs.flops(op, g, wl)
        assert p.weight_bytes == op.weight_bytes()


def test_a_collective_runs_in_its_producers_kernel(r1):
    g = deepseek.build_layer(r1, "dense", "decode")
    order = g.order()
    cut = order.index("attn_residual")
    fused = fuse(
        g,
        [
            KernelSpec(name="A", ops=order[:cut], sharding=Sharding(tp=16)),
            KernelSpec(name="B", ops=order[cut:], sharding=Sharding(tp=16)),
        ],
        "dense",
    )
    a, b = build_kernels(g, fused, "dense", workload_for("decode", 16, 8192, None), HW, "decode")
    assert ("all-reduce", "o_proj") in [(c.kind, c.src) for c in a.collectives]
    assert all(c.src != "o_proj" for c in b.collectives)


# --------------------------------------------------------------------------------------------
# per-socket work


def test_decode_token_ops_are_replicated_under_tp(r1):
    g = deepseek.build_layer(r1, "moe", "decode")
    wl = workload_for("decode", 16, 8192, None)
    layer = shard(g, one_kernel(g, "moe"), "moe", wl, 16, {})
    norm = layer.ops["attn_norm"]  # token-wise, with a weight
    assert norm.flops == norm.full_flops
    assert norm.weight_bytes == g.ops["attn_norm"].weight_bytes()
    up = layer.ops["experts_up_proj"]  # column
    assert up.flops == pytest.approx(up.full_flops / 16)
    assert up.weight_bytes == pytest.approx(g.ops["experts_up_proj"].weight_bytes() / 16)


def test_prefill_token_ops_are_sequence_parallel_with_whole_weights(r1):
    g = deepseek.build_layer(r1, "moe", "prefill")
    wl = workload_for("prefill", 1, 4096, None)
    layer = shard(g, one_kernel(g, "moe"), "moe", wl, 16, {})
    gate = layer.ops["router_gate"]  # a token-wise GEMM: every socket keeps the gate weights
    assert gate.flops == pytest.approx(gate.full_flops / 16)
    assert gate.weight_bytes == g.ops["router_gate"].weight_bytes()


def test_dp_attention_splits_the_batch_rounding_up(r1):
    g = deepseek.build_layer(r1, "moe", "decode")
    for batch, per_socket in ((32, 2), (20, 2), (8, 1)):
        wl = workload_for("decode", batch, 8192, None)
        layer = shard(
            g, one_kernel(g, "moe", overrides={"attention": {"dp": 16}}), "moe", wl, 16, {}
        )
        p = layer.ops["attention"]
        assert (p.strategy, p.degree, p.out_layout) == ("dp", 16, "T")
        assert p.flops == pytest.approx(p.full_flops * per_socket / batch)


def test_ep_splits_routed_experts(r1):
    g = deepseek.build_layer(r1, "moe", "decode")
    wl = workload_for("decode", 16, 8192, None)
    overrides = {"experts_up_proj": {"ep": 16}, "experts_down_proj": {"ep": 16}}
    layer = shard(g, one_kernel(g, "moe", overrides=overrides), "moe", wl, 16, {})
    for name in ("experts_up_proj", "experts_down_proj"):
        p = layer.ops[name]
        assert (p.strategy, p.degree) == ("ep", 16)
        assert p.weight_bytes == pytest.approx(g.ops[name].weight_bytes() / 16)
        assert p.flops == pytest.approx(p.full_flops / 16)


def test_overrides_first_matching_pattern_wins(r1):
    g = deepseek.build_layer(r1, "moe", "decode")
    spec = KernelSpec(
        name="k",
        ops=["*"],
        sharding=Sharding(tp=16),
        overrides={"attention": Sharding(dp=16), "att*": Sharding(tp=8)},
    )
    (fk,) = fuse(g, [spec], "moe")
    assert resolve_sharding(fk, "attention", "moe").strategy == "dp"
    sh = resolve_sharding(fk, "o_proj", "moe")
    assert (sh.strategy, sh.degree, sh.path) == ("tp", 16, ("kernels", "moe", 0, "sharding", "tp"))


# --------------------------------------------------------------------------------------------
# invalid shardings


def shard_error(graph, kind, wl, sharding=None, overrides=None, sockets=16) -> SpecError:
    with pytest.raises(SpecError) as info:
        shard(graph, one_kernel(graph, kind, sharding, overrides), kind, wl, sockets, {})
    return info.value


def test_tp_that_does_not_divide_the_heads(r1):
    g = deepseek.build_layer(r1, "moe", "prefill")
    err = shard_error(
        g, "moe", workload_for("prefill", 1, 4096, None), overrides={"attention": {"tp": 7}}
    )
    assert "7" in err.problem and "heads" in err.problem and "128" in err.problem
    assert err.key == "kernels.moe[0].overrides.attention.tp"
    assert err.fix


def test_degree_beyond_the_node(r1):
    g = deepseek.build_layer(r1, "moe", "prefill")
    err = shard_error(g, "moe", workload_for("prefill", 1, 4096, None), sharding={"tp": 32})
    assert "32" in err.problem and "16 sockets" in err.problem
    assert err.key == "kernels.moe[0].sharding.tp"


def test_ep_on_an_op_without_experts(r1):
    g = deepseek.build_layer(r1, "moe", "decode")
    err = shard_error(g, "moe", workload_for("decode", 16, 8192, None), sharding={"ep": 16})
    assert "ep" in err.problem and err.key == "kernels.moe[0].sharding.ep"
