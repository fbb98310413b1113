"""Sharding plans: which ops each placement moves, and which plans a layer gets."""

from __future__ import annotations

import pytest

from rdusim.ir.graph import Phase
from rdusim.ir.model import build_model
from rdusim.search.space import (
    KV_BLOCKS,
    AttentionPlacement,
    ExpertPlacement,
    ShardingPlan,
    attention_block,
    kv_block_options,
    plans_for,
)
from rdusim.spec.mapping import Sharding, load_mapping, snapstream_sizes


def layer(name: str, kind: str, phase: Phase):
    rm = load_mapping(name)
    return build_model(rm.model, phase, snapstream_sizes(rm.spec, "m.yaml")).layers[kind]


@pytest.fixture(scope="module")
def r1_decode_moe():
    return layer("r1_decode", "moe", Phase.DECODE)


def test_the_attention_block_of_mla_is_the_paper_decode_mappings_dp_ops(r1_decode_moe):
    # mappings/r1_decode.yaml makes exactly these dp16: the cache ops and MLA's absorbed GEMMs
    assert attention_block(r1_decode_moe) == {"q_absorb", "kv_cache_write", "attention", "v_absorb"}


def test_the_attention_block_of_gqa_is_its_cache_ops_and_the_output_projection():
    # GQA's queries come from a rope op, not a GEMM; its output goes straight into o_proj
    graph = layer("llama31_8b_decode", "dense", Phase.DECODE)
    assert attention_block(graph) == {"kv_cache_write", "attention", "o_proj"}


def test_each_placement_moves_only_its_ops(r1_decode_moe):
    tp = Sharding(tp=16)
    base = ShardingPlan().shardings(r1_decode_moe, 16)
    assert set(base.values()) == {tp}
    cache = ShardingPlan(AttentionPlacement.CACHE_DP).shardings(r1_decode_moe, 16)
    assert {n for n, s in cache.items() if s != tp} == {"kv_cache_write", "attention"}
    assert cache["attention"] == Sharding(dp=16)
    sp = ShardingPlan(AttentionPlacement.SEQ_SPLIT).shardings(r1_decode_moe, 16)
    assert {n: s for n, s in sp.items() if s != tp} == {"attention": Sharding(sp=16)}
    ep = ShardingPlan(experts=ExpertPlacement.EP).shardings(r1_decode_moe, 16)
    experts = {n for n in r1_decode_moe.ops if n.startswith("experts_")}
    assert {n for n, s in ep.items() if s != tp} == experts
    assert {ep[n] for n in experts} == {Sharding(ep=16)}


def test_decode_with_experts_gets_every_plan(r1_decode_moe):
    plans = plans_for(r1_decode_moe, Phase.DECODE, 16)
    assert len(plans) == len(AttentionPlacement) * len(ExpertPlacement)
    assert len(set(plans)) == len(plans)


def test_prefill_places_only_experts():
    graph = layer("r1_prefill", "moe", Phase.PREFILL)
    plans = plans_for(graph, Phase.PREFILL, 16)
    assert {p.attention for p in plans} == {AttentionPlacement.TP}
    assert {p.experts for p in plans} == set(ExpertPlacement)
    dense = layer("llama31_8b_prefill", "dense", Phase.PREFILL)
    assert plans_for(dense, Phase.PREFILL, 16) == [ShardingPlan()]


def test_plans_that_coincide_are_dropped():
    # without the absorbed GEMMs beside it, MLA's attention block is its cache ops: block-dp
    # gives every op what cache-dp gives it
    moe = layer("r1_decode", "moe", Phase.DECODE)
    graph = moe.subgraph(["kv_cache_write", "attention"])
    assert [p.attention for p in plans_for(graph, Phase.DECODE, 16)] == [
        AttentionPlacement.TP,
        AttentionPlacement.CACHE_DP,
        AttentionPlacement.SEQ_SPLIT,
    ]
    router = moe.subgraph(["ffn_norm", "router_gate"])
    assert plans_for(router, Phase.DECODE, 16) == [ShardingPlan()]
    llama = layer("llama31_8b_decode", "dense", Phase.DECODE)
    assert [p.attention for p in plans_for(llama, Phase.DECODE, 16)] == list(AttentionPlacement)


def test_kv_blocks_are_offered_to_prefill_attention_only(r1_decode_moe):
    graph = layer("r1_prefill", "moe", Phase.PREFILL)
    assert kv_block_options([graph.ops["attention"]], Phase.PREFILL) == KV_BLOCKS
    assert kv_block_options([graph.ops["o_proj"]], Phase.PREFILL) == (None,)
    assert kv_block_options([r1_decode_moe.ops["attention"]], Phase.DECODE) == (None,)
    sizes = [b for b in KV_BLOCKS if b is not None]
    assert KV_BLOCKS[0] is None and sizes == sorted(sizes, reverse=True)
