"""Memory planning: SRAM buffers per kernel, the HBM budget per socket, and the maximum batch."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rdusim.compiler.capacity import max_batch
from rdusim.compiler.compile import CompileContext, build_kernels, compile_mapping, workload_for
from rdusim.compiler.fusion import fuse
from rdusim.compiler.memory import (
    RESIDENT_WEIGHT_BYTES,
    _weight_buffer,
    cache_bytes,
    check_sram,
    kv_share,
)
from rdusim.compiler.program import HBMPlan, LayerProgram
from rdusim.errors import SpecError
from rdusim.ir.builders import deepseek, llama
from rdusim.ir.graph import Phase, Workload
from rdusim.spec.hardware import load_hardware
from rdusim.spec.mapping import KernelSpec, Sharding, Tiling, load_mapping

MAPPINGS = Path(__file__).resolve().parents[2] / "mappings"
HW = load_hardware("sn40l-16")
TILE_TOKENS = 32  # prefill rows a 500 kB PMU holds of R1's 7168-wide BF16 hidden state


# --------------------------------------------------------------------------------------------
# HBM plan and capacity


@pytest.fixture(scope="module")
def r1_decode_64():
    return compile_mapping(load_mapping(MAPPINGS / "r1_decode.yaml", ["batch=64"]))


def test_r1_decode_kv_cache_per_socket(r1_decode_64, r1):
    # MLA caches the latent and the rope key per token and layer, in BF16
    per_layer = (r1.kv_lora_rank + r1.qk_rope_head_dim) * 2
    assert per_layer == 1152
    layers = r1.num_hidden_layers + r1.num_nextn_predict_layers  # the MTP layer has its own cache
    kv_len = 131072 // 4  # SnapStream, compression 4
    sequences = 64 // 16  # attention DP16: each socket keeps its own sequences
    expected = sequences * kv_len * per_layer * layers
    assert expected == pytest.approx(4 * 32768 * 70272 * 62 / 61, rel=1e-15)
    assert r1_decode_64.hbm.kv_cache == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("batch", [1, 2, 4, 8, 16, 32])
def test_r1_decode_kv_cache_follows_split_kv(batch):
    # attention dp16 on fewer sequences than sockets: dp over what the batch fills, each
    # sequence's positions spread over the rest; either way a socket holds 1/16 of the batch's
    # cache when the groups divide the batch (powers of two here)
    prog = compile_mapping(load_mapping(MAPPINGS / "r1_decode.yaml", [f"batch={batch}"]))
    layers = 61 + 1  # main layers + the MTP layer
    expected = layers * batch * (131072 // 4) * 1152 / 16
    assert prog.hbm.kv_cache == pytest.approx(expected, rel=1e-12)


def test_llama_decode_kv_cache_at_batch_one():
    prog = compile_mapping(load_mapping(MAPPINGS / "llama31_8b_decode.yaml", ["batch=1"]))
    per_token = 2 * 8 * 128 * 2  # K and V of 8 KV heads of 128, BF16
    assert prog.hbm.kv_cache == pytest.approx(32 * 8192 * per_token / 16, rel=1e-12)


def test_head_split_below_the_node_shrinks_the_weight_shards():
    def weights(batch: int) -> float:
        rm = load_mapping(MAPPINGS / "r1_decode.yaml", [f"batch={batch}"])
        return compile_mapping(rm).hbm.weights

    # q_absorb and v_absorb (128 heads x 128 x 512, FP8) go from whole copies (dp16) to tp16
    # shards in all 62 layers that map them (3 dense, 58 MoE, the MTP layer)
    absorb = 128 * 128 * 512
    assert weights(16) - weights(1) == pytest.approx(62 * 2 * absorb * 15 / 16, rel=1e-12)
    assert weights(4) == weights(1)


def test_r1_decode_weights_and_budget(r1_decode_64):
    hbm = r1_decode_64.hbm
    assert 42e9 <= hbm.weights <= 46e9
    assert hbm.capacity == HW.socket.hbm.capacity_bytes * HW.calibration.hbm_usable_fraction
    assert hbm.used == hbm.weights + hbm.kv_cache + hbm.workspace
    assert hbm.workspace > 0 and hbm.fits


def test_max_batch_reports_when_nothing_fits():
    from dataclasses import replace

    from rdusim.uncertainty.parameters import with_values

    rm = load_mapping(MAPPINGS / "r1_decode.yaml", ["snapstream.enabled=false"])
    # leave the runtime only half of HBM: the 44 GB of weight shards alone no longer fit
    rm = replace(rm, hardware=with_values(rm.hardware, {"hbm_usable_fraction": 0.5}))
    with pytest.raises(SpecError) as info:
        max_batch(rm)
    assert info.value.key == "hardware" and "weights" in info.value.problem
    assert "do not fit sn40l-16's 16 sockets" in info.value.problem


def test_prefill_keeps_the_compressed_prompt_cache(r1):
    prog = compile_mapping(load_mapping(MAPPINGS / "r1_prefill.yaml", ["seq_len=16384"]))
    # 61 layers of 4096 kept positions, spread over 16 sockets (no MTP layer in prefill)
    assert prog.hbm.kv_cache == pytest.approx(61 * 4096 * 1152 / 16, rel=1e-12)
    full = compile_mapping(
        load_mapping(MAPPINGS / "r1_prefill.yaml", ["seq_len=16384", "snapstream.enabled=false"])
    )
    assert full.hbm.kv_cache == pytest.approx(4 * prog.hbm.kv_cache, rel=1e-12)


def test_hbm_plan_fits(r1_decode_64):
    # the budget is the usable fraction of the 64 GB per socket; an exact fill still fits
    assert HBMPlan(10.0, 4.0, 3.0, 3.0).fits
    assert not HBMPlan(10.0, 4.0, 3.0, 3.5).fits
    hbm = r1_decode_64.hbm
    assert hbm.capacity == pytest.approx(64e9 * HW.calibration.hbm_usable_fraction, rel=1e-15)
    assert hbm.used == pytest.approx(hbm.weights + hbm.kv_cache + hbm.workspace, rel=1e-15)
    assert hbm.fits and hbm.used <= hbm.capacity
    # a batch whose cache cannot fit: 64x the sequences, 64x the cache of batch 64
    big = compile_mapping(load_mapping(MAPPINGS / "r1_decode.yaml", ["batch=4096"])).hbm
    assert big.kv_cache == pytest.approx(64 * hbm.kv_cache, rel=1e-12)
    assert big.used > big.capacity and not big.fits


# --------------------------------------------------------------------------------------------
# KV cache shares


def layer_program(graph, kind, phase, wl, overrides=None):
    spec = KernelSpec(
        name="k",
        ops=["*"],
        sharding=Sharding(tp=16),
        overrides={k: Sharding(**v) for k, v in (overrides or {}).items()},
    )
    ctx = CompileContext(HW, phase, TILE_TOKENS)
    kernels = build_kernels(graph, fuse(graph, [spec], kind), kind, wl, ctx, check=False)
    return LayerProgram(kind, 1, graph, kernels, wl)


def test_kv_share_by_attention_split(r1, llama8b):
    wl = workload_for(Phase.DECODE, 20, 8192, None)
    g = deepseek.build_layer(r1, "moe", "decode")
    # DP: a socket keeps its own sequences (uneven batches round up)
    assert (
        kv_share(layer_program(g, "moe", "decode", wl, {"attention": {"dp": 16}}), 16, wl) == 2 / 20
    )
    # MLA's latent is shared by all heads: head-split attention keeps the whole cache
    assert kv_share(layer_program(g, "moe", "decode", wl), 16, wl) == 1.0
    gl = llama.build_layer(llama8b, "dense", "decode")
    # GQA: a socket holds whole KV heads, so Llama-8B's 8 KV heads split at most 8 ways
    assert llama8b.num_key_value_heads == 8
    assert kv_share(layer_program(gl, "dense", "decode", wl), 16, wl) == 1 / 8
    # split-KV: one sequence spread over 16 sockets, or 4 groups of 4 sockets
    one = workload_for(Phase.DECODE, 1, 8192, None)
    assert kv_share(layer_program(g, "moe", "decode", one, {"attention": {"dp": 16}}), 16, one) == (
        1 / 16
    )
    dpsp = layer_program(g, "moe", "decode", wl, {"attention": {"dp": 4, "sp": 4}})
    assert kv_share(dpsp, 16, wl) == 5 / 20 / 4
    sp = layer_program(g, "moe", "decode", wl, {"attention": {"sp": 16}})
    assert kv_share(sp, 16, wl) == 1 / 16


def test_cache_bytes_count_the_cache_once(r1):
    g = deepseek.build_layer(r1, "moe", "decode")
    assert cache_bytes(g, Workload(1, 1, 1)) == 1152
    assert cache_bytes(g, Workload(4, 1, 1000)) == 4 * 1000 * 1152


# --------------------------------------------------------------------------------------------
# SRAM


def test_weight_buffers():
    assert _weight_buffer(1e6, 1, 64) == 1e6  # small weights stay resident
    big = 4 * RESIDENT_WEIGHT_BYTES
    assert _weight_buffer(big, 256, 4) == 2 * big / 256  # one expert at a time, double-buffered
    assert _weight_buffer(big, 1, 8) == 2 * big / 8  # tile-sized chunks


def mha_kernel(r1, kv_block=None, tile_tokens=None):
    g = deepseek.build_layer(r1, "moe", "prefill")
    spec = KernelSpec(
        name="MHA",
        ops=["attention"],
        sharding=Sharding(tp=16),
        tiling=Tiling(kv_block=kv_block, tile_tokens=tile_tokens),
    )
    rest = [o for o in g.order() if o != "attention"]
    cut = g.order().index("attention")
    specs = [
        KernelSpec(name="A", ops=rest[:cut], sharding=Sharding(tp=16)),
        spec,
        KernelSpec(name="B", ops=rest[cut:], sharding=Sharding(tp=16)),
    ]
    wl = workload_for(Phase.PREFILL, 1, 32768, None)
    ctx = CompileContext(HW, Phase.PREFILL, TILE_TOKENS)
    return build_kernels(g, fuse(g, specs, "moe"), "moe", wl, ctx, check=False)[1]


def test_kernel_sram_is_the_sum_of_its_ops(r1):
    k = mha_kernel(r1, kv_block=8192)
    assert k.sram_bytes == pytest.approx(sum(p.sram_bytes for p in k.ops))
    assert k.sram_bytes <= HW.socket.sram_bytes
    check_sram(k, "moe", 1, HW)  # fits: no error


def test_larger_blocks_and_tiles_need_more_sram(r1):
    small = mha_kernel(r1, kv_block=4096).sram_bytes
    assert mha_kernel(r1, kv_block=8192).sram_bytes > small
    assert mha_kernel(r1, kv_block=4096, tile_tokens=8192).sram_bytes > small


def test_a_kernel_over_sram_is_located(r1):
    k = mha_kernel(r1, kv_block=1_000_000)
    assert k.sram_bytes > HW.socket.sram_bytes
    with pytest.raises(SpecError) as info:
        check_sram(k, "moe", 3, HW)
    err = info.value
    assert err.key == "kernels.moe.MHA.tiling" and err.path == ("kernels", "moe", 3, "tiling")
    assert "MHA" in err.problem and "520 MB" in err.problem and "kv_block" in (err.fix or "")
    assert f"({(k.sram_bytes - 520e6) / 1e6:.3g} MB over)" in err.problem  # by how much


def test_pmus_cover_every_buffer(r1):
    """Each op's PMUs hold its buffers (whole PMUs, at least one) or stage its PCUs' operands
    (`staging_pmus_per_pcu` a PCU), whichever needs more; the kernel fits the socket."""
    k = mha_kernel(r1, kv_block=8192)
    per_pcu = HW.socket.staging_pmus_per_pcu
    for p in k.ops:
        buffers = max(1, math.ceil(p.sram_bytes / HW.socket.pmu_bytes))
        assert p.pmus == max(buffers, math.ceil(per_pcu * p.pcus)), p.name
        assert p.pmus * HW.socket.pmu_bytes >= p.sram_bytes, p.name
    assert k.pmus <= HW.socket.pmus
    # the flash attention's K/V blocks alone take over a hundred PMUs
    attention = next(p for p in k.ops if p.kind == "attention")
    assert attention.sram_bytes > 100 * HW.socket.pmu_bytes
