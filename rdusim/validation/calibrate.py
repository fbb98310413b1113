"""The fit behind `rdusim calibrate`: which published figures pin which parameter, and whether the
fit identifies them.

Four parameters are fitted by least squares, each cell's deviation measured in its acceptance
tolerance (a chi-square whose sigma is the band a cell must fall in):

* `gemm_efficiency` and `attention_efficiency` on Table 4's shares. Shares alone fix only their
  ratio; the absolute level comes through the Streaming Ring Buffer share, a kernel that moves
  about a microsecond of data, so its share is a call's cost over the layer's time;
* `software_call_s` on Table 5's 128K-with-SnapStream throughput (the paper's deployment issues
  calls from the host) and, through the same ring-buffer share, on Table 4;
* `hardware_call_s` on kernel looping's largest published decode speed-up: one datum for one
  parameter, so its standard error reflects the other cells' misfit, not a redundancy of its own.

From the Jacobian at the solution come each parameter's standard error, their correlations and
the condition number of the relative sensitivities. A fit is identifiable when no parameter sits
at a bound, every correlation stays below `MAX_CORRELATION` in magnitude, the condition number
below `MAX_CONDITION` and every relative standard error below `MAX_RELATIVE_STDERR`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rdusim.spec.hardware import Hardware
from rdusim.validation import paper as pp
from rdusim.validation.cells import Cell

FITTED_PARAMS = ("gemm_efficiency", "attention_efficiency", "software_call_s", "hardware_call_s")

BOUNDS = {
    "gemm_efficiency": (0.05, 1.0),
    "attention_efficiency": (0.05, 1.0),
    "software_call_s": (0.0, 2e-3),
    "hardware_call_s": (0.0, 5e-4),
}

FITTED_ON: dict[str, str] = {
    "gemm_efficiency": "fitted: Table 4 (GEMM kernels' shares; level via the ring-buffer share)",
    "attention_efficiency": "fitted: Table 4 (MHA share)",
    "simd_efficiency": "not fitted: SIMD vs systolic ALUs per PCU (MICRO'24 §IV-A)",
    "hbm_efficiency": "not fitted: ~85% of HBM bandwidth in a fused decoder (MICRO'24 §VI-C)",
    "software_call_s": "fitted: Table 5 (128K, SnapStream) and Table 4's ring-buffer share",
    "hardware_call_s": "fitted: kernel looping's 2.2x decode speed-up (arXiv 2410.23668)",
    "hbm_usable_fraction": "fitted: Table 5 max batch sizes (read off a band, not least squares)",
}

MAX_CORRELATION = 0.95
MAX_CONDITION = 1e3
MAX_RELATIVE_STDERR = 0.5
AT_BOUND = 1e-3  # a parameter within this fraction of its range from a bound sits on it


def with_calibration(hw: Hardware, **values: float) -> Hardware:
    """A copy of `hw` with some calibration values replaced."""
    return hw.model_copy(update={"calibration": hw.calibration.model_copy(update=values)})


def fit_cells(hw: Hardware) -> list[Cell]:
    """The cells the fit matches: Table 4's shares, the fitted Table 5 throughput and the
    kernel-looping speed-up."""
    cells = [c for c in pp.table4(hw) if c.bound == "band"]  # the seven shares
    seq, ss = 131072, True
    t5 = pp.paper()["table5"]
    row = next(r for r in t5["rows"] if r["seq_len"] == seq)
    sim = pp.table5_run(seq, ss, hw)
    pub = row["tput_ss"]
    cells.append(
        Cell(
            "table5",
            f"{seq // 1024}K throughput (SnapStream)",
            sim["tput"],
            pub,
            t5["tolerance"]["throughput_relative"] * pub,
            "tokens/s",
            True,
        )
    )
    cells += pp.kernel_looping(hw)
    return cells


def residuals(hw: Hardware) -> list[float]:
    """Deviations of the fitted cells, each in units of its tolerance."""
    return [(c.simulated - c.published) / c.tolerance for c in fit_cells(hw)]


@dataclass
class FitResult:
    hardware: Hardware
    cells: list[Cell]
    values: dict[str, float]
    stderr: dict[str, float]
    at_bound: dict[str, bool]
    correlation: list[list[float]]
    condition_number: float
    problems: list[str] = field(default_factory=list)

    @property
    def identifiable(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "parameters": {
                n: {"value": self.values[n], "stderr": self.stderr[n], "at_bound": self.at_bound[n]}
                for n in FITTED_PARAMS
            },
            "parameter_order": list(FITTED_PARAMS),
            "correlation": self.correlation,
            "condition_number": self.condition_number,
            "identifiable": self.identifiable,
            "problems": self.problems,
            "residuals": [
                {
                    "table": c.table,
                    "cell": c.item,
                    "simulated": c.simulated,
                    "published": c.published,
                    "relative_error": c.simulated / c.published - 1.0,
                }
                for c in self.cells
            ],
        }


def _statistics(
    jac_x: np.ndarray, resid: np.ndarray, x: np.ndarray, constraints: int = 0
) -> tuple[np.ndarray, np.ndarray, float]:
    """(standard errors, correlation matrix, condition number) from the Jacobian in parameter
    units, the residuals and the parameter values. `constraints` are exact relations among the
    data (shares that sum to 100%), each one fewer independent datum. A singular J^T J, a
    parameter the data do not see, gives an infinite standard error."""
    m, n = jac_x.shape
    dof = max(1, m - n - constraints)
    s2 = float(resid @ resid) / dof
    jtj = jac_x.T @ jac_x
    try:
        cov = np.linalg.inv(jtj) * s2
    except np.linalg.LinAlgError:
        cov = np.full((n, n), np.inf)
    stderr = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    denom = np.outer(stderr, stderr)
    finite = np.isfinite(denom) & (denom > 0)
    corr = np.divide(cov, denom, out=np.zeros_like(cov), where=finite)
    relative = jac_x * np.where(x != 0, x, 1.0)  # sensitivities to relative changes
    sv = np.linalg.svd(relative, compute_uv=False)
    cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else float("inf")
    return stderr, corr, cond


def _problems(
    values: dict[str, float],
    stderr: dict[str, float],
    at_bound: dict[str, bool],
    corr: np.ndarray,
    cond: float,
) -> list[str]:
    out = [f"{n} sits at its bound {BOUNDS[n]}" for n, hit in at_bound.items() if hit]
    names = list(FITTED_PARAMS)
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            if abs(corr[i, j]) > MAX_CORRELATION:
                out.append(
                    f"{names[i]} and {names[j]} are correlated {corr[i, j]:+.3f}: the data move "
                    "them together"
                )
    if cond > MAX_CONDITION:
        out.append(f"condition number {cond:.3g} exceeds {MAX_CONDITION:g}")
    for n in names:
        if values[n] and stderr[n] / abs(values[n]) > MAX_RELATIVE_STDERR:
            out.append(f"{n} has a relative standard error of {stderr[n] / abs(values[n]):.0%}")
    return out


def fit(
    hw: Hardware,
    *,
    max_evals: int = 200,
    progress: Callable[[list[float]], None] | None = None,
) -> FitResult:
    """Least-squares fit of the fitted parameters, with identifiability statistics."""
    from scipy.optimize import least_squares

    names = list(FITTED_PARAMS)
    lo = np.array([BOUNDS[n][0] for n in names])
    hi = np.array([BOUNDS[n][1] for n in names])
    scale = hi - lo
    x0 = np.array([getattr(hw.calibration, n) for n in names])

    def f(u: np.ndarray) -> np.ndarray:
        x = lo + u * scale
        r = residuals(with_calibration(hw, **dict(zip(names, map(float, x), strict=True))))
        if progress:
            progress(r)
        return np.array(r)

    u0 = np.clip((x0 - lo) / scale, 0.0, 1.0)
    sol = least_squares(f, u0, bounds=(0, 1), max_nfev=max_evals, diff_step=1e-3, x_scale=1.0)
    x = lo + sol.x * scale
    values = dict(zip(names, map(float, x), strict=True))
    fitted = with_calibration(hw, **values)
    jac_x = np.asarray(sol.jac) / scale
    # Table 4's shares sum to 100%: one relation among the fitted cells
    stderr_arr, corr, cond = _statistics(jac_x, np.asarray(sol.fun), x, constraints=1)
    stderr = dict(zip(names, map(float, stderr_arr), strict=True))
    at_bound = {
        n: bool(u < AT_BOUND or u > 1 - AT_BOUND) for n, u in zip(names, sol.x, strict=True)
    }
    return FitResult(
        hardware=fitted,
        cells=fit_cells(fitted),
        values=values,
        stderr=stderr,
        at_bound=at_bound,
        correlation=corr.tolist(),
        condition_number=cond,
        problems=_problems(values, stderr, at_bound, corr, cond),
    )
