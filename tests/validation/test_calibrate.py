"""`rdusim.validation.calibrate`: what the fit matches, the statistics it reports (against a
closed-form regression and a simulation of it), when it calls a fit unidentifiable, and that the
shipped presets hold its result."""

from __future__ import annotations

import numpy as np
import pytest

from rdusim.spec.hardware import load_hardware
from rdusim.validation import calibrate as cal
from rdusim.validation import paper as pp


def test_fit_cells_are_the_fitted_comparison_cells():
    hw = load_hardware("sn40l-16")
    got = cal.fit_cells(hw)
    cells = pp.comparison_cells("all", hw)
    want = [c for c in cells["table4"] if c.table == "table4" and c.bound == "band"]
    want += [c for c in cells["table5"] if c.item == "128K throughput (SnapStream)"]
    want += cells["looping"]
    assert [(g.table, g.item) for g in got] == [(w.table, w.item) for w in want]
    for g, w in zip(got, want, strict=True):
        assert g.simulated == pytest.approx(w.simulated, rel=1e-12)
        assert (g.published, g.tolerance) == (w.published, w.tolerance)
    r = cal.residuals(hw)
    assert r == pytest.approx([(w.simulated - w.published) / w.tolerance for w in want])


def test_fitted_parameters_and_their_sources():
    assert len(cal.FITTED_PARAMS) <= 8
    fields = set(type(load_hardware("sn40l-16").calibration).model_fields)
    assert set(cal.FITTED_ON) == fields and len(fields) <= 8
    for name in cal.FITTED_PARAMS:
        assert cal.FITTED_ON[name].startswith("fitted:")
        lo, hi = cal.BOUNDS[name]
        assert lo < getattr(load_hardware("sn40l-16").calibration, name) < hi


def test_statistics_match_ordinary_least_squares():
    """For a linear model the reported standard errors are OLS's, s^2 (J^T J)^-1, and they
    describe how the estimate scatters over repeated noise (simulated here)."""
    rng = np.random.default_rng(7)
    jac = rng.normal(size=(12, 3))
    beta = np.array([2.0, -1.0, 0.5])
    sigma = 0.3
    estimates = []
    for _ in range(4000):
        y = jac @ beta + rng.normal(scale=sigma, size=12)
        estimates.append(np.linalg.lstsq(jac, y, rcond=None)[0])
    spread = np.std(estimates, axis=0)
    y = jac @ beta + rng.normal(scale=sigma, size=12)
    fit = np.linalg.lstsq(jac, y, rcond=None)[0]
    resid = jac @ fit - y
    stderr, corr, cond = cal._statistics(jac, resid, fit)
    s2 = resid @ resid / (12 - 3)
    assert stderr == pytest.approx(np.sqrt(np.diag(s2 * np.linalg.inv(jac.T @ jac))), rel=1e-9)
    assert stderr == pytest.approx(spread, rel=0.35)  # one noise draw vs 4000
    assert np.diag(corr) == pytest.approx(np.ones(3))
    assert cond == pytest.approx(np.linalg.cond(jac * fit), rel=1e-9)


def test_condition_number_of_relative_sensitivities():
    jac = np.array([[1.0, 0.0], [0.0, 10.0], [0.0, 0.0]])
    _, _, cond = cal._statistics(jac, np.array([0.1, 0.1, 0.1]), np.array([1.0, 1.0]))
    assert cond == pytest.approx(10.0)
    _, _, cond = cal._statistics(jac, np.array([0.1, 0.1, 0.1]), np.array([10.0, 1.0]))
    assert cond == pytest.approx(1.0)  # the first parameter's sensitivity per relative change


def test_problems_name_what_is_wrong():
    values = {n: 1.0 for n in cal.FITTED_PARAMS}
    stderr = {n: 0.1 for n in cal.FITTED_PARAMS}
    at_bound = dict.fromkeys(cal.FITTED_PARAMS, False)
    corr = np.eye(len(cal.FITTED_PARAMS))
    assert cal._problems(values, stderr, at_bound, corr, 2.0) == []
    a, b = cal.FITTED_PARAMS[:2]
    corr[0, 1] = corr[1, 0] = 0.99
    stderr[a] = 0.9
    at_bound[b] = True
    problems = " | ".join(cal._problems(values, stderr, at_bound, corr, 5e3))
    assert f"{b} sits at its bound" in problems
    assert f"{a} and {b} are correlated +0.990" in problems
    assert "condition number 5e+03" in problems
    assert f"{a} has a relative standard error of 90%" in problems


@pytest.mark.slow
def test_the_shipped_presets_hold_an_identifiable_fit():
    hw = load_hardware("sn40l-16")
    result = cal.fit(hw)
    assert result.identifiable, result.problems
    for name in cal.FITTED_PARAMS:
        # the shipped value is the fit's, to the three digits the preset keeps
        assert getattr(hw.calibration, name) == pytest.approx(result.values[name], rel=2e-3)
    d = result.as_dict()
    assert set(d["parameters"][cal.FITTED_PARAMS[0]]) == {"value", "stderr", "at_bound"}
    assert len(d["correlation"]) == len(cal.FITTED_PARAMS)
    assert d["condition_number"] < cal.MAX_CONDITION
