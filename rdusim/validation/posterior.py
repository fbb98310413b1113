"""Calibration as inference: the posterior of the calibrated parameters given the evidence.

The unknowns are the calibrated parameters on their free scales (log, or logit for fractions)
and the model's discrepancy (log). Their prior is `priors.yaml`; the likelihood is
`rdusim.validation.likelihood` over the fitted items, each item's value computed by its runs
re-priced under the parameters (`rdusim.validation.measures`).

The posterior is found in three documented steps:

1. **Mode.** Gauss-Newton with a trust region: the items' log-values are linearised in the
   parameters (a Jacobian by forward differences, one model evaluation per parameter), the
   linearised posterior, cheap to evaluate, is maximised within the region, and the step is
   kept if the true posterior agrees; the region grows or shrinks with the agreement.
2. **Laplace.** The covariance is the inverse of the linearised posterior's curvature at the mode
   (the Hessian of its negative log, by central differences), made positive definite.
3. **Sampling.** emcee's affine-invariant ensemble sampler explores the linearised posterior
   (bounds, mixtures over readings and all, with no model evaluation: it is vectorised over the
   walkers), started around the mode with the Laplace covariance. Draws spread over its chain are
   then priced exactly and weighted by their true posterior over their linearised one
   (importance sampling); a seeded systematic resample of the weights gives the ensemble. The
   effective sample size says how well the linearisation matched.

A parameter the evidence does not constrain keeps its prior's width: that is the honest answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import minimize
from scipy.special import logsumexp

from rdusim.uncertainty.parameters import PARAMETERS, Parameter, Scale
from rdusim.validation.items import Evidence, Item, Metric, Prior, Use
from rdusim.validation.likelihood import (
    Group,
    groups_of,
    log_values,
    responsibilities,
    total_loglik,
)
from rdusim.validation.measures import ItemModel, Runs, Theta, item_model

Z90 = 1.6448536269514722  # the standard normal's 95th percentile: 90% lies within +-Z90
Progress = Callable[[str], None]


def prior_moments(p: Parameter | None, prior: Prior) -> tuple[float, float]:
    """(mean, sd) on the free scale of a prior with 90% of its mass in [low, high]."""
    if p is None:  # the discrepancy: log scale
        lo, hi = math.log(prior.low), math.log(prior.high)
    else:
        lo, hi = p.to_free(prior.low), p.to_free(prior.high)
    return (lo + hi) / 2, (hi - lo) / (2 * Z90)


@dataclass
class Problem:
    """The evidence as a function of the free parameters."""

    evidence: Evidence
    models: dict[str, ItemModel]
    fitted: list[str]
    parameters: tuple[Parameter, ...] = PARAMETERS
    evaluations: int = 0
    mean: np.ndarray = field(init=False)
    sd: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        moments = [
            prior_moments(p, self.evidence.priors.parameters[p.name]) for p in self.parameters
        ]
        moments.append(prior_moments(None, self.evidence.priors.discrepancy))
        self.mean = np.array([m for m, _ in moments])
        self.sd = np.array([s for _, s in moments])
        self.items: dict[str, Item] = {i: m.item for i, m in self.models.items()}
        self.group_names = {i: m.group for i, m in self.models.items()}

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parameters] + ["discrepancy"]

    @property
    def dim(self) -> int:
        return len(self.parameters) + 1

    def theta(self, u: np.ndarray) -> Theta:
        return {p.name: p.from_free(float(x)) for p, x in zip(self.parameters, u, strict=False)}

    def discrepancy(self, u: np.ndarray) -> float:
        return math.exp(float(u[-1]))

    def free(self, values: Theta, discrepancy: float) -> np.ndarray:
        return np.array(
            [p.to_free(values[p.name]) for p in self.parameters] + [math.log(discrepancy)]
        )

    def groups(self, items: Sequence[str]) -> list[Group]:
        return groups_of(self.group_names, items)

    # --- model evaluations -------------------------------------------------------------------

    def log_values(
        self, u: np.ndarray, items: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Every item's log-values under `u` (one model evaluation)."""
        self.evaluations += 1
        theta = self.theta(u)
        cache: dict = {}
        return {
            i: log_values(self.models[i].predict(theta, cache))
            for i in (items if items is not None else self.models)
        }

    def log_parameters(self, u: np.ndarray) -> np.ndarray:
        """The parameters' logarithms (the discrepancy's free value kept last), for one vector
        or each row of a batch."""
        out = np.array(u, dtype=float, copy=True)
        for k, p in enumerate(self.parameters):
            if p.scale == Scale.LOGIT:
                out[..., k] = -np.logaddexp(0.0, -out[..., k])  # log(sigmoid(u))
        return out

    def capacity_log_values(self, item_id: str) -> Callable[[np.ndarray], np.ndarray]:
        """The log-values of a capacity item as a function of `u`: arithmetic on the runs' HBM
        plans, no pricing."""
        model = self.models[item_id]
        k = [p.name for p in self.parameters].index("hbm_usable_fraction")
        p = self.parameters[k]

        def f(u: np.ndarray) -> np.ndarray:
            return log_values(model.predict({p.name: p.from_free(float(u[k]))}, {}))

        return f

    # --- the posterior -----------------------------------------------------------------------

    def log_prior(self, u: np.ndarray) -> Any:
        """The log prior of one parameter vector, or of each row of a batch."""
        r = (u - self.mean) / self.sd
        return -0.5 * np.sum(r * r, axis=-1)

    def log_post_at(self, u: np.ndarray, z: dict[str, np.ndarray], items: Sequence[str]) -> Any:
        """The log posterior given the items' log-values `z` at `u` (a vector, or a batch of
        vectors with a batch of log-values)."""
        d = np.exp(u[..., -1])
        return self.log_prior(u) + total_loglik(self.groups(items), self.items, z, d)

    def log_post(self, u: np.ndarray, items: Sequence[str] | None = None) -> float:
        items = self.fitted if items is None else items
        return self.log_post_at(u, self.log_values(u, items), items)


@dataclass
class Linearised:
    """The items' log-values as a linear function of the parameters around `u0`; items whose
    value is a step function of a parameter (a maximum batch, by usable HBM) are computed
    exactly instead, which costs no pricing."""

    u0: np.ndarray
    z0: dict[str, np.ndarray]
    jac: dict[str, np.ndarray]  # item -> (parameters, *value shape)
    exact: dict[str, Callable[[np.ndarray], np.ndarray]] = field(default_factory=dict)

    basis: Callable[[np.ndarray], np.ndarray] = field(default=lambda u: u)

    def at(self, u: np.ndarray) -> dict[str, np.ndarray]:
        """Log-values at `u`, or at each row of a batch `u` (then with a leading batch axis)."""
        du = self.basis(u) - self.basis(self.u0)
        n = du.shape[-1] - 1  # the discrepancy moves no model value
        out = {}
        for i, z in self.z0.items():
            if i in self.exact:
                f = self.exact[i]
                out[i] = f(u) if u.ndim == 1 else np.stack([f(row) for row in u])
            else:
                out[i] = z + np.tensordot(du[..., :n], self.jac[i], axes=1)
        return out


def linearise(problem: Problem, u0: np.ndarray, step: float = 1e-3) -> Linearised:
    """Log-values linear in the parameters' logarithms around `u0`. Times are sums of terms in
    rates and durations, so their logarithm is nearer linear in the logarithm of a rate than
    in its logit; the sampler still moves on the free scale."""
    z0 = problem.log_values(u0)
    n = len(problem.parameters)
    basis = problem.log_parameters
    b0 = basis(u0)
    jac: dict[str, np.ndarray] = {i: np.zeros((n, *z.shape)) for i, z in z0.items()}
    for k in range(n):
        u = u0.copy()
        u[k] += step
        db = basis(u)[k] - b0[k]
        zk = problem.log_values(u)
        for i in z0:
            jac[i][k] = (zk[i] - z0[i]) / db
    exact = {
        i: problem.capacity_log_values(i)
        for i in z0
        if problem.models[i].metric == Metric.MAX_BATCH
    }
    return Linearised(u0.copy(), z0, jac, exact, basis)


def _maximise(
    f: Callable[[np.ndarray], Any],
    u0: np.ndarray,
    bounds: list[tuple[float, float]],
    h: float = 1e-6,
) -> np.ndarray:
    """The maximum of `f` (which takes a batch of points) within `bounds`, by L-BFGS-B with
    central-difference gradients computed in one batched call."""
    n = len(u0)
    eye = np.eye(n) * h

    def value_and_grad(u: np.ndarray) -> tuple[float, np.ndarray]:
        v = np.asarray(f(np.vstack([u, u + eye, u - eye])), dtype=float)
        return -float(v[0]), -(v[1 : n + 1] - v[n + 1 :]) / (2 * h)

    res = minimize(value_and_grad, u0, jac=True, method="L-BFGS-B", bounds=bounds)
    return np.asarray(res.x, dtype=float)


def find_mode(
    problem: Problem,
    u0: np.ndarray,
    items: Sequence[str] | None = None,
    *,
    max_iterations: int = 12,
    radius: float = 1.0,
    progress: Progress | None = None,
) -> tuple[np.ndarray, Linearised]:
    """The posterior mode by trust-region Gauss-Newton (see the module's docstring)."""
    items = list(problem.fitted if items is None else items)
    u = u0.copy()
    lin = linearise(problem, u)
    current = problem.log_post_at(u, lin.z0, items)
    for it in range(max_iterations):
        box = [(x - radius, x + radius) for x in u]

        def surrogate(v: np.ndarray, lin: Linearised = lin) -> float:
            return problem.log_post_at(v, lin.at(v), items)

        cand = _maximise(surrogate, u, box)
        predicted = surrogate(cand) - current
        actual_lp = problem.log_post(cand, items)
        gain = actual_lp - current
        if progress:
            progress(f"mode: iteration {it + 1}, log posterior {max(actual_lp, current):.3f}")
        if gain > 0:
            u, current = cand, actual_lp
            if predicted > 0 and gain > 0.5 * predicted:
                radius = min(radius * 2, 4.0)
            lin = linearise(problem, u)
            if gain < 1e-3:
                break
        else:
            radius /= 4
            if radius < 1e-3:
                break
    return u, lin


def curvature(f: Callable[[np.ndarray], np.ndarray], u: np.ndarray, h: float = 1e-3) -> np.ndarray:
    """The Hessian of `f` at `u` by central differences; `f` takes a batch of points (rows)
    and returns one value per row, so every difference is one call."""
    n = len(u)
    eye = np.eye(n) * h
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    points = [u, *(u + e for e in eye), *(u - e for e in eye)]
    for i, j in pairs:
        points += [
            u + eye[i] + eye[j],
            u + eye[i] - eye[j],
            u - eye[i] + eye[j],
            u - eye[i] - eye[j],
        ]
    v = np.asarray(f(np.array(points)), dtype=float)
    f0, plus, minus = v[0], v[1 : n + 1], v[n + 1 : 2 * n + 1]
    hess = np.diag((plus - 2 * f0 + minus) / h**2)
    for k, (i, j) in enumerate(pairs):
        a, b, c, d = v[2 * n + 1 + 4 * k : 2 * n + 5 + 4 * k]
        hess[i, j] = hess[j, i] = (a - b - c + d) / (4 * h * h)
    return hess


def laplace_covariance(
    problem: Problem, lin: Linearised, u: np.ndarray, items: Sequence[str]
) -> np.ndarray:
    """The inverse curvature of the linearised negative log posterior at `u`, its eigenvalues
    floored so it is positive definite (a direction with no curvature keeps the prior's)."""

    def neg(v: np.ndarray) -> np.ndarray:
        return -np.asarray(problem.log_post_at(v, lin.at(v), items))

    hess = curvature(neg, u)
    hess = (hess + hess.T) / 2
    w, v = np.linalg.eigh(hess)
    floor = 1.0 / np.max(problem.sd) ** 2
    w = np.maximum(w, floor)
    return (v / w) @ v.T


@dataclass
class Sample:
    """Weighted draws of the free parameters, each with every item's log-values."""

    u: np.ndarray  # (draws, dim)
    log_weights: np.ndarray
    z: list[dict[str, np.ndarray]]

    @property
    def weights(self) -> np.ndarray:
        w = np.exp(self.log_weights - logsumexp(self.log_weights))
        return w / w.sum()

    @property
    def effective_size(self) -> float:
        w = self.weights
        return float(1.0 / np.sum(w * w))


def surrogate_chain(
    problem: Problem,
    lin: Linearised,
    mode: np.ndarray,
    cov: np.ndarray,
    *,
    walkers: int = 32,
    steps: int = 4000,
    burn: int = 1000,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Draws from the linearised posterior by emcee's affine-invariant ensemble sampler
    (vectorised over walkers: the linearised posterior costs no model evaluation), with their
    linearised log posterior and the chain's longest integrated autocorrelation time."""
    import emcee

    rng = np.random.default_rng(seed)
    start = _gaussian_draws(rng, mode, cov * 0.25, walkers)

    def log_prob(u: np.ndarray) -> np.ndarray:
        return np.asarray(problem.log_post_at(u, lin.at(u), problem.fitted), dtype=float)

    sampler = emcee.EnsembleSampler(walkers, len(mode), log_prob, vectorize=True)
    sampler.random_state = np.random.RandomState(seed % (2**32)).get_state()
    sampler.run_mcmc(start, steps, progress=False)
    # tol=0: report the estimate; the chain length is judged by the caller (steps / tau)
    tau = float(np.max(sampler.get_autocorr_time(discard=burn, quiet=True, tol=0)))
    chain = sampler.get_chain(discard=burn, flat=True)
    logp = sampler.get_log_prob(discard=burn, flat=True)
    return chain, logp, tau


def _gaussian_draws(
    rng: np.random.Generator, mean: np.ndarray, cov: np.ndarray, n: int
) -> np.ndarray:
    return rng.multivariate_normal(mean, cov, size=n, method="eigh")


def importance_sample(
    problem: Problem,
    chain: np.ndarray,
    chain_logp: np.ndarray,
    *,
    draws: int,
    seed: int,
    progress: Progress | None = None,
) -> Sample:
    """`draws` of the surrogate chain, spread evenly over it, weighted by their true posterior
    over their linearised one: the correction for what the linearisation misses."""
    rng = np.random.default_rng(seed)
    picks = np.sort(rng.choice(len(chain), size=min(draws, len(chain)), replace=False))
    x, logq = chain[picks], chain_logp[picks]
    draws = len(picks)
    lw = np.empty(draws)
    zs: list[dict[str, np.ndarray]] = []
    for k in range(draws):
        z = problem.log_values(x[k])
        zs.append(z)
        lw[k] = problem.log_post_at(x[k], z, problem.fitted) - logq[k]
        if progress and (k + 1) % 16 == 0:
            progress(f"importance sampling: {k + 1}/{draws}")
    return Sample(x, lw, zs)


def systematic_resample(weights: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Indices of `n` draws resampled in proportion to `weights` (systematic, seeded)."""
    rng = np.random.default_rng(seed)
    positions = (rng.random() + np.arange(n)) / n
    cum = np.cumsum(weights)
    cum[-1] = 1.0
    return np.searchsorted(cum, positions)


def build_problem(
    evidence: Evidence,
    *,
    items: Sequence[str] | None = None,
    runs: Runs | None = None,
    progress: Progress | None = None,
) -> Problem:
    """The fitted and held-out items' models, every run simulated once."""
    runs = runs or Runs(progress)
    wanted = list(items) if items is not None else evidence.ids(Use.FIT, Use.HOLDOUT)
    models = {i: item_model(evidence, i, runs) for i in wanted}
    fitted = [i for i in wanted if evidence.item(i).use == Use.FIT]
    return Problem(evidence, models, fitted)


def reading_weights(
    problem: Problem, u: np.ndarray, z: dict[str, np.ndarray], items: Sequence[str]
) -> dict[str, np.ndarray]:
    """For each group of `items`: how much each of its shared readings explains them at `u`."""
    d = problem.discrepancy(u)
    return {g.name: responsibilities(g, problem.items, z, d) for g in problem.groups(items)}
