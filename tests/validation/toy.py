"""A toy calibration problem with a closed-form answer, shared by the posterior and
leave-one-out tests: items whose log-values are linear in two log-scale parameters, a Gaussian
prior, and a discrepancy its prior pins, so the posterior is the conjugate normal one."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import norm

from rdusim.uncertainty.parameters import BY_NAME, PARAMETERS, Scale
from rdusim.validation.items import Evidence, Item, Measure, Metric, PriorsFile
from rdusim.validation.posterior import Problem

Z90 = float(norm.ppf(0.95))

# --- the toy problem -----------------------------------------------------------------------------

TOY_PARAMS = (BY_NAME["p2p_bandwidth"], BY_NAME["argument_load_s"])  # both on the log scale
PRIOR_MEAN = np.array([math.log(2e11), math.log(1e-5)])
PRIOR_SD = np.array([1.0, 0.8])
D0, D_SD = 0.05, 1e-4  # the discrepancy: pinned by its prior


def toy_priors() -> PriorsFile:
    entries = {}
    for p in PARAMETERS:  # the others are not in the toy's parameters; any valid prior will do
        lo, hi = (0.5, 0.9) if p.scale == Scale.LOGIT else (1.0, 10.0)
        entries[p.name] = {"low": lo, "high": hi, "source": "unused"}
    for p, m, s in zip(TOY_PARAMS, PRIOR_MEAN, PRIOR_SD, strict=True):
        entries[p.name] = {
            "low": math.exp(m - Z90 * s),
            "high": math.exp(m + Z90 * s),
            "source": "toy",
        }
    d = {"low": D0 * math.exp(-Z90 * D_SD), "high": D0 * math.exp(Z90 * D_SD), "source": "toy"}
    return PriorsFile.model_validate({"parameters": entries, "discrepancy": d})


def toy_item(item_id: str, value: float, precision: float) -> Item:
    return Item(
        id=item_id,
        quantity="toy",
        where="here",
        value=value,
        unit="s",
        precision=precision,
        use="fit",
        measure=Measure(metric=Metric.TOTAL_LATENCY_S, mapping="toy"),
    )


@dataclass
class LinearModel:
    """An item model whose log-value is c + a . (u - PRIOR_MEAN), u the parameters' logs."""

    item: Item
    c: float
    a: np.ndarray
    group: str = ""
    group_readings: list = field(default_factory=lambda: [()])
    own_readings: list = field(default_factory=lambda: [()])
    over_readings: list = field(default_factory=lambda: [()])
    calls: int = 0

    def __post_init__(self) -> None:
        self.group = self.group or self.item.id

    @property
    def metric(self) -> Metric:
        return Metric.TOTAL_LATENCY_S

    def predict(self, theta, cache=None) -> np.ndarray:
        self.calls += 1
        u = np.array([math.log(theta[p.name]) for p in TOY_PARAMS])
        return np.array([[math.exp(self.c + float(self.a @ (u - PRIOR_MEAN)))]])

    def predict_reading(self, theta, a, b, cache=None) -> float:
        return float(self.predict(theta)[a, b])


# item -> (c, a, observed log-value minus c, precision)
TOY_ITEMS = {
    "A": (0.0, np.array([1.0, 0.5]), 0.6, 0.05),
    "B": (1.0, np.array([-0.3, 1.2]), -0.5, 0.1),
    "C": (-2.0, np.array([0.4, -0.2]), 0.2, 0.08),
}


def toy_problem(items=("A", "B", "C")) -> Problem:
    models = {}
    for i in items:
        c, a, dy, prec = TOY_ITEMS[i]
        models[i] = LinearModel(toy_item(i, math.exp(c + dy), prec), c, a)
    return Problem(Evidence([], toy_priors()), models, list(items), parameters=TOY_PARAMS)


def analytic_posterior(items=("A", "B", "C")) -> tuple[np.ndarray, np.ndarray]:
    """The conjugate normal posterior of the two log-parameters."""
    precision = np.diag(1.0 / PRIOR_SD**2)
    shift = np.zeros(2)
    for i in items:
        _, a, dy, prec = TOY_ITEMS[i]
        s2 = prec**2 + D0**2
        precision += np.outer(a, a) / s2
        shift += a * dy / s2
    cov = np.linalg.inv(precision)
    return PRIOR_MEAN + cov @ shift, cov
