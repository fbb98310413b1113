"""Sharding: layouts, the collectives a layout change needs, per-socket work under tp, dp, ep and
split-KV (sp), and the small-batch rule for data-parallel decode ops.

Collective costs themselves are tested in test_collectives.py; here the expected volumes and
rounds are the closed forms of the direct (fully-connected) and ring algorithms.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.compiler.collectives import Topology
from rdusim.compiler.compile import CompileContext, build_kernels, compile_mapping, workload_for
from rdusim.compiler.fusion import fuse
from rdusim.compiler.program import Layout
from rdusim.compiler.sharding import (
    OpBase,
    ShardContext,
    cache_share,
    degree_fix,
    fused_shardings,
    resolve_sharding,
    shard,
    walk,
)
from rdusim.errors import SpecError, SpecErrors
from rdusim.ir import ops as costs
from rdusim.ir.builders import deepseek, llama
from rdusim.ir.graph import Phase, TensorKind
from rdusim.spec.hardware import load_hardware
from rdusim.spec.mapping import KernelSpec, Sharding, load_mapping

HW = load_hardware("sn40l-16")
REPO = Path(__file__).resolve().parents[2]
MLA_CACHE_BYTES = (512 + 64) * 2  # R1: latent + rope key per token and layer, BF16
KV_LEN = 8192


def one_kernel(graph, kind, sharding=None, overrides=None):
    sharding = {"tp": 16} if sharding is None else sharding
    spec = KernelSpec(
        name="all",
        ops=["*"],
        sharding=Sharding(**sharding),
        overrides={k: Sharding(**v) for k, v in (overrides or {}).items()},
    )
    return fuse(graph, [spec], kind)


def ctx(wl, prefill, topology=Topology.FULLY_CONNECTED, sockets=16):
    return ShardContext(workload=wl, sockets=sockets, prefill=prefill, topology=topology)


def run(graph, kind, wl, prefill, sharding=None, overrides=None, **kw):
    return shard(graph, one_kernel(graph, kind, sharding, overrides), kind, ctx(wl, prefill, **kw))


def collectives_of(layer, tensor):
    return [c for c in layer.collectives if c.tensor == tensor]


# rounds of one phase (reduce-scatter or all-gather) over 16 sockets: a single round of direct
# sends when every pair of sockets is linked, d - 1 = 15 hops around a ring
PHASE_ROUNDS = {Topology.FULLY_CONNECTED: 1, Topology.RING: 15}


@pytest.fixture(scope="module")
def r1_decode_moe(r1):
    return deepseek.build_layer(r1, "moe", "decode")


# --------------------------------------------------------------------------------------------
# layouts and the collectives between them


@pytest.mark.parametrize("topology", list(Topology))
def test_row_parallel_o_proj_then_token_op_prefill_reduce_scatters(r1, topology):
    g = deepseek.build_layer(r1, "dense", "prefill")
    wl = workload_for(Phase.PREFILL, 1, 4096, None)
    layer = run(g, "dense", wl, True, topology=topology)
    (out,) = g.ops["o_proj"].outputs
    assert layer.layouts[out] == Layout.P
    (c,) = collectives_of(layer, out)
    assert (c.kind, c.src, c.dst) == ("reduce-scatter", "o_proj", "attn_residual")
    # each socket sends the 15 slices of its addend that other sockets own
    n = 4096 * 7168 * 2
    assert c.bytes == pytest.approx(15 / 16 * n, rel=1e-12)
    assert c.rounds == PHASE_ROUNDS[topology]
    # sequence parallel: the residual stream is split by tokens
    assert layer.ops["attn_residual"].out_layout == Layout.T


@pytest.mark.parametrize("topology", list(Topology))
def test_row_parallel_o_proj_then_token_op_decode_all_reduces(r1, topology):
    g = deepseek.build_layer(r1, "dense", "decode")
    wl = workload_for(Phase.DECODE, 16, KV_LEN, None)
    layer = run(g, "dense", wl, False, topology=topology)
    (out,) = g.ops["o_proj"].outputs
    (c,) = collectives_of(layer, out)
    assert (c.kind, c.src, c.dst) == ("all-reduce", "o_proj", "attn_residual")
    # reduce-scatter then all-gather: twice the bytes and the rounds of one phase
    n = 16 * 7168 * 2
    assert c.bytes == pytest.approx(2 * 15 / 16 * n, rel=1e-12)
    assert c.rounds == 2 * PHASE_ROUNDS[topology]
    assert layer.ops["attn_residual"].out_layout == Layout.R


def test_layouts_follow_each_ops_split(llama8b):
    g = llama.build_layer(llama8b, "dense", "prefill")
    layer = run(g, "dense", workload_for(Phase.PREFILL, 1, 4096, None), True)
    ops = layer.ops
    assert ops["q_proj"].in_layouts == (Layout.R,)  # column
    assert ops["q_proj"].out_layout == Layout.F
    assert ops["rope_q"].out_layout == Layout.F  # local: keeps its input's split
    assert ops["attention"].out_layout == Layout.F  # heads
    assert ops["o_proj"].in_layouts == (Layout.F,) and ops["o_proj"].out_layout == Layout.P  # row
    assert ops["ffn_norm"].out_layout == Layout.T  # token-wise, sequence parallel
    assert ops["ffn_down_proj"].out_layout == Layout.P
    # a column GEMM needs whole rows: the sequence-split norm output is gathered first
    (ag,) = collectives_of(layer, g.ops["ffn_norm"].outputs[0])
    assert ag.kind == "all-gather" and ag.dst == "ffn_up_proj"
    # the layer's input arrives as the previous layer left its output (second pass)
    (x,) = [t for t in g.graph_inputs() if g.tensors[t].kind != TensorKind.CACHE]
    outs = [t for t in g.graph_outputs() if g.tensors[t].kind != TensorKind.CACHE]
    assert [layer.layouts[t] for t in outs] == [Layout.T]
    assert layer.layouts[x] == Layout.T


def test_a_replicated_layer_needs_no_collectives(llama8b):
    g = llama.build_layer(llama8b, "dense", "prefill")
    wl = workload_for(Phase.PREFILL, 1, 4096, None)
    layer = run(g, "dense", wl, True, sharding={})
    assert layer.collectives == []
    assert set(layer.layouts.values()) == {Layout.R}
    for op in g:
        p = layer.ops[op.name]
        assert (p.strategy, p.degree, p.sharding_label) == ("replicate", 1, "replicate")
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
    wl = workload_for(Phase.DECODE, 16, KV_LEN, None)
    a, b = build_kernels(g, fused, "dense", wl, CompileContext(HW, Phase.DECODE, 32))
    assert ("all-reduce", "o_proj") in [(c.kind, c.src) for c in a.collectives]
    assert all(c.src != "o_proj" for c in b.collectives)


# --------------------------------------------------------------------------------------------
# per-socket work


@pytest.mark.parametrize("verified", [1, 3])
def test_decode_token_ops_are_replicated_under_tp(r1_decode_moe, verified):
    # also with several verified tokens per sequence (MTP): decode never splits the sequence
    g = r1_decode_moe
    wl = workload_for(Phase.DECODE, 16, KV_LEN, None, verified)
    assert wl.seq == verified
    layer = run(g, "moe", wl, False)
    norm = layer.ops["attn_norm"]  # token-wise, with a weight
    assert norm.flops == norm.full_flops
    assert norm.weight_bytes == g.ops["attn_norm"].weight_bytes()
    assert norm.out_layout == Layout.R
    up = layer.ops["experts_up_proj"]  # column
    assert up.flops == pytest.approx(up.full_flops / 16)
    assert up.weight_bytes == pytest.approx(g.ops["experts_up_proj"].weight_bytes() / 16)


def test_prefill_token_ops_are_sequence_parallel_with_whole_weights(r1):
    g = deepseek.build_layer(r1, "moe", "prefill")
    layer = run(g, "moe", workload_for(Phase.PREFILL, 1, 4096, None), True)
    gate = layer.ops["router_gate"]  # a token-wise GEMM: every socket keeps the gate weights
    assert gate.flops == pytest.approx(gate.full_flops / 16)
    assert gate.weight_bytes == g.ops["router_gate"].weight_bytes()
    assert gate.out_layout == Layout.T


@pytest.mark.parametrize(("batch", "per_socket"), [(32, 2), (20, 2), (16, 1)])
def test_dp_attention_splits_the_batch_rounding_up(r1_decode_moe, batch, per_socket):
    g = r1_decode_moe
    wl = workload_for(Phase.DECODE, batch, KV_LEN, None)
    layer = run(g, "moe", wl, False, overrides={"attention": {"dp": 16}})
    p = layer.ops["attention"]
    assert (p.strategy, p.degree, p.seq_split, p.out_layout) == ("dp", 16, 1, Layout.T)
    assert p.sharding_label == "dp16"
    assert p.flops == pytest.approx(p.full_flops * per_socket / batch)
    assert p.hbm_read == pytest.approx(per_socket * KV_LEN * MLA_CACHE_BYTES, rel=1e-12)


def test_ep_splits_routed_experts_over_sockets(r1_decode_moe):
    g = r1_decode_moe
    wl = workload_for(Phase.DECODE, 16, KV_LEN, None)
    overrides = {"experts_up_proj": {"ep": 16}, "experts_down_proj": {"ep": 16}}
    layer = run(g, "moe", wl, False, overrides=overrides)
    for name in ("experts_up_proj", "experts_down_proj"):
        p = layer.ops[name]
        assert (p.strategy, p.degree, p.sharding_label) == ("ep", 16, "ep16")
        assert p.weight_bytes == pytest.approx(g.ops[name].weight_bytes() / 16)
        # the busiest socket does at least the mean share and streams at most its own experts
        # (the expectations themselves are checked in test_experts.py)
        assert p.full_flops / 16 <= p.flops < p.full_flops
        assert 0 < p.weight_read_bytes <= p.weight_bytes


def test_overrides_first_matching_pattern_wins(r1_decode_moe):
    spec = KernelSpec(
        name="k",
        ops=["*"],
        sharding=Sharding(tp=16),
        overrides={"attention": Sharding(dp=16), "att*": Sharding(tp=8)},
    )
    (fk,) = fuse(r1_decode_moe, [spec], "moe")
    assert resolve_sharding(fk, "attention", "moe", 16).strategy == "dp"
    sh = resolve_sharding(fk, "o_proj", "moe", 16)
    assert (sh.strategy, sh.degree, sh.path) == ("tp", 16, ("kernels", "moe", 0, "sharding", "tp"))


def test_dp_with_sp_resolves_to_both_splits(r1_decode_moe):
    spec = KernelSpec(
        name="k", ops=["*"], sharding=Sharding(tp=16), overrides={"attention": {"dp": 4, "sp": 4}}
    )
    (fk,) = fuse(r1_decode_moe, [spec], "moe")
    sh = resolve_sharding(fk, "attention", "moe", 16)
    assert (sh.strategy, sh.degree, sh.seq_split) == ("dp", 4, 4)
    assert sh.path == ("kernels", "moe", 0, "overrides", "attention", "dp")


# --------------------------------------------------------------------------------------------
# small batches: split-KV attention and head-split per-head ops

# (batch, dp, sp) for `attention: {dp: 16}` on 16 sockets: dp keeps the largest divisor of 16
# the batch fills, each sequence's cache is spread over the 16 / dp sockets left
SMALL_BATCH = [(1, 1, 16), (2, 2, 8), (3, 2, 8), (4, 4, 4), (5, 4, 4), (8, 8, 2), (12, 8, 2)]
FULL_BATCH = [(16, 16, 1), (20, 16, 1), (64, 16, 1), (256, 16, 1)]
DP16 = {"q_absorb": {"dp": 16}, "attention": {"dp": 16}, "v_absorb": {"dp": 16}}


@pytest.mark.parametrize(("batch", "dp", "sp"), SMALL_BATCH + FULL_BATCH)
def test_small_batch_decode_attention_splits_the_cache(r1_decode_moe, batch, dp, sp):
    wl = workload_for(Phase.DECODE, batch, KV_LEN, None)
    layer = run(r1_decode_moe, "moe", wl, False, overrides=DP16)
    p = layer.ops["attention"]
    assert (p.strategy, p.degree, p.seq_split) == ("dp", dp, sp)
    if dp > 1:
        assert p.sharding_label == (f"dp{dp}xsp{sp}" if sp > 1 else f"dp{dp}")
    # a socket keeps ceil(batch / dp) sequences, 1/sp of each one's cached positions
    sequences = math.ceil(batch / dp)
    cache = sequences * KV_LEN * MLA_CACHE_BYTES / sp
    assert p.hbm_read == pytest.approx(cache, rel=1e-12)
    assert p.flops == pytest.approx(p.full_flops * sequences / batch / sp, rel=1e-12)
    if batch in (1, 4):
        # every socket holds 1/16 of the batch's cache: batch x kv_len x 1152 bytes / 16
        assert p.hbm_read == pytest.approx(batch * KV_LEN * 1152 / 16, rel=1e-12)
    # split-KV ends with partial results to combine; dp alone with each socket's sequences
    assert p.out_layout == (Layout.P if sp > 1 else Layout.T)


def test_split_kv_partials_are_reduced_for_the_head_split_output(r1_decode_moe):
    wl = workload_for(Phase.DECODE, 1, KV_LEN, None)
    layer = run(r1_decode_moe, "moe", wl, False, overrides=DP16)
    (out,) = r1_decode_moe.ops["attention"].outputs
    (c,) = collectives_of(layer, out)
    # v_absorb splits the heads (tp16): each socket keeps its heads' sum of the 16 partials
    assert (c.kind, c.src, c.dst) == ("reduce-scatter", "attention", "v_absorb")
    n = 1 * 1 * 128 * 512 * 2  # one token, 128 heads of the 512-wide latent, BF16
    assert c.bytes == pytest.approx(15 / 16 * n, rel=1e-12)
    assert c.rounds == 1


@pytest.mark.parametrize("batch", [1, 2, 4, 8, 15])
def test_per_head_ops_switch_to_tp_below_the_node(r1_decode_moe, batch):
    wl = workload_for(Phase.DECODE, batch, KV_LEN, None)
    layer = run(r1_decode_moe, "moe", wl, False, overrides=DP16)
    for name in ("q_absorb", "v_absorb"):
        p = layer.ops[name]
        assert (p.strategy, p.degree, p.seq_split, p.sharding_label) == ("tp", 16, 1, "tp16")
        # 128 heads of a 128 x 512 matrix in FP8, split 16 ways
        assert p.weight_bytes == pytest.approx(128 * 128 * 512 / 16, rel=1e-12)
        assert p.flops == pytest.approx(p.full_flops / 16, rel=1e-12)


@pytest.mark.parametrize("batch", [16, 17, 64])
def test_per_head_ops_stay_data_parallel_from_the_node_size(r1_decode_moe, batch):
    wl = workload_for(Phase.DECODE, batch, KV_LEN, None)
    layer = run(r1_decode_moe, "moe", wl, False, overrides=DP16)
    for name in ("q_absorb", "v_absorb"):
        p = layer.ops[name]
        assert (p.strategy, p.degree, p.sharding_label) == ("dp", 16, "dp16")
        assert p.weight_bytes == 128 * 128 * 512  # whole weights on every socket


@pytest.mark.parametrize(("batch", "sequences"), [(16, 4), (2, 1), (1, 1)])
def test_explicit_dp_with_sp_is_kept(r1_decode_moe, batch, sequences):
    wl = workload_for(Phase.DECODE, batch, KV_LEN, None)
    layer = run(r1_decode_moe, "moe", wl, False, overrides={"attention": {"dp": 4, "sp": 4}})
    p = layer.ops["attention"]
    assert (p.strategy, p.degree, p.seq_split, p.sharding_label) == ("dp", 4, 4, "dp4xsp4")
    assert p.hbm_read == pytest.approx(sequences * KV_LEN * MLA_CACHE_BYTES / 4, rel=1e-12)


def test_pure_sp_splits_every_sequence(r1_decode_moe):
    wl = workload_for(Phase.DECODE, 16, KV_LEN, None)
    layer = run(r1_decode_moe, "moe", wl, False, overrides={"attention": {"sp": 16}})
    p = layer.ops["attention"]
    assert (p.strategy, p.degree, p.sharding_label, p.out_layout) == ("sp", 16, "sp16", Layout.P)
    assert p.hbm_read == pytest.approx(16 * KV_LEN * MLA_CACHE_BYTES / 16, rel=1e-12)
    assert p.flops == pytest.approx(p.full_flops / 16, rel=1e-12)


def test_gqa_decode_attention_splits_the_cache_at_batch_one(llama8b):
    g = llama.build_layer(llama8b, "dense", "decode")
    wl = workload_for(Phase.DECODE, 1, KV_LEN, None)
    layer = run(g, "dense", wl, False, overrides={"attention": {"dp": 16}})
    p = layer.ops["attention"]
    assert (p.strategy, p.degree, p.seq_split) == ("dp", 1, 16)
    per_token = 2 * 8 * 128 * 2  # K and V, 8 KV heads of 128, BF16
    assert p.hbm_read == pytest.approx(KV_LEN * per_token / 16, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 80))
def test_dp16_attention_uses_every_socket_and_covers_the_cache(r1_decode_moe, batch):
    wl = workload_for(Phase.DECODE, batch, KV_LEN, None)
    p = run(r1_decode_moe, "moe", wl, False, overrides=DP16).ops["attention"]
    assert p.degree * p.seq_split == 16
    assert p.degree <= batch
    whole = batch * KV_LEN * MLA_CACHE_BYTES
    # 16 sockets together read at least the whole cache, exactly when the groups divide the batch
    assert 16 * p.hbm_read >= whole * (1 - 1e-12)
    if batch % p.degree == 0:
        assert 16 * p.hbm_read == pytest.approx(whole, rel=1e-12)


def test_cache_share_closed_forms(r1_decode_moe, llama8b):
    mla = r1_decode_moe.ops["attention"]
    gqa = llama.build_layer(llama8b, "dense", "decode").ops["attention"]
    assert cache_share(mla, "dp", 16, 20) == 2 / 20
    assert cache_share(mla, "dp", 4, 16, seq_split=4) == 4 / 16 / 4
    assert cache_share(mla, "dp", 1, 1, seq_split=16) == 1 / 16
    assert cache_share(mla, "sp", 16, 3) == 1 / 16
    assert cache_share(mla, "tp", 16, 3) == 1.0  # all heads share the latent
    assert cache_share(gqa, "tp", 16, 3) == 1 / 8  # whole KV heads: at most 8 ways
    assert cache_share(gqa, "tp", 4, 3) == 1 / 4
    assert cache_share(mla, "replicate", 1, 3) == 1.0


# --------------------------------------------------------------------------------------------
# invalid shardings


def shard_error(graph, kind, wl, prefill, sharding=None, overrides=None, sockets=16) -> SpecError:
    with pytest.raises(SpecError) as info:
        run(graph, kind, wl, prefill, sharding, overrides, sockets=sockets)
    return info.value


def test_tp_that_does_not_divide_the_heads(r1):
    g = deepseek.build_layer(r1, "moe", "prefill")
    wl = workload_for(Phase.PREFILL, 1, 4096, None)
    err = shard_error(g, "moe", wl, True, overrides={"attention": {"tp": 7}})
    assert "7" in err.problem and "heads" in err.problem and "128" in err.problem
    assert err.key == "kernels.moe.all.overrides.attention.tp"
    assert err.fix and err.fix.endswith("2, 4, 8 or 16")


def test_a_degree_that_divides_no_head_count_lists_the_ones_that_do(tmp_path):
    # Qwen2-7B has 28 heads: neither 8 nor 16 divides them
    text = (REPO / "mappings" / "llama31_8b_prefill.yaml").read_text(encoding="utf-8")
    config = REPO / "tests" / "fixtures" / "configs" / "qwen2-7b.json"
    path = tmp_path / "qwen.yaml"
    path.write_text(text.replace("model: llama-3.1-8b\n", f"model: {config}\n"), encoding="utf-8")
    with pytest.raises(SpecErrors) as info:
        compile_mapping(load_mapping(path))
    # every kernel whose tp16 splits heads is named, together, by its --set key
    keys = [e.key for e in info.value.errors]
    assert keys == [
        "kernels.dense.SnapKV Compression.sharding.tp",
        "kernels.dense.MHA.sharding.tp",
    ], keys
    for err in info.value.errors:
        assert "28 heads" in err.problem
        assert (
            err.fix
            == "use a degree that divides both the 28 heads and the node's 16 sockets: 2 or 4"
        )


@pytest.mark.parametrize(
    ("what", "size", "sockets", "listed"),
    [
        ("heads", 28, 16, ": 2 or 4"),
        ("heads", 128, 16, ": 2, 4, 8 or 16"),
        ("experts", 60, 8, ": 2 or 4"),
        ("heads", 40, 16, ": 2, 4 or 8"),
        ("heads", 6, 8, ": 2"),
    ],
)
def test_degree_fix_lists_the_degrees_that_shard(what, size, sockets, listed):
    fix = degree_fix(what, size, sockets)
    assert fix.endswith(listed) and f"{size} {what}" in fix and f"{sockets} sockets" in fix


def test_degree_fix_when_no_degree_shards():
    fix = degree_fix("heads", 7, 16)
    assert fix.startswith("no degree above 1 divides both the 7 heads")


def test_degree_beyond_the_node(r1):
    g = deepseek.build_layer(r1, "moe", "prefill")
    err = shard_error(
        g, "moe", workload_for(Phase.PREFILL, 1, 4096, None), True, sharding={"tp": 32}
    )
    assert "32" in err.problem and "16 sockets" in err.problem
    assert err.key == "kernels.moe.all.sharding.tp"


def test_dp_times_sp_beyond_the_node(r1_decode_moe):
    wl = workload_for(Phase.DECODE, 16, KV_LEN, None)
    err = shard_error(r1_decode_moe, "moe", wl, False, overrides={"attention": {"dp": 8, "sp": 4}})
    assert "32" in err.problem and "16 sockets" in err.problem
    assert err.key == "kernels.moe.all.overrides.attention.dp"


def test_ep_on_an_op_without_experts(r1_decode_moe):
    wl = workload_for(Phase.DECODE, 16, KV_LEN, None)
    err = shard_error(r1_decode_moe, "moe", wl, False, sharding={"ep": 16})
    assert "ep" in err.problem and err.key == "kernels.moe.all.sharding.ep"


@pytest.mark.parametrize("op", ["o_proj", "q_absorb", "experts_up_proj"])
def test_sp_on_an_op_without_a_cache(r1_decode_moe, op):
    wl = workload_for(Phase.DECODE, 16, KV_LEN, None)
    err = shard_error(r1_decode_moe, "moe", wl, False, overrides={op: {"sp": 16}})
    assert "sp" in err.problem and op in err.problem
    assert err.key == f"kernels.moe.all.overrides.{op}.sp"
    assert err.fix


def test_sp_on_prefill_attention_is_refused(r1):
    # prefill attention reads this step's keys, not a cache: there is no cache to split
    g = deepseek.build_layer(r1, "moe", "prefill")
    wl = workload_for(Phase.PREFILL, 1, 4096, None)
    err = shard_error(g, "moe", wl, True, overrides={"attention": {"sp": 16}})
    assert "attention" in err.problem and err.key == "kernels.moe.all.overrides.attention.sp"


def test_sp_on_a_non_attention_op_is_located_in_the_mapping(tmp_path):
    text = (REPO / "mappings" / "r1_decode.yaml").read_text(encoding="utf-8")
    old = "        q_absorb: {dp: 16}\n"
    assert text.count(old) == 2
    text = text.replace(old, "        q_absorb: {sp: 16}\n", 1)
    path = tmp_path / "sp_on_q_absorb.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as info:
        compile_mapping(load_mapping(path, ["batch=16", "seq_len=8192"]))
    err = info.value
    assert err.file == str(path)
    assert err.line == text.splitlines().index("        q_absorb: {sp: 16}") + 1
    assert err.key == "kernels.moe.MLA.overrides.q_absorb.sp"
    assert "q_absorb" in err.problem


# --------------------------------------------------------------------------------------------
# one walk, many fusions


def test_a_walk_finishes_each_kernels_plans_as_shard_does(r1):
    """`shard` is the walk plus each kernel's finish: cutting the layer anywhere gives every op
    the plan the walk finishes for the ops around it, and the same collectives."""
    g = deepseek.build_layer(r1, "moe", "prefill")
    order = g.order()
    wl = workload_for(Phase.PREFILL, 1, 4096, None)
    c = ctx(wl, prefill=True)
    one = walk(g, fused_shardings(one_kernel(g, "moe"), "moe", c), c)
    for cut in (1, order.index("attention"), len(order) - 1):
        fused = fuse(
            g,
            [
                KernelSpec(name="A", ops=order[:cut], sharding=Sharding(tp=16)),
                KernelSpec(name="B", ops=order[cut:], sharding=Sharding(tp=16)),
            ],
            "moe",
        )
        sharded = shard(g, fused, "moe", c)
        finished = {**one.kernel_plans(order[:cut], None), **one.kernel_plans(order[cut:], None)}
        assert sharded.ops == finished
        assert sharded.collectives == one.collectives
        # an op whose producer sits across the cut reads from HBM what it otherwise streams
        first = g.ops[order[cut]]
        inside = one.kernel_plans(order, None)[first.name]
        assert finished[first.name].stream_in < inside.stream_in or not first.inputs


def test_an_op_base_key_changes_with_each_field_its_finish_reads(r1):
    """The key the auto-mapper shares candidates by covers every field of an op's base: change
    any one and the key changes (and what it finishes to may)."""
    wl = workload_for(Phase.PREFILL, 1, 4096, None)
    g = deepseek.build_layer(r1, "moe", "prefill")
    c = ctx(wl, prefill=True)
    w = walk(g, fused_shardings(one_kernel(g, "moe"), "moe", c), c)
    base = w.ops["attention"]
    changed = {
        "template": dataclasses.replace(base.template, flops=base.template.flops + 1),
        "reads": (*base.reads, (1.0, None)),
        "cache_read": base.cache_read + 1,
        "read_replaces_inputs": not base.read_replaces_inputs,
        "written": base.written + 1,
        "cache_write_share": 0.5 if base.cache_write_share != 0.5 else 0.25,
        "consumers": base.consumers | {"elsewhere"},
        "always_written": not base.always_written,
        "flash": dataclasses.replace(
            base.flash, sh=dataclasses.replace(base.flash.sh, degree=8), by_block={}
        ),
    }
    assert set(changed) == {f.name for f in dataclasses.fields(OpBase)}
    alone, whole = frozenset({"attention"}), frozenset(g.ops)

    def finished(b: OpBase) -> list[object]:
        return [b.finish(inside, kv) for inside in (alone, whole) for kv in (None, 1024)]

    for name, value in changed.items():
        other = dataclasses.replace(base, **{name: value})
        assert other.key() != base.key(), name
        assert finished(other) != finished(base), name
    again = walk(g, fused_shardings(one_kernel(g, "moe"), "moe", c), c)
    assert again.ops["attention"].key() == base.key()
    # the K/V block is the kernel's, not the key's: the re-reads follow it
    assert base.finish(whole, 1024).hbm_read > base.finish(whole, None).hbm_read


# --------------------------------------------------------------------------------------------
# op bases kept across walks of growing subgraphs (the greedy auto-mapper's trial kernels)


def _grow(graph, kind, wl, prefill, bases):
    """Walk each prefix of the layer's ops as its own subgraph, as the greedy's trials do."""
    from rdusim.compiler.sharding import walk as walk_

    order = graph.order()
    out = []
    sctx = ctx(wl, prefill)
    for k in range(1, len(order) + 1):
        sub = graph.subgraph(order[:k])
        fused = one_kernel(sub, kind)
        w = walk_(sub, fused_shardings(fused, kind, sctx), sctx, bases)
        out.append({n: (b.key(), b.flash.bytes(None)) for n, b in w.ops.items()})
    return out


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_kept_op_bases_are_the_bases_a_walk_makes_afresh(r1, phase):
    graph = deepseek.build_layer(r1, "moe", phase)
    wl = workload_for(Phase(phase), 4, 4096, None, 2 if phase == "decode" else 1)
    bases: dict = {}
    kept = _grow(graph, "moe", wl, phase == "prefill", bases)
    assert kept == _grow(graph, "moe", wl, phase == "prefill", None)
    grown = len(graph.order())
    assert grown < len(bases) < grown * (grown + 1) // 2  # most were kept, some made anew


def test_an_op_base_is_kept_by_every_part_of_what_it_is_made_from(r1):
    """Change one part of the key (the op, its sharding, the layouts it needs or makes, the
    workload, prefill, the routing, its inputs' producers, its outputs' consumers, its tensors)
    and the key differs; the parts that differ change the base."""
    from rdusim.compiler.experts import Routing
    from rdusim.compiler.program import Layout
    from rdusim.compiler.sharding import OpSharding, _base_key, _op_base

    graph = deepseek.build_layer(r1, "moe", "decode")
    wl = workload_for(Phase.DECODE, 4, 4096, None, 1)
    order = graph.order()
    op = graph.ops[order[1]]
    sh = OpSharding("tp", 16, ("x",))
    need = [Layout.R] * len(op.inputs)
    base_ctx = ctx(wl, False)
    key = _base_key(graph, op, sh, need, Layout.R, base_ctx)
    other_graph = deepseek.build_layer(r1, "moe", "decode")  # the same names, other objects
    without_producer = graph.subgraph(order[1:])
    without_consumers = graph.subgraph(order[:2])
    variants = [
        _base_key(graph, graph.ops[order[2]], sh, need, Layout.R, base_ctx),
        _base_key(graph, op, OpSharding("tp", 8, ("x",)), need, Layout.R, base_ctx),
        _base_key(graph, op, sh, [Layout.T] * len(need), Layout.R, base_ctx),
        _base_key(graph, op, sh, need, Layout.T, base_ctx),
        _base_key(
            graph, op, sh, need, Layout.R, ctx(workload_for(Phase.DECODE, 8, 4096, None, 1), False)
        ),
        _base_key(graph, op, sh, need, Layout.R, ctx(wl, True)),
        _base_key(
            graph,
            op,
            sh,
            need,
            Layout.R,
            dataclasses.replace(base_ctx, routing=Routing("zipf", 1.0)),
        ),
        _base_key(without_producer, op, sh, need, Layout.R, base_ctx),
        _base_key(without_consumers, op, sh, need, Layout.R, base_ctx),
        _base_key(other_graph, other_graph.ops[order[1]], sh, need, Layout.R, base_ctx),
    ]
    assert all(v != key for v in variants) and len(set(variants)) == len(variants)
    made = _op_base(graph, op, sh, need, Layout.R, base_ctx)
    assert _op_base(without_producer, op, sh, need, Layout.R, base_ctx).reads != made.reads
    alone = _op_base(without_consumers, op, sh, need, Layout.R, base_ctx)
    assert alone.consumers != made.consumers
