"""The spatial-pipeline engine: invariants that hold for any kernel, checked on real R1 kernels,
and closed forms on small synthetic pipelines.

The engine is a discrete-event simulation, so its answers are checked against what must be true
of any schedule: identical sockets give identical results whether simulated once or all
together; more bandwidth never slows a kernel; a kernel takes at least its HBM traffic over the
bandwidth and at least its busiest op's compute time.
"""

from __future__ import annotations

import itertools
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rdusim.api import run_mapping
from rdusim.compiler.program import Collective, Kernel, OpPlan, Program
from rdusim.sim.engine import MAX_SIM_TILES, PipelineRun, simulate_pipeline
from rdusim.spec.hardware import Hardware
from rdusim.spec.placement import Tier

MAPPINGS = Path(__file__).resolve().parents[2] / "mappings"
REL = 1e-9
SLACK = 1e-12  # seconds of float slack on lower bounds


@cache
def compiled(mapping: str, overrides: tuple[str, ...]) -> tuple[Program, Hardware]:
    run = run_mapping(MAPPINGS / f"{mapping}.yaml", list(overrides), simulate_it=False)
    return run.program, run.mapping.hardware


def distinct_kernels(program: Program) -> list[tuple[str, Kernel]]:
    """(layer kind, kernel) for every kernel, once per layer kind."""
    return [(lp.kind, k) for lp in program.all_layers() for k in lp.kernels]


PREFILL = ("r1_prefill", ("seq_len=4096",))
DECODE = ("r1_decode", ("seq_len=8192", "batch=16"))
CASES = [PREFILL, DECODE]


def with_hbm_bandwidth(hw: Hardware, factor: float) -> Hardware:
    hbm = hw.socket.hbm.model_copy(update={"bandwidth": hw.socket.hbm.bandwidth * factor})
    return hw.model_copy(update={"socket": hw.socket.model_copy(update={"hbm": hbm})})


def with_p2p_bandwidth(hw: Hardware, factor: float) -> Hardware:
    links = hw.links.model_copy(update={"p2p_bandwidth": hw.links.p2p_bandwidth * factor})
    return hw.model_copy(update={"links": links})


def hbm_rate(hw: Hardware) -> float:
    return hw.socket.hbm.bandwidth * hw.calibration.hbm_efficiency


def p2p_rate(hw: Hardware) -> float:
    return hw.links.p2p_bandwidth


def kernel_hbm_bytes(k: Kernel) -> float:
    """Bytes the kernel moves over HBM on one socket (what the loaders and writers carry)."""
    return sum(p.hbm_read + p.hbm_write + p.spill_bytes + p.streamed_weight_bytes for p in k.ops)


def op_compute_s(p: OpPlan, hw: Hardware) -> float:
    rate = p.pcus * hw.socket.flops_per_pcu * hw.calibration.efficiency(p.cost_class)
    return p.flops / rate if rate > 0 and p.flops > 0 else 0.0


def check_bounds(k: Kernel, t: PipelineRun, hw: Hardware) -> None:
    assert t.pipeline_s >= kernel_hbm_bytes(k) / hbm_rate(hw) - SLACK, k.name
    assert t.pipeline_s >= sum(c.bytes for c in k.collectives) / p2p_rate(hw) - SLACK
    assert t.pipeline_s >= max((o.busy_s for o in t.ops), default=0.0) - SLACK
    latency = hw.links.p2p_latency_s
    assert t.pipeline_s >= max((c.rounds * latency for c in k.collectives), default=0.0) - SLACK
    for o in t.ops:
        assert o.busy_s >= 0 and o.hbm_s >= 0 and o.stall_s >= 0
        assert o.bound in ("compute", "hbm", "input")
        assert max(o.busy_s, o.hbm_s) <= t.pipeline_s + SLACK
    names = {p.name for p in k.ops}
    b = t.bottleneck
    assert b in ("HBM bandwidth", "P2P links") or (b.startswith("op ") and b[3:] in names), b


# ------------------------------------------------------------------ sockets equivalence


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_sockets_equivalence(case):
    """Identical sockets: simulating one of them gives exactly what simulating all 16 gives."""
    program, hw = compiled(*case)
    assert program.sockets == 16
    for kind, k in distinct_kernels(program):
        one = simulate_pipeline(k, hw, sockets=1)
        all16 = simulate_pipeline(k, hw, sockets=program.sockets)
        assert all16.pipeline_s == pytest.approx(one.pipeline_s, rel=REL), (kind, k.name)
        assert all16.hbm_bytes == pytest.approx(one.hbm_bytes, rel=REL)
        assert all16.p2p_bytes == pytest.approx(one.p2p_bytes, rel=REL)
        assert all16.bottleneck == one.bottleneck
        for a, b in zip(one.ops, all16.ops, strict=True):
            assert b.busy_s == pytest.approx(a.busy_s, rel=REL)


def test_sockets_equivalence_through_run_mapping():
    a = run_mapping(MAPPINGS / "r1_prefill.yaml", ["seq_len=4096"], sockets=1)
    b = run_mapping(MAPPINGS / "r1_prefill.yaml", ["seq_len=4096"], sockets=16)
    for kind, layer in a.report["layers"].items():
        for ka, kb in zip(layer["kernels"], b.report["layers"][kind]["kernels"], strict=True):
            assert kb["latency_s"] == pytest.approx(ka["latency_s"], rel=REL), (kind, ka["name"])
    assert b.report["total_latency_s"] == pytest.approx(a.report["total_latency_s"], rel=REL)


def test_traced_sockets_run_the_same_schedule():
    program, hw = compiled(*PREFILL)
    k = program.layers["moe"].kernels[0]
    t = simulate_pipeline(k, hw, sockets=4, trace=True)
    per_socket = {
        s: sorted((x.track, x.name, x.start, x.end) for x in t.slices if x.socket == s)
        for s in range(4)
    }
    assert per_socket[0]
    # collectives wait for every peer, so every socket finishes each tile at the same time
    assert all(per_socket[s] == per_socket[0] for s in range(1, 4))


# ------------------------------------------------------------------ bounds and accounting


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_latency_lower_bounds_and_bottleneck(case):
    program, hw = compiled(*case)
    for _, k in distinct_kernels(program):
        check_bounds(k, simulate_pipeline(k, hw), hw)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_traffic_and_compute_are_conserved(case):
    """Tiling splits work but never loses or duplicates any: bytes and busy time add up."""
    program, hw = compiled(*case)
    for _, k in distinct_kernels(program):
        t = simulate_pipeline(k, hw)
        assert t.hbm_bytes == pytest.approx(kernel_hbm_bytes(k), rel=REL, abs=1e-6)
        assert t.p2p_bytes == pytest.approx(sum(c.bytes for c in k.collectives), rel=REL, abs=1e-6)
        assert t.hbm_busy_s == pytest.approx(t.hbm_bytes / hbm_rate(hw), rel=REL, abs=1e-15)
        assert t.p2p_busy_s == pytest.approx(t.p2p_bytes / p2p_rate(hw), rel=REL, abs=1e-15)
        for p, o in zip(k.ops, t.ops, strict=True):
            assert o.name == p.name and o.pcus == p.pcus
            assert o.busy_s == pytest.approx(op_compute_s(p, hw), rel=REL, abs=1e-15)


def test_trace_does_not_change_timing():
    program, hw = compiled(*DECODE)
    for _, k in distinct_kernels(program):
        plain = simulate_pipeline(k, hw)
        traced = simulate_pipeline(k, hw, trace=True)
        assert traced.pipeline_s == plain.pipeline_s
        assert not plain.slices and traced.slices
        assert all(-SLACK <= s.start <= s.end <= traced.pipeline_s + SLACK for s in traced.slices)


# ------------------------------------------------------------------ monotonicity


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
@pytest.mark.parametrize("what", ["hbm", "p2p"])
def test_more_bandwidth_never_slower(case, what):
    program, hw = compiled(*case)
    faster = with_hbm_bandwidth(hw, 2.0) if what == "hbm" else with_p2p_bandwidth(hw, 2.0)
    for kind, k in distinct_kernels(program):
        base = simulate_pipeline(k, hw).pipeline_s
        fast = simulate_pipeline(k, faster).pipeline_s
        assert fast <= base * (1 + REL), (kind, k.name, base, fast)


def test_hbm_bound_kernel_speeds_up_with_hbm():
    """A decode FFN streams expert weights: doubling HBM bandwidth must show."""
    program, hw = compiled(*DECODE)
    k = next(k for k in program.layers["moe"].kernels if k.name == "FFN")
    base = simulate_pipeline(k, hw)
    assert base.bottleneck == "HBM bandwidth"
    fast = simulate_pipeline(k, with_hbm_bandwidth(hw, 2.0))
    assert fast.pipeline_s < 0.75 * base.pipeline_s


@cache
def mha(seq_len: int) -> float:
    program, hw = compiled("r1_prefill", (f"seq_len={seq_len}",))
    k = next(k for k in program.layers["moe"].kernels if k.name == "MHA")
    return simulate_pipeline(k, hw).pipeline_s


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=1, max_value=32), st.integers(min_value=1, max_value=32))
def test_prefill_mha_monotone_in_seq_len(a, b):
    lo, hi = sorted((a * 1024, b * 1024))
    assert mha(lo) <= mha(hi) * (1 + REL)


# ------------------------------------------------------------------ synthetic kernels


def chain_kernel(
    flops: list[float],
    reads: list[float],
    writes: list[float],
    tiles: int,
    coll_bytes: float,
    blocking: int,
) -> Kernel:
    ops = [
        OpPlan(
            name=f"op{i}",
            kind="matmul",
            cost_class="systolic",
            strategy="tp",
            degree=16,
            flops=f,
            hbm_read=r,
            hbm_write=w,
            weight_bytes=0.0,
            stream_in=0.0,
            stream_out=0.0,
            pcus=64,
            blocking=(i == blocking),
        )
        for i, (f, r, w) in enumerate(zip(flops, reads, writes, strict=True))
    ]
    edges = [(a.name, b.name) for a, b in itertools.pairwise(ops)]
    collectives = []
    if coll_bytes > 0 and len(ops) > 1:
        collectives.append(Collective("all-reduce", "x", coll_bytes, 2, ops[0].name, ops[1].name))
    return Kernel("synthetic", ops, collectives, tiles=tiles, edges=edges)


sizes = st.floats(min_value=0.0, max_value=1e9, allow_nan=False)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=5),
    data=st.data(),
    tiles=st.integers(min_value=1, max_value=200),
    coll=st.floats(min_value=0.0, max_value=1e8),
)
def test_synthetic_pipeline_invariants(n, data, tiles, coll):
    _, hw = compiled(*PREFILL)
    flops = data.draw(st.lists(st.floats(min_value=0.0, max_value=1e13), min_size=n, max_size=n))
    reads = data.draw(st.lists(sizes, min_size=n, max_size=n))
    writes = data.draw(st.lists(sizes, min_size=n, max_size=n))
    blocking = data.draw(st.integers(min_value=-1, max_value=n - 1))
    k = chain_kernel(flops, reads, writes, tiles, coll, blocking)
    one = simulate_pipeline(k, hw)
    check_bounds(k, one, hw)
    three = simulate_pipeline(k, hw, sockets=3)
    assert three.pipeline_s == pytest.approx(one.pipeline_s, rel=REL)
    assert one.hbm_bytes == pytest.approx(kernel_hbm_bytes(k), rel=REL, abs=1e-6)
    # a pipeline never beats the sum of per-tile work on its busiest resource, and never
    # takes longer than running every stage and transfer back to back
    serial = (
        sum(op_compute_s(p, hw) for p in k.ops)
        + kernel_hbm_bytes(k) / hbm_rate(hw)
        + sum(c.bytes / p2p_rate(hw) + c.rounds * hw.links.p2p_latency_s for c in k.collectives)
    )
    assert one.pipeline_s <= serial * (1 + 1e-9) + SLACK


def test_each_socket_uses_its_own_stores(monkeypatch):
    """Every store (loader buffer, edge, collective, writer inbox) carries each tile exactly once.

    Guards the per-socket wiring: the processes' bodies run after the set-up loop, so a store
    captured late would be shared by all sockets (twice the tiles) and others left unused.
    """
    from rdusim.sim import channels, engine

    created: list[CountingStore] = []

    class CountingStore(channels.Store):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.puts = 0
            created.append(self)

        def put(self, item):
            self.puts += 1
            return super().put(item)

    monkeypatch.setattr(engine, "Store", CountingStore)
    program, hw = compiled(*PREFILL)
    k = next(k for k in program.layers["moe"].kernels if k.collectives and k.edges)
    simulate_pipeline(k, hw, sockets=3)
    n = max(1, min(k.tiles, MAX_SIM_TILES))
    assert created
    assert sorted({s.puts for s in created}) == [n]


# ------------------------------------------------------------------ closed forms


def single_op(flops: float = 0.0, read: float = 0.0, cost: str = "systolic", pcus: int = 10):
    return OpPlan(
        name="a",
        kind="gemm",
        cost_class=cost,
        strategy="tp",
        degree=16,
        flops=flops,
        hbm_read=read,
        hbm_write=0.0,
        weight_bytes=0.0,
        stream_in=0.0,
        stream_out=0.0,
        pcus=pcus,
    )


def test_one_compute_stage_takes_its_flops_over_its_rate():
    _, hw = compiled(*PREFILL)
    p = single_op(flops=3.0e12)
    t = simulate_pipeline(Kernel("k", [p], tiles=7), hw)
    rate = 10 * hw.socket.flops_per_pcu * hw.calibration.gemm_efficiency
    assert t.pipeline_s == pytest.approx(3.0e12 / rate, rel=REL)


def test_one_read_takes_its_bytes_over_the_hbm_rate():
    _, hw = compiled(*PREFILL)
    p = single_op(read=5.0e9, cost="memory", pcus=0)
    t = simulate_pipeline(Kernel("k", [p], tiles=9), hw)
    assert t.pipeline_s == pytest.approx(5.0e9 / hbm_rate(hw), rel=REL)


@pytest.mark.parametrize("blocking", [False, True])
@pytest.mark.parametrize(("f1", "f2", "n"), [(1e12, 3e12, 8), (4e12, 1e12, 5), (2e12, 2e12, 1)])
def test_two_stage_pipeline(f1, f2, n, blocking):
    """Streaming: tau1 + tau2 + (n-1) max(tau1, tau2); blocking: n tau1 + n tau2."""
    _, hw = compiled(*PREFILL)
    k = chain_kernel([f1, f2], [0.0, 0.0], [0.0, 0.0], n, 0.0, 1 if blocking else -1)
    rate = 64 * hw.socket.flops_per_pcu * hw.calibration.gemm_efficiency
    t1, t2 = f1 / n / rate, f2 / n / rate
    expected = n * (t1 + t2) if blocking else t1 + t2 + (n - 1) * max(t1, t2)
    assert simulate_pipeline(k, hw).pipeline_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("rounds", [1, 2, 15])
def test_collective_pays_its_rounds_once_then_streams_its_bytes(rounds):
    _, hw = compiled(*PREFILL)
    k = chain_kernel([0.0, 0.0], [0.0, 0.0], [0.0, 0.0], 4, 2.0e8, -1)
    k.collectives[0].rounds = rounds
    expected = rounds * hw.links.p2p_latency_s + 2.0e8 / p2p_rate(hw)
    assert simulate_pipeline(k, hw).pipeline_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("iterations", [1, 2, 5])
def test_chained_iterations_of_a_lone_stage_run_back_to_back(iterations):
    """The stage reading the layer input waits for the previous iteration: no overlap."""
    _, hw = compiled(*PREFILL)
    p = single_op(flops=1.0e12)
    one = simulate_pipeline(Kernel("k", [p], tiles=4), hw).pipeline_s
    many = simulate_pipeline(Kernel("k", [p], tiles=4), hw, iterations=iterations).pipeline_s
    assert many == pytest.approx(iterations * one, rel=REL)


def test_chained_iterations_prefetch_weights():
    """Weights do not depend on the previous iteration, so they stream during its compute:
    with load L and compute C per iteration (C > L), k iterations take L/n + k C + ... < k(L+C)."""
    _, hw = compiled(*PREFILL)
    p = single_op(flops=2.0e12)
    p.weight_bytes = 1.0e9
    n = 8
    one = simulate_pipeline(Kernel("k", [p], tiles=n), hw).pipeline_s
    three = simulate_pipeline(Kernel("k", [p], tiles=n), hw, iterations=3).pipeline_s
    load = 1.0e9 / hbm_rate(hw)
    compute = 2.0e12 / (10 * hw.socket.flops_per_pcu * hw.calibration.gemm_efficiency)
    assert compute > load
    # the first tile's weights, then every iteration's compute back to back
    assert three == pytest.approx(load / n + 3 * compute, rel=1e-9)
    assert one == pytest.approx(load / n + compute, rel=1e-9)


def test_a_blocking_stage_waits_for_every_tile_of_its_input():
    """Stage 2 blocking behind a slow stage 1: it starts only after stage 1's last tile, then
    runs all of its tiles (n tau1 + n tau2); a stage that waited for one tile would finish at
    tau1 + n tau2 instead."""
    _, hw = compiled(*PREFILL)
    n = 6
    k = chain_kernel([5e12, 1e12], [0.0, 0.0], [0.0, 0.0], n, 0.0, blocking=1)
    t = simulate_pipeline(k, hw, trace=True)
    rate = 64 * hw.socket.flops_per_pcu * hw.calibration.gemm_efficiency
    tau1, tau2 = 5e12 / n / rate, 1e12 / n / rate
    assert t.pipeline_s == pytest.approx(n * tau1 + n * tau2, rel=1e-9)
    first = min(s.start for s in t.slices if s.track == "op" and s.name == "op1")
    assert first == pytest.approx(n * tau1, rel=1e-9)


def test_each_stage_is_labelled_by_what_limits_it():
    """compute: more time computing than on HBM; hbm: the reverse (reads or writes); input:
    neither, it only waits for its producer."""
    _, hw = compiled(*PREFILL)
    rate = 64 * hw.socket.flops_per_pcu * hw.calibration.gemm_efficiency
    ms = 1e-3
    # (compute s, read s, write s) per stage
    stages = [(2 * ms, 1 * ms, 0.0), (0.5 * ms, 3 * ms, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 2 * ms)]
    k = chain_kernel(
        [c * rate for c, _, _ in stages],
        [r * hbm_rate(hw) for _, r, _ in stages],
        [w * hbm_rate(hw) for _, _, w in stages],
        8,
        0.0,
        blocking=-1,
    )
    t = simulate_pipeline(k, hw)
    assert [o.bound for o in t.ops] == ["compute", "hbm", "input", "hbm"]
    for o, (c, r, w) in zip(t.ops, stages, strict=True):
        assert o.busy_s == pytest.approx(c, rel=1e-9, abs=1e-15)
        assert o.hbm_s == pytest.approx(r + w, rel=1e-9, abs=1e-15)


# ------------------------------------------------------------------ the DDR channel

DDR_PEAK = 100e9  # bytes/s a SN40L socket streams from DDR (the preset's figure, at peak)


def ddr_weights_op(name: str, weights: float, read: float = 0.0) -> OpPlan:
    """An op without arithmetic streaming `weights` bytes placed in DDR (and `read` from HBM)."""
    p = single_op(read=read, cost="memory", pcus=0)
    p.name, p.cost_class, p.weight_bytes, p.weight_tier = name, "systolic", weights, Tier.DDR
    return p


def test_weights_in_ddr_take_their_bytes_over_the_ddr_bandwidth():
    """3 GB of weights in DDR and nothing else: 3e9 / 100e9 = 30 ms on the DDR channel, none
    on HBM, whatever the tile count; DDR is what bounds the kernel and its op."""
    _, hw = compiled(*PREFILL)
    assert hw.socket.ddr.bandwidth == DDR_PEAK
    for tiles in (1, 7):
        t = simulate_pipeline(Kernel("k", [ddr_weights_op("a", 3e9)], tiles=tiles), hw)
        assert t.pipeline_s == pytest.approx(0.03, rel=REL)
        assert t.ddr_bytes == pytest.approx(3e9, rel=REL) and t.hbm_bytes == 0.0
        assert t.ddr_busy_s == pytest.approx(0.03, rel=REL)
        assert t.bottleneck == "DDR bandwidth" and t.ops[0].bound == "ddr"
        assert t.ops[0].ddr_s == pytest.approx(0.03, rel=REL)


def test_hbm_and_ddr_are_two_channels_that_overlap():
    """8 GB from HBM and 0.5 GB of weights from DDR in one op take the longer of the two
    transfers, not their sum; two ops streaming from DDR share its one channel."""
    _, hw = compiled(*PREFILL)
    a = ddr_weights_op("a", 0.5e9, read=8e9)
    t = simulate_pipeline(Kernel("k", [a], tiles=16), hw)
    assert t.pipeline_s == pytest.approx(max(8e9 / hbm_rate(hw), 0.5e9 / DDR_PEAK), rel=REL)
    b = ddr_weights_op("b", 0.25e9)
    shared = simulate_pipeline(Kernel("k", [a, b], tiles=16), hw)
    assert shared.pipeline_s == pytest.approx(0.75e9 / DDR_PEAK, rel=REL)


def test_a_cache_in_ddr_moves_its_reads_and_writes_to_ddr():
    """An op reading 2 GB of cache and writing 1 GB into it, the cache in DDR: all 3 GB cross
    DDR (30 ms, the channel busy throughout), nothing crosses HBM."""
    _, hw = compiled(*PREFILL)
    p = single_op(read=2e9, cost="memory", pcus=0)
    p.hbm_write, p.cache_read, p.cache_write, p.cache_tier = 1e9, 2e9, 1e9, Tier.DDR
    t = simulate_pipeline(Kernel("k", [p], tiles=4), hw)
    assert t.pipeline_s == pytest.approx(3e9 / DDR_PEAK, rel=REL)
    assert t.hbm_bytes == 0.0 and t.ddr_bytes == pytest.approx(3e9, rel=REL)
