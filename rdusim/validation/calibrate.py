"""`rdusim calibrate`: the posterior of the calibrated parameters, and the ensemble it ships as.

`calibrate` builds every fitted item's runs, finds the posterior (`rdusim.validation.posterior`:
mode, Laplace covariance, importance sampling), and resamples a seeded ensemble of parameter
sets. Each parameter's summary says its prior range, its posterior quantiles, how much the
evidence narrowed it, and which items pin it most; each shared deployment's summary says which
of its readings the evidence favours. `write_calibration` stores the ensemble as package data
and puts its median into every hardware preset, so the point values are the ensemble's median.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rdusim.errors import SpecError
from rdusim.spec.hardware import Hardware, load_hardware
from rdusim.uncertainty.ensemble import ENSEMBLE_FILE, Ensemble
from rdusim.uncertainty.parameters import PARAMETERS, values_of
from rdusim.validation.defaults import DRAWS, MEMBERS, SEED
from rdusim.validation.items import Evidence, shipped_evidence
from rdusim.validation.likelihood import sigma
from rdusim.validation.posterior import (
    Z90,
    Linearised,
    Problem,
    Progress,
    Sample,
    build_problem,
    find_mode,
    importance_sample,
    laplace_covariance,
    reading_weights,
    surrogate_chain,
    systematic_resample,
)

START_DISCREPANCY = 0.1  # where the mode search starts the model error (the prior's middle)
PINNED_SHARE = 0.05  # an item pins a parameter when it carries this share of its information


@dataclass
class Calibration:
    """The posterior and what it says."""

    problem: Problem
    mode: np.ndarray
    covariance: np.ndarray
    linearised: Linearised
    sample: Sample
    ensemble: Ensemble
    readings: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def effective_size(self) -> float:
        return self.sample.effective_size

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.ensemble.method,
            "seed": self.ensemble.seed,
            "members": len(self.ensemble),
            "draws": len(self.sample.log_weights),
            "effective_sample_size": self.effective_size,
            "evaluations": self.problem.evaluations,
            "discrepancy": self.ensemble.discrepancy,
            "parameters": self.ensemble.parameters,
            "readings": self.readings,
            "fitted_items": list(self.ensemble.fitted_items),
        }


def _pinned_by(problem: Problem, lin: Linearised, u: np.ndarray) -> dict[str, list[str]]:
    """For each parameter, the fitted items carrying at least `PINNED_SHARE` of the evidence's
    information about it (squared sensitivity over squared noise), largest first."""
    d = problem.discrepancy(u)
    out: dict[str, list[str]] = {}
    for k, p in enumerate(problem.parameters):
        info = {}
        for i in problem.fitted:
            jac = lin.jac[i][k]
            info[i] = float(np.max(np.abs(jac))) ** 2 / sigma(problem.items[i], d) ** 2
        total = sum(info.values())
        ranked = sorted(info, key=lambda i: -info[i])
        out[p.name] = [i for i in ranked if total > 0 and info[i] / total >= PINNED_SHARE][:3]
        if not out[p.name] and total > 0:
            out[p.name] = ranked[:1]
        if total == 0:  # a step function of the parameter: the capacity items computed exactly
            out[p.name] = [i for i in problem.fitted if i in lin.exact][:3]
    return out


def _parameter_summaries(
    problem: Problem, members: np.ndarray, lin: Linearised, u: np.ndarray
) -> dict[str, dict[str, Any]]:
    """Each parameter's prior, its quantiles over the ensemble's members (the same sets every
    interval is priced with), how much the evidence narrowed it, and what pins it."""
    pinned = _pinned_by(problem, lin, u)
    out: dict[str, dict[str, Any]] = {}
    for k, p in enumerate(problem.parameters):
        prior = problem.evidence.priors.parameters[p.name]
        q = [float(np.quantile(members[:, k], f)) for f in (0.05, 0.5, 0.95)]
        prior_width = 2 * Z90 * problem.sd[k]
        out[p.name] = {
            "unit": p.unit,
            "meaning": p.meaning,
            "prior": {
                "low": prior.low,
                "high": prior.high,
                "source": " ".join(prior.source.split()),
            },
            "p05": p.from_free(q[0]),
            "p50": p.from_free(q[1]),
            "p95": p.from_free(q[2]),
            "narrowing": (q[2] - q[0]) / prior_width,
            "pinned_by": pinned[p.name],
        }
    return out


def _reading_summary(
    problem: Problem, u: np.ndarray, z: dict[str, np.ndarray]
) -> dict[str, dict[str, float]]:
    """For each shared deployment, the posterior weight of each reading at the mode."""
    weights = reading_weights(problem, u, z, problem.fitted)
    out: dict[str, dict[str, float]] = {}
    for name, wts in weights.items():
        model = next(problem.models[i] for i in problem.fitted if problem.models[i].group == name)
        if len(model.group_readings) < 2:
            continue
        out[name] = {
            " ".join(r) or "(as shipped)": float(x)
            for r, x in zip(model.group_readings, wts, strict=True)
        }
    return out


def calibrate(
    evidence: Evidence | None = None,
    *,
    start: Hardware | None = None,
    draws: int = DRAWS,
    members: int = MEMBERS,
    seed: int = SEED,
    progress: Progress | None = None,
    problem: Problem | None = None,
) -> Calibration:
    """The posterior of the calibrated parameters given the fitted evidence items."""
    evidence = evidence or shipped_evidence()
    problem = problem or build_problem(evidence, progress=progress)
    start = start or load_hardware("sn40l-16")
    u0 = problem.free(values_of(start), START_DISCREPANCY)
    mode, lin = find_mode(problem, u0, progress=progress)
    cov = laplace_covariance(problem, lin, mode, problem.fitted)
    if progress:
        progress("sampling the linearised posterior")
    chain, chain_logp, tau = surrogate_chain(problem, lin, mode, cov, seed=seed)
    sample = importance_sample(
        problem, chain, chain_logp, draws=draws, seed=seed, progress=progress
    )
    picks = systematic_resample(sample.weights, members, seed)
    names = tuple(p.name for p in problem.parameters)
    chosen = [problem.theta(sample.u[i]) for i in picks]
    median = {n: float(np.median([c[n] for c in chosen])) for n in names}
    discrepancy = float(np.median([problem.discrepancy(sample.u[i]) for i in picks]))
    readings = _reading_summary(problem, mode, lin.z0)
    ensemble = Ensemble(
        names=names,
        members=tuple(tuple(c[n] for n in names) for c in chosen),
        median=median,
        seed=seed,
        method=f"emcee on the posterior linearised at its mode (autocorrelation {tau:.0f} "
        f"steps), {len(sample.log_weights)} draws priced exactly and importance-weighted "
        f"(effective {sample.effective_size:.0f}), systematically resampled",
        discrepancy=discrepancy,
        parameters=_parameter_summaries(problem, sample.u[picks], lin, mode),
        fitted_items=tuple(problem.fitted),
        readings=readings,
    )
    return Calibration(problem, mode, cov, lin, sample, ensemble, readings)


# --- writing ------------------------------------------------------------------------------------


def format_value(v: float) -> str:
    """A parameter value as the presets write it: four significant digits."""
    return f"{v:.4g}"


_ENTRY = re.compile(r"^(?P<head>  (?P<key>[A-Za-z_]\w*):\s+)(?P<value>[^\s#]+)(?P<tail>.*)$", re.S)


def patch_sections(text: str, values: dict[tuple[str, str], str]) -> str:
    """`text` (a hardware YAML) with each `(section, key)` entry's value replaced in place;
    indentation, comments (kept in their column where room allows) and every other line are
    kept. Raises KeyError naming entries the file does not have."""
    out = []
    section = None
    seen: set[tuple[str, str]] = set()
    for line in text.splitlines(keepends=True):
        if line.strip() and not line[0].isspace() and not line.startswith("#"):
            section = line.split(":", 1)[0].strip()
        elif section and (m := _ENTRY.match(line)) and (section, m["key"]) in values:
            new = values[(section, m["key"])]
            tail = m["tail"]
            grow = len(new) - len(m["value"])
            spaces = len(tail) - len(tail.lstrip(" "))
            if tail.lstrip(" ").startswith("#"):
                tail = " " * max(1, spaces - grow) + tail.lstrip(" ")
            line = m["head"] + new + tail
            seen.add((section, m["key"]))
        out.append(line)
    missing = set(values) - seen
    if missing:
        raise KeyError(", ".join(f"{s}.{k}" for s, k in sorted(missing)))
    return "".join(out)


def preset_values(ensemble: Ensemble) -> dict[tuple[str, str], str]:
    """The presets' entries the ensemble's median sets."""
    return {p.path: format_value(ensemble.median[p.name]) for p in PARAMETERS}


def write_calibration(cal: Calibration, folder: Path, presets: Sequence[Path]) -> list[Path]:
    """The ensemble as `folder/ensemble.json` and its median in each preset written to
    `folder`; the paths written. Every preset is patched before anything is written, so a preset
    that lacks an entry (a SpecError naming it and the entries) leaves `folder` as it was."""
    values = preset_values(cal.ensemble)
    patched = {}
    for preset in presets:
        try:
            patched[folder / preset.name] = patch_sections(
                preset.read_text(encoding="utf-8"), values
            )
        except KeyError as missing:
            raise SpecError(
                "cannot write the calibration into it: no indented `key: value` line for "
                f"{missing.args[0]}",
                file=str(preset),
                fix="write each calibrated entry on its own line under its section, as "
                "sn40l-16.yaml does",
            ) from None
    target = folder / ENSEMBLE_FILE
    target.write_text(json.dumps(cal.ensemble.as_dict(), indent=1) + "\n", encoding="utf-8")
    for out, text in patched.items():
        out.write_text(text, encoding="utf-8")
    return [target, *patched]


def relative_spread(values: Sequence[float]) -> float:
    """(p95 - p05) / (2 p50) of positive values: the relative half-width of a 90% interval."""
    q = np.percentile(values, [5, 50, 95])
    return float((q[2] - q[0]) / (2 * q[1])) if q[1] > 0 else math.inf
