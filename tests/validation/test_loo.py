"""`rdusim.validation.loo`: what "inside the 90% interval" and the log error mean for each kind
of bound (hand cases), the summary's arithmetic, and on a toy linear-Gaussian problem the refit
without an item and the predictive interval against their closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from rdusim.validation.items import Bound, Item, Measure, Metric
from rdusim.validation.loo import Prediction, predictive, refit_without, summarise
from rdusim.validation.posterior import linearise
from tests.validation.toy import (
    D0,
    D_SD,
    PRIOR_MEAN,
    TOY_ITEMS,
    analytic_posterior,
    toy_problem,
)

MEASURE_EXTRAS = {
    Metric.SPEEDUP: {"base": ["kernel_looping=false"]},
    Metric.SHARE: {"kernels": ["MHA"], "layer": "moe"},
}


def make_item(value, bound=Bound.VALUE, metric=Metric.TOTAL_LATENCY_S, precision=0.02) -> Item:
    return Item(
        id="x",
        quantity="q",
        where="w",
        value=value,
        unit="s",
        bound=bound,
        precision=precision,
        use="fit",
        measure=Measure(metric=metric, mapping="toy", **MEASURE_EXTRAS.get(metric, {})),
    )


def prediction(item, p05, p50, p95, constant=None, roofline=None) -> Prediction:
    return Prediction("s/x", "s", item, True, p05, p50, p95, p50, constant, roofline)


# --- inside the interval -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bound", "value", "interval", "inside"),
    [
        (Bound.VALUE, 10.0, (8, 9, 12), True),
        (Bound.VALUE, 10.0, (8, 9, 10), True),  # on the edge
        (Bound.VALUE, 10.0, (11, 12, 13), False),  # interval above the figure
        (Bound.VALUE, 10.0, (7, 8, 9), False),  # below
        # "over 10": consistent if the interval reaches 10
        (Bound.LOWER, 10.0, (5, 8, 11), True),
        (Bound.LOWER, 10.0, (11, 12, 13), True),
        (Bound.LOWER, 10.0, (5, 7, 9), False),
        # "below 10": consistent if the interval starts below 10
        (Bound.UPPER, 10.0, (9, 12, 15), True),
        (Bound.UPPER, 10.0, (2, 3, 4), True),
        (Bound.UPPER, 10.0, (11, 12, 13), False),
        # "2-5": consistent if the intervals overlap
        (Bound.RANGE, (2.0, 5.0), (1, 1.5, 2.5), True),
        (Bound.RANGE, (2.0, 5.0), (4, 6, 8), True),
        (Bound.RANGE, (2.0, 5.0), (1, 3, 9), True),  # covers the range
        (Bound.RANGE, (2.0, 5.0), (3, 3.5, 4), True),  # inside the range
        (Bound.RANGE, (2.0, 5.0), (0.5, 1, 1.9), False),
        (Bound.RANGE, (2.0, 5.0), (5.1, 6, 7), False),
    ],
)
def test_inside_90(bound, value, interval, inside):
    assert prediction(make_item(value, bound), *interval).inside_90 is inside


@pytest.mark.parametrize(
    ("bound", "value", "predicted", "error"),
    [
        (Bound.VALUE, 10.0, 20.0, math.log(2)),
        (Bound.VALUE, 10.0, 5.0, -math.log(2)),
        (Bound.VALUE, 10.0, 10.0, 0.0),
        (Bound.LOWER, 10.0, 20.0, 0.0),  # satisfies "over 10"
        (Bound.LOWER, 10.0, 5.0, -math.log(2)),
        (Bound.UPPER, 10.0, 5.0, 0.0),  # satisfies "below 10"
        (Bound.UPPER, 10.0, 40.0, math.log(4)),
        (Bound.RANGE, (2.0, 5.0), 3.0, 0.0),
        (Bound.RANGE, (2.0, 5.0), 1.0, -math.log(2)),
        (Bound.RANGE, (2.0, 5.0), 15.0, math.log(3)),
    ],
)
def test_log_error(bound, value, predicted, error):
    p = prediction(make_item(value, bound), 1.0, 1.0, 1.0)
    assert p.log_error(predicted) == pytest.approx(error, abs=1e-15)


def test_log_error_of_nothing_or_a_non_positive_value_is_none():
    p = prediction(make_item(10.0), 1.0, 1.0, 1.0)
    assert p.log_error(None) is None
    assert p.log_error(0.0) is None
    assert p.log_error(-3.0) is None


def test_relative_half_width():
    assert prediction(make_item(1.0), 80, 100, 130).relative_half_width == pytest.approx(0.25)
    assert prediction(make_item(1.0), 0, 0, 1).relative_half_width == math.inf


def test_as_dict_carries_the_interval_and_errors():
    d = prediction(make_item((2.0, 5.0), Bound.RANGE), 1, 1.0, 3, constant=10.0).as_dict()
    assert d["measured"] == [2.0, 5.0] and d["bound"] == "range"
    assert d["inside_90"] is True
    assert d["log_error"]["rdusim"] == pytest.approx(-math.log(2))
    assert d["log_error"]["null_constant"] == pytest.approx(math.log(2))
    assert d["log_error"]["null_roofline"] is None


# --- summary -------------------------------------------------------------------------------------


def test_summarise_by_hand():
    rate = make_item(100.0, metric=Metric.THROUGHPUT)
    per_user = make_item(200.0, metric=Metric.PER_USER)
    step = make_item(0.01, metric=Metric.TOTAL_LATENCY_S)
    share = make_item((2.0, 5.0), Bound.RANGE, metric=Metric.SHARE)
    preds = [
        # inside; half-width 0.1; errors: rdusim log(1.1), constant log(0.5), roofline log(2)
        prediction(rate, 99, 110, 121, constant=50.0, roofline=200.0),
        # outside (p05 202 > 200); half-width 198/400; errors: 0, log(2), log(0.8)
        prediction(per_user, 202, 200, 400, constant=400.0, roofline=160.0),
        # inside, but not a rate (half-width 10 would change the median); no roofline: not compared
        prediction(step, 0.0, 0.01, 0.2, constant=0.01, roofline=None),
        # inside (overlaps 2-5); errors: p50 1 -> -log 2, constant 3 -> 0, roofline 10 -> log 2
        prediction(share, 0.5, 1.0, 2.5, constant=3.0, roofline=10.0),
    ]
    s = summarise(preds)
    assert s.items == 4
    assert s.coverage_90 == pytest.approx(3 / 4)
    assert s.median_rel_half_width == pytest.approx((0.1 + 0.495) / 2)  # the rate items only
    assert s.compared == 3
    want = {
        "rdusim": math.log(1.1) ** 2 + 0.0 + math.log(2) ** 2,
        "null_constant": math.log(0.5) ** 2 + math.log(2) ** 2 + 0.0,
        "null_roofline": math.log(2) ** 2 + math.log(0.8) ** 2 + math.log(2) ** 2,
    }
    assert s.sq_log_error == pytest.approx(want)
    d = s.as_dict()
    assert d["count"] == 4 and d["compared_items"] == 3


def test_summarise_without_rate_items_has_no_width():
    s = summarise([prediction(make_item(1.0), 0.9, 1.0, 1.1)])
    assert math.isnan(s.median_rel_half_width)
    assert s.coverage_90 == 1.0 and s.compared == 0
    assert s.sq_log_error == {"rdusim": 0.0, "null_constant": 0.0, "null_roofline": 0.0}


@pytest.fixture(scope="module")
def toy():
    problem = toy_problem()
    mean, _ = analytic_posterior(TOY_ITEMS)
    mode = np.array([*mean, math.log(D0)])
    return problem, mode, linearise(problem, mode)


@pytest.mark.parametrize("left_out", sorted(TOY_ITEMS))
def test_refit_without_an_item_is_the_analytic_posterior_of_the_others(toy, left_out):
    problem, mode, lin = toy
    others = [i for i in TOY_ITEMS if i != left_out]
    mean, cov = analytic_posterior(others)
    u, c, kept = refit_without(problem, lin, mode, left_out)
    assert kept == others
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(u[:2] - mean) < 1e-3 * sd), (u[:2] - mean) / sd
    assert c[:2, :2] == pytest.approx(cov, rel=1e-4, abs=1e-8)
    # leaving an item out widens the posterior
    _, full = analytic_posterior(TOY_ITEMS)
    assert np.all(np.diag(c[:2, :2]) >= np.diag(full) * (1 - 1e-6))


def test_predictive_matches_the_analytic_predictive_normal(toy):
    """Under u ~ N(mean, cov), item A's log-value is c + a.(u - m0) plus noise of sd
    hypot(precision, discrepancy): normal with mean c + a.(mean - m0) and variance
    a' cov a + noise^2, so its quantiles are exp(mu + z_q sd). With 20000 draws a quantile's
    Monte Carlo sd is sqrt(q(1-q)/n)/phi(z_q) predictive sds: 0.015 at the 5th and 95th, 0.009 at
    the median; 0.06 predictive sds (4 of those) bounds the error."""
    problem, _, _ = toy
    mean, cov = analytic_posterior(["B", "C"])
    u = np.array([*mean, math.log(D0)])
    full_cov = np.zeros((3, 3))
    full_cov[:2, :2] = cov
    full_cov[2, 2] = D_SD**2
    c, a, _, prec = TOY_ITEMS["A"]
    mu = c + a @ (mean - PRIOR_MEAN)
    sd = math.sqrt(a @ cov @ a + prec**2 + D0**2)
    rng = np.random.default_rng(1)
    got = predictive(problem, "A", u, full_cov, np.array([1.0]), draws=20000, rng=rng)
    for value, q in zip(got, (0.05, 0.5, 0.95), strict=True):
        assert math.log(value) == pytest.approx(mu + norm.ppf(q) * sd, abs=0.06 * sd), q


def test_predictive_with_known_parameters_is_the_noise_alone(toy):
    """With the parameters known (a covariance of 1e-12), the spread is the figure's noise:
    log-quantiles mu + z_q hypot(precision, discrepancy), within the same Monte Carlo bound."""
    problem, mode, _ = toy
    c, a, _, prec = TOY_ITEMS["B"]
    mu = c + a @ (mode[:2] - PRIOR_MEAN)
    noise = math.hypot(prec, D0)
    cov = np.eye(3) * 1e-12
    rng = np.random.default_rng(2)
    got = predictive(problem, "B", mode, cov, np.array([1.0]), draws=20000, rng=rng)
    for value, q in zip(got, (0.05, 0.5, 0.95), strict=True):
        assert math.log(value) == pytest.approx(mu + norm.ppf(q) * noise, abs=0.06 * noise), q


def test_predictive_is_seeded(toy):
    problem, mode, _ = toy
    cov = np.diag([0.01, 0.01, D_SD**2])
    a = predictive(problem, "B", mode, cov, np.array([1.0]), draws=64, rng=np.random.default_rng(4))
    b = predictive(problem, "B", mode, cov, np.array([1.0]), draws=64, rng=np.random.default_rng(4))
    assert a == b
    assert a[0] <= a[1] <= a[2]
