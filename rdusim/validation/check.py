"""`rdusim validate`: the evidence, the posterior fitted to it, and leave-one-out predictions.

`validate` reads the evidence folder and nothing else: it builds every fitted and held-out item's
runs, fits the posterior's mode and Laplace covariance (`rdusim.validation.posterior`), predicts
each fitted item from a refit without it and each held-out item from the full fit
(`rdusim.validation.loo`), and says which readings of each shared deployment the evidence
favours.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rdusim.spec.hardware import load_hardware
from rdusim.uncertainty.ensemble import shipped_ensemble
from rdusim.uncertainty.parameters import values_of
from rdusim.validation.items import Evidence, Use, shipped_evidence
from rdusim.validation.loo import Prediction, Summary, leave_one_out, summarise
from rdusim.validation.measures import shipped_runs
from rdusim.validation.posterior import (
    Linearised,
    Problem,
    Progress,
    build_problem,
    find_mode,
    laplace_covariance,
    reading_weights,
)

COVERAGE_GOAL = 0.8  # of the items inside their 90% interval, below which validate fails


@dataclass
class Validation:
    evidence: Evidence
    problem: Problem
    mode: np.ndarray
    linearised: Linearised
    covariance: np.ndarray
    predictions: list[Prediction]
    summary: Summary
    readings: dict[str, dict[str, float]]

    @property
    def parameters(self) -> dict[str, float]:
        return {**self.problem.theta(self.mode), "discrepancy": self.problem.discrepancy(self.mode)}

    def unexpected(self) -> list[Prediction]:
        """Items outside their interval without a known reason, or with one and now inside."""
        return [p for p in self.predictions if p.inside_90 == bool(p.item.reason)]

    def as_dict(self) -> dict[str, Any]:
        ev = self.evidence
        return {
            "evidence": [
                {
                    "id": i,
                    "source": ev.source_of(i).id,
                    "fitted": ev.item(i).use == Use.FIT,
                    "use": ev.item(i).use.value,
                    "value": list(v) if isinstance(v := ev.item(i).value, tuple) else v,
                    "unit": ev.item(i).unit,
                    "reason": ev.item(i).reason,
                }
                for i in ev.items
            ],
            "sources": [s.model_dump() for s in ev.sources],
            "loo": {
                "items": [
                    p.as_dict() | {"runs": shipped_runs(ev, p.item_id)} for p in self.predictions
                ],
                **self.summary.as_dict(),
            },
            "parameters": self.parameters,
            "readings": self.readings,
            "unexpected": [p.item_id for p in self.unexpected()],
        }


def readings_summary(
    problem: Problem, u: np.ndarray, z: dict[str, np.ndarray]
) -> dict[str, dict[str, float]]:
    """For each shared deployment with a choice: each reading's posterior weight at `u`."""
    out: dict[str, dict[str, float]] = {}
    for name, wts in reading_weights(problem, u, z, problem.fitted).items():
        model = next(m for m in problem.models.values() if m.group == name)
        if len(model.group_readings) > 1:
            out[name] = {
                " ".join(r): float(x) for r, x in zip(model.group_readings, wts, strict=True)
            }
    return out


def start_point(problem: Problem) -> np.ndarray:
    """Where the mode search starts: the shipped point (the ensemble's median) and its
    discrepancy, or the prior's middle for the discrepancy when nothing ships."""
    ensemble = shipped_ensemble()
    discrepancy = ensemble.discrepancy if ensemble else 0.1
    return problem.free(values_of(load_hardware("sn40l-16")), discrepancy)


def validate(
    evidence: Evidence | None = None,
    *,
    items: list[str] | None = None,
    progress: Progress | None = None,
    draws: int | None = None,
) -> Validation:
    evidence = evidence or shipped_evidence()
    problem = build_problem(evidence, items=items, progress=progress)
    mode, lin = find_mode(problem, start_point(problem), progress=progress)
    cov = laplace_covariance(problem, lin, mode, problem.fitted)
    kwargs = {"draws": draws} if draws else {}
    predictions = leave_one_out(problem, mode, lin, cov, progress=progress, **kwargs)
    return Validation(
        evidence,
        problem,
        mode,
        lin,
        cov,
        predictions,
        summarise(predictions),
        readings_summary(problem, mode, lin.z0),
    )
