"""Fusion: every op of a layer in exactly one kernel, kernels in an order the graph allows."""

from __future__ import annotations

import pytest

from rdusim.compiler.fusion import check_overrides, fuse
from rdusim.errors import SpecError
from rdusim.ir.builders import deepseek
from rdusim.snapstream.config import SnapStreamConfig
from rdusim.spec.mapping import KernelSpec, Sharding

SS = SnapStreamConfig(sink=128, recent=448, topk=448, obs_window=128, pool_kernel=7)


def K(name: str, *ops: str) -> KernelSpec:
    return KernelSpec(name=name, ops=list(ops))


@pytest.fixture(scope="module")
def moe(r1):
    return deepseek.build_layer(r1, "moe", "prefill", SS)


@pytest.fixture(scope="module")
def moe_plain(r1):
    return deepseek.build_layer(r1, "moe", "prefill", None)


def paper_kernels() -> list[KernelSpec]:
    """The SnapStream paper's seven kernels of a prefill MoE layer (as in mappings/r1_prefill.yaml)."""
    return [
        K("QKV", "attn_norm", "q_*", "kv_a_*", "rope_*", "kv_cache_write", "kv_b_proj"),
        K("Streaming Ring Buffer", "ring_*"),
        K("SnapKV Compression", "snapkv_*"),
        K("MHA", "attention"),
        K("Output Proj", "o_proj"),
        K("Router", "attn_residual", "ffn_norm", "router_*", "token_group"),
        K("MoE FFN", "shared_*", "experts_*", "ffn_residual"),
    ]


def test_one_pattern_takes_the_whole_layer(moe):
    (fk,) = fuse(moe, [K("all", "*")], "moe")
    assert fk.ops == tuple(moe.order())
    assert fk.index == 0


def test_paper_kernels_place_every_op_once_in_graph_order(moe):
    fused = fuse(moe, paper_kernels(), "moe")
    assert [fk.spec.name for fk in fused] == [k.name for k in paper_kernels()]
    placed = [n for fk in fused for n in fk.ops]
    assert sorted(placed) == sorted(moe.ops)
    assert len(placed) == len(set(placed))
    order = moe.order()
    for fk in fused:
        assert list(fk.ops) == sorted(fk.ops, key=order.index)
    by_name = {fk.spec.name: fk.ops for fk in fused}
    assert by_name["MHA"] == ("attention",)
    assert "snapkv_topk" in by_name["SnapKV Compression"]
    assert by_name["Router"][-1] == "token_group"


def test_a_pattern_may_repeat_an_op_of_its_own_kernel(moe):
    kernels = paper_kernels()
    kernels[0] = K(
        "QKV", "attn_norm", "q_*", "q_a_proj", "kv_a_*", "rope_*", "kv_cache_write", "kv_b_proj"
    )
    fused = fuse(moe, kernels, "moe")
    assert fused[0].ops.count("q_a_proj") == 1


def test_unknown_op_names_its_key_path(moe):
    kernels = paper_kernels()
    kernels[0] = K(
        "QKV", "attn_norm", "q_bogus", "q_*", "kv_a_*", "rope_*", "kv_cache_write", "kv_b_proj"
    )
    with pytest.raises(SpecError) as info:
        fuse(moe, kernels, "moe")
    err = info.value
    assert err.key == "kernels.moe.QKV.ops[1]"
    assert err.path == ("kernels", "moe", 0, "ops", 1)
    assert "q_bogus" in err.problem and "moe" in err.problem
    assert err.fix


def test_an_op_in_two_kernels_is_refused(moe):
    kernels = paper_kernels()
    kernels[4] = K("Output Proj", "o_proj", "attention")
    with pytest.raises(SpecError) as info:
        fuse(moe, kernels, "moe")
    err = info.value
    assert err.key == "kernels.moe.Output Proj.ops[1]"
    assert "attention" in err.problem and "MHA" in err.problem
    assert "exactly one kernel" in (err.fix or "")


def test_an_op_in_no_kernel_is_refused(moe):
    kernels = paper_kernels()
    kernels[5] = K("Router", "attn_residual", "ffn_norm", "router_*")
    with pytest.raises(SpecError) as info:
        fuse(moe, kernels, "moe")
    err = info.value
    assert err.key == "kernels.moe" and err.path == ("kernels", "moe")
    assert "token_group" in err.problem


def test_kernels_out_of_dependency_order_are_refused(moe):
    kernels = paper_kernels()
    kernels[5], kernels[6] = kernels[6], kernels[5]  # MoE FFN before Router
    with pytest.raises(SpecError) as info:
        fuse(moe, kernels, "moe")
    err = info.value
    assert err.key == "kernels.moe.MoE FFN.ops"
    assert "MoE FFN" in err.problem and "Router" in err.problem and "later" in err.problem


def test_snapstream_kernels_are_dropped_when_its_ops_are_absent(moe, moe_plain):
    known = set(moe.ops) - set(moe_plain.ops)
    assert {"ring_select", "snapkv_topk"} <= known
    fused = fuse(moe_plain, paper_kernels(), "moe", known)
    names = [fk.spec.name for fk in fused]
    assert names == ["QKV", "MHA", "Output Proj", "Router", "MoE FFN"]
    # kernel indices still point at the mapping's list, for error key paths
    assert [fk.index for fk in fused] == [0, 3, 4, 5, 6]
    # without knowing the names, the SnapStream patterns are unknown ops
    with pytest.raises(SpecError, match="ring_"):
        fuse(moe_plain, paper_kernels(), "moe")


def test_known_names_do_not_excuse_real_typos(moe, moe_plain):
    known = set(moe.ops) - set(moe_plain.ops)
    kernels = [*paper_kernels()[:-1], K("MoE FFN", "shared_*", "experts_*", "ffn_residul")]
    with pytest.raises(SpecError) as info:
        fuse(moe_plain, kernels, "moe", known)
    assert info.value.key == "kernels.moe.MoE FFN.ops[2]"
    assert (info.value.fix or "").startswith("did you mean 'ffn_residual'?")


# --------------------------------------------------------------------------------------------
# unknown names: a suggestion from the names that exist


def test_an_unknown_op_suggests_the_closest_name(moe):
    kernels = paper_kernels()
    kernels[3] = K("MHA", "atention")
    with pytest.raises(SpecError) as info:
        fuse(moe, kernels, "moe")
    err = info.value
    assert err.key == "kernels.moe.MHA.ops[0]"
    assert (err.fix or "").startswith("did you mean 'attention'?")


def test_an_unknown_op_suggests_a_known_but_absent_name(moe, moe_plain):
    known = set(moe.ops) - set(moe_plain.ops)
    kernels = [*paper_kernels(), K("late", "snapkv_topc")]
    with pytest.raises(SpecError) as info:
        fuse(moe_plain, kernels, "moe", known)
    assert "did you mean 'snapkv_topk'?" in (info.value.fix or "")


def test_a_typo_far_from_every_op_gets_no_suggestion(moe):
    kernels = [*paper_kernels(), K("late", "zzzz")]
    with pytest.raises(SpecError) as info:
        fuse(moe, kernels, "moe")
    assert "did you mean" not in (info.value.fix or "")


def with_overrides(kernels: list[KernelSpec], i: int, **overrides: dict) -> list[KernelSpec]:
    kernels = list(kernels)
    kernels[i] = kernels[i].model_copy(
        update={"overrides": {k: Sharding(**v) for k, v in overrides.items()}}
    )
    return kernels


def test_overrides_of_the_kernels_own_ops_pass(moe):
    kernels = with_overrides(paper_kernels(), 0, q_a_proj={"tp": 8}, **{"rope_*": {"tp": 4}})
    check_overrides(fuse(moe, kernels, "moe"), "moe")


def test_an_override_matching_no_op_is_refused_with_a_suggestion(moe):
    kernels = with_overrides(paper_kernels(), 3, atention={"tp": 8})
    with pytest.raises(SpecError) as info:
        check_overrides(fuse(moe, kernels, "moe"), "moe")
    err = info.value
    assert err.key == "kernels.moe.MHA.overrides.atention"
    assert err.path == ("kernels", "moe", 3, "overrides", "atention")
    assert "'atention'" in err.problem and "'MHA'" in err.problem
    assert (err.fix or "").startswith("did you mean 'attention'?")


def test_an_override_of_another_kernels_op_names_that_kernel(moe):
    kernels = with_overrides(paper_kernels(), 3, o_proj={"tp": 8})
    with pytest.raises(SpecError) as info:
        check_overrides(fuse(moe, kernels, "moe"), "moe")
    err = info.value
    assert err.key == "kernels.moe.MHA.overrides.o_proj"
    assert "o_proj in 'Output Proj'" in err.problem
    assert "attention" in (err.fix or "")


def test_an_override_suggests_only_the_kernels_own_ops(moe):
    # `shared_down_proj` is in the MoE FFN kernel; the Router's closest op is `router_topk`
    kernels = with_overrides(paper_kernels(), 5, router_tpk={"tp": 8})
    with pytest.raises(SpecError) as info:
        check_overrides(fuse(moe, kernels, "moe"), "moe")
    assert (info.value.fix or "").startswith("did you mean 'router_topk'?")


def test_an_override_of_snapstream_ops_waits_while_they_are_absent(moe, moe_plain):
    known = set(moe.ops) - set(moe_plain.ops)
    kernels = with_overrides(paper_kernels(), 0, **{"snapkv_*": {"tp": 8}})
    check_overrides(fuse(moe_plain, kernels, "moe", known), "moe", known)
    # with SnapStream's ops present, they run in another kernel
    with pytest.raises(SpecError, match="snapkv_qk in 'SnapKV Compression'"):
        check_overrides(fuse(moe, kernels, "moe"), "moe")
