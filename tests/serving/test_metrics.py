"""Serving metrics: definitions checked by hand, Little's law on a long stationary run, and the
JSON keys the issue asks for."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.serving.arrivals import Request
from rdusim.serving.engine import RequestRecord, simulate_models
from rdusim.serving.metrics import (
    NO_SLO,
    generated_tokens,
    in_system,
    meets_slo,
    rounded,
    stats,
    summary,
    time_average_in_system,
)
from rdusim.spec.workload import SloSpec
from tests.serving import legacy_metrics
from tests.serving.synthetic import (
    colocated,
    constant_times,
    deployments,
    disaggregated,
    requests,
    run,
    shape,
)

ISSUE_KEYS = {
    "requests",
    "completed",
    "output_tokens",
    "duration_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "throughput_tokens_per_s",
    "goodput_requests_per_s",
    "mean_requests_in_system",
    "arrival_rate",
}


def close(x: float) -> object:
    """Equal to within the metrics' six significant digits."""
    return pytest.approx(x, rel=1e-5)


THREE = requests((0.0, 100, 3), (0.5, 100, 2), (0.6, 100, 4))


def test_percentiles_interpolate_between_order_statistics() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    s = stats(values)
    # linear interpolation: rank q/100 x (n - 1) from 0
    assert s == {"p50": 50.5, "p90": 90.1, "p99": 99.01, "mean": 50.5}
    assert stats([]) == {"p50": None, "p90": None, "p99": None, "mean": None}


def test_rounding_keeps_six_significant_digits() -> None:
    assert rounded(1234.56789) == 1234.57
    assert rounded(0.000123456789) == 0.000123457
    assert rounded(float("nan")) is None and rounded(None) is None


def test_summary_of_the_hand_schedule() -> None:
    # prefill-first on THREE (see test_engine): firsts 1.0, 2.0, 3.1; lasts 3.2, 2.1, 3.4
    result = run(THREE, shape(2), colocated())
    m = summary(result, SloSpec(ttft_s=1.5, tpot_s=0.5))
    assert set(m) >= ISSUE_KEYS
    assert (m["requests"], m["completed"], m["output_tokens"]) == (3, 3, 9)
    assert m["duration_s"] == close(3.4)
    assert m["ttft_s"]["mean"] == close((1.0 + 1.5 + 2.5) / 3)
    assert m["tpot_s"]["mean"] == close((1.1 + 0.1 + 0.1) / 3)
    assert m["e2e_s"]["p50"] == close(2.8)  # 3.2, 1.6, 2.8
    assert m["throughput_tokens_per_s"] == close(rounded(9 / 3.4))
    # r0 misses TPOT (1.1 s), r1 meets both (1.5 s, 0.1 s), r2 misses TTFT (2.5 s)
    assert m["goodput_requests_per_s"] == close(rounded(1 / 3.4))
    assert m["slo_attainment"] == close(rounded(1 / 3))
    # requests in system: sojourns 3.2 + 1.6 + 2.8 over 3.4 s
    assert m["mean_requests_in_system"] == close(rounded(7.6 / 3.4))
    assert m["arrival_rate"] == close(rounded(2 / 0.6))


def test_summary_without_slo_has_no_goodput_and_says_why() -> None:
    result = run(THREE, shape(2), colocated())
    m = summary(result, None)
    assert m["goodput_requests_per_s"] is None and m["slo_attainment"] is None
    assert m["goodput_note"] == NO_SLO and "not applicable" in NO_SLO
    assert (
        m["throughput_tokens_per_s"]
        == summary(result, SloSpec(ttft_s=1, tpot_s=1))["throughput_tokens_per_s"]
    )


def test_time_average_in_system_by_hand() -> None:
    result = run(requests((0.0, 10, 1), (0.0, 10, 1)), shape(1), colocated())
    # one request in [0, 1] twice over, then one in [1, 2]: (2 + 1) / 2
    assert time_average_in_system(result.records, 0.0, 2.0) == pytest.approx(1.5)


def test_time_average_over_a_window_not_starting_at_zero() -> None:
    """The same two requests arriving at 2 s: the first done at 3 s, the second at 4 s. Over
    [2, 4]: two in the system for 1 s, one for 1 s, (2 + 1) / 2 = 1.5. Over [2, 6]: the same
    3 request-seconds over 4 s, 0.75. (The window starts at the first arrival, as `summary`
    takes it.)"""
    result = run(requests((2.0, 10, 1), (2.0, 10, 1)), shape(1), colocated())
    assert [r.last_token_s for r in result.records] == [3.0, 4.0]
    assert time_average_in_system(result.records, 2.0, 4.0) == pytest.approx(1.5)
    assert time_average_in_system(result.records, 2.0, 6.0) == pytest.approx(0.75)


def test_summary_of_the_hand_schedule_five_seconds_later() -> None:
    """THREE with every arrival 5 s later runs the same schedule 5 s later (firsts 6.0, 7.0,
    8.1; lasts 8.2, 7.1, 8.4): the window is [5, 8.4], 3.4 s, so the sojourns 3.2 + 1.6 + 2.8
    again average 7.6 / 3.4 requests in the system, and every metric but the occupancy
    timeline's times is the one of the run from 0."""
    later = [replace(r, arrival_s=r.arrival_s + 5.0) for r in THREE]
    result = run(later, shape(2), colocated())
    assert [round(r.last_token_s, 9) for r in result.records] == [8.2, 7.1, 8.4]
    slo = SloSpec(ttft_s=1.5, tpot_s=0.5)
    m = summary(result, slo)
    assert m["duration_s"] == close(3.4)
    assert m["mean_requests_in_system"] == close(rounded(7.6 / 3.4))
    assert m["throughput_tokens_per_s"] == close(rounded(9 / 3.4))
    assert m["goodput_requests_per_s"] == close(rounded(1 / 3.4))
    from_zero = summary(run(THREE, shape(2), colocated()), slo)
    assert m["slot_occupancy"]["mean"] == close(from_zero["slot_occupancy"]["mean"])
    values = [v for _, v in m["slot_occupancy"]["timeline"]]
    assert values == pytest.approx([v for _, v in from_zero["slot_occupancy"]["timeline"]])
    assert m["slot_occupancy"]["timeline"][0][0] == 5.0
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        assert m[key] == pytest.approx(from_zero[key], rel=1e-5)


def test_generated_tokens_stop_at_the_output() -> None:
    result = run(requests((0.0, 10, 11)), shape(1, tokens_per_step=2.44), colocated())
    rec = result.records[0]
    assert rec.steps == 5  # 5 x 2.44 = 12.2 tokens offered, 10 wanted
    assert generated_tokens(rec, 2.44) == 11


def test_generated_tokens_round_fractional_steps_down() -> None:
    """5 decode steps at 2.44 tokens a step offer 12.2 tokens: 12 whole ones after the
    prefill's first, 13, when the request wants 20."""
    rec = RequestRecord(0, 0.0, 10, 20, first_token_s=1.0, last_token_s=2.0, steps=5)
    assert generated_tokens(rec, 2.44) == 13


def test_a_one_token_request_meets_any_tpot_objective() -> None:
    """A one-token request has no TPOT: it meets the SLO on its TTFT alone (0.5 s against a
    1 s objective: met; against 0.25 s: missed)."""
    rec = RequestRecord(0, 2.0, 10, 1, first_token_s=2.5, last_token_s=2.5, completions=1)
    assert rec.tpot_s is None
    assert meets_slo(rec, SloSpec(ttft_s=1.0, tpot_s=0.01))
    assert not meets_slo(rec, SloSpec(ttft_s=0.25, tpot_s=0.01))


def test_occupancy_integrates_the_occupied_slot_steps() -> None:
    """A decode node's occupied slots integrated over time equal its slot-steps x step time."""
    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(1.0, 300))
    reqs = [Request(i, float(t), 10, int(rng.integers(2, 30))) for i, t in enumerate(arrivals)]
    step = 0.1
    result = run(reqs, shape(8), disaggregated(prefill_nodes=2), constant_times(0.5, step))
    m = summary(result, SloSpec(ttft_s=10, tpot_s=1))
    occupied_area = m["slot_occupancy"]["mean"] * 8 * m["duration_s"]
    assert occupied_area == pytest.approx(result.slot_steps * step, rel=1e-4)
    timeline = m["slot_occupancy"]["timeline"]
    assert len(timeline) == 200 and all(0 <= v <= 8 for _, v in timeline)


def test_littles_law_on_a_long_stationary_run() -> None:
    """Mean requests in the system = arrival rate x mean time in it, within 5%."""
    rate, n = 1.0, 20_000
    rng = np.random.default_rng(11)
    arrivals = np.cumsum(rng.exponential(1 / rate, n))
    outputs = rng.integers(10, 40, n)
    reqs = [
        Request(i, float(t), 10, int(o))
        for i, (t, o) in enumerate(zip(arrivals, outputs, strict=True))
    ]
    result = run(reqs, shape(4), disaggregated(prefill_nodes=2), constant_times(0.5, 0.1))
    m = summary(result, SloSpec(ttft_s=10, tpot_s=1))
    little = rate * m["e2e_s"]["mean"]
    error = abs(m["mean_requests_in_system"] - little) / little
    assert error < 0.05, error
    # and with the rate the run measured
    assert m["mean_requests_in_system"] == pytest.approx(
        m["arrival_rate"] * m["e2e_s"]["mean"], rel=0.05
    )


# --- the column version against the loop over request objects it replaced ---------------------


@settings(max_examples=200, deadline=None)
@given(
    deployments(),
    st.one_of(
        st.none(),
        st.builds(
            SloSpec,
            ttft_s=st.sampled_from([0.5, 1.0, 2.0, 1e3]),
            tpot_s=st.sampled_from([0.1, 0.25, 1.0]),
        ),
    ),
)
def test_the_metrics_are_those_of_the_loop_over_records(case, slo) -> None:
    reqs, models, config = case
    result = simulate_models(reqs, models, config)
    assert summary(result, slo) == legacy_metrics.summary(result, slo)


def test_in_system_by_hand() -> None:
    # arrivals at 0, 1 and 1; completions at 2, 3 and 5 (window 0..5): 1 request for 1 s, 3
    # for 1 s, 2 for 1 s, 1 for 2 s = 8 request-seconds over 5 s
    assert in_system(np.array([0.0, 1.0, 1.0]), np.array([2.0, 3.0, 5.0]), 0.0, 5.0) == 1.6
    assert in_system(np.array([]), np.array([]), 0.0, 5.0) == 0.0
