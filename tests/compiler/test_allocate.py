"""Allocation: PCUs by work (every compute op at least one), PMUs by buffers."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.compiler.allocate import allocate, efficiency
from rdusim.compiler.compile import compile_mapping
from rdusim.compiler.program import Kernel, OpPlan
from rdusim.ir.graph import CostClass, OpKind
from rdusim.spec.hardware import load_hardware
from rdusim.spec.mapping import load_mapping

MAPPINGS = Path(__file__).resolve().parents[2] / "mappings"
HW = load_hardware("sn40l-16")
CLASSES = tuple(CostClass)


def plan(name: str, flops: float, cost_class: str = "systolic", sram: float = 1e6) -> OpPlan:
    return OpPlan(
        name=name,
        kind=OpKind.GEMM,
        cost_class=CostClass(cost_class),
        strategy="tp",
        degree=16,
        flops=flops,
        hbm_read=0.0,
        hbm_write=0.0,
        weight_bytes=0.0,
        stream_in=0.0,
        stream_out=0.0,
        sram_bytes=sram,
    )


def test_efficiency_by_cost_class():
    cal = HW.calibration
    assert efficiency(HW, CostClass.SYSTOLIC) == cal.gemm_efficiency
    assert efficiency(HW, CostClass.ATTENTION) == cal.attention_efficiency
    assert efficiency(HW, CostClass.SIMD) == cal.simd_efficiency
    assert efficiency(HW, CostClass.MEMORY) == 1.0
    for c in CLASSES:
        assert efficiency(HW, c) == cal.efficiency(c)


def test_pcus_follow_work():
    k = Kernel(
        "k", [plan("a", 3e9), plan("b", 1e9), plan("gather", 0.0, "memory"), plan("idle", 0.0)]
    )
    allocate(k, HW)
    pcus = {p.name: p.pcus for p in k.ops}
    assert k.pcus == HW.socket.pcus
    assert pcus["gather"] == 0 and pcus["idle"] == 0
    # each op keeps one PCU; the 1038 others split 3:1 by work, rounded (largest remainder:
    # each count moves by less than one)
    assert pcus["a"] + pcus["b"] == HW.socket.pcus
    assert abs((pcus["a"] - 1) - 3 * (pcus["b"] - 1)) < 4


def test_pcus_weigh_work_by_efficiency():
    # SIMD runs at a quarter of the GEMM efficiency here: the same element count needs more PCUs
    k = Kernel("k", [plan("gemm", 1e9, "systolic"), plan("norm", 1e9, "simd")])
    allocate(k, HW)
    ratio = HW.calibration.gemm_efficiency / HW.calibration.simd_efficiency
    assert k.op("norm").pcus / k.op("gemm").pcus == pytest.approx(ratio, rel=0.01)


def test_a_memory_only_kernel_gets_no_pcus_but_pmus():
    k = Kernel("ring", [plan("g1", 0.0, "memory", sram=3.2e6), plan("g2", 0.0, "memory", sram=0.0)])
    allocate(k, HW)
    assert k.pcus == 0
    assert [p.pmus for p in k.ops] == [math.ceil(3.2e6 / HW.socket.pmu_bytes), 1]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.0, 1e12), st.sampled_from(CLASSES), st.floats(0.0, 2e7)),
        min_size=1,
        max_size=40,
    )
)
def test_allocation_invariants(ops):
    k = Kernel("k", [plan(f"op{i}", f, c, s) for i, (f, c, s) in enumerate(ops)])
    allocate(k, HW)
    compute = [p for p in k.ops if p.cost_class != "memory" and p.flops > 0]
    for p in k.ops:
        assert p.pcus >= (1 if p in compute else 0)
        assert p.pmus == max(1, math.ceil(p.sram_bytes / HW.socket.pmu_bytes))
    assert k.pcus == (HW.socket.pcus if compute else 0)


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
