"""The compiler driver: workloads, tiles, whole programs, and conservation of work under any
valid fusion and sharding (property-based)."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.compiler.compile import (
    DEFAULT_TILE_TOKENS,
    _tiles,
    build_kernels,
    compile_mapping,
    workload_for,
)
from rdusim.compiler.fusion import fuse
from rdusim.errors import SpecError
from rdusim.ir import ops as costs
from rdusim.ir.graph import Graph, TPMode, Workload
from rdusim.ir.model import build_model
from rdusim.snapstream.config import SnapStreamConfig
from rdusim.spec.hardware import Hardware, load_hardware
from rdusim.spec.mapping import KernelSpec, Sharding, Tiling, load_mapping
from rdusim.spec.model import load_model_config

REPO = Path(__file__).resolve().parents[2]
MAPPINGS = REPO / "mappings"
SS = SnapStreamConfig(sink=128, recent=448, topk=448, obs_window=128, pool_kernel=7)
TP_CHOICES = ({"tp": 16}, {"tp": 8}, {"tp": 4}, {})
DECODE_BATCH = 16  # divisible by every dp degree drawn, so dp splits are exact


@cache
def hardware() -> Hardware:
    return load_hardware("sn40l-16")


@cache
def case(label: str) -> tuple[Graph, str, Workload, str]:
    """(graph, layer kind, workload, phase) of one layer under test."""
    model, kind, phase = label.split(":")
    cfg = load_model_config(REPO / "models" / f"{model}.yaml")
    ss = SS if phase == "prefill" else None
    graph = build_model(cfg, phase, ss).layers[kind]
    batch = 1 if phase == "prefill" else DECODE_BATCH
    return graph, kind, workload_for(phase, batch, 4096 if phase == "prefill" else 8192, ss), phase


CASES = (
    "deepseek-r1:moe:decode",
    "deepseek-r1:dense:decode",
    "deepseek-r1:moe:prefill",
    "deepseek-r1:dense:prefill",
    "llama-3.1-8b:dense:prefill",
    "llama-3.1-8b:dense:decode",
)


@st.composite
def fusions(draw: st.DrawFn) -> tuple[str, list[KernelSpec]]:
    """A layer cut into random contiguous kernels of its topological order, randomly sharded."""
    label = draw(st.sampled_from(CASES))
    graph, _, _, phase = case(label)
    order = graph.order()
    cuts = draw(st.lists(st.booleans(), min_size=len(order) - 1, max_size=len(order) - 1))
    groups: list[list[str]] = [[order[0]]]
    for name, cut in zip(order[1:], cuts, strict=True):
        if cut:
            groups.append([name])
        else:
            groups[-1].append(name)
    kernels = []
    for i, ops in enumerate(groups):
        sharding = Sharding(**draw(st.sampled_from(TP_CHOICES)))
        overrides = {}
        if phase == "decode" and "attention" in ops:
            dp = draw(st.sampled_from((None, 4, 8, 16)))
            if dp:
                overrides["attention"] = Sharding(dp=dp)
        kernels.append(KernelSpec(name=f"K{i}", ops=ops, sharding=sharding, overrides=overrides))
    return label, kernels


def split_factor(plan, op, phase: str) -> int:
    """Sockets sharing an op's work, per the sharding pass's documented semantics: tp/dp/ep
    divide it by the degree, except that token-wise ops under tp in decode are replicated."""
    if plan.strategy == "replicate":
        return 1
    if plan.strategy == "tp" and op.tp_mode == TPMode.TOKEN and phase == "decode":
        return 1
    return plan.degree


def weight_split(plan, op) -> int:
    """tp/ep split an op's weights by the degree, except token-wise ops (norms, gates that need
    whole rows) keep them whole; dp and replicate keep whole weights."""
    if plan.strategy in ("tp", "ep") and op.weights and op.tp_mode != TPMode.TOKEN:
        return plan.degree
    return 1


@settings(max_examples=30, deadline=None)
@given(fusions())
def test_random_fusions_conserve_ops_flops_and_weights(drawn):
    label, kspecs = drawn
    graph, kind, wl, phase = case(label)
    fused = fuse(graph, kspecs, kind)
    kernels = build_kernels(graph, fused, kind, wl, hardware(), phase, check=False)

    # every op exactly once, kernels in mapping order, ops in graph order within a kernel
    placed = [p.name for k in kernels for p in k.ops]
    assert sorted(placed) == sorted(graph.ops)
    assert placed == graph.order()
    assert [k.name for k in kernels] == [k.name for k in kspecs]

    total_flops = sum(costs.flops(op, graph, wl) for op in graph)
    total_weights = graph.weight_bytes()
    flops = weights = 0.0
    for k in kernels:
        assert k.pcus <= hardware().socket.pcus
        for p in k.ops:
            op = graph.ops[p.name]
            assert p.full_flops == costs.flops(op, graph, wl)
            n = split_factor(p, op, phase)
            assert math.isclose(p.flops * n, p.full_flops, rel_tol=1e-12, abs_tol=1e-9), p.name
            w = weight_split(p, op)
            assert math.isclose(p.weight_bytes * w, op.weight_bytes(), rel_tol=1e-12), p.name
            flops += p.flops * n
            weights += p.weight_bytes * w
            assert p.sram_bytes > 0
    assert math.isclose(flops, total_flops, rel_tol=1e-12)
    assert math.isclose(weights, total_weights, rel_tol=1e-12)


# --------------------------------------------------------------------------------------------
# workloads and tiles


def test_workload_for_prefill_and_decode():
    assert workload_for("prefill", 1, 4096, None) == Workload(1, 4096, 4096, 0)
    # SnapStream prefill: eviction candidates are the prompt minus sink and recent window
    assert workload_for("prefill", 2, 4096, SS) == Workload(2, 4096, 4096, 4096 - 128 - 448)
    assert workload_for("decode", 64, 131072, None) == Workload(64, 1, 131072)
    # SnapStream decode attends to the fixed-size compressed cache
    assert workload_for("decode", 64, 131072, SS) == Workload(64, 1, SS.slots)


def test_tiles_prefill_streams_token_tiles_decode_fixed_steps():
    k = KernelSpec(name="k", ops=["x"])
    assert _tiles(k, Workload(1, 8192, 8192), "prefill") == (4, DEFAULT_TILE_TOKENS)
    assert _tiles(k, Workload(1, 100, 100), "prefill") == (1, DEFAULT_TILE_TOKENS)
    k2 = KernelSpec(name="k", ops=["x"], tiling=Tiling(tile_tokens=1000))
    assert _tiles(k2, Workload(1, 8192, 8192), "prefill") == (9, 1000)
    assert _tiles(k, Workload(32, 1, 8192), "decode") == (64, 32)


def test_kernel_tile_tokens_never_exceed_the_tokens():
    graph, kind, _, phase = case("llama-3.1-8b:dense:prefill")
    wl = workload_for("prefill", 1, 1024, SS)
    fused = fuse(graph, [KernelSpec(name="all", ops=["*"], sharding=Sharding(tp=16))], kind)
    (k,) = build_kernels(graph, fused, kind, wl, hardware(), phase)
    assert k.tile_tokens == 1024
    assert k.tiles == 1


# --------------------------------------------------------------------------------------------
# whole programs


def test_prefill_program_layers_and_extras():
    rm = load_mapping(MAPPINGS / "r1_prefill.yaml", ["seq_len=8192"])
    prog = compile_mapping(rm)
    assert set(prog.layers) == {"dense", "moe"}
    assert prog.layers["dense"].count == 3 and prog.layers["moe"].count == 58
    assert set(prog.extras) == {"embedding", "head"}  # the MTP module runs in decode only
    assert prog.snapstream and prog.kv_len == 2048
    assert prog.workload == Workload(1, 8192, 8192, 8192 - 128 - (2048 - 128) // 2)
    # the LM head runs on the last prompt token only
    head_flops = sum(p.full_flops for k in prog.extras["head"].kernels for p in k.ops)
    assert head_flops == pytest.approx(2 * 7168 * 129280, rel=1e-2)
    assert prog.sram_peak_bytes <= 520e6


def test_decode_program_maps_the_mtp_layer_like_moe_layers():
    rm = load_mapping(MAPPINGS / "r1_decode.yaml", ["batch=16", "seq_len=8192"])
    prog = compile_mapping(rm)
    assert set(prog.extras) == {"embedding", "head", "mtp0_proj", "mtp0_layer"}
    assert [k.name for k in prog.extras["mtp0_layer"].kernels] == ["MLA", "FFN"]
    assert prog.kv_len == 2048 and prog.workload == Workload(16, 1, 2048)
    assert prog.tokens_per_step == 2.4


def test_batch_max_must_be_resolved_first():
    rm = load_mapping(MAPPINGS / "r1_decode.yaml")
    assert rm.spec.batch == "max"
    with pytest.raises(SpecError, match="max"):
        compile_mapping(rm)
    assert compile_mapping(rm, batch=4).workload.batch == 4


def test_a_layer_kind_without_kernels_is_located(tmp_path):
    text = (MAPPINGS / "r1_prefill.yaml").read_text(encoding="utf-8")
    text = text.replace("../models/", f"{REPO / 'models'}/")
    text = text[: text.index("  dense:")]
    path = tmp_path / "no_dense.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as info:
        compile_mapping(load_mapping(path, ["seq_len=8192"]))
    err = info.value
    assert err.key == "kernels" and err.file == str(path)
    assert "dense" in err.problem and err.line == text.splitlines().index("kernels:") + 1
