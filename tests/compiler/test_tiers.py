"""The DDR tier end to end: which tier each op's weights and cache bytes come from, the memory
plan per tier against Llama-3.1-8B's sizes worked out by hand, each tier's capacity error, and a
decode step made slower by exactly the DDR streaming it adds.

Hand sizes (Llama-3.1-8B, BF16, 16 sockets): a decoder layer holds q and o (4096 x 4096 each),
k and v (4096 x 1024 each), gate+up and down (3 x 4096 x 14336) and two RMSNorm vectors of 4096;
projections are sharded over the 16 sockets, the norms replicated. The embedding and the LM head
are 128256 x 4096 each (vocab-parallel), plus the final norm. A token's K and V in one layer are
2 x 8 heads x 128 x 2 bytes = 4096 bytes.
"""

from __future__ import annotations

import pytest

from rdusim.api import run_mapping
from rdusim.compiler.capacity import max_batch
from rdusim.compiler.compile import compile_mapping
from rdusim.compiler.program import ExtraRole, OpPlan
from rdusim.compiler.tiers import Placement, part_of, place
from rdusim.errors import InfeasibleError
from rdusim.spec.mapping import load_mapping
from rdusim.spec.placement import PlacementSpec, Tier

SOCKETS = 16
BF16 = 2
LAYERS = 32
HIDDEN, KV_WIDTH, FFN, VOCAB = 4096, 1024, 14336, 128256
NORM_BYTES = HIDDEN * BF16  # a replicated RMSNorm vector on every socket
LAYER_PROJECTIONS = 2 * HIDDEN * HIDDEN + 2 * HIDDEN * KV_WIDTH + 3 * HIDDEN * FFN
DENSE_PER_SOCKET = LAYERS * (LAYER_PROJECTIONS * BF16 / SOCKETS + 2 * NORM_BYTES)
EMBEDDING_PER_SOCKET = VOCAB * HIDDEN * BF16 / SOCKETS
HEAD_PER_SOCKET = VOCAB * HIDDEN * BF16 / SOCKETS + NORM_BYTES
KV_BYTES_PER_TOKEN = LAYERS * 2 * 8 * 128 * BF16  # every layer's K and V
DDR_PEAK = 100e9  # the preset's DDR bandwidth, streamed at peak

DECODE_8K = ["batch=1", "seq_len=8192", "snapstream.enabled=false"]


def program(*sets: str):
    return compile_mapping(load_mapping("llama31_8b_decode", [*DECODE_8K, *sets]))


# ------------------------------------------------------------------ the pass


def test_placement_resolves_each_part_and_defaults_to_hbm():
    p = Placement.of(PlacementSpec(weights=Tier.DDR, head=Tier.HBM, kv_cache=Tier.DDR))
    assert [p.weights_of(x) for x in ("dense", "moe", "mtp", "embedding", "head")] == [
        Tier.DDR,
        Tier.DDR,
        Tier.DDR,
        Tier.DDR,
        Tier.HBM,
    ]
    assert p.kv_cache == Tier.DDR
    assert Placement().weights_of("moe") == Tier.HBM and Placement().kv_cache == Tier.HBM


@pytest.mark.parametrize(
    ("role", "part"),
    [
        (ExtraRole.EMBEDDING, "embedding"),
        (ExtraRole.MTP_EMBEDDING, "embedding"),
        (ExtraRole.HEAD, "head"),
        (ExtraRole.MTP_HEAD, "head"),
        (ExtraRole.MTP_PROJECTION, "mtp"),
        (ExtraRole.MTP_LAYER, "mtp"),
    ],
)
def test_an_extra_is_placed_with_its_part(role, part):
    assert part_of("anything", role) == part
    assert part_of("moe", None) == "moe"


def plan(**kw) -> OpPlan:
    fields = {
        "name": "a",
        "kind": "gemm",
        "cost_class": "systolic",
        "strategy": "tp",
        "degree": 16,
        "flops": 0.0,
        "hbm_read": 0.0,
        "hbm_write": 0.0,
        "weight_bytes": 0.0,
        "stream_in": 0.0,
        "stream_out": 0.0,
    }
    return OpPlan(**(fields | kw))


def test_each_byte_crosses_the_channel_of_its_tier():
    """7 B of activations, 5 B of cache read, 3 B written of which 2 B into the cache, 11 B of
    weights and a 13 B spill: weights and cache follow their tiers, the rest stays in HBM."""
    p = plan(hbm_read=12.0, hbm_write=3.0, weight_bytes=11.0, cache_read=5.0, cache_write=2.0)
    p.spill_bytes = 13.0
    assert (p.hbm_bytes, p.ddr_bytes) == (12 + 3 + 11 + 13, 0.0)
    place([p], Tier.DDR, Tier.HBM)
    assert (p.hbm_in_bytes, p.ddr_in_bytes, p.ddr_write) == (12 + 13, 11.0, 0.0)
    place([p], Tier.HBM, Tier.DDR)
    assert (p.hbm_in_bytes, p.ddr_in_bytes, p.ddr_write) == (7 + 11 + 13, 5.0, 2.0)
    assert p.hbm_bytes == 7 + 11 + 13 + 1
    place([p], Tier.DDR, Tier.DDR)
    assert (p.hbm_bytes, p.ddr_bytes) == (7 + 13 + 1, 11 + 5 + 2)
    assert p.memory_in_bytes == p.hbm_in_bytes + p.ddr_in_bytes == 12 + 11 + 13


def test_a_lookup_reads_its_rows_from_its_table_tier():
    """The embedding gathers rows of its own table: in DDR, so are those reads."""
    p = plan(cost_class="memory", hbm_read=6.0, weight_bytes=100.0, lookup_read=6.0)
    assert p.streamed_weight_bytes == 0.0  # a table is read row by row, not streamed
    place([p], Tier.DDR, Tier.HBM)
    assert (p.hbm_in_bytes, p.ddr_in_bytes) == (0.0, 6.0)


def test_compiled_ops_carry_their_parts_tiers():
    prog = program("placement.dense=ddr", "placement.kv_cache=ddr")
    for lp in prog.all_layers():
        tier = Tier.DDR if lp.kind == "dense" else Tier.HBM
        for k in lp.kernels:
            assert {p.weight_tier for p in k.ops} == {tier}, lp.kind
            assert {p.cache_tier for p in k.ops} == {Tier.DDR}
    assert prog.weight_tiers == {"dense": Tier.DDR, "embedding": Tier.HBM, "head": Tier.HBM}
    dense = prog.layers["dense"].kernels[0]
    attention = next(p for p in dense.ops if p.traits.is_attention)
    # the step reads the whole 8K cache of its layer: 8192 x 4096 B over the 16 sockets
    assert attention.cache_read == pytest.approx(8192 * 4096 / SOCKETS, rel=1e-12)
    assert attention.ddr_in_bytes >= attention.cache_read


# ------------------------------------------------------------------ the memory plan


def test_default_plan_puts_everything_in_hbm():
    prog = program()
    assert prog.ddr.weights == prog.ddr.kv_cache == 0.0
    assert prog.hbm.weights == pytest.approx(
        DENSE_PER_SOCKET + EMBEDDING_PER_SOCKET + HEAD_PER_SOCKET, rel=1e-12
    )
    assert prog.hbm.kv_cache == pytest.approx(8192 * KV_BYTES_PER_TOKEN / SOCKETS, rel=1e-12)
    assert prog.ddr.capacity == 1.5e12


def test_each_part_and_the_cache_are_counted_in_their_tier():
    prog = program("placement.dense=ddr", "placement.kv_cache=ddr")
    assert prog.ddr.weights == pytest.approx(DENSE_PER_SOCKET, rel=1e-12)
    assert prog.hbm.weights == pytest.approx(EMBEDDING_PER_SOCKET + HEAD_PER_SOCKET, rel=1e-12)
    assert prog.ddr.kv_cache == pytest.approx(8192 * KV_BYTES_PER_TOKEN / SOCKETS, rel=1e-12)
    assert prog.hbm.kv_cache == 0.0
    assert prog.fits


def test_a_kv_cache_in_ddr_is_bounded_by_ddr():
    """With DDR cut to 1 GB a socket and the cache there, a sequence's 8K cache (8192 x
    131072 B over 16 sockets, 67.1 MB) fits 14 times: the largest power of two is 8, where HBM
    alone would hold far more."""
    sets = [*DECODE_8K, "hardware.socket.ddr.capacity_bytes=1e9", "placement.kv_cache=ddr"]
    per_sequence = 8192 * KV_BYTES_PER_TOKEN / SOCKETS
    assert int(1e9 // per_sequence) == 14
    batch, prog = max_batch(load_mapping("llama31_8b_decode", sets))
    assert batch == 8 and prog.ddr.kv_cache == pytest.approx(8 * per_sequence, rel=1e-12)
    in_hbm, _ = max_batch(load_mapping("llama31_8b_decode", sets[:-1]))
    assert in_hbm > 8


# ------------------------------------------------------------------ capacity errors per tier


def test_ddr_overflow_names_the_tier_the_excess_and_a_fix():
    sets = ["hardware.socket.ddr.capacity_bytes=5e8", "placement.weights=ddr"]
    with pytest.raises(InfeasibleError) as info:
        run_mapping("llama31_8b_decode", [*DECODE_8K, *sets], uncertainty=False)
    err = info.value
    total = DENSE_PER_SOCKET + EMBEDDING_PER_SOCKET + HEAD_PER_SOCKET
    assert err.problem.startswith("DDR overflows")
    assert f"weights {total / 1e9:.1f}" in err.problem
    assert f"({(total - 5e8) / 1e9:.1f} GB over)" in err.problem  # 1.004 - 0.5 GB
    assert err.key == "placement" and "place less in DDR" in (err.fix or "")


def test_hbm_overflow_offers_ddr_and_ddr_makes_it_fit():
    """Llama-3.1-70B's 141 GB do not fit two sockets' HBM; the error says DDR would hold them,
    and placing every weight there runs, each socket streaming its half from DDR."""
    two = ["batch=1", "hardware.node.sockets=2"]
    with pytest.raises(InfeasibleError) as info:
        run_mapping("llama31_70b_decode", two, uncertainty=False)
    assert "--set placement.weights=ddr" in (info.value.fix or "")
    assert "placement.moe" not in (info.value.fix or "")  # Llama has no MoE layers
    run = run_mapping("llama31_70b_decode", [*two, "placement.weights=ddr"], uncertainty=False)
    assert run.program.hbm.weights == 0.0 and run.program.ddr.weights > 70e9


def test_hbm_overflow_of_the_cache_offers_the_cache_in_ddr():
    sets = ["batch=4096", "seq_len=8192", "snapstream.enabled=false"]
    with pytest.raises(InfeasibleError) as info:
        run_mapping("llama31_8b_decode", sets, uncertainty=False)
    assert "GB over" in info.value.problem
    assert "placement.kv_cache=ddr" in (info.value.fix or "")


# ------------------------------------------------------------------ timing


FREE_CALLS = [
    "calibration.argument_load_s=1e-9",
    "calibration.config_bandwidth=1e16",
    "hardware.links.p2p_latency_s=1e-12",
]


def test_dense_weights_in_ddr_slow_a_bandwidth_bound_step_by_their_ddr_time():
    """A batch-1 step with free calls is bandwidth bound. Moving the dense layers' weights W to
    DDR makes each layer stream W/32 from DDR at 100 GB/s, while its cache and activations (the
    rest of its HBM bytes, C) cross HBM alongside: the step gains W / 100 GB/s and loses
    (W + C) / the HBM rate. W and the 2K cache are worked out by hand."""
    sets = ["batch=1", "seq_len=2048", "snapstream.enabled=false", *FREE_CALLS]
    hbm = run_mapping("llama31_8b_decode", sets, uncertainty=False)
    ddr = run_mapping("llama31_8b_decode", [*sets, "placement.dense=ddr"], uncertainty=False)
    hw = hbm.mapping.hardware
    hbm_rate = hw.socket.hbm.bandwidth * hw.calibration.hbm_efficiency
    cache = 2048 * KV_BYTES_PER_TOKEN / SOCKETS
    expected = DENSE_PER_SOCKET / DDR_PEAK - (DENSE_PER_SOCKET + cache) / hbm_rate
    assert ddr.result is not None and hbm.result is not None
    slower = ddr.result.total_latency_s - hbm.result.total_latency_s
    assert slower == pytest.approx(expected, rel=1e-3)
    assert ddr.result.traffic("ddr") == pytest.approx(DENSE_PER_SOCKET, rel=1e-9)
