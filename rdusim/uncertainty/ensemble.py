"""The shipped posterior ensemble: parameter sets drawn by `rdusim calibrate --write`.

Members are stored as absolute values for the hardware they were fitted on. Applied to any
hardware, each member moves that hardware's own values by the member's offset from the
ensemble's median on the parameter's free scale (log or logit), so a what-if that changes a
calibrated value (`--set calibration.hbm_efficiency=0.7`) shifts the whole ensemble with it,
and the shipped presets, whose values are the median (to the four significant digits they are
written with), get the members to that precision.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from rdusim.spec.hardware import Hardware
from rdusim.uncertainty.parameters import BY_NAME, with_values

ENSEMBLE_FILE = "ensemble.json"


@dataclass(frozen=True)
class Ensemble:
    """A seeded sample of the calibrated parameters' posterior.

    `discrepancy` is the fitted model error: the log-scale standard deviation by which a
    published figure departs from the model beyond the parameters' spread. `parameters` carries,
    per parameter, what the fit says of it (prior range, posterior quantiles, which evidence
    items pin it).
    """

    names: tuple[str, ...]
    members: tuple[tuple[float, ...], ...]
    median: dict[str, float]
    seed: int
    method: str
    discrepancy: float
    parameters: dict[str, dict[str, Any]] = field(default_factory=dict)
    fitted_items: tuple[str, ...] = ()
    # for each deployment the evidence shares, the posterior weight of each reading of what its
    # source leaves open
    readings: dict[str, dict[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = [n for n in self.names if n not in BY_NAME]
        if unknown:
            raise ValueError(f"ensemble names unknown parameters: {', '.join(unknown)}")
        if any(len(m) != len(self.names) for m in self.members):
            raise ValueError("every ensemble member gives one value per parameter")

    def __len__(self) -> int:
        return len(self.members)

    def values(self, i: int) -> dict[str, float]:
        return dict(zip(self.names, self.members[i], strict=True))

    def offsets(self, i: int) -> dict[str, float]:
        """Member `i`'s offset from the median on each parameter's free scale."""
        out = {}
        for name, value in self.values(i).items():
            p = BY_NAME[name]
            out[name] = p.to_free(value) - p.to_free(self.median[name])
        return out

    def applied(self, hw: Hardware) -> list[Hardware]:
        """`hw` under each member: its own values moved by the member's offsets."""
        out = []
        for i in range(len(self)):
            values = {}
            for name, offset in self.offsets(i).items():
                p = BY_NAME[name]
                own = p.get(hw)
                if own <= 0:  # a what-if with none of it (no link latency): nothing to spread
                    continue
                values[name] = p.from_free(p.to_free(own) + offset)
            out.append(with_values(hw, values))
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "seed": self.seed,
            "discrepancy": self.discrepancy,
            "names": list(self.names),
            "median": self.median,
            "members": [list(m) for m in self.members],
            "parameters": self.parameters,
            "fitted_items": list(self.fitted_items),
            "readings": self.readings,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ensemble:
        return cls(
            names=tuple(data["names"]),
            members=tuple(tuple(float(v) for v in m) for m in data["members"]),
            median={k: float(v) for k, v in data["median"].items()},
            seed=int(data["seed"]),
            method=str(data["method"]),
            discrepancy=float(data["discrepancy"]),
            parameters=dict(data.get("parameters", {})),
            fitted_items=tuple(data.get("fitted_items", ())),
            readings=dict(data.get("readings", {})),
        )


def ensemble_path() -> Path:
    return Path(str(resources.files("rdusim.hardware").joinpath(ENSEMBLE_FILE)))


@cache
def shipped_ensemble() -> Ensemble | None:
    """The ensemble that ships with rdusim (None before the first `calibrate --write`)."""
    path = ensemble_path()
    if not path.exists():
        return None
    return Ensemble.from_dict(json.loads(path.read_text(encoding="utf-8")))
