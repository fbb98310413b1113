"""`rdusim.uncertainty.summary`: intervals against percentiles computed here, the split of a
run's time by term, and elasticities against closed forms (an HBM-bound run, a parameter no
kernel uses, one every call pays)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.api import run_mapping
from rdusim.spec.hardware import load_hardware
from rdusim.uncertainty.parameters import PARAMETERS, with_values
from rdusim.uncertainty.pricing import AnchoredPricer
from rdusim.uncertainty.summary import (
    ELASTICITY_STEP,
    Term,
    elasticities,
    headline,
    intervals,
    max_batch_interval,
    split_by_term,
    usable_hbm_bytes,
)

DECODE = ["batch=1", "seq_len=2048", "snapstream.enabled=false"]
# calls made (nearly) free: what is left of a batch-1 decode step is streaming from HBM
FREE_CALLS = [
    "calibration.argument_load_s=1e-9",
    "calibration.config_bandwidth=1e16",
    "hardware.links.p2p_latency_s=1e-12",
]
HW = load_hardware("sn40l-16")  # fully connected: a barrier is one round of link latency


def percentile(values: list[float], q: float) -> float:
    """numpy's default ("linear") percentile, written out: the order statistic at rank
    q/100 * (n - 1), interpolated between its neighbours."""
    xs = sorted(values)
    rank = q / 100 * (len(xs) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


# --- fakes: just what `headline` reads ----------------------------------------------------------


def fake_result(total, calls, throughput, kernels, phase="decode", tokens_per_step=2.0):
    """A SimResult-like member: one layer kind `moe` with the given kernel latencies."""
    lr = SimpleNamespace(
        latency_s=sum(kernels.values()),
        kernels=[SimpleNamespace(name=n, latency_s=t) for n, t in kernels.items()],
    )
    return SimpleNamespace(
        program=SimpleNamespace(phase=phase, tokens_per_step=tokens_per_step),
        total_latency_s=total,
        kernel_call_time_s=calls,
        throughput_tokens_per_s=throughput,
        layers={"moe": lr},
    )


positive = st.floats(min_value=1e-6, max_value=1e3, allow_nan=False, allow_infinity=False)
member = st.tuples(positive, positive, positive, positive, positive)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(member, min_size=1, max_size=40))
def test_intervals_are_the_members_percentiles(rows):
    results = [
        fake_result(t, c, tp, {"MLA": a, "FFN": b}, tokens_per_step=2.5) for t, c, tp, a, b in rows
    ]
    got = intervals(results)
    columns = {
        "total_latency_s": [r[0] for r in rows],
        "kernel_call_time_s": [r[1] for r in rows],
        "throughput_tokens_per_s": [r[2] for r in rows],
        "tpot_s": [r[0] / 2.5 for r in rows],
        "layers.moe.latency_s": [r[3] + r[4] for r in rows],
        "layers.moe.MLA.latency_s": [r[3] for r in rows],
        "layers.moe.FFN.latency_s": [r[4] for r in rows],
        "layers.moe.MLA.share": [r[3] / (r[3] + r[4]) for r in rows],
        "layers.moe.FFN.share": [r[4] / (r[3] + r[4]) for r in rows],
    }
    assert set(got) == set(columns)
    for key, values in columns.items():
        for q, name in ((5, "p05"), (50, "p50"), (95, "p95")):
            assert got[key][name] == pytest.approx(percentile(values, q), rel=1e-9, abs=1e-15), (
                key,
                name,
            )
        assert got[key]["p05"] <= got[key]["p50"] <= got[key]["p95"]


def test_intervals_by_hand():
    totals = [1.0, 2.0, 3.0, 4.0, 5.0]
    results = [fake_result(t, t / 10, 1 / t, {"K": t}, phase="prefill") for t in totals]
    got = intervals(results)
    # rank 0.05 * 4 = 0.2 -> 1.2; 0.5 * 4 = 2 -> 3.0; 0.95 * 4 = 3.8 -> 4.8
    assert got["total_latency_s"] == pytest.approx({"p05": 1.2, "p50": 3.0, "p95": 4.8})
    assert got["kernel_call_time_s"] == pytest.approx({"p05": 0.12, "p50": 0.3, "p95": 0.48})
    assert got["layers.moe.K.share"] == pytest.approx({"p05": 1.0, "p50": 1.0, "p95": 1.0})
    assert "tpot_s" not in got  # prefill has no time per output token


def test_headline_of_an_empty_layer_has_zero_shares():
    r = fake_result(1.0, 0.1, 1.0, {"A": 0.0, "B": 0.0})
    h = headline(r)
    assert h["layers.moe.A.share"] == 0.0 and h["layers.moe.latency_s"] == 0.0


# --- split by term, by hand ---------------------------------------------------------------------


def fake_run(total, calls, n_calls):
    return SimpleNamespace(
        total_latency_s=total,
        kernel_call_time_s=calls,
        all_layers=lambda: [SimpleNamespace(calls=n_calls)],
    )


def test_split_by_term_by_hand():
    hw = HW
    total, calls, n = 1.0, 0.2, 1000
    barrier = n * hw.links.p2p_latency_s / total
    el = {
        "hbm_efficiency": -0.3,
        "gemm_efficiency": -0.1,
        "attention_efficiency": -0.05,
        "simd_efficiency": -0.05,
        "p2p_bandwidth": -0.1,
        "p2p_latency_s": 0.1 + barrier,
    }
    got = split_by_term(fake_run(total, calls, n), hw, el)
    assert got[Term.CALLS] == pytest.approx(0.2)
    assert got[Term.HBM] == pytest.approx(0.3)
    assert got[Term.COMPUTE] == pytest.approx(0.2)
    assert got[Term.LINKS] == pytest.approx(0.2)
    assert got[Term.FILL_DRAIN] == pytest.approx(0.1)
    assert sum(got.values()) == pytest.approx(total)


share = st.floats(min_value=0.0, max_value=0.3)


@settings(max_examples=100, deadline=None)
@given(
    total=st.floats(1e-3, 10.0),
    calls_share=share,
    hbm=share,
    gemm=st.floats(0.0, 0.1),
    att=st.floats(0.0, 0.1),
    simd=st.floats(0.0, 0.05),
    bw=st.floats(0.0, 0.1),
    lat=st.floats(0.0, 0.1),
    # a positive elasticity to an efficiency (slower with a faster rate) is no share at all
    stray=st.floats(0.0, 0.2),
)
def test_split_by_term_sums_to_the_total_when_the_terms_fit(
    total, calls_share, hbm, gemm, att, simd, bw, lat, stray
):
    hw = HW
    el = {
        "hbm_efficiency": -hbm,
        "gemm_efficiency": -gemm + stray,
        "attention_efficiency": -att,
        "simd_efficiency": -simd,
        "p2p_bandwidth": -bw,
        "p2p_latency_s": lat,
    }
    got = split_by_term(fake_run(total, calls_share * total, 0), hw, el)
    assert set(got) == set(Term)
    assert all(v >= 0 for v in got.values())
    assert got[Term.CALLS] == pytest.approx(calls_share * total, rel=1e-12, abs=1e-15)
    assert got[Term.HBM] == pytest.approx(hbm * total, rel=1e-12, abs=1e-15)
    compute = max(0.0, gemm - stray + att + simd)
    assert got[Term.COMPUTE] == pytest.approx(compute * total, rel=1e-12, abs=1e-15)
    assert got[Term.LINKS] == pytest.approx((bw + lat) * total, rel=1e-12, abs=1e-15)
    # every share here is at most 0.3 + 0.3 + 0.25 + 0.2 < 1: the rest is fill and drain
    assert sum(got.values()) == pytest.approx(total, rel=1e-12)


# --- on shipped runs ----------------------------------------------------------------------------


def pricer_of(mr):
    return AnchoredPricer(mr.program, mr.result, mr.mapping.hardware)


@pytest.fixture(scope="module")
def decode():
    mr = run_mapping("llama31_8b_decode", DECODE, uncertainty=False)
    assert mr.result is not None and mr.program.orchestration == "hardware"
    return mr


@pytest.fixture(scope="module")
def decode_free_calls():
    mr = run_mapping("llama31_8b_decode", DECODE + FREE_CALLS, uncertainty=False)
    assert mr.result is not None
    return mr


@pytest.fixture(scope="module")
def prefill():
    mr = run_mapping("r1_prefill", ["seq_len=4096"], uncertainty=False)
    assert mr.result is not None and mr.program.orchestration == "software"
    return mr


@pytest.fixture(scope="module")
def decode_elasticities(decode):
    return elasticities(pricer_of(decode), decode.mapping.hardware)


def test_elasticities_name_every_time_parameter(decode_elasticities):
    assert set(decode_elasticities) == {p.name for p in PARAMETERS} - {"hbm_usable_fraction"}
    assert all(math.isfinite(v) for v in decode_elasticities.values())


def test_an_hbm_bound_run_scales_inversely_with_hbm_efficiency(decode_free_calls):
    """With calls free, a batch-1 decode step is the HBM's streaming time H plus a rest R no
    HBM parameter scales. f = H/T is measured from the bytes the run moves (not from the
    pricer), and the 5% step gives exactly log(f/0.95 + 1 - f)/log(0.95) for T = H + R."""
    mr = decode_free_calls
    hw = mr.mapping.hardware
    res = mr.result
    f = res.traffic("hbm") / (hw.socket.hbm.bandwidth * hw.calibration.hbm_efficiency)
    f /= res.total_latency_s
    assert f > 0.99  # the premise: HBM-bound
    want = math.log(f / ELASTICITY_STEP + 1 - f) / math.log(ELASTICITY_STEP)
    el = elasticities(pricer_of(mr), hw)
    assert el["hbm_efficiency"] == pytest.approx(want, abs=0.005)
    assert el["hbm_efficiency"] == pytest.approx(-1.0, abs=0.01)
    for name in ("gemm_efficiency", "attention_efficiency", "simd_efficiency"):
        assert abs(el[name]) < 0.01, name


def test_host_round_trip_moves_nothing_when_the_agcus_issue_calls(decode, decode_elasticities):
    assert decode_elasticities["host_round_trip_s"] == 0.0
    hw = decode.mapping.hardware
    pricer = pricer_of(decode)
    slow_host = with_values(hw, {"host_round_trip_s": hw.calibration.host_round_trip_s * 100})
    assert pricer.price(slow_host).total_latency_s == pricer.price(hw).total_latency_s


@pytest.mark.parametrize("name", ["host_round_trip_s", "argument_load_s"])
def test_a_per_call_cost_has_the_elasticity_of_its_share(prefill, name):
    """Every host-issued call pays the host's round trip and argument load once, and nothing
    else depends on them: T(0.95 x) = T - 0.05 x N for N calls, so the elasticity is
    log(1 - 0.05 x N / T) / log(0.95)."""
    hw = prefill.mapping.hardware
    res = prefill.result
    x = getattr(hw.calibration, name)
    n = res.kernel_calls
    t = res.total_latency_s
    want = math.log(1 - (1 - ELASTICITY_STEP) * x * n / t) / math.log(ELASTICITY_STEP)
    el = elasticities(pricer_of(prefill), hw)
    assert el[name] == pytest.approx(want, rel=1e-6)
    assert 0 < el[name] < 1


def test_calls_term_of_a_decode_step_is_its_kernel_call_time(decode, decode_elasticities):
    hw = decode.mapping.hardware
    terms = split_by_term(decode.result, hw, decode_elasticities)
    assert terms[Term.CALLS] == pytest.approx(decode.result.kernel_call_time_s, rel=1e-12)
    assert terms[Term.CALLS] > 0
    assert all(v >= 0 for v in terms.values())


def test_hbm_term_of_an_hbm_bound_step_is_nearly_all_of_it(decode_free_calls):
    mr = decode_free_calls
    hw = mr.mapping.hardware
    terms = split_by_term(mr.result, hw, elasticities(pricer_of(mr), hw))
    assert terms[Term.HBM] / mr.result.total_latency_s == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("which", ["decode", "prefill"])
def test_split_by_term_of_a_shipped_run_covers_its_total(request, which):
    """The terms cover the run's time: fill and drain takes what the others leave, so they
    never fall short; they overshoot only by what the finite-step elasticities over-count
    (a few percent at most on the shipped runs, see the next test)."""
    mr = request.getfixturevalue(which)
    hw = mr.mapping.hardware
    terms = split_by_term(mr.result, hw, elasticities(pricer_of(mr), hw))
    total = mr.result.total_latency_s
    assert total * (1 - 1e-12) <= sum(terms.values()) <= total * 1.03


def test_split_by_term_sums_to_the_total_when_elasticities_over_count():
    # a run half in calls, the rest a rate-matched kernel: a 5% slower HBM or a 5% slower GEMM
    # each lengthen it by 5%, so both elasticities are -0.5 (of the whole run)
    el = {"hbm_efficiency": -0.5, "gemm_efficiency": -0.5}
    got = split_by_term(fake_run(1.0, 0.5, 0), HW, el)
    assert sum(got.values()) == pytest.approx(1.0)


# --- the max batch's interval -------------------------------------------------------------------

GB = 1e9
# HBM bytes per socket by batch (weights 50 GB, 1 GB of cache a sequence), against 64 GB sockets
USED = {1: 51 * GB, 2: 52 * GB, 4: 54 * GB, 8: 58 * GB, 16: 66 * GB}


def order_statistic(values: list[int], q: float) -> int:
    """The inverted distribution function's percentile, written out: the smallest value with at
    least q% of the values at or below it (the ceil(q/100 * n)-th smallest)."""
    xs = sorted(values)
    return xs[max(1, math.ceil(q / 100 * len(xs))) - 1]


def test_max_batch_interval_by_hand():
    """Usable fractions 0.80 ... 0.99 of 64 GB (51.2 ... 63.4 GB): a member below 52 GB holds
    batch 1, below 54 batch 2, below 58 batch 4, from 58 up batch 8; 16 needs 66 GB."""
    fractions = [0.80 + 0.01 * i for i in range(20)]
    members = [with_values(HW, {"hbm_usable_fraction": f}) for f in fractions]
    by_hand = []
    for f in fractions:
        cap = 64 * GB * f
        by_hand.append(8 if cap >= 58 * GB else 4 if cap >= 54 * GB else 2 if cap >= 52 * GB else 1)
    assert by_hand[:2] == [1, 1] and by_hand[-1] == 8
    got = max_batch_interval(USED, members)
    assert got == {
        q: order_statistic(by_hand, p) for q, p in (("p05", 5), ("p50", 50), ("p95", 95))
    }
    # 20 members: the 1st, the 10th and the 19th smallest
    assert got == {"p05": 1, "p50": 4, "p95": 8}
    assert all(isinstance(v, int) for v in got.values())  # a batch, never between two


def test_max_batch_interval_of_one_member_is_its_batch():
    hw = with_values(HW, {"hbm_usable_fraction": 0.9})  # 57.6 GB: batch 4
    assert max_batch_interval(USED, [hw]) == {"p05": 4, "p50": 4, "p95": 4}
    assert usable_hbm_bytes(hw) == pytest.approx(57.6 * GB, rel=1e-12)


def test_no_batch_fits_is_zero():
    hw = with_values(HW, {"hbm_usable_fraction": 0.79})  # 50.6 GB: not even batch 1
    assert max_batch_interval(USED, [hw]) == {"p05": 0, "p50": 0, "p95": 0}
