"""Candidate kernels are what the compiler makes of the same ops in a whole program."""

from __future__ import annotations

import dataclasses

import pytest

from rdusim.compiler.compile import compile_context, compile_mapping, layer_workload
from rdusim.ir.graph import Graph, Phase
from rdusim.ir.model import build_model
from rdusim.search.segments import (
    Candidate,
    CandidateBuilder,
    KernelPool,
    Limit,
    Refusal,
    kernel_spec,
)
from rdusim.search.space import AttentionPlacement, ExpertPlacement, ShardingPlan
from rdusim.spec.mapping import Sharding, Tiling, load_mapping, snapstream_sizes


def builder(name: str, kind: str, plan: ShardingPlan, batch: int = 64, overrides=()):
    rm = load_mapping(name, list(overrides))
    phase = Phase(rm.spec.phase)
    graph = build_model(rm.model, phase, snapstream_sizes(rm.spec, "m.yaml")).layers[kind]
    return rm, CandidateBuilder(graph, kind, plan, layer_workload(rm, batch), compile_context(rm))


def same_kernel(a, b) -> None:
    """Equal in everything the simulator reads (the name aside)."""
    assert [dataclasses.asdict(p) for p in a.ops] == [dataclasses.asdict(p) for p in b.ops]
    assert [dataclasses.asdict(c) for c in a.collectives] == [
        dataclasses.asdict(c) for c in b.collectives
    ]
    assert (a.tiles, a.tile_tokens, a.kv_block, a.sram_bytes) == (
        b.tiles,
        b.tile_tokens,
        b.kv_block,
        b.sram_bytes,
    )
    assert sorted(a.edges) == sorted(b.edges)


@pytest.mark.parametrize("kind", ["moe", "dense"])
def test_the_paper_decode_kernels_are_candidates_of_the_block_dp_plan(kind):
    # mappings/r1_decode.yaml is two kernels per layer: MLA (ops up to token_group) and FFN,
    # with the attention block dp16 (the block-dp plan)
    rm, b = builder("r1_decode", kind, ShardingPlan(AttentionPlacement.BLOCK_DP))
    program = compile_mapping(rm, batch=64)
    mla, ffn = program.layers[kind].kernels
    split = len(mla.ops)
    n = len(b.order)
    assert [p.name for p in mla.ops] == b.order[:split]
    for (start, end), compiled in (((0, split), mla), ((split, n), ffn)):
        c = b.build(start, end)
        assert isinstance(c, Candidate)
        same_kernel(c.kernel, compiled)


def test_a_prefill_candidate_with_a_kv_block_is_the_hand_mha_kernel():
    rm, b = builder("r1_prefill", "moe", ShardingPlan(), batch=1)
    mha = next(k for k in compile_mapping(rm).layers["moe"].kernels if k.name == "MHA")
    i = b.order.index("attention")
    c = b.build(i, i + 1, 8192)
    assert isinstance(c, Candidate)
    same_kernel(c.kernel, mha)


def test_a_kernel_over_a_socket_s_sram_is_refused_with_the_compiler_s_reason():
    # a 128K prompt's attention holding the whole cache as one K/V block cannot fit
    _, b = builder("r1_prefill", "moe", ShardingPlan(), batch=1)
    i = b.order.index("attention")
    r = b.build(i, i + 1, None)
    assert isinstance(r, Refusal) and r.limit == Limit.SRAM
    assert "MB of SRAM" in r.detail


@pytest.mark.parametrize(
    ("socket", "limit", "words"),
    [
        (["hardware.socket.pcus=8"], Limit.PCUS, "need at least 16 PCUs"),
        (
            ["hardware.socket.pmus=8", "hardware.socket.pmu_bytes=65000000"],
            Limit.PMUS,
            "need at least 17 PMUs",
        ),
    ],
)
def test_a_kernel_over_a_socket_s_units_is_refused_naming_the_unit(socket, limit, words):
    # a whole Llama-3.1-8B decode layer on a socket of 8 PCUs (or 8 PMUs of the same SRAM):
    # 14 compute ops need 16 PCUs and 17 PMUs at least, under the SRAM a socket has
    overrides = ["hardware=sn40l-8", *socket]
    _, b = builder("llama31_8b_decode", "dense", ShardingPlan(), batch=1, overrides=overrides)
    r = b.build(0, len(b.order))
    assert isinstance(r, Refusal) and r.limit == limit
    assert words in r.detail


def test_a_plan_that_does_not_divide_an_op_is_refused():
    _, b = builder("llama31_8b_decode", "dense", ShardingPlan(), overrides=["hardware=sn40l-8"])
    assert isinstance(b.build(0, 1), Candidate)
    bad = CandidateBuilder(b.graph, "dense", _TpThree(), b.workload, b.ctx)
    r = bad.build(0, 2)
    assert isinstance(r, Refusal) and r.limit == Limit.SHARDING
    assert "3 does not divide" in r.detail


class _TpThree(ShardingPlan):
    """Every op tp over 3 sockets: divides neither the heads nor a node of 8."""

    def shardings(self, graph: Graph, sockets: int) -> dict[str, Sharding]:
        return {n: Sharding(tp=3) for n in graph.ops}


def test_each_candidate_is_built_once():
    _, b = builder("llama31_8b_decode", "dense", ShardingPlan())
    first = b.build(0, 3)
    assert b.build(0, 3) is first and b.built == 1


def test_kernel_spec_takes_the_most_common_sharding_and_overrides_the_rest():
    dp, tp = Sharding(dp=16), Sharding(tp=16)
    spec = kernel_spec("k", ["a", "b", "c"], {"a": tp, "b": dp, "c": tp}, Tiling(kv_block=4096))
    assert spec.sharding == tp and spec.overrides == {"b": dp}
    assert spec.tiling.kv_block == 4096
    tie = kernel_spec("k", ["a", "b"], {"a": dp, "b": tp})
    assert tie.sharding == dp and tie.overrides == {"b": tp}


def test_plans_share_a_candidate_only_when_it_compiles_the_same():
    """Builders of one layer share a pool: a run of ops whose sharded plans and collectives are
    the same under two plans is compiled once (the same candidate), and a run that holds an op
    the plans shard differently is compiled for each, each what a builder alone makes of it."""
    _, alone_tp = builder("r1_decode", "moe", ShardingPlan())
    _, alone_ep = builder("r1_decode", "moe", ShardingPlan(experts=ExpertPlacement.EP))
    graph, wl, ctx = alone_tp.graph, alone_tp.workload, alone_tp.ctx
    pool = KernelPool(graph, wl, ctx)
    tp = CandidateBuilder(graph, "moe", ShardingPlan(), wl, ctx, pool)
    ep = CandidateBuilder(graph, "moe", ShardingPlan(experts=ExpertPlacement.EP), wl, ctx, pool)
    routed = {n for n in tp.order if graph.ops[n].routed is not None}
    shared = apart = 0
    n = len(tp.order)
    for i in range(n):
        for j in range(i + 1, min(n, i + 4) + 1):
            a, b = tp.build(i, j), ep.build(i, j)
            if a is b:
                shared += 1
                assert not routed & set(tp.order[i:j])
            else:
                apart += 1
            for got, alone in ((a, alone_tp.build(i, j)), (b, alone_ep.build(i, j))):
                assert type(got) is type(alone)
                if isinstance(got, Candidate):
                    assert isinstance(alone, Candidate)
                    assert repr(got.kernel) == repr(alone.kernel)
                else:
                    assert got == alone
    assert shared and apart
    assert pool.compiled == shared + 2 * apart
    assert tp.built == ep.built == shared + apart  # the report counts each plan's candidates
