"""Closed forms for terms of the compiler's cost model that no coarser test observes.

Every expected value is written here from DeepSeek-R1's published dimensions (or counted by brute
force), never computed with the compiler's own helpers, so a change to a term shows up as a
wrong number: the flash-attention K/V re-read, the HBM write of a tensor converted by a
collective in its producer's kernel, the flash K/V double buffer in SRAM, and the round count of
collectives and call barriers on a ring.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rdusim.api import run_mapping
from rdusim.compiler.compile import compile_mapping
from rdusim.compiler.fusion import fuse
from rdusim.compiler.program import Kernel, OpPlan, Program
from rdusim.compiler.sharding import ShardContext, shard
from rdusim.cost.calls import call_cost
from rdusim.ir.graph import Workload
from rdusim.ir.model import build_model
from rdusim.sim.model import SimResult
from rdusim.spec.hardware import Hardware, load_hardware
from rdusim.spec.mapping import KernelSpec, Sharding, load_mapping
from tests.kernels import sized_kernel

REPO = Path(__file__).resolve().parents[2]

# DeepSeek-R1 (models/deepseek-r1.yaml) on an SN40L-16 node, BF16 activations
S = 65536  # prompt tokens
SOCKETS = 16
BF16 = 2
HEADS = 128
QK_NOPE, QK_ROPE, V_DIM = 128, 64, 128
HIDDEN, Q_LORA, KV_LORA = 7168, 1536, 512
HEADS_PER_SOCKET = HEADS // SOCKETS
TILE_ROWS = 32  # 500 kB PMU // (7168 x 2 bytes) = 34 rows, rounded down to a power of two

# the attention op's inputs, whole: queries (nope + rope per head), per-head K (nope) and V, and
# the rope key all heads share
Q_BYTES = S * HEADS * (QK_NOPE + QK_ROPE) * BF16
KV_BYTES = S * HEADS * (QK_NOPE + V_DIM) * BF16
K_PE_BYTES = S * QK_ROPE * BF16


def test_r1_dimensions_are_the_model_files(r1):
    assert (r1.num_attention_heads, r1.hidden_size) == (HEADS, HIDDEN)
    assert (r1.qk_nope_head_dim, r1.qk_rope_head_dim, r1.v_head_dim) == (QK_NOPE, QK_ROPE, V_DIM)
    assert (r1.q_lora_rank, r1.kv_lora_rank) == (Q_LORA, KV_LORA)


def extra_passes(nb: int) -> float:
    """K/V passes beyond the first, counted: causal query block i (1-based) reads i K/V blocks."""
    return sum(range(1, nb + 1)) / nb - 1


def prefill_with_kv_block(r1_mapping, kv_block: int | None) -> Program:
    """The paper's prefill mapping at S tokens, both MHA kernels with the given K/V block."""
    tiling = "tiling: {}" if kv_block is None else f"tiling: {{kv_block: {kv_block}}}"
    edit = ("tiling: {kv_block: 8192}", tiling)
    path, _ = r1_mapping(edit, edit, name=f"kv_{kv_block}.yaml")
    return compile_mapping(load_mapping(path, [f"seq_len={S}"]))


def mha_op(program: Program) -> tuple[Kernel, OpPlan]:
    kernel = next(k for k in program.layers["moe"].kernels if k.name == "MHA")
    return kernel, kernel.op("attention")


# ------------------------------------------------------------------ flash-attention K/V re-read


def attention_plan(r1, mha: Sharding, kv_block: int | None) -> OpPlan:
    """The prefill attention op's plan from the sharding pass, MHA a kernel of its own."""
    graph = build_model(r1, "prefill", None).layers["moe"]
    tp = Sharding(tp=SOCKETS)
    rest = ["o_proj", "attn_residual", "ffn_norm", "router_*", "token_group"]
    kernels = [
        KernelSpec(
            name="QKV",
            ops=["attn_norm", "q_*", "kv_a_*", "rope_*", "kv_cache_write", "kv_b_proj"],
            sharding=tp,
        ),
        KernelSpec(name="MHA", ops=["attention"], sharding=mha),
        KernelSpec(name="Rest", ops=[*rest, "shared_*", "experts_*", "ffn_residual"], sharding=tp),
    ]
    ctx = ShardContext(Workload(1, S, S), SOCKETS, prefill=True, kv_blocks={"MHA": kv_block})
    return shard(graph, fuse(graph, kernels, "moe"), "moe", ctx).ops["attention"]


def test_mha_without_a_kv_block_reads_its_inputs_once(r1):
    # all heads on every socket
    op = attention_plan(r1, Sharding(), None)
    assert op.hbm_read == pytest.approx(Q_BYTES + KV_BYTES + K_PE_BYTES, rel=1e-12)
    # heads split 16 ways: a socket reads its heads' queries and K/V, and the whole rope key
    op = attention_plan(r1, Sharding(tp=SOCKETS), None)
    assert op.hbm_read == pytest.approx(Q_BYTES / 16 + KV_BYTES / 16 + K_PE_BYTES, rel=1e-12)


@pytest.mark.parametrize(("kv_block", "passes"), [(8192, 3.5), (16384, 1.5), (65536, 0.0)])
def test_replicated_flash_attention_rereads_kv_per_query_block(r1, kv_block, passes):
    """One socket running all heads: each query block re-reads the K/V blocks it attends to."""
    assert extra_passes(S // kv_block) == passes
    op = attention_plan(r1, Sharding(), kv_block)
    once = Q_BYTES + KV_BYTES + K_PE_BYTES
    assert op.hbm_read == pytest.approx(once + (KV_BYTES + K_PE_BYTES) * passes, rel=1e-12)


@pytest.mark.parametrize(("kv_block", "passes"), [(8192, 3.5), (16384, 1.5)])
def test_tp16_flash_attention_rereads_its_heads_kv_and_the_whole_rope_key(
    r1_mapping, kv_block, passes
):
    _, op = mha_op(prefill_with_kv_block(r1_mapping, kv_block))
    per_socket_kv = KV_BYTES / 16 + K_PE_BYTES
    once = Q_BYTES / 16 + per_socket_kv
    assert op.hbm_read == pytest.approx(once + per_socket_kv * passes, rel=1e-12)


@pytest.mark.parametrize("kv_block", [8192, 16384])
def test_tp16_flash_rereads_at_least_each_sockets_heads_kv(r1_mapping, kv_block):
    """The re-read of the heads' K/V (the bulk of it), whatever the rope key's share."""
    _, op = mha_op(prefill_with_kv_block(r1_mapping, kv_block))
    passes = extra_passes(S // kv_block)
    reread = op.hbm_read - (Q_BYTES / 16 + KV_BYTES / 16 + K_PE_BYTES)
    assert KV_BYTES / 16 * passes <= reread <= (KV_BYTES / 16 + K_PE_BYTES) * passes


# ------------------------------------------------------------------ writes after a collective


def test_output_proj_writes_only_its_token_share_after_the_reduce_scatter(r1_mapping):
    program = prefill_with_kv_block(r1_mapping, 8192)
    kernel = next(k for k in program.layers["moe"].kernels if k.name == "Output Proj")
    assert [(c.kind, c.tensor) for c in kernel.collectives] == [("reduce-scatter", "attn_proj")]
    # partial sums of the whole S x hidden output are reduced and scattered before they leave
    assert kernel.op("o_proj").hbm_write == pytest.approx(S * HIDDEN * BF16 / 16, rel=1e-12)


def test_norms_write_whole_latents_after_their_all_gathers(r1_mapping):
    """With the up-projections in a later kernel, the norms' all-gathers run in their own kernel:
    each socket writes the whole (replicated) latent, not its token share."""
    old = (
        "      ops: [attn_norm, q_a_proj, q_a_norm, q_b_proj, kv_a_proj, kv_a_norm, rope_q, "
        "rope_k,\n            kv_cache_write, kv_b_proj]\n      sharding: {tp: 16}"
    )
    new = (
        "      ops: [attn_norm, q_a_proj, q_a_norm, kv_a_proj, kv_a_norm]\n"
        "      sharding: {tp: 16}\n"
        "    - name: QKV up\n"
        "      ops: [q_b_proj, rope_q, rope_k, kv_cache_write, kv_b_proj]\n"
        "      sharding: {tp: 16}"
    )
    path, _ = r1_mapping((old, new), name="split_qkv.yaml")
    down = compile_mapping(load_mapping(path, [f"seq_len={S}"])).layers["moe"].kernels[0]
    gathered = {(c.kind, c.tensor, c.src) for c in down.collectives}
    assert gathered == {("all-gather", "q_a_n", "q_a_norm"), ("all-gather", "c_kv", "kv_a_norm")}
    assert down.op("q_a_norm").hbm_write == pytest.approx(S * Q_LORA * BF16, rel=1e-12)
    assert down.op("kv_a_norm").hbm_write == pytest.approx(S * KV_LORA * BF16, rel=1e-12)


# ------------------------------------------------------------------ flash K/V block in SRAM


@pytest.mark.parametrize("kv_block", [8192, 16384])
def test_mha_sram_holds_a_double_buffered_kv_block(r1_mapping, kv_block):
    kernel, op = mha_op(prefill_with_kv_block(r1_mapping, kv_block))
    assert (kernel.tile_tokens, kernel.kv_block) == (TILE_ROWS, kv_block)
    q_tile = TILE_ROWS * HEADS_PER_SOCKET * (QK_NOPE + QK_ROPE) * BF16
    # each position: this socket's heads' K (nope) and V, and the rope key every head shares, once
    kv_block_bytes = kv_block * (HEADS_PER_SOCKET * (QK_NOPE + V_DIM) + QK_ROPE) * BF16
    scores = TILE_ROWS * kv_block * BF16
    out_tile = TILE_ROWS * HEADS_PER_SOCKET * V_DIM * BF16
    expected = 2 * q_tile + 2 * kv_block_bytes + scores + 2 * out_tile
    assert op.sram_bytes == pytest.approx(expected, rel=1e-12)
    assert kernel.sram_bytes == pytest.approx(expected, rel=1e-12)  # the kernel's only op


# ------------------------------------------------------------------ ring topology end to end

RING_ROUNDS = SOCKETS - 1  # a one-directional ring passes a block around in d - 1 steps


def ring_hardware(tmp_path: Path) -> Path:
    text = (REPO / "rdusim" / "hardware" / "sn40l-16.yaml").read_text(encoding="utf-8")
    assert "topology: fully-connected" in text
    text = text.replace("topology: fully-connected", "topology: ring")
    path = tmp_path / "sn40l-16-ring.yaml"
    path.write_text(text.replace("name: sn40l-16", "name: sn40l-16-ring"), encoding="utf-8")
    return path


def all_collectives(program: Program):
    for lp in [*program.layers.values(), *program.extras.values()]:
        for k in lp.kernels:
            yield from k.collectives


@pytest.mark.parametrize("mapping", ["r1_prefill", "r1_decode"])
def test_every_collective_on_a_ring_takes_d_minus_1_rounds_a_phase(tmp_path, models_dir, mapping):
    hw = ring_hardware(tmp_path)
    text = (REPO / "mappings" / f"{mapping}.yaml").read_text(encoding="utf-8")
    text = text.replace("hardware: sn40l-16", f"hardware: {hw}")
    path = tmp_path / f"{mapping}_ring.yaml"
    path.write_text(text, encoding="utf-8")
    rm = load_mapping(path, [f"seq_len={S}", *(["batch=64"] if mapping == "r1_decode" else [])])
    assert rm.hardware.links.topology == "ring"
    program = compile_mapping(rm)
    colls = list(all_collectives(program))
    assert colls
    for c in colls:
        phases = 2 if c.kind == "all-reduce" else 1  # reduce-scatter, then all-gather
        assert c.rounds == RING_ROUNDS * phases, (c.kind, c.tensor)
    if mapping == "r1_decode":
        assert any(c.kind == "all-reduce" for c in colls)


def test_a_hardware_call_barrier_on_a_ring_takes_d_minus_1_rounds(tmp_path):
    """A call ends at a barrier: a zero-byte all-gather, one round fully connected, d - 1 = 15
    on a ring of 16, each one link latency; the rest of the call does not see the topology."""
    ring = load_hardware(ring_hardware(tmp_path))
    full = load_hardware("sn40l-16")
    latency = full.links.p2p_latency_s
    cal, socket = full.calibration, full.socket
    k = sized_kernel(100, 300)
    load = (100 * socket.config_bytes_per_pcu + 300 * socket.config_bytes_per_pmu) / (
        cal.config_bandwidth
    )
    assert call_cost(k, ring, "hardware") == pytest.approx(
        load + cal.argument_load_s + RING_ROUNDS * latency, rel=1e-12
    )
    assert call_cost(k, full, "hardware") == pytest.approx(
        load + cal.argument_load_s + 1 * latency, rel=1e-12
    )
    # the host's call waits at the same barrier, and adds its round trip
    for hw in (ring, full):
        assert call_cost(k, hw, "software") - call_cost(k, hw, "hardware") == pytest.approx(
            cal.host_round_trip_s, rel=1e-9
        )
    assert call_cost(k, ring, "software") - call_cost(k, full, "software") == pytest.approx(
        (RING_ROUNDS - 1) * latency, rel=1e-9
    )


def decode_step(hw: Hardware, orchestration: str) -> SimResult:
    run = run_mapping(
        REPO / "mappings" / "r1_decode.yaml",
        ["batch=64", f"orchestration={orchestration}"],
        hardware=hw,
    )
    assert run.result is not None
    return run.result


@pytest.mark.parametrize("orchestration", ["software", "hardware"])
def test_a_decode_step_is_slower_on_a_ring(tmp_path, orchestration):
    full = decode_step(load_hardware("sn40l-16"), orchestration)
    ring = decode_step(load_hardware(ring_hardware(tmp_path)), orchestration)
    assert ring.kernel_calls == full.kernel_calls
    extra = ring.total_latency_s - full.total_latency_s
    assert extra > 0
    if orchestration == "hardware":
        # every call's barrier alone pays d - 2 more rounds; pipelines are never faster
        latency = load_hardware("sn40l-16").links.p2p_latency_s
        assert extra >= full.kernel_calls * (RING_ROUNDS - 1) * latency * (1 - 1e-9)
