"""Allocation: PCUs per op from the PCU's geometry, shared by work and rate-matched to each
phase's pace; PMUs from operand staging or buffers; and the placement check.

Every expected value is worked out here from the hardware spec's numbers (closed forms, or brute
force over every PCU count of a small kernel), never with the allocator's own helpers.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.compiler.allocate import allocate, check_units, efficiency, unit_overflow
from rdusim.compiler.compile import compile_mapping
from rdusim.compiler.program import Collective, Kernel, OpPlan
from rdusim.errors import InfeasibleError
from rdusim.ir.graph import CostClass, OpKind
from rdusim.spec.hardware import Hardware, load_hardware
from rdusim.spec.mapping import load_mapping

MAPPINGS = Path(__file__).resolve().parents[2] / "mappings"
HW = load_hardware("sn40l-16")
CLASSES = tuple(CostClass)
PCUS = HW.socket.pcus
PMUS = HW.socket.pmus
PMU_BYTES = HW.socket.pmu_bytes

# element operations per element of the SIMD kinds (MICRO'24 §IV-A pipelines them over a PCU's
# stages), written out here for the geometry oracle; any other SIMD kind is one operation
ELEMENT_OPS = {
    OpKind.NORM: 4,  # square, accumulate, rsqrt-scale, weight multiply
    OpKind.ELEMENTWISE: 1,
    OpKind.ROPE: 6,  # 4 multiplies + 2 adds
    OpKind.SOFTMAX: 5,  # max, subtract, exp, sum, divide
    OpKind.REDUCE: 1,
    OpKind.ROUTER: 8,
}
ATTENTION_SYSTOLIC = 2  # QK^T and PV


def plan(
    name: str,
    flops: float,
    cost_class: str = "systolic",
    sram: float = 1e3,
    *,
    kind: OpKind = OpKind.GEMM,
    read: float = 0.0,
    blocking: bool = False,
) -> OpPlan:
    return OpPlan(
        name=name,
        kind=kind,
        cost_class=CostClass(cost_class),
        strategy="tp",
        degree=16,
        flops=flops,
        hbm_read=read,
        hbm_write=0.0,
        weight_bytes=0.0,
        stream_in=0.0,
        stream_out=0.0,
        sram_bytes=sram,
        blocking=blocking,
    )


def chain(*ops: OpPlan, collectives: list[Collective] | None = None) -> Kernel:
    edges = [(a.name, b.name) for a, b in itertools.pairwise(ops)]
    return Kernel("k", list(ops), collectives or [], edges=edges)


def variant(hw: Hardware = HW, *, stages: int | None = None, staging: float | None = None):
    socket = hw.socket
    if stages is not None:
        socket = socket.model_copy(update={"pcu": socket.pcu.model_copy(update={"stages": stages})})
    if staging is not None:
        socket = socket.model_copy(update={"staging_pmus_per_pcu": staging})
    return hw.model_copy(update={"socket": socket})


# ------------------------------------------------------------------ hand oracles


def achieved_rate(hw: Hardware, cost_class: str) -> float:
    """FLOP/s one PCU achieves: the socket's peak over its PCUs, times the class's efficiency."""
    cal = hw.calibration
    eff = {
        "systolic": cal.gemm_efficiency,
        "attention": cal.attention_efficiency,
        "simd": cal.simd_efficiency,
    }[cost_class]
    return hw.socket.peak_bf16_flops / hw.socket.pcus * eff


def work(p: OpPlan, hw: Hardware = HW) -> float:
    """PCU-seconds of compute."""
    return p.flops / achieved_rate(hw, p.cost_class)


def hbm_rate(hw: Hardware = HW) -> float:
    return hw.socket.hbm.bandwidth * hw.calibration.hbm_efficiency


def geometry_min(p: OpPlan, hw: Hardware = HW) -> int:
    """The fewest PCUs: systolic 1, attention 2 + the softmax's stages, SIMD its stages."""
    if p.cost_class == "memory" or p.flops <= 0:
        return 0
    stages = hw.socket.pcu.stages
    if p.cost_class == "systolic":
        return 1
    if p.cost_class == "attention":
        return ATTENTION_SYSTOLIC + math.ceil(ELEMENT_OPS[OpKind.SOFTMAX] / stages)
    return math.ceil(ELEMENT_OPS.get(p.kind, 1) / stages)


def buffers(p: OpPlan, hw: Hardware = HW) -> int:
    return max(1, math.ceil(p.sram_bytes / hw.socket.pmu_bytes))


def staging(p: OpPlan, hw: Hardware = HW) -> int:
    return math.ceil(hw.socket.staging_pmus_per_pcu * p.pcus)


def fewest_pcus(w: float, pace: float) -> int:
    """Brute force: the smallest p with w / p <= pace (to a relative 1e-9: round-off)."""
    p = 1
    while w / p > pace * (1 + 1e-9):
        p += 1
    return p


# ------------------------------------------------------------------ efficiency


def test_efficiency_by_cost_class():
    cal = HW.calibration
    assert efficiency(HW, CostClass.SYSTOLIC) == cal.gemm_efficiency
    assert efficiency(HW, CostClass.ATTENTION) == cal.attention_efficiency
    assert efficiency(HW, CostClass.SIMD) == cal.simd_efficiency
    assert efficiency(HW, CostClass.MEMORY) == 1.0
    for c in CLASSES:
        assert efficiency(HW, c) == cal.efficiency(c)


# ------------------------------------------------------------------ geometry minimums


@pytest.mark.parametrize("stages", [1, 2, 3, 6])
def test_an_op_paced_far_below_its_compute_keeps_its_geometry_minimum(stages):
    """Tiny arithmetic behind a 10 GB read: the pace asks for a fraction of a PCU, so each op
    keeps what the PCU's geometry needs: systolic 1, attention 2 + ceil(5 / stages), SIMD
    ceil(element ops / stages); data movement none."""
    hw = variant(stages=stages)
    expected = {
        "gemm": 1,
        "flash": 2 + math.ceil(5 / stages),
        "norm": math.ceil(4 / stages),
        "rope": math.ceil(6 / stages),
        "softmax": math.ceil(5 / stages),
        "router": math.ceil(8 / stages),
        "add": 1,
        "topk": 1,
        "load": 0,
        "idle": 0,
    }
    k = Kernel(
        "k",
        [
            plan("gemm", 1e3),
            plan("flash", 1e3, "attention", kind=OpKind.ATTENTION),
            plan("norm", 1e3, "simd", kind=OpKind.NORM),
            plan("rope", 1e3, "simd", kind=OpKind.ROPE),
            plan("softmax", 1e3, "simd", kind=OpKind.SOFTMAX),
            plan("router", 1e3, "simd", kind=OpKind.ROUTER),
            plan("add", 1e3, "simd", kind=OpKind.ELEMENTWISE),
            plan("topk", 1e3, "simd", kind=OpKind.TOPK),
            plan("load", 1e3, "memory", kind=OpKind.GATHER, read=1e10),
            plan("idle", 0.0),
        ],
    )
    allocate(k, hw)
    assert {p.name: p.pcus for p in k.ops} == expected
    # staging one PMU a PCU (the preset), buffers one PMU: the larger
    assert {p.name: p.pmus for p in k.ops} == {n: max(1, v) for n, v in expected.items()}


# ------------------------------------------------------------------ compute-bound: shared by work


def test_a_compute_bound_kernel_shares_every_pcu_by_work():
    """No memory floor: the pace is the slowest op's under the shared allocation, so every op
    keeps its share. Works 5:3:2 over the 1037 PCUs left after one each: 518.5, 311.1, 207.4;
    the one PCU the floors leave goes to the largest remainder (0.5, the first op)."""
    rate = achieved_rate(HW, "systolic")
    k = Kernel("k", [plan("a", 5 * rate), plan("b", 3 * rate), plan("c", 2 * rate)])
    allocate(k, HW)
    assert [p.pcus for p in k.ops] == [1 + 519, 1 + 311, 1 + 207]
    assert k.pcus == PCUS == 1040
    assert [p.pmus for p in k.ops] == [520, 312, 208]  # staging: one PMU a PCU


def test_a_compute_bound_share_weighs_work_by_efficiency():
    """The same element count on SIMD needs gemm_efficiency / simd_efficiency times the PCUs."""
    k = Kernel("k", [plan("gemm", 1e12, "systolic"), plan("norm", 1e12, "simd", kind=OpKind.NORM)])
    allocate(k, HW)
    ratio = HW.calibration.gemm_efficiency / HW.calibration.simd_efficiency
    gemm, norm = k.op("gemm").pcus, k.op("norm").pcus
    assert gemm + norm == PCUS
    # beyond one PCU each, the 1038 others split by work; rounding moves each by under one
    assert abs((norm - 1) - ratio * (gemm - 1)) < 1 + ratio
    assert norm > gemm


def test_a_memory_op_in_a_compute_bound_kernel_gets_pmus_but_no_pcus():
    k = Kernel(
        "ring",
        [plan("g1", 0.0, "memory", sram=3.2e6), plan("g2", 5e9, "memory", sram=0.0)],
    )
    allocate(k, HW)
    assert [p.pcus for p in k.ops] == [0, 0]
    assert [p.pmus for p in k.ops] == [math.ceil(3.2e6 / PMU_BYTES), 1] == [7, 1]


# ------------------------------------------------------------------ rate matching to memory


def test_a_memory_bound_op_keeps_the_fewest_pcus_that_hold_its_pace():
    """One GEMM behind a 13.6 GB read: the pace is the read (at the achieved HBM bandwidth); the GEMM
    keeps the fewest PCUs whose time is within it, ceil(w / pace)."""
    k = Kernel("k", [plan("gemm", 1e12, read=13.6e9)])
    allocate(k, HW)
    pace = 13.6e9 / hbm_rate()
    w = work(k.op("gemm"))
    p = k.op("gemm").pcus
    assert p == math.ceil(w / pace) == fewest_pcus(w, pace)
    assert w / p <= pace < w / (p - 1)  # one fewer would fall behind the memory
    assert 100 < p < PCUS / 2  # far below the whole socket, far above the minimum
    assert k.op("gemm").pmus == p  # staging sets its PMUs


def test_the_links_set_the_pace_too():
    """A collective feeding the op takes bytes / p2p bandwidth: that is the phase's floor."""
    c = Collective("all-gather", "x", 4e9, 1, None, "gemm")
    k = Kernel("k", [plan("gemm", 1e12)], [c])
    allocate(k, HW)
    pace = 4e9 / HW.links.p2p_bandwidth
    w = work(k.op("gemm"))
    assert k.op("gemm").pcus == fewest_pcus(w, pace)
    assert k.op("gemm").pcus < PCUS / 2


def test_ops_of_one_phase_hold_its_pace_even_run_one_after_another():
    """Two equal GEMMs streaming into each other share the phase's pace (a 54.4 GB read: 40
    ms): each keeps ceil(sqrt(w) (sqrt(w) + sqrt(w)) / pace) = ceil(2 w / pace), the fewest
    equal counts with w / p + w / p within the pace."""
    a, b = plan("a", 1e12, read=54.4e9), plan("b", 1e12)
    k = chain(a, b)
    allocate(k, HW)
    pace = 54.4e9 / hbm_rate()
    w = work(a)
    assert [p.pcus for p in k.ops] == [math.ceil(2 * w / pace)] * 2
    assert w / a.pcus + w / b.pcus <= pace


def test_a_blocking_op_starts_a_phase_with_its_own_pace():
    """b waits for all of a: a's phase is paced by its read, b's (no memory) by its compute
    under the shared allocation, so b keeps its share (half the socket: equal works) while a
    keeps what its read needs."""
    a, b = plan("a", 1e12, read=54.4e9), plan("b", 1e12, blocking=True)
    k = chain(a, b)
    allocate(k, HW)
    pace = 54.4e9 / hbm_rate()
    w = work(a)
    assert a.pcus == fewest_pcus(w, pace)
    assert b.pcus == 1 + 1038 // 2 == 520
    # the same ops streaming share one phase and both are paced by the read
    a2, b2 = plan("a", 1e12, read=54.4e9), plan("b", 1e12)
    k2 = chain(a2, b2)
    allocate(k2, HW)
    assert a2.pcus == b2.pcus == math.ceil(2 * w / pace) < b.pcus / 2


def test_an_hbm_bound_kernel_uses_far_fewer_pcus_than_a_compute_bound_one():
    compute = chain(plan("a", 1e11), plan("b", 1e11), plan("c", 1e11))
    hbm = chain(plan("a", 1e11, read=1e11), plan("b", 1e11), plan("c", 1e11))
    allocate(compute, HW)
    allocate(hbm, HW)
    assert compute.pcus == PCUS
    # pace 1e11 / 1.36e12 = 74 ms; three equal works w each keep ceil(3 w / pace)
    w, pace = work(hbm.op("a")), 1e11 / hbm_rate()
    assert [p.pcus for p in hbm.ops] == [math.ceil(3 * w / pace)] * 3
    assert hbm.pcus < compute.pcus / 10


def test_a_shipped_decode_kernel_uses_far_fewer_pcus_than_its_prefill():
    """Llama 3.1 8B: a batch-1 decode layer streams its weights (HBM-bound), a 128K prefill's
    projections are compute-bound."""
    decode = compile_mapping(load_mapping(MAPPINGS / "llama31_8b_decode.yaml", ["batch=1"]))
    prefill = compile_mapping(load_mapping(MAPPINGS / "llama31_8b_prefill.yaml", []))
    (layer,) = decode.layers["dense"].kernels
    assert layer.pcus < PCUS / 10
    assert max(k.pcus for k in prefill.layers["dense"].kernels) > 0.9 * PCUS


# ------------------------------------------------------------------ brute force


def brute_force_total(works: list[float], least: list[int], pace: float, top: int) -> int:
    """The fewest PCUs in all over every vector with least_i <= p_i <= top whose ops, run one
    after another, take no longer than `pace` (the stated constraint), by enumeration."""
    grids = np.meshgrid(*[np.arange(lo, top + 1) for lo in least], indexing="ij")
    time = sum(w / g for w, g in zip(works, grids, strict=True))
    total = sum(grids)
    ok = time <= pace * (1 + 1e-9)
    assert ok.any(), "the enumeration range is too small"
    return int(total[ok].min())


@settings(max_examples=40, deadline=None)
@given(
    ratios=st.lists(st.floats(1.0, 10.0), min_size=2, max_size=3),
    scale=st.floats(1e10, 1e12),
    slowness=st.floats(0.1, 3.0),
    streaming=st.booleans(),
)
def test_one_phase_is_within_rounding_of_the_brute_force_minimum(
    ratios, scale, slowness, streaming
):
    """2-3 GEMMs of one phase behind a read taking `slowness` x their summed PCU-seconds.

    The allocation must meet the constraint (the ops, one after another, within the pace), and
    its total must be within rounding of the least total any PCU counts meeting it reach: each
    op rounds its real-valued optimum up by less than one PCU, so at most n - 1 over.
    (Works differ at most 10x and the pace is at least a tenth of the total work, so every op's
    share of the socket, at least 1037 / 21 PCUs, exceeds what the pace needs: only the
    rate-matching can bind.)
    """
    gemms = [plan(f"op{i}", r * scale) for i, r in enumerate(ratios)]
    works = [work(p) for p in gemms]
    pace = slowness * sum(works)
    load = plan("load", 0.0, "memory", read=pace * hbm_rate())
    k = chain(load, *gemms) if streaming else Kernel("k", [load, *gemms])
    allocate(k, HW)
    got = [p.pcus for p in gemms]
    assert k.op("load").pcus == 0
    assert sum(w / p for w, p in zip(works, got, strict=True)) <= pace * (1 + 1e-9)
    n = len(gemms)
    # the real-valued optimum sums to (sum sqrt w)^2 / pace; no optimum has an op above it + n
    top = int((sum(math.sqrt(w) for w in works) ** 2) / pace) + n
    assert max(got) <= top
    best = brute_force_total(works, [1] * n, pace, top)
    assert best <= sum(got) <= best + n - 1


@settings(max_examples=40, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.floats(1e11, 1e12), st.floats(1.0, 45.0)),
        min_size=1,
        max_size=3,
    )
)
def test_a_phase_of_one_op_keeps_exactly_the_fewest_pcus(ops):
    """Each op blocks on the previous one, so each is a phase of its own, paced by its own read
    (its PCU-seconds over `target`): exactly the brute-force fewest PCUs within that pace. (Works
    differ at most 10x, so each op's share of the socket, at least 1 + 1037 / 21 PCUs, is above
    the 45 the pace can ask for: the read, not the share, sets the pace.)"""
    plans = []
    for i, (flops, target) in enumerate(ops):
        p = plan(f"op{i}", flops, blocking=i > 0)
        p.hbm_read = work(p) / target * hbm_rate()
        plans.append(p)
    k = chain(*plans)
    allocate(k, HW)
    for p in plans:
        pace = p.hbm_read / hbm_rate()
        assert p.pcus == fewest_pcus(work(p), pace), p.name


# ------------------------------------------------------------------ PMUs


def test_pmus_are_buffers_or_staging_whichever_needs_more():
    hw = variant(staging=0.5)
    k = Kernel("k", [plan("a", 1e12, sram=2e8), plan("b", 1e12, sram=1e3)])
    allocate(k, hw)
    a, b = k.op("a"), k.op("b")
    assert a.pcus + b.pcus == PCUS and a.pcus == b.pcus == 520
    assert a.pmus == 400  # 200 MB of buffers over 500 kB PMUs beats 260 staging PMUs
    assert b.pmus == 260  # half a PMU for each of its 520 PCUs


def test_the_pace_is_relaxed_until_staging_and_buffers_fit():
    """A compute-bound GEMM wants every PCU and a PMU for each, beside a 100 MB buffer (200
    PMUs): 1240 > 1040, so it gives up PCUs until it fits, at most 1040 - 200 = 840."""
    k = Kernel("k", [plan("gemm", 1e12), plan("ring", 0.0, "memory", sram=1e8)])
    allocate(k, HW)
    assert k.op("ring").pmus == 200
    assert k.pmus <= PMUS
    # relaxed no further than it has to be (the slack is searched to 1%: 840 / 1.01 > 831)
    assert 831 <= k.op("gemm").pcus <= 840


def test_two_pmus_a_pcu_halve_a_compute_bound_kernel():
    hw = variant(staging=2.0)
    k = Kernel("k", [plan("gemm", 1e12)])
    allocate(k, hw)
    assert k.pmus <= PMUS
    assert 514 <= k.op("gemm").pcus <= 520  # 520 / 1.01 > 514


# ------------------------------------------------------------------ properties

KINDS = [
    ("systolic", OpKind.GEMM),
    ("attention", OpKind.ATTENTION),
    ("simd", OpKind.NORM),
    ("simd", OpKind.ROUTER),
    ("simd", OpKind.SOFTMAX),
    ("simd", OpKind.TOPK),
    ("memory", OpKind.GATHER),
]


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(KINDS),
            st.one_of(st.just(0.0), st.floats(1.0, 1e13)),
            st.floats(0.0, 2e7),
            st.one_of(st.just(0.0), st.floats(1e3, 1e11)),
            st.booleans(),
        ),
        min_size=1,
        max_size=40,
    ),
    linked=st.booleans(),
    stages=st.sampled_from([2, 6]),
)
def test_allocation_invariants(ops, linked, stages):
    hw = variant(stages=stages)
    plans = [
        plan(f"op{i}", f, c, s, kind=kind, read=r, blocking=b)
        for i, ((c, kind), f, s, r, b) in enumerate(ops)
    ]
    k = chain(*plans) if linked else Kernel("k", plans)
    least = {p.name: geometry_min(p, hw) for p in plans}
    per_pcu = hw.socket.staging_pmus_per_pcu
    least_pmus = sum(max(buffers(p, hw), math.ceil(per_pcu * least[p.name])) for p in plans)
    fits = sum(least.values()) <= PCUS and least_pmus <= PMUS
    assert (unit_overflow(k, hw) is None) == fits
    allocate(k, hw)
    for p in plans:
        if p.cost_class == "memory" or p.flops <= 0:
            assert p.pcus == 0, p.name
        else:
            assert p.pcus >= least[p.name] >= 1, p.name
        assert p.pmus == max(buffers(p, hw), staging(p, hw)), p.name
    if fits:
        assert k.pcus <= PCUS
        assert k.pmus <= PMUS


# ------------------------------------------------------------------ placement


def test_the_whole_socket_of_one_pcu_ops_fits_and_one_more_does_not():
    ops = [plan(f"g{i}", 1e9) for i in range(PCUS)]
    k = Kernel("k", ops)
    assert unit_overflow(k, HW) is None
    check_units(k, "moe", 0, HW)  # no error
    allocate(k, HW)
    assert [p.pcus for p in ops] == [1] * PCUS and k.pmus == PMUS
    over = Kernel("k", [*ops, plan("one_more", 1e9)])
    assert unit_overflow(over, HW) is not None


def test_a_kernel_over_the_pcus_is_refused_naming_its_largest_op():
    # 1038 GEMMs (1 each) and flash attention (2 + ceil(5/6) = 3): 1041 > 1040
    ops = [plan(f"g{i}", 1e9) for i in range(1038)]
    k = Kernel("big", [*ops, plan("flash", 1e9, "attention", kind=OpKind.ATTENTION)])
    with pytest.raises(InfeasibleError) as info:
        check_units(k, "moe", 2, HW)
    err = info.value
    assert err.key == "kernels.moe.big" and err.path == ("kernels", "moe", 2)
    assert "'big'" in err.problem and "'flash'" in err.problem
    assert "1041 PCUs" in err.problem and unit_overflow(k, HW)[0] == "PCUs"
    assert err.fix


def test_a_kernel_over_the_pmus_is_refused_naming_its_largest_op():
    """Buffers round up to whole PMUs: 520 buffers of 500,001 bytes take two PMUs each, and one
    of 1.5 MB + 1 byte four: 1044 PMUs, though their 261.5 MB fit the SRAM."""
    ops = [plan(f"b{i}", 0.0, "memory", sram=500_001) for i in range(520)]
    k = Kernel("kv", [*ops, plan("wide", 1e9, sram=1_500_001)])
    assert k.ops[-1].sram_bytes + sum(p.sram_bytes for p in ops) < HW.socket.sram_bytes
    over = unit_overflow(k, HW)
    assert over is not None and over[0] == "PMUs"
    with pytest.raises(InfeasibleError) as info:
        check_units(k, "dense", None, HW)
    assert "'kv'" in info.value.problem
    assert "'wide' 4" in info.value.problem and "1044 PMUs" in info.value.problem
    assert info.value.key is None
    # one buffer fewer: 1042 PMUs, still over; two fewer: exactly the socket's 1040
    assert unit_overflow(Kernel("kv", [*ops[:-1], k.ops[-1]]), HW) is not None
    assert unit_overflow(Kernel("kv", [*ops[:-2], k.ops[-1]]), HW) is None


@pytest.mark.parametrize("batch", [1, 16])
@pytest.mark.parametrize(
    "mapping",
    ["r1_prefill.yaml", "r1_decode.yaml", "llama31_8b_prefill.yaml", "llama31_8b_decode.yaml"],
)
def test_shipped_mappings_stay_within_the_socket(mapping, batch):
    rm = load_mapping(MAPPINGS / mapping, ["seq_len=16384", f"batch={batch}"])
    prog = compile_mapping(rm)
    for lp in prog.all_layers():
        for k in lp.kernels:
            assert k.pcus <= HW.socket.pcus
            assert k.pmus <= HW.socket.pmus
            assert k.sram_bytes <= HW.socket.sram_bytes
            for p in k.ops:
                assert p.pcus >= geometry_min(p), (k.name, p.name)
                assert p.pmus >= max(buffers(p), staging(p)), (k.name, p.name)


@pytest.mark.parametrize("slack", [1.0, 1.3, 2.0, 8.0])
def test_the_pmu_search_counts_each_ops_staging_or_buffers(slack):
    """The PMU search prices a placement without building it; its count is each op's staging or
    buffers, whichever is more, over the placement `wanted` builds, on every shipped kernel."""
    from rdusim.compiler.allocate import _demand

    program = compile_mapping(load_mapping(MAPPINGS / "r1_prefill.yaml"))
    kernels = [k for lp in program.all_layers() for k in lp.kernels]
    for k in kernels:
        demand = _demand(k, HW)
        pcus = demand.wanted(slack)
        staged = [math.ceil(HW.socket.staging_pmus_per_pcu * pcus.get(p.name, 0)) for p in k.ops]
        want = sum(max(buffers(p), s) for p, s in zip(k.ops, staged, strict=True))
        assert demand.pmus_at(slack) == want, k.name
