"""`rdusim.uncertainty.pricing.AnchoredPricer`: at the point it is the simulator, an HBM-bound
kernel doubles with half the bandwidth, and pricing leaves the compiled allocation as it was."""

from __future__ import annotations

import dataclasses

import pytest

from rdusim.api import run_mapping
from rdusim.compiler.allocate import allocation, phases
from rdusim.uncertainty import pricing
from rdusim.uncertainty.ensemble import shipped_ensemble
from rdusim.uncertainty.parameters import with_values
from rdusim.uncertainty.pricing import AnchoredPricer

RUNS = {
    "llama31_8b_decode": ["batch=1", "seq_len=2048", "snapstream.enabled=false"],
    "r1_prefill": ["seq_len=4096"],
}


@pytest.fixture(scope="module", params=sorted(RUNS))
def run(request):
    mr = run_mapping(request.param, RUNS[request.param], uncertainty=False)
    assert mr.result is not None
    return mr


@pytest.fixture(scope="module")
def llama_decode():
    mr = run_mapping("llama31_8b_decode", RUNS["llama31_8b_decode"], uncertainty=False)
    assert mr.result is not None
    return mr


@pytest.fixture(scope="module")
def r1_prefill():
    mr = run_mapping("r1_prefill", RUNS["r1_prefill"], uncertainty=False)
    assert mr.result is not None
    return mr


def layer_pairs(a, b):
    return list(
        zip(
            [*a.layers.values(), *a.extras.values()],
            [*b.layers.values(), *b.extras.values()],
            strict=True,
        )
    )


def units(program):
    """Every op's (PCUs, PMUs), kernel by kernel, in program order."""
    return [
        [(o.name, o.pcus, o.pmus) for o in k.ops] for lp in program.all_layers() for k in lp.kernels
    ]


def test_at_the_point_the_price_is_the_simulation(run):
    hw = run.mapping.hardware
    priced = AnchoredPricer(run.program, run.result, hw).price(hw)
    sim = run.result
    assert priced.total_latency_s == pytest.approx(sim.total_latency_s, rel=1e-12)
    assert priced.kernel_call_time_s == pytest.approx(sim.kernel_call_time_s, rel=1e-12)
    assert priced.kernel_calls == sim.kernel_calls
    checked = 0
    for p_layer, s_layer in layer_pairs(priced, sim):
        assert [k.name for k in p_layer.kernels] == [k.name for k in s_layer.kernels]
        assert p_layer.latency_s == pytest.approx(s_layer.latency_s, rel=1e-12)
        for pk, sk in zip(p_layer.kernels, s_layer.kernels, strict=True):
            assert pk.latency_s == pytest.approx(sk.latency_s, rel=1e-12), pk.name
            assert pk.call_time_s == pytest.approx(sk.call_time_s, rel=1e-12), pk.name
            assert pk.call_s == sk.call_s, pk.name
            assert pk.executions == sk.executions
            checked += 1
    assert checked >= 3


def test_pricing_twice_gives_the_same_result(llama_decode):
    hw = llama_decode.mapping.hardware
    pricer = AnchoredPricer(llama_decode.program, llama_decode.result, hw)
    half = with_values(hw, {"hbm_efficiency": hw.calibration.hbm_efficiency / 2})
    a = pricer.price(half).total_latency_s
    pricer.price(hw)
    assert pricer.price(half).total_latency_s == a


def _kernel(result, kind, name):
    lr = {**result.layers, **result.extras}[kind]
    return next(k for k in lr.kernels if k.name == name)


@pytest.mark.parametrize(
    ("fixture", "kind", "name"),
    [
        # the LM head at batch 1: the vocabulary's weights streamed, a row of arithmetic
        ("llama_decode", "head", "K0:final_norm"),
        # SnapStream's ring buffer: a copy from HBM to HBM, no arithmetic at all
        ("r1_prefill", "dense", "Streaming Ring Buffer"),
    ],
)
def test_halving_hbm_efficiency_about_doubles_an_hbm_bound_kernel(request, fixture, kind, name):
    """Every HBM byte takes twice as long, nothing else moves. The kernel's time after its
    call's cost is its HBM work H plus a part R no HBM parameter scales (the first tile's
    compute, the last tile's drain), on a critical path of sums and maxima: it goes from H + R
    to at most 2H + R, so the ratio lies between 1 + H/(H + R) and 2. Here H is at least 90% of
    it at the point (the simulator's HBM busy time says so, checked below), so the ratio is
    in [1.85, 2]. The call's cost (argument load, barrier) is unchanged but for its program
    load, which follows the units the allocator re-matches to the slower rate: a few percent of
    a load that is itself a small part of the call."""
    mr = request.getfixturevalue(fixture)
    hw = mr.mapping.hardware
    half = with_values(hw, {"hbm_efficiency": hw.calibration.hbm_efficiency / 2})
    pricer = AnchoredPricer(mr.program, mr.result, hw)
    before = _kernel(mr.result, kind, name)
    after = _kernel(pricer.price(half), kind, name)
    assert before.hbm_busy_s >= 0.9 * before.pipeline_s  # HBM-bound: the premise
    part_before = before.call_time_s - before.call_s
    part_after = after.call_time_s - after.call_s
    assert 1.85 <= part_after / part_before <= 2.0 + 1e-9
    assert after.call_s == pytest.approx(before.call_s, rel=0.02)


def test_halving_hbm_efficiency_barely_moves_a_gemm_bound_kernel(r1_prefill):
    """The contrast: prefill's GEMM-bound `Output Proj + FFN` keeps HBM busy for a fraction
    f = H/(H + R) of its pipeline (3.5% here), so half the bandwidth lengthens that part by at
    most f (from H + R to at most 2H + R)."""
    hw = r1_prefill.mapping.hardware
    half = with_values(hw, {"hbm_efficiency": hw.calibration.hbm_efficiency / 2})
    pricer = AnchoredPricer(r1_prefill.program, r1_prefill.result, hw)
    before = _kernel(r1_prefill.result, "dense", "Output Proj + FFN")
    after = _kernel(pricer.price(half), "dense", "Output Proj + FFN")
    f = before.hbm_busy_s / before.pipeline_s
    assert f <= 0.1  # the premise: not HBM-bound
    ratio = (after.call_time_s - after.call_s) / (before.call_time_s - before.call_s)
    assert 1.0 - 1e-9 <= ratio <= 1.0 + f


def test_halving_gemm_efficiency_about_doubles_a_gemm_bound_kernel(r1_prefill):
    """The same kernel's arithmetic at half the rate: its pipeline, nearly all GEMM, about
    doubles; by the argument above (from C + R to at most 2C + R, C the GEMM time) it lands in
    [1.8, 2] when the rest R is at most a tenth, whatever units the allocator re-matches."""
    hw = r1_prefill.mapping.hardware
    half = with_values(hw, {"gemm_efficiency": hw.calibration.gemm_efficiency / 2})
    pricer = AnchoredPricer(r1_prefill.program, r1_prefill.result, hw)
    before = _kernel(r1_prefill.result, "dense", "Output Proj + FFN")
    after = _kernel(pricer.price(half), "dense", "Output Proj + FFN")
    ratio = (after.call_time_s - after.call_s) / (before.call_time_s - before.call_s)
    assert 1.8 <= ratio <= 2.0 + 1e-9


def test_pricing_restores_the_compiled_allocation(run):
    hw = run.mapping.hardware
    before = units(run.program)
    half = with_values(
        hw,
        {
            "hbm_efficiency": hw.calibration.hbm_efficiency / 2,
            "gemm_efficiency": hw.calibration.gemm_efficiency / 3,
        },
    )
    # the premise: under `half` the allocator would place some kernel's units differently, so
    # pricing does change the ops while it prices them
    moved = [
        k.name
        for lp in run.program.all_layers()
        for k in lp.kernels
        if allocation(k, half, phases(k)) != {o.name: (o.pcus, o.pmus) for o in k.ops}
    ]
    assert moved, "no kernel's allocation depends on the efficiencies: the test proves nothing"
    pricer = AnchoredPricer(run.program, run.result, hw)
    pricer.price(half)
    assert units(run.program) == before
    ensemble = shipped_ensemble()
    assert ensemble is not None
    pricer.price_all(ensemble.applied(hw)[:8])
    assert units(run.program) == before


def test_allocation_is_restored_when_pricing_fails(llama_decode, monkeypatch):
    hw = llama_decode.mapping.hardware
    before = units(llama_decode.program)
    pricer = AnchoredPricer(llama_decode.program, llama_decode.result, hw)

    def broken(*args, **kwargs):
        raise RuntimeError("closed form failed")

    monkeypatch.setattr(pricing, "estimate", broken)
    pricing.clear_prices()  # a price kept from another test would never reach the closed form
    half = with_values(hw, {"gemm_efficiency": hw.calibration.gemm_efficiency / 3})
    with pytest.raises(RuntimeError, match="closed form failed"):
        pricer.price(half)
    assert units(llama_decode.program) == before


def test_price_all_prices_each_member(llama_decode):
    hw = llama_decode.mapping.hardware
    pricer = AnchoredPricer(llama_decode.program, llama_decode.result, hw)
    members = [with_values(hw, {"hbm_efficiency": e}) for e in (0.5, 0.7, 0.9)]
    totals = [r.total_latency_s for r in pricer.price_all(members)]
    assert totals == [pricer.price(m).total_latency_s for m in members]
    assert totals[0] > totals[1] > totals[2]  # less bandwidth, more time


def test_a_kept_price_is_what_pricing_anew_gives(llama_decode):
    hw = llama_decode.mapping.hardware
    members = [with_values(hw, {"hbm_efficiency": e}) for e in (0.55, 0.75)]
    pricing.clear_prices()
    fresh = [
        r.total_latency_s
        for r in AnchoredPricer(llama_decode.program, llama_decode.result, hw).price_all(members)
    ]
    kept = [
        r.total_latency_s
        for r in AnchoredPricer(llama_decode.program, llama_decode.result, hw).price_all(members)
    ]
    assert kept == fresh


def test_prices_are_kept_by_the_member_and_the_point(llama_decode, monkeypatch):
    """Change one part of a price's key (the member, the point hardware the anchor is taken at,
    the point's simulated timing) and the kernel is priced again, to another answer."""
    hw = llama_decode.mapping.hardware
    program, result = llama_decode.program, llama_decode.result
    member = with_values(hw, {"hbm_efficiency": 0.6})
    base = AnchoredPricer(program, result, hw).price(member).total_latency_s
    calls: list[str] = []
    real = pricing.estimate

    def counting(kernel, *args, **kwargs):
        calls.append(kernel.name)
        return real(kernel, *args, **kwargs)

    monkeypatch.setattr(pricing, "estimate", counting)
    assert AnchoredPricer(program, result, hw).price(member).total_latency_s == base
    anchors = len(calls)  # the new pricer's anchors at the point; every price was kept
    other_member = with_values(hw, {"hbm_efficiency": 0.61})
    assert AnchoredPricer(program, result, hw).price(other_member).total_latency_s != base
    assert len(calls) > 2 * anchors
    other_point = with_values(hw, {"gemm_efficiency": hw.calibration.gemm_efficiency * 0.9})
    moved = AnchoredPricer(program, result, other_point).price(member).total_latency_s
    assert moved != base
    slower = dataclasses.replace(
        result,
        layers={
            kind: dataclasses.replace(
                lr,
                kernels=[dataclasses.replace(t, pipeline_s=2 * t.pipeline_s) for t in lr.kernels],
            )
            for kind, lr in result.layers.items()
        },
    )
    assert AnchoredPricer(program, slower, hw).price(member).total_latency_s > base


def _timings(result) -> list:
    return [
        (t.pipeline_s, t.second_s, t.period_s, t.call_s, t.settle_s)
        for lr in result.all_layers()
        for t in lr.kernels
    ]


def test_the_ensemble_priced_together_is_the_ensemble_priced_one_by_one(run, monkeypatch):
    """`price_all` prices each kernel under the whole ensemble at once (numpy over members);
    `price` of one member at a time, with nothing kept, is the scalar closed form."""
    hw = run.mapping.hardware
    ensemble = shipped_ensemble()
    assert ensemble is not None
    members = ensemble.applied(hw)
    pricing.clear_prices()
    pricer = AnchoredPricer(run.program, run.result, hw)
    alone = []
    for m in members:
        alone.append(_timings(pricer.price(m)))
        pricing.clear_prices()
    pricing.clear_prices()
    pricer = AnchoredPricer(run.program, run.result, hw)
    scalar: list[str] = []
    real = pricing.estimate
    monkeypatch.setattr(
        pricing, "estimate", lambda k, *a, **kw: scalar.append(k.name) or real(k, *a, **kw)
    )
    together = [_timings(r) for r in pricer.price_all(members)]
    assert together == alone
    assert scalar == []  # no member was priced one at a time


def test_members_of_another_socket_are_priced_one_by_one(llama_decode):
    """A member whose socket differs (here its DDR bandwidth) is not priced with the others:
    `price_all` prices every member as `price` does alone."""
    hw = llama_decode.mapping.hardware
    ddr = hw.socket.ddr.model_copy(update={"bandwidth": hw.socket.ddr.bandwidth / 2})
    members = [
        with_values(hw, {"hbm_efficiency": 0.6}),
        hw.model_copy(update={"socket": hw.socket.model_copy(update={"ddr": ddr})}),
    ]
    pricing.clear_prices()
    together = [
        _timings(r)
        for r in AnchoredPricer(llama_decode.program, llama_decode.result, hw).price_all(members)
    ]
    alone = []
    for m in members:
        pricing.clear_prices()
        alone.append(
            _timings(AnchoredPricer(llama_decode.program, llama_decode.result, hw).price(m))
        )
    assert together == alone
