"""Serving intervals: the point's run in the middle, the bounding members' runs at the ends."""

from __future__ import annotations

from rdusim.serving.serve import FIXED_METRICS, serving_intervals
from rdusim.serving.step_times import LinearStepTimes, ScaledStepTimes


def test_each_metric_spans_the_point_and_both_bounding_runs() -> None:
    point = {"ttft_s": {"mean": 2.0, "p50": 1.9}, "throughput_tokens_per_s": 100.0, "requests": 10}
    slow = {"ttft_s": {"mean": 2.6, "p50": 2.5}, "throughput_tokens_per_s": 80.0, "requests": 10}
    fast = {"ttft_s": {"mean": 1.7, "p50": 1.6}, "throughput_tokens_per_s": 110.0, "requests": 10}
    iv = serving_intervals(point, [fast, slow])
    assert iv["ttft_s.mean"] == {"p05": 1.7, "p50": 2.0, "p95": 2.6}
    assert iv["ttft_s.p50"] == {"p05": 1.6, "p50": 1.9, "p95": 2.5}
    assert iv["throughput_tokens_per_s"] == {"p05": 80.0, "p50": 100.0, "p95": 110.0}
    assert "requests" in FIXED_METRICS and "requests" not in iv


def test_a_metric_missing_from_a_bound_has_no_interval() -> None:
    iv = serving_intervals({"duration_s": 5.0, "goodput": None}, [{}, {"duration_s": 6.0}])
    assert iv == {}


def test_scaled_step_times_scale_each_graph_by_its_own_factor() -> None:
    base = LinearStepTimes(1.0, 0.001, 0.05, 0.001, 1e-6)
    scaled = ScaledStepTimes(base, prefill_scale=1.5, decode_scale=0.8)
    assert scaled.prefill_s(4096) == 1.5 * (1.0 + 0.001 * 4096)
    assert scaled.decode_step_s(16, 1000) == 0.8 * (0.05 + (0.001 + 1e-6 * 1000) * 16)
