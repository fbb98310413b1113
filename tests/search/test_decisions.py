"""The auto-mapper's decisions over the calibration ensemble: ranking statistics and the gain
against a mapping's own kernels."""

from __future__ import annotations

import numpy as np
import pytest

from rdusim.api import run_mapping
from rdusim.search.mapper import MappingCandidate, ranking
from rdusim.search.objective import Objective


def candidate(scores: list[float], point: float | None = None) -> MappingCandidate:
    c = MappingCandidate(kernels={}, looped=False, estimate_s=0.0, plans={})
    c.ensemble = scores
    c.score = point
    return c


def test_ranking_is_the_mean_or_a_percentile_of_the_ensemble() -> None:
    scores = [1.0, 2.0, 3.0, 4.0, 10.0]
    c = candidate(scores, point=2.5)
    assert ranking(c, "mean") == pytest.approx(4.0)
    # numpy's linear percentile, written out: p25 of 5 values is the second
    assert ranking(c, "p25") == pytest.approx(2.0)
    assert ranking(c, "p95") == pytest.approx(10.0 - 0.2 * 6.0)


def test_ranking_falls_back_to_the_simulated_score_without_an_ensemble() -> None:
    assert ranking(candidate([], point=3.5), "mean") == 3.5
    assert np.isnan(ranking(candidate([], point=None), "mean"))


def test_a_pick_that_wins_on_the_mean_can_lose_on_its_pessimistic_end() -> None:
    steady = candidate([10.0] * 20)
    risky = candidate([5.0] * 2 + [12.0] * 18)  # better mean of throughput, worse p05
    assert ranking(risky, "mean") > ranking(steady, "mean")
    assert ranking(risky, "p05") < ranking(steady, "p05")


def test_gain_against_the_hand_kernels_is_the_ratio_of_objectives_member_by_member() -> None:
    """Llama-3.1-8B decode at batch 1: the search's step over the mapping's own, per member."""
    sets = ["batch=1", "seq_len=2048", "snapstream.enabled=false"]
    auto = run_mapping("llama31_8b_decode", [*sets, "kernels=auto", "kernel_looping=false"])
    hand = run_mapping("llama31_8b_decode", [*sets, "kernel_looping=false"])
    a = auto.report["auto_mapping"]
    assert a["objective"] == Objective.STEP_TIME.value
    gain = a["gain_vs_hand"]
    assert gain["p05"] <= gain["p50"] <= gain["p95"]
    assert 0.0 <= a["p_better"] <= 1.0
    # at the point, the gain is the hand mapping's step over the pick's
    point = hand.report["total_latency_s"] / auto.report["total_latency_s"]
    assert a["gain_at_point"] == pytest.approx(point, rel=1e-9)
    assert a["hand_objective"] == pytest.approx(hand.report["total_latency_s"], rel=1e-9)
