"""`analytic_members.estimates`, the closed form over many hardware parameter sets at once: each
member's pipeline, loop period and call are what `analytic.estimate` gives under that member
alone (its allocation applied), to the last bit, on shipped kernels, their looped forms and
search candidates, under every member of the shipped ensemble."""

from __future__ import annotations

import pytest

from rdusim.compiler.allocate import allocation, phases
from rdusim.compiler.allocate_members import allocations
from rdusim.compiler.compile import compile_mapping, looped_form
from rdusim.compiler.program import Kernel
from rdusim.cost.analytic import estimate
from rdusim.cost.analytic_members import estimates, supports
from rdusim.search.segments import every_candidate
from rdusim.spec.hardware import Hardware
from rdusim.spec.mapping import load_mapping
from rdusim.uncertainty.ensemble import shipped_ensemble


def _alone(k: Kernel, hw: Hardware, orchestration: str, looped: int) -> tuple[float, ...]:
    units = allocation(k, hw, phases(k))
    kept = [(o.pcus, o.pmus) for o in k.ops]
    try:
        for o in k.ops:
            o.pcus, o.pmus = units[o.name]
        e = estimate(k, hw, orchestration=orchestration, looped_executions=looped)
    finally:
        for o, (p, m) in zip(k.ops, kept, strict=True):
            o.pcus, o.pmus = p, m
    return e.pipeline_s, e.period_s, e.call_s


def _check(kernels: list[Kernel], hw: Hardware) -> int:
    ensemble = shipped_ensemble()
    assert ensemble is not None
    members = ensemble.applied(hw)[:16]
    checked = 0
    for k0 in kernels:
        for k, looped, orchestration in [(k0, 1, "software"), (looped_form(k0, hw), 5, "hardware")]:
            if not supports(k):
                continue
            units = allocations(k, members, phases(k))
            got = estimates(
                k, members, units, orchestration=orchestration, looped_executions=looped
            )
            for i, member in enumerate(members):
                want = _alone(k, member, orchestration, looped)
                assert (got.pipeline_s[i], got.period_s[i], got.call_s[i]) == want, k.name
            checked += 1
    return checked


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("r1_prefill", ("seq_len=4096",)),
        ("r1_decode", ("seq_len=8192",)),
        ("llama31_8b_decode", ("batch=4",)),
        ("llama31_70b_decode", ("batch=8",)),
    ],
)
def test_each_member_of_a_shipped_program_is_priced_as_alone(name, overrides):
    rm = load_mapping(name, list(overrides))
    program = compile_mapping(rm, batch=4 if rm.spec.phase == "decode" else None)
    kernels = list({id(k): k for lp in program.all_layers() for k in lp.kernels}.values())
    assert _check(kernels, rm.hardware) >= len(kernels)


def test_each_member_of_search_candidates_is_priced_as_alone():
    rm = load_mapping("llama31_8b_decode", ["batch=4"])
    assert _check(list(every_candidate(rm, "dense", 4))[::4], rm.hardware) > 20


def test_a_kernel_that_uses_ddr_is_left_to_the_scalar_form():
    rm = load_mapping("llama31_8b_decode", ["batch=4", "placement.kv_cache=ddr"])
    program = compile_mapping(rm, batch=4)
    kernels = [k for lp in program.all_layers() for k in lp.kernels]
    uses = [any(o.ddr_in_bytes or o.ddr_write for o in k.ops) for k in kernels]
    assert any(uses) and not all(uses)
    assert [supports(k) for k in kernels] == [not u for u in uses]
