"""The compiler driver: workloads, tiles, whole programs (MTP, kernel looping), and conservation of
work under any valid fusion and sharding (property-based)."""

from __future__ import annotations

import dataclasses
import math
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.compiler.collectives import CollectiveKind
from rdusim.compiler.compile import (
    CompileContext,
    _tiles,
    build_kernels,
    compile_mapping,
    looped_form,
    prefill_tile_tokens,
    workload_for,
)
from rdusim.compiler.fusion import fuse
from rdusim.compiler.program import ExtraRole, Kernel, LayerProgram, Layout, OpPlan
from rdusim.errors import SpecError, SpecErrors
from rdusim.ir import ops as costs
from rdusim.ir.graph import CostClass, Graph, OpKind, Phase, TPMode, Workload
from rdusim.ir.model import build_model
from rdusim.snapstream.config import SnapStreamConfig
from rdusim.spec.hardware import Hardware, load_hardware
from rdusim.spec.mapping import KernelSpec, Sharding, Tiling, load_mapping
from rdusim.spec.model import load_model_config

REPO = Path(__file__).resolve().parents[2]
MAPPINGS = REPO / "mappings"
SS = SnapStreamConfig(sink=128, recent=448, topk=448, obs_window=128, pool_kernel=7)
TP_CHOICES = ({"tp": 16}, {"tp": 8}, {"tp": 4}, {})
# decode batches: each is divisible by the dp groups any drawn dp degree keeps (batch 1: one
# group split over the cache; 4: four groups), so dp and split-KV divide the work exactly
DECODE_BATCHES = (1, 4, 16)
R1_TILE_ROWS = 32  # 500 kB PMU // (7168 x 2 bytes) = 34 rows, rounded down to a power of two


@cache
def hardware() -> Hardware:
    return load_hardware("sn40l-16")


@cache
def case(label: str, batch: int = 16, verified: int = 1) -> tuple[Graph, str, Workload, Phase]:
    """(graph, layer kind, workload, phase) of one layer under test."""
    model, kind, phase_name = label.split(":")
    phase = Phase(phase_name)
    cfg = load_model_config(REPO / "models" / f"{model}.yaml")
    ss = SS if phase == Phase.PREFILL else None
    graph = build_model(cfg, phase, ss).layers[kind]
    if phase == Phase.PREFILL:
        return graph, kind, workload_for(phase, 1, 4096, ss), phase
    return graph, kind, workload_for(phase, batch, 8192, ss, verified), phase


def context(phase: Phase) -> CompileContext:
    return CompileContext(hardware(), phase, R1_TILE_ROWS)


CASES = (
    "deepseek-r1:moe:decode",
    "deepseek-r1:dense:decode",
    "deepseek-r1:moe:prefill",
    "deepseek-r1:dense:prefill",
    "llama-3.1-8b:dense:prefill",
    "llama-3.1-8b:dense:decode",
)


@st.composite
def fusions(draw: st.DrawFn) -> tuple[tuple[str, int, int], list[KernelSpec]]:
    """A layer cut into random contiguous kernels of its topological order, randomly sharded;
    decode layers at a random batch and 1 or 3 verified tokens per sequence."""
    label = draw(st.sampled_from(CASES))
    batch = draw(st.sampled_from(DECODE_BATCHES))
    verified = draw(st.sampled_from((1, 3)))
    graph, _, _, phase = case(label, batch, verified)
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
        if phase == Phase.DECODE and "attention" in ops:
            dp = draw(st.sampled_from((None, 4, 8, 16)))
            if dp:
                overrides["attention"] = Sharding(dp=dp)
        kernels.append(KernelSpec(name=f"K{i}", ops=ops, sharding=sharding, overrides=overrides))
    return (label, batch, verified), kernels


def split_factor(plan, op, phase: Phase) -> int:
    """Sockets sharing an op's work, per the sharding pass's documented semantics: tp/dp divide
    it by the degree and split-KV by its split too, except that token-wise ops under tp in
    decode are replicated."""
    if plan.strategy == "replicate":
        return 1
    if plan.strategy == "tp" and op.tp_mode == TPMode.TOKEN and phase == Phase.DECODE:
        return 1
    return plan.degree * plan.seq_split


def weight_split(plan, op) -> int:
    """tp/ep split an op's weights by the degree, except token-wise ops (norms, gates that need
    whole rows) keep them whole; dp and replicate keep whole weights."""
    if plan.strategy in ("tp", "ep") and op.weights and op.tp_mode != TPMode.TOKEN:
        return plan.degree
    return 1


@settings(max_examples=30, deadline=None)
@given(fusions())
def test_random_fusions_conserve_ops_flops_and_weights(drawn):
    (label, batch, verified), kspecs = drawn
    graph, kind, wl, phase = case(label, batch, verified)
    fused = fuse(graph, kspecs, kind)
    kernels = build_kernels(graph, fused, kind, wl, context(phase), check=False)

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
    assert workload_for(Phase.PREFILL, 1, 4096, None) == Workload(1, 4096, 4096, 0)
    # SnapStream prefill: eviction candidates are the prompt minus sink and recent window
    assert workload_for(Phase.PREFILL, 2, 4096, SS) == Workload(2, 4096, 4096, 4096 - 128 - 448)
    assert workload_for(Phase.DECODE, 64, 131072, None) == Workload(64, 1, 131072)
    # SnapStream decode attends to the fixed-size compressed cache
    assert workload_for(Phase.DECODE, 64, 131072, SS) == Workload(64, 1, SS.slots)
    # with k MTP drafts the main model verifies k + 1 tokens per sequence
    assert workload_for(Phase.DECODE, 64, 131072, SS, verified=3) == Workload(64, 3, SS.slots)
    assert workload_for(Phase.DECODE, 64, 131072, SS, verified=3).tokens == 192


def _reading(name: str, nbytes: float) -> OpPlan:
    return OpPlan(name, OpKind.GEMM, CostClass.SYSTOLIC, "tp", 16, 0.0, nbytes, 0.0, 0.0, 0.0, 0.0)


def test_tiles_prefill_streams_token_tiles_decode_streams_pmu_chunks():
    k = KernelSpec(name="k", ops=["x"])
    prefill = CompileContext(hardware(), Phase.PREFILL, 2048)
    assert _tiles(k.tiling, [], Workload(1, 8192, 8192), prefill) == (4, 2048)
    assert _tiles(k.tiling, [], Workload(1, 100, 100), prefill) == (1, 100)
    # tokens that fit one tile (the head's last position): a matrix-vector product whose
    # weights stream in 500 kB PMU chunks, as in decode: 700 MB -> 1400 tiles
    assert _tiles(k.tiling, [_reading("a", 7.0e8)], Workload(1, 1, 8192), prefill) == (1400, 1)
    k2 = KernelSpec(name="k", ops=["x"], tiling=Tiling(tile_tokens=1000))
    assert _tiles(k2.tiling, [], Workload(1, 8192, 8192), prefill) == (9, 1000)
    decode = CompileContext(hardware(), Phase.DECODE, 2048)
    # small ops: at least 64 steps
    assert _tiles(k.tiling, [_reading("a", 1e6)], Workload(32, 1, 8192), decode) == (64, 32)
    assert _tiles(k.tiling, [_reading("a", 1e6)], Workload(32, 3, 8192), decode) == (64, 96)
    # the largest op's bytes in 500 kB PMU chunks: 700 MB -> 1400 tiles
    ops = [_reading("a", 7.0e8), _reading("b", 1e7)]
    assert _tiles(k.tiling, ops, Workload(32, 1, 8192), decode) == (1400, 32)


def pow2_floor(x: int) -> int:
    p = 1
    while 2 * p <= x:
        p *= 2
    return p


@pytest.mark.parametrize(("model", "hidden"), [("deepseek-r1", 7168), ("llama-3.1-8b", 4096)])
def test_prefill_tile_rows_are_what_one_pmu_holds(model, hidden):
    cfg = load_model_config(REPO / "models" / f"{model}.yaml")
    assert cfg.hidden_size == hidden
    pmu = hardware().socket.pmu_bytes
    rows = pow2_floor(pmu // (hidden * 2))  # BF16 rows of the hidden state
    assert prefill_tile_tokens(hidden, 2, pmu) == rows
    if model == "deepseek-r1":
        assert rows == R1_TILE_ROWS == 32


@settings(max_examples=60, deadline=None)
@given(
    hidden=st.integers(1, 1 << 16),
    act=st.sampled_from([0.5, 1.0, 2.0, 4.0]),
    pmu=st.integers(1, 1 << 22),
)
def test_prefill_tile_rows_fill_a_pmu_by_powers_of_two(hidden, act, pmu):
    rows = prefill_tile_tokens(hidden, act, pmu)
    assert rows >= 1 and rows & (rows - 1) == 0
    if hidden * act <= pmu:
        # the tile fits the PMU, and twice as many rows would not
        assert rows * hidden * act <= pmu < 2 * rows * hidden * act
    else:
        assert rows == 1  # a row wider than a PMU still streams one row at a time


@pytest.mark.parametrize(
    ("mapping", "hidden"), [("r1_prefill.yaml", 7168), ("llama31_8b_prefill.yaml", 4096)]
)
def test_prefill_kernels_stream_hardware_sized_tiles(mapping, hidden):
    prog = compile_mapping(load_mapping(MAPPINGS / mapping))
    rows = pow2_floor(hardware().socket.pmu_bytes // (hidden * 2))
    assert prog.workload.tokens == 131072
    for lp in prog.layers.values():
        for k in lp.kernels:
            assert (k.tiles, k.tile_tokens) == (math.ceil(131072 / rows), rows), k.name
    if mapping.startswith("r1"):
        assert {(k.tiles, k.tile_tokens) for k in prog.layers["moe"].kernels} == {(4096, 32)}


def test_kernel_tile_tokens_never_exceed_the_tokens():
    graph, kind, _, phase = case("llama-3.1-8b:dense:prefill")
    wl = workload_for(Phase.PREFILL, 1, 1024, SS)
    fused = fuse(graph, [KernelSpec(name="all", ops=["*"], sharding=Sharding(tp=16))], kind)
    ctx = CompileContext(hardware(), phase, 2048)
    (k,) = build_kernels(graph, fused, kind, wl, ctx)
    assert k.tile_tokens == 1024
    # one token tile: the weights stream in PMU-sized chunks, the largest op setting the count
    largest = max(p.hbm_in_bytes for p in k.ops)
    assert k.tiles == math.ceil(largest / hardware().socket.pmu_bytes) > 1


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


def test_decode_program_verifies_the_mtp_drafts():
    rm = load_mapping(MAPPINGS / "r1_decode.yaml", ["batch=16", "seq_len=8192"])
    assert (rm.spec.mtp.draft_tokens, rm.spec.mtp.acceptance) == (2, 0.8)
    prog = compile_mapping(rm)
    # the main model checks the token and its 2 drafts for every sequence
    assert prog.kv_len == 2048 and prog.workload == Workload(16, 2 + 1, 2048)
    assert prog.tokens_per_step == pytest.approx(1 + 0.8 + 0.8**2, rel=1e-15)
    assert (prog.mtp_mode, prog.draft_tokens) == ("verify", 2)
    assert set(prog.extras) == {
        "embedding",
        "head",
        "mtp0_proj",
        "mtp0_layer",
        "mtp_embedding",
        "mtp_head",
    }
    # the MTP module drafts one token per sequence a run, 2 runs in a row, each embedding the
    # token it extends and reading logits for the next
    for name in ("mtp0_proj", "mtp0_layer", "mtp_embedding", "mtp_head"):
        lp = prog.extras[name]
        assert lp.runs == 2 and lp.executions == 2, name
        assert lp.workload == Workload(16, 1, 2048), name
    # the main model's embedding and LM head see all verified tokens, once
    for name in ("embedding", "head"):
        assert prog.extras[name].runs == 1 and prog.extras[name].workload == prog.workload
    # the MTP module's decoder layer is mapped like the MoE layers
    assert [k.name for k in prog.extras["mtp0_layer"].kernels] == ["MLA", "FFN"]
    assert all(lp.runs == 1 for lp in prog.layers.values())


def test_extras_carry_their_roles_not_just_names():
    """Compile, simulation and trace find the extras by role (and MTP module), never by name."""
    rm = load_mapping(MAPPINGS / "r1_decode.yaml", ["batch=16", "seq_len=8192"])
    prog = compile_mapping(rm)
    roles = {name: (lp.role, lp.module) for name, lp in prog.extras.items()}
    assert roles == {
        "embedding": (ExtraRole.EMBEDDING, None),
        "head": (ExtraRole.HEAD, None),
        "mtp0_proj": (ExtraRole.MTP_PROJECTION, 0),
        "mtp0_layer": (ExtraRole.MTP_LAYER, 0),
        "mtp_embedding": (ExtraRole.MTP_EMBEDDING, None),
        "mtp_head": (ExtraRole.MTP_HEAD, None),
    }
    assert all(lp.role is None for lp in prog.layers.values())
    assert prog.extra(ExtraRole.MTP_LAYER, 0) is prog.extras["mtp0_layer"]
    assert prog.extra(ExtraRole.MTP_LAYER, 1) is None


def test_a_program_speaks_in_enums():
    """Phases, op kinds, cost classes, layouts and collectives are enums (which compare equal
    to, and serialise as, their names)."""
    prog = compile_mapping(load_mapping(MAPPINGS / "r1_decode.yaml", ["batch=16"]))
    assert prog.phase is Phase.DECODE and prog.phase == "decode"
    plans = [p for lp in prog.all_layers() for k in lp.kernels for p in k.ops]
    assert all(isinstance(p.kind, OpKind) and isinstance(p.cost_class, CostClass) for p in plans)
    assert all(isinstance(p.out_layout, Layout) for p in plans)
    assert all(isinstance(lay, Layout) for p in plans for lay in p.in_layouts)
    collectives = [c for lp in prog.all_layers() for k in lp.kernels for c in k.collectives]
    assert collectives and all(isinstance(c.kind, CollectiveKind) for c in collectives)


def test_scaled_mtp_deploys_the_module_without_running_it():
    sets = ["batch=16", "seq_len=8192", "mtp.draft_tokens=0"]
    scaled = compile_mapping(
        load_mapping(
            MAPPINGS / "r1_decode.yaml", [*sets, "mtp.mode=scaled", "mtp.tokens_per_step=2.4"]
        )
    )
    plain = compile_mapping(load_mapping(MAPPINGS / "r1_decode.yaml", sets))
    assert scaled.workload == plain.workload == Workload(16, 1, 2048)
    assert scaled.tokens_per_step == 2.4 and plain.tokens_per_step == 1.0
    assert scaled.mtp_mode == "scaled"
    assert set(scaled.extras) == {"embedding", "head", "mtp0_proj", "mtp0_layer"}
    assert set(plain.extras) == {"embedding", "head"}
    assert scaled.extras["mtp0_proj"].runs == scaled.extras["mtp0_layer"].runs == 0
    assert scaled.extras["mtp0_layer"].executions == 0
    # its weights and its layer's cache stay in HBM: 62 cached layers instead of 61
    assert scaled.hbm.kv_cache == pytest.approx(plain.hbm.kv_cache * 62 / 61, rel=1e-12)
    assert scaled.hbm.kv_cache == pytest.approx(62 * 16 * 2048 * 1152 / 16, rel=1e-12)

    def shard(lp):
        return sum(p.weight_bytes for k in lp.kernels for p in k.ops)

    mtp_layer, moe_layer = scaled.extras["mtp0_layer"], scaled.layers["moe"]
    assert shard(mtp_layer) == shard(moe_layer)  # the same MoE layer, mapped the same way
    # eh_proj (2 x 7168 -> 7168, FP8) split 16 ways, two BF16 norms of 7168 whole
    assert shard(scaled.extras["mtp0_proj"]) == 2 * 7168 * 7168 / 16 + 2 * 7168 * 2
    added = shard(scaled.extras["mtp0_proj"]) + shard(mtp_layer)
    assert scaled.hbm.weights - plain.hbm.weights == pytest.approx(added, rel=1e-12)


def test_kernel_calls_per_step():
    graph, kind, wl, _ = case("deepseek-r1:moe:decode")
    two = [Kernel("A", []), Kernel("B", [])]
    assert LayerProgram(kind, 58, graph, two, wl).calls == 58 * 2
    assert LayerProgram(kind, 58, graph, two, wl, runs=3).calls == 3 * 58 * 2
    assert LayerProgram(kind, 58, graph, two, wl, runs=3).executions == 3 * 58
    # a looped kind is one call per kernel and run, whatever its layer count
    looped = LayerProgram(kind, 58, graph, two[:1], wl, runs=2, looped=True)
    assert (looped.calls, looped.executions) == (2, 2 * 58)
    assert LayerProgram(kind, 1, graph, two, wl, runs=0).calls == 0


def test_kernel_looping_runs_a_one_kernel_layer_as_one_call():
    prog = compile_mapping(load_mapping(MAPPINGS / "llama31_8b_decode.yaml"))
    (lp,) = prog.layers.values()
    assert lp.kind == "dense" and [k.name for k in lp.kernels] == ["Decoder"]
    assert lp.looped and lp.count == 32
    assert (lp.calls, lp.executions) == (1, 32)
    assert prog.orchestration == "hardware"
    # the embedding and the head are not looped: one call per kernel
    for extra in prog.extras.values():
        assert not extra.looped and extra.calls == len(extra.kernels)
    unlooped = compile_mapping(
        load_mapping(MAPPINGS / "llama31_8b_decode.yaml", ["kernel_looping=false"])
    )
    assert not unlooped.layers["dense"].looped and unlooped.layers["dense"].calls == 32
    # the pipelined outer loop streams the next layer's weights in beside the kernel: one
    # layer's BF16 shard (q, o: 4096^2; k, v: 4096 x 1024; FFN: 3 x 4096 x 14336; split 16
    # ways) plus the two whole 4096-wide norms
    (looped_k,), (plain_k,) = lp.kernels, unlooped.layers["dense"].kernels
    shard = (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) * 2 / 16 + 2 * 4096 * 2
    assert looped_k.prefetch_iteration and not plain_k.prefetch_iteration
    assert looped_k.streamed_weight_bytes == shard
    assert looped_k.sram_bytes == pytest.approx(plain_k.sram_bytes + shard, rel=1e-12)


def test_a_looped_kernel_prefetches_only_what_fits():
    def kernel(sram: float) -> Kernel:
        p = OpPlan("w", OpKind.GEMM, CostClass.SYSTOLIC, "tp", 16, 1.0, 0.0, 0.0, 30e6, 0.0, 0.0)
        return Kernel("k", [p], sram_bytes=sram)

    room = hardware().socket.sram_bytes
    fits = looped_form(kernel(room - 30e6), hardware())
    tight = looped_form(kernel(room - 29e6), hardware())
    assert fits.prefetch_iteration and fits.sram_bytes == room
    assert not tight.prefetch_iteration and tight.sram_bytes == room - 29e6


def test_kernel_looping_needs_one_kernel_per_layer(r1_mapping):
    path, text = r1_mapping(
        ("orchestration: software\n", "orchestration: software\nkernel_looping: true\n")
    )
    with pytest.raises(SpecErrors) as info:
        compile_mapping(load_mapping(path, ["seq_len=8192"]))
    assert len(info.value.errors) == 2  # the dense and the moe layers, together
    err = info.value.errors[0]
    assert err.key == "kernel_looping" and err.file == str(path)
    assert err.line == text.splitlines().index("kernel_looping: true") + 1
    assert "kernel_looping" in (err.fix or "")
    # names the layer kind and its kernels
    kernels = ["QKV", "Streaming Ring Buffer", "SnapKV Compression", "MHA", "Output Proj"]
    assert "dense" in err.problem or "moe" in err.problem
    for name in kernels:
        assert name in err.problem, name


def test_batch_max_must_be_resolved_first():
    rm = load_mapping(MAPPINGS / "r1_decode.yaml")
    assert rm.spec.batch == "max"
    with pytest.raises(SpecError, match="max"):
        compile_mapping(rm)
    assert compile_mapping(rm, batch=4).workload.batch == 4


def test_a_layer_kind_without_kernels_is_located(tmp_path):
    text = (MAPPINGS / "r1_prefill.yaml").read_text(encoding="utf-8")
    text = text[: text.index("  dense:")]
    path = tmp_path / "no_dense.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as info:
        compile_mapping(load_mapping(path, ["seq_len=8192"]))
    err = info.value
    assert err.key == "kernels" and err.file == str(path)
    assert "dense" in err.problem and err.line == text.splitlines().index("kernels:") + 1


def line_of_text(text: str, needle: str) -> int:
    """1-based number of the first line of `text` containing `needle`."""
    return next(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


def test_a_misspelt_override_is_located_with_a_suggestion(r1_mapping):
    path, text = r1_mapping(
        (
            "      tiling: {kv_block: 8192}",
            "      overrides: {atention: {tp: 8}}\n      tiling: {kv_block: 8192}",
        )
    )
    with pytest.raises(SpecError) as info:
        compile_mapping(load_mapping(path, ["seq_len=8192"]))
    err = info.value
    assert err.key == "kernels.moe.MHA.overrides.atention" and err.file == str(path)
    assert err.line == line_of_text(text, "atention")
    assert (err.fix or "").startswith("did you mean 'attention'?")


def test_an_override_of_an_op_in_another_kernel_is_located(r1_mapping):
    path, text = r1_mapping(
        (
            "      ops: [o_proj]\n      sharding: {tp: 16}",
            "      ops: [o_proj]\n      sharding: {tp: 16}\n      overrides:\n"
            "        attn_residual: {tp: 8}",
        )
    )
    with pytest.raises(SpecError) as info:
        compile_mapping(load_mapping(path, ["seq_len=8192"]))
    err = info.value
    assert err.key == "kernels.moe.Output Proj.overrides.attn_residual"
    assert err.line == line_of_text(text, "attn_residual: {tp: 8}")
    assert "attn_residual in 'Router'" in err.problem


def test_snapstream_overrides_are_kept_while_snapstream_is_off(r1_mapping):
    path, _ = r1_mapping(
        (
            '      ops: ["snapkv_*"]\n      sharding: {tp: 16}',
            '      ops: ["snapkv_*"]\n      sharding: {tp: 16}\n      overrides: {snapkv_qk: {tp: 8}}',
        )
    )
    program = compile_mapping(load_mapping(path, ["seq_len=8192", "snapstream.enabled=false"]))
    assert "SnapKV Compression" not in [k.name for k in program.layers["moe"].kernels]
    on = compile_mapping(load_mapping(path, ["seq_len=8192"]))
    snapkv = next(k for k in on.layers["moe"].kernels if k.name == "SnapKV Compression")
    assert snapkv.op("snapkv_qk").degree == 8


def test_shipped_overrides_all_match_their_kernels():
    rm = load_mapping(MAPPINGS / "r1_decode.yaml", ["batch=16"])
    mla = compile_mapping(rm).layers["moe"].kernels[0]
    assert {mla.op(n).strategy for n in ("q_absorb", "attention", "v_absorb")} == {"dp"}


# --------------------------------------------------------------------------------------------
# the greedy auto-mapping, kept


def test_the_greedy_mapping_is_kept_by_graph_kind_workload_and_context():
    """A kept greedy mapping is the one computing it anew gives; a graph of the same content
    (another object) finds it, and a change to any part of the key (the graph, the workload,
    the compile context) gives that input's own mapping, not the kept one."""
    from rdusim.compiler import compile as compiler
    from rdusim.compiler.compile import compile_context, layer_workload
    from rdusim.spec.mapping import snapstream_sizes

    rm = load_mapping(REPO / "mappings" / "r1_decode.yaml")
    ctx = compile_context(rm)

    def layers():
        ss = snapstream_sizes(rm.spec, rm.source.file)
        return build_model(rm.model, Phase.DECODE, ss).layers

    g = layers()["moe"]
    wl = layer_workload(rm, 1)
    # a sixteenth of the SRAM: at batch 1 the greedy rule closes a kernel before the experts
    socket = ctx.hw.socket.model_copy(update={"sram_bytes": ctx.hw.socket.sram_bytes / 16})
    cramped = dataclasses.replace(ctx, hw=ctx.hw.model_copy(update={"socket": socket}))
    base = compiler._auto(g, "moe", wl, cramped)
    assert len(base) == 2 and base == compiler._greedy(g, "moe", wl, cramped)
    assert compiler._auto(layers()["moe"], "moe", wl, cramped) == base
    for args in (
        (layers()["dense"], "moe", wl, cramped),
        (g, "moe", layer_workload(rm, 64), cramped),
        (g, "moe", wl, ctx),
    ):
        got = compiler._auto(*args)
        assert got == compiler._greedy(*args)
        assert got != base
