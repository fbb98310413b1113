"""Leave-one-out validation: each fitted item predicted by a posterior fitted without it.

For each fitted item the posterior is refitted without it: its mode found again on the
linearised posterior (`rdusim.validation.posterior`, linearised at the full fit's mode) and its
Laplace covariance taken there. Parameter sets drawn from that refit price the item exactly
(its runs re-priced, not linearised); the reading of a shared deployment is drawn in proportion
to how well it explains the deployment's other items, an item's own readings with equal weight;
and the model's discrepancy and the figure's precision are added as noise. The 5th, 50th and
95th percentiles of the draws are the item's predictive interval. Held-out items are predicted
the same way from the full fit.

Two null models that know nothing of the machine's internals stand beside each prediction:
**constant**, one step time for every decode figure (the geometric mean of the other fitted
decode figures' steps), equal kernel shares, no speed-up from looping; and **roofline**, every
run at peak HBM bandwidth or peak FLOPs with free kernel calls.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from rdusim.sim.kernel import KernelTiming
from rdusim.sim.model import LayerResult, SimResult
from rdusim.validation.items import Bound, Item, Metric, Use
from rdusim.validation.likelihood import responsibilities, sigma
from rdusim.validation.measures import ItemModel, Run
from rdusim.validation.posterior import Linearised, Problem, _maximise, laplace_covariance

DRAWS = 160  # parameter sets per predicted item
SEED = 7
Progress = Callable[[str], None]
RATE_METRICS = (Metric.THROUGHPUT, Metric.PER_USER)  # "decode throughput items"
STEP_METRICS = (Metric.THROUGHPUT, Metric.PER_USER, Metric.TPOT_S, Metric.REQUEST_LATENCY_S)


@dataclass
class Prediction:
    item_id: str
    source: str
    item: Item
    fitted: bool
    p05: float
    p50: float
    p95: float
    point: float  # the shipped reading at the point calibration
    null_constant: float | None
    null_roofline: float | None

    @property
    def inside_90(self) -> bool:
        """The published figure (or bound, or range) is consistent with the 90% interval."""
        b = self.item.bound
        if b == Bound.VALUE:
            return self.p05 <= self.item.low <= self.p95
        if b == Bound.LOWER:
            return self.p95 >= self.item.low
        if b == Bound.UPPER:
            return self.p05 <= self.item.high
        return self.p05 <= self.item.high and self.p95 >= self.item.low

    @property
    def relative_half_width(self) -> float:
        return (self.p95 - self.p05) / (2 * self.p50) if self.p50 > 0 else math.inf

    def log_error(self, value: float | None) -> float | None:
        """How far `value` lies from the published figure on the log scale (0 inside a bound
        or range it satisfies)."""
        if value is None or value <= 0:
            return None
        z = math.log(value)
        lo, hi = math.log(self.item.low), math.log(self.item.high)
        b = self.item.bound
        if b == Bound.LOWER:
            return min(0.0, z - lo)
        if b == Bound.UPPER:
            return max(0.0, z - hi)
        if b == Bound.RANGE:
            return min(0.0, z - lo) + max(0.0, z - hi)
        return z - lo

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.item_id,
            "source": self.source,
            "fitted": self.fitted,
            "measured": list(self.item.value)
            if isinstance(self.item.value, tuple)
            else self.item.value,
            "bound": self.item.bound.value,
            "unit": self.item.unit,
            "p05": self.p05,
            "p50": self.p50,
            "p95": self.p95,
            "point": self.point,
            "inside_90": self.inside_90,
            "log_error": {
                "rdusim": self.log_error(self.p50),
                "null_constant": self.log_error(self.null_constant),
                "null_roofline": self.log_error(self.null_roofline),
            },
            "known_miss": self.item.reason if self.item.use != Use.CONTEXT else None,
        }


# --- null models ------------------------------------------------------------------------------


def roofline_result(run: Run) -> SimResult:
    """The run with every kernel at peak HBM bandwidth or peak FLOPs, calls free."""
    res = run.result(None)
    socket = run.hardware.socket

    def timing(k: KernelTiming, flops: float) -> KernelTiming:
        t = max(k.hbm_bytes / socket.hbm.bandwidth, flops / socket.peak_bf16_flops)
        return KernelTiming(
            k.name, t, t, t, 0.0, k.executions, [], "roofline", k.hbm_bytes, k.p2p_bytes, 0.0, 0.0
        )

    def layer(lr: LayerResult, kernels_flops: list[float]) -> LayerResult:
        return LayerResult(
            lr.kind,
            lr.count,
            lr.runs,
            lr.looped,
            [timing(k, f) for k, f in zip(lr.kernels, kernels_flops, strict=False)],
            lr.role,
            lr.module,
        )

    p = res.program

    def flops(lp_kernels: list) -> list[float]:
        return [sum(o.flops for o in k.ops) for k in lp_kernels]

    return SimResult(
        p,
        {kind: layer(res.layers[kind], flops(lp.kernels)) for kind, lp in p.layers.items()},
        {name: layer(res.extras[name], flops(lp.kernels)) for name, lp in p.extras.items()},
    )


def _implied_step(model: ItemModel, value: float) -> float | None:
    """The one decode step a rate figure implies for the shipped reading's run."""
    roles = model.runs[(0, 0, 0)]
    res = roles["main"].result(None)
    tps = res.program.tokens_per_step
    batch = res.program.workload.batch
    m = model.metric
    if m == Metric.THROUGHPUT:
        return batch * tps / value
    if m == Metric.PER_USER:
        return tps / value
    if m == Metric.TPOT_S:
        return value * tps
    if m == Metric.REQUEST_LATENCY_S:
        out = model.item.measure.output_tokens if model.item.measure else None
        return value * tps / out if out else None
    return None


def _from_step(model: ItemModel, step: float) -> float | None:
    roles = model.runs[(0, 0, 0)]
    res = roles["main"].result(None)
    tps = res.program.tokens_per_step
    m = model.metric
    if m == Metric.THROUGHPUT:
        return res.program.workload.batch * tps / step
    if m == Metric.PER_USER:
        return tps / step
    if m == Metric.TPOT_S:
        return step / tps
    if m == Metric.REQUEST_LATENCY_S and model.item.measure and model.item.measure.output_tokens:
        return model.item.measure.output_tokens * step / tps
    return None


def null_constant(problem: Problem, item_id: str, others: Sequence[str]) -> float | None:
    """The constant null's value for `item_id`, fitted on `others`."""
    model = problem.models[item_id]
    m = model.metric
    if m in STEP_METRICS:
        steps = []
        for o in others:
            om = problem.models[o]
            if om.metric in STEP_METRICS and om.item.bound == Bound.VALUE:
                s = _implied_step(om, om.item.central)
                if s:
                    steps.append(math.log(s))
        return _from_step(model, math.exp(sum(steps) / len(steps))) if steps else None
    if m == Metric.SHARE:
        layer = model.item.measure.layer if model.item.measure else None
        res = model.runs[(0, 0, 0)]["main"].result(None)
        n = len(res.layers[layer].kernels) if layer in res.layers else 0
        picked = len(model.item.measure.kernels or []) if model.item.measure else 0
        return 100.0 * picked / n if n else None
    if m == Metric.SPEEDUP:
        return 1.0
    peers = [
        math.log(problem.items[o].central)
        for o in others
        if problem.models[o].metric == m and problem.items[o].unit == model.item.unit
    ]
    return math.exp(sum(peers) / len(peers)) if peers else None


def null_roofline(model: ItemModel) -> float | None:
    """The roofline null's value: the shipped reading with every run at peak, calls free."""
    if model.metric in (Metric.MAX_BATCH, Metric.NAIVE_INDEXING_BYTES, Metric.NAIVE_SRAM_RATIO):
        return None
    roles = model.runs[(0, 0, 0)]
    cache = {id(r): roofline_result(r) for r in roles.values()}
    return model._value(roles, None, cache)


# --- predictive intervals -----------------------------------------------------------------------


def _gaussian(rng: np.random.Generator, mean: np.ndarray, cov: np.ndarray, n: int) -> np.ndarray:
    return rng.multivariate_normal(mean, cov, size=n, method="eigh")


def predictive(
    problem: Problem,
    item_id: str,
    mean: np.ndarray,
    cov: np.ndarray,
    group_weights: np.ndarray,
    *,
    draws: int,
    rng: np.random.Generator,
) -> tuple[float, float, float]:
    """(p05, p50, p95) of the item's predictive distribution under N(mean, cov)."""
    model = problem.models[item_id]
    item = problem.items[item_id]
    us = _gaussian(rng, mean, cov, draws)
    values = np.empty(draws)
    n_group, n_own = len(model.group_readings), len(model.own_readings)
    for s, u in enumerate(us):
        a = int(rng.choice(n_group, p=group_weights))
        b = int(rng.integers(n_own))
        value = model.predict_reading(problem.theta(u), a, b)
        noise = rng.normal(0.0, sigma(item, problem.discrepancy(u)))
        values[s] = max(value, 1e-300) * math.exp(noise)
    q = np.percentile(values, [5, 50, 95])
    return float(q[0]), float(q[1]), float(q[2])


def _group_weights(
    problem: Problem, item_id: str, u: np.ndarray, z: dict[str, np.ndarray], others: Sequence[str]
) -> np.ndarray:
    """The item's shared readings weighted by how well they explain the group's other items."""
    model = problem.models[item_id]
    n = len(model.group_readings)
    peers = tuple(o for o in others if problem.models[o].group == model.group)
    if n == 1 or not peers:
        return np.full(n, 1.0 / n)
    from rdusim.validation.likelihood import Group

    return responsibilities(Group(model.group, peers), problem.items, z, problem.discrepancy(u))


def refit_without(
    problem: Problem, lin: Linearised, mode: np.ndarray, item_id: str
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The linearised posterior's mode and Laplace covariance without `item_id`."""
    others = [i for i in problem.fitted if i != item_id]

    def surrogate(v: np.ndarray) -> float:
        return problem.log_post_at(v, lin.at(v), others)

    box = [(x - 4.0, x + 4.0) for x in mode]
    u = _maximise(surrogate, mode, box)
    return u, laplace_covariance(problem, lin, u, others), others


def leave_one_out(
    problem: Problem,
    mode: np.ndarray,
    lin: Linearised,
    cov: np.ndarray,
    *,
    draws: int = DRAWS,
    seed: int = SEED,
    progress: Progress | None = None,
) -> list[Prediction]:
    """Every fitted item predicted without it, every held-out item by the full fit."""
    rng = np.random.default_rng(seed)
    out = []
    ids = list(problem.models)
    for n, item_id in enumerate(ids):
        if progress:
            progress(f"leave-one-out: {n + 1}/{len(ids)} {item_id}")
        fitted = item_id in problem.fitted
        if fitted:
            u, c, others = refit_without(problem, lin, mode, item_id)
        else:
            u, c, others = mode, cov, list(problem.fitted)
        weights = _group_weights(problem, item_id, u, lin.at(u), others)
        p05, p50, p95 = predictive(problem, item_id, u, c, weights, draws=draws, rng=rng)
        model = problem.models[item_id]
        out.append(
            Prediction(
                item_id=item_id,
                source=problem.evidence.source_of(item_id).id,
                item=model.item,
                fitted=fitted,
                p05=p05,
                p50=p50,
                p95=p95,
                point=model.point_value(),
                null_constant=null_constant(problem, item_id, others),
                null_roofline=null_roofline(model),
            )
        )
    return out


@dataclass(frozen=True)
class Summary:
    items: int
    coverage_90: float
    median_rel_half_width: float  # over the decode throughput items
    sq_log_error: dict[str, float]  # over items all three models predict
    compared: int

    def as_dict(self) -> dict[str, object]:
        return {
            "count": self.items,
            "coverage_90": self.coverage_90,
            "median_rel_half_width": self.median_rel_half_width,
            "sq_log_error": self.sq_log_error,
            "compared_items": self.compared,
        }


def summarise(predictions: Sequence[Prediction]) -> Summary:
    inside = [p.inside_90 for p in predictions]
    widths = [
        p.relative_half_width
        for p in predictions
        if p.item.measure and p.item.measure.metric in RATE_METRICS
    ]
    sums = {"rdusim": 0.0, "null_constant": 0.0, "null_roofline": 0.0}
    compared = 0
    for p in predictions:
        errs = (p.log_error(p.p50), p.log_error(p.null_constant), p.log_error(p.null_roofline))
        if any(e is None for e in errs):
            continue
        compared += 1
        for key, e in zip(sums, errs, strict=True):
            assert e is not None
            sums[key] += e * e
    return Summary(
        items=len(predictions),
        coverage_90=sum(inside) / len(inside) if inside else 0.0,
        median_rel_half_width=float(np.median(widths)) if widths else math.nan,
        sq_log_error=sums,
        compared=compared,
    )
