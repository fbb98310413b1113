"""Stand-ins for `rdusim validate`'s and `rdusim calibrate`'s results, built from the shipped
evidence and ensemble without the minute-long fit, so their rendering and the commands' exit
codes are tested quickly. They are real `Validation` / `Calibration` objects (so `as_dict()` is
the code's own); only the expensive parts they never read are stubbed.

Every predicted item gets an interval around its published figure (inside it), except the items
in `outside`, whose interval lies wholly above the figure. Nothing here is a published number:
the figures come from the evidence files.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import numpy as np

from rdusim.spec.hardware import load_hardware
from rdusim.uncertainty.ensemble import Ensemble, shipped_ensemble
from rdusim.uncertainty.parameters import values_of
from rdusim.validation.calibrate import Calibration
from rdusim.validation.check import Validation
from rdusim.validation.items import Bound, Evidence, Use, shipped_evidence
from rdusim.validation.loo import Prediction, summarise
from rdusim.validation.measures import readings
from tests.known_misses import known_misses


def _interval(low: float, high: float, bound: Bound, outside: bool) -> tuple[float, float, float]:
    """(p05, p50, p95) consistent with a figure [low, high] bounded by `bound`, or not."""
    if outside:
        return 2.0 * high, 2.5 * high, 3.0 * high
    if bound == Bound.UPPER:
        return 0.5 * high, 0.8 * high, 1.1 * high
    if bound == Bound.LOWER:
        return 0.9 * low, 1.2 * low, 1.5 * low
    return 0.8 * low, (low * high) ** 0.5 * 1.02, 1.25 * high


def fake_predictions(
    evidence: Evidence | None = None, outside: Iterable[str] | None = None
) -> list[Prediction]:
    """One prediction per fitted and held-out item; `outside` (default: the known misses) have
    intervals that miss their figures."""
    evidence = evidence or shipped_evidence()
    missing = set(known_misses(evidence) if outside is None else outside)
    out = []
    for item_id in evidence.ids(Use.FIT, Use.HOLDOUT):
        item = evidence.item(item_id)
        p05, p50, p95 = _interval(item.low, item.high, item.bound, item_id in missing)
        out.append(
            Prediction(
                item_id=item_id,
                source=evidence.source_of(item_id).id,
                item=item,
                fitted=item.use == Use.FIT,
                p05=p05,
                p50=p50,
                p95=p95,
                point=p50,
                null_constant=p50 * 3.0,
                null_roofline=p50 / 2.5,
            )
        )
    return out


def fake_readings(evidence: Evidence | None = None) -> dict[str, dict[str, float]]:
    """Every shared deployment with a choice: its readings, the first favoured."""
    evidence = evidence or shipped_evidence()
    out: dict[str, dict[str, float]] = {}
    for f in evidence.files:
        for name, dep in f.deployments.items():
            rs = readings(dict(dep.unstated))
            if len(rs) < 2:
                continue
            weights = np.array([0.5**k for k in range(len(rs))])
            weights /= weights.sum()
            out[f"{f.source.id}/{name}"] = {
                " ".join(r): float(w) for r, w in zip(rs, weights, strict=True)
            }
    return out


def fake_validation(
    predictions: list[Prediction] | None = None, evidence: Evidence | None = None
) -> Validation:
    """A `Validation` of `predictions` (default: `fake_predictions()`)."""
    evidence = evidence or shipped_evidence()
    predictions = fake_predictions(evidence) if predictions is None else predictions
    point = values_of(load_hardware("sn40l-16"))
    problem = SimpleNamespace(theta=lambda _u: dict(point), discrepancy=lambda _u: 0.1)
    return Validation(
        evidence=evidence,
        problem=problem,  # type: ignore[arg-type]
        mode=np.zeros(len(point) + 1),
        linearised=None,  # type: ignore[arg-type]
        covariance=np.eye(len(point) + 1),
        predictions=predictions,
        summary=summarise(predictions),
        readings=fake_readings(evidence),
    )


def fake_calibration(ensemble: Ensemble | None = None) -> Calibration:
    """A `Calibration` whose ensemble is `ensemble` (default: the shipped one)."""
    ensemble = ensemble or shipped_ensemble()
    assert ensemble is not None, "rdusim ships an ensemble"
    sample: Any = SimpleNamespace(log_weights=np.zeros(512), effective_size=40.0)
    return Calibration(
        problem=SimpleNamespace(evaluations=600),  # type: ignore[arg-type]
        mode=np.zeros(len(ensemble.names) + 1),
        covariance=np.eye(len(ensemble.names) + 1),
        linearised=None,  # type: ignore[arg-type]
        sample=sample,
        ensemble=ensemble,
        readings=fake_readings(),
    )
