"""`rdusim.validation.posterior` on a toy problem with a closed-form answer: two items whose
log-values are linear in two log-scale parameters, a Gaussian prior, and a discrepancy the prior
pins. The mode, the Laplace covariance and the sampler's draws are compared with the conjugate
normal posterior computed here; the helpers (prior moments, curvature, resampling) with scipy
and brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from rdusim.uncertainty.parameters import BY_NAME, PARAMETERS
from rdusim.validation.items import (
    Prior,
    shipped_evidence,
)
from rdusim.validation.posterior import (
    curvature,
    find_mode,
    laplace_covariance,
    linearise,
    prior_moments,
    surrogate_chain,
    systematic_resample,
)
from tests.validation.toy import (
    D0,
    D_SD,
    PRIOR_MEAN,
    PRIOR_SD,
    TOY_ITEMS,
    analytic_posterior,
    toy_problem,
)

# --- prior moments -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [p.name for p in PARAMETERS] + ["discrepancy"])
def test_shipped_priors_put_90_percent_of_their_mass_in_their_range(name):
    priors = shipped_evidence().priors
    if name == "discrepancy":
        prior, to_free = priors.discrepancy, math.log
        mean, sd = prior_moments(None, prior)
    else:
        p = BY_NAME[name]
        prior, to_free = priors.parameters[name], p.to_free
        mean, sd = prior_moments(p, prior)
    lo, hi = to_free(prior.low), to_free(prior.high)
    mass = norm.cdf(hi, mean, sd) - norm.cdf(lo, mean, sd)
    assert mass == pytest.approx(0.90, abs=1e-9)
    assert norm.cdf(lo, mean, sd) == pytest.approx(0.05, abs=1e-9)  # and symmetrically


@settings(deadline=None)
@given(low=st.floats(1e-8, 1e8), ratio=st.floats(1.001, 1e4))
def test_a_log_prior_has_90_percent_in_range(low, ratio):
    prior = Prior(low=low, high=low * ratio, source="toy")
    mean, sd = prior_moments(BY_NAME["p2p_latency_s"], prior)
    assert mean == pytest.approx(math.log(low * math.sqrt(ratio)), rel=1e-12, abs=1e-12)
    mass = norm.cdf(math.log(low * ratio), mean, sd) - norm.cdf(math.log(low), mean, sd)
    assert mass == pytest.approx(0.90, abs=1e-9)


@settings(deadline=None)
@given(low=st.floats(0.01, 0.9), width=st.floats(0.01, 0.5))
def test_a_logit_prior_has_90_percent_in_range_on_the_logit_scale(low, width):
    high = min(low + width, 0.99)
    prior = Prior(low=low, high=high, source="toy")
    mean, sd = prior_moments(BY_NAME["hbm_efficiency"], prior)
    lo, hi = math.log(low / (1 - low)), math.log(high / (1 - high))
    assert norm.cdf(hi, mean, sd) - norm.cdf(lo, mean, sd) == pytest.approx(0.90, abs=1e-9)


def start() -> np.ndarray:
    return np.array([*PRIOR_MEAN, math.log(D0)])


def test_toy_problem_has_the_priors_it_was_given():
    problem = toy_problem()
    assert problem.dim == 3
    assert problem.names == ["p2p_bandwidth", "argument_load_s", "discrepancy"]
    assert problem.mean == pytest.approx([*PRIOR_MEAN, math.log(D0)], rel=1e-12)
    assert problem.sd == pytest.approx([*PRIOR_SD, D_SD], rel=1e-9)
    u = start()
    assert problem.theta(u) == pytest.approx({"p2p_bandwidth": 2e11, "argument_load_s": 1e-5})
    assert problem.discrepancy(u) == pytest.approx(D0)
    assert problem.free(problem.theta(u), D0) == pytest.approx(u)


def test_log_post_is_the_closed_form_up_to_a_constant():
    problem = toy_problem()
    rng = np.random.default_rng(0)

    def by_hand(u):
        lp = -0.5 * np.sum(((u - problem.mean) / problem.sd) ** 2)
        for c, a, dy, prec in TOY_ITEMS.values():
            s = math.hypot(prec, math.exp(u[2]))
            lp += norm.logpdf(c + dy, loc=c + a @ (u[:2] - PRIOR_MEAN), scale=s)
        return lp

    for _ in range(5):
        u = start() + rng.normal(0, [0.5, 0.5, 1e-4])
        assert problem.log_post(u) == pytest.approx(by_hand(u), rel=1e-10)


def test_find_mode_lands_on_the_analytic_posterior_mean():
    problem = toy_problem()
    mean, cov = analytic_posterior()
    mode, lin = find_mode(problem, start())
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(mode[:2] - mean) < 1e-3 * sd), (mode[:2] - mean) / sd
    assert mode[2] == pytest.approx(math.log(D0), abs=3 * D_SD)
    # the linearisation of a linear model is the model
    assert lin.at(mode)["A"] == pytest.approx(problem.log_values(mode)["A"], abs=1e-8)


def test_laplace_covariance_is_the_analytic_posterior_covariance():
    problem = toy_problem()
    mean, cov = analytic_posterior()
    u = np.array([*mean, math.log(D0)])
    lin = linearise(problem, u)
    got = laplace_covariance(problem, lin, u, problem.fitted)
    assert got.shape == (3, 3)
    assert got[:2, :2] == pytest.approx(cov, rel=1e-4, abs=1e-8)
    assert math.sqrt(got[2, 2]) == pytest.approx(D_SD, rel=0.01)  # the prior's
    assert np.all(np.linalg.eigvalsh(got) > 0)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 5),
)
def test_curvature_of_a_quadratic_is_its_hessian(seed, n):
    rng = np.random.default_rng(seed)
    m = rng.normal(size=(n, n))
    hess = m + m.T
    b = rng.normal(size=n)
    u0 = rng.normal(size=n)

    def f(us: np.ndarray) -> np.ndarray:
        return 0.5 * np.einsum("ki,ij,kj->k", us, hess, us) + us @ b + 3.0

    got = curvature(f, u0)
    assert got == pytest.approx(hess, abs=1e-5)
    assert np.array_equal(got, got.T)


def test_curvature_evaluates_f_once():
    calls = []

    def f(us):
        calls.append(len(us))
        return np.sum(us**2, axis=1)

    got = curvature(f, np.zeros(3))
    assert calls == [1 + 2 * 3 + 4 * 3]  # centre, +-each axis, four corners per pair
    assert got == pytest.approx(2 * np.eye(3), abs=1e-6)


weights = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30).filter(lambda w: sum(w) > 1e-3)


@settings(max_examples=200, deadline=None)
@given(w=weights, n=st.integers(1, 300), seed=st.integers(0, 2**32 - 1))
def test_systematic_resample_keeps_each_count_within_one_of_its_share(w, n, seed):
    w = np.array(w) / np.sum(w)
    picks = systematic_resample(w, n, seed)
    assert len(picks) == n
    assert np.all((picks >= 0) & (picks < len(w)))
    counts = np.bincount(picks, minlength=len(w))
    assert np.all(np.abs(counts - n * w) <= 1 + 1e-9), (counts, n * w)
    assert np.all(counts[w == 0] == 0)
    assert np.all(np.diff(picks) >= 0)  # systematic: in order


@settings(deadline=None)
@given(w=weights, n=st.integers(1, 100), seed=st.integers(0, 2**32 - 1))
def test_systematic_resample_is_deterministic_for_a_seed(w, n, seed):
    w = np.array(w) / np.sum(w)
    assert np.array_equal(systematic_resample(w, n, seed), systematic_resample(w, n, seed))


def test_systematic_resample_depends_on_the_seed():
    w = np.full(10, 0.1)
    draws = {tuple(systematic_resample(w, 5, seed)) for seed in range(20)}
    assert len(draws) > 1  # the offset moves which five of the ten are drawn


def test_surrogate_chain_samples_the_analytic_posterior():
    """32 walkers x 1000 kept steps with an autocorrelation of a few tens of steps: several
    hundred effective draws, so the mean lands within ~0.05 sd and each sd within ~5%; the
    bounds allow about three times that."""
    problem = toy_problem()
    mean, cov = analytic_posterior()
    u = np.array([*mean, math.log(D0)])
    lin = linearise(problem, u)
    lap = laplace_covariance(problem, lin, u, problem.fitted)
    chain, logp, tau = surrogate_chain(problem, lin, u, lap, steps=1200, burn=200, seed=5)
    assert chain.shape == (32 * 1000, 3) and logp.shape == (32 * 1000,)
    assert 0 < tau < 150
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(chain[:, :2].mean(axis=0) - mean) < 0.15 * sd)
    got = np.cov(chain[:, :2].T)
    assert np.sqrt(np.diag(got)) == pytest.approx(sd, rel=0.1)
    corr = cov[0, 1] / (sd[0] * sd[1])
    assert got[0, 1] / np.sqrt(got[0, 0] * got[1, 1]) == pytest.approx(corr, abs=0.08)
    # the chain's log posterior is the problem's
    k = len(chain) // 2
    want = problem.log_post_at(chain[k], lin.at(chain[k]), problem.fitted)
    assert logp[k] == pytest.approx(want, rel=1e-10)
    # seeded
    a, _, _ = surrogate_chain(problem, lin, u, lap, steps=60, burn=10, seed=9)
    b, _, _ = surrogate_chain(problem, lin, u, lap, steps=60, burn=10, seed=9)
    assert np.array_equal(a, b)
