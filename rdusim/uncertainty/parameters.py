"""The calibrated parameters: where each lives in the hardware spec and how it may vary.

A parameter is a field of the hardware spec that no datasheet fixes. Fractions (efficiencies,
usable HBM) live in (0, 1]; everything else is a positive quantity. Samplers and ensembles work
on an unbounded scale: logit for fractions, log for the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from rdusim.spec.hardware import Hardware


class Scale(StrEnum):
    """How a parameter is made unbounded."""

    LOG = "log"  # a positive quantity
    LOGIT = "logit"  # a fraction in (0, 1)


@dataclass(frozen=True)
class Parameter:
    name: str  # short name, as reports show it
    path: tuple[str, str]  # (section, field) in the hardware spec
    scale: Scale
    unit: str
    meaning: str

    @property
    def key(self) -> str:
        """The `--set` path (`calibration.gemm_efficiency`, `hardware.links.p2p_bandwidth`)."""
        section, name = self.path
        return f"{section}.{name}" if section == "calibration" else f"hardware.{section}.{name}"

    def get(self, hw: Hardware) -> float:
        section, name = self.path
        return float(getattr(getattr(hw, section), name))

    def to_free(self, value: float) -> float:
        if self.scale == Scale.LOG:
            return math.log(value)
        v = min(max(value, 1e-9), 1 - 1e-9)
        return math.log(v / (1 - v))

    def from_free(self, u: float) -> float:
        if self.scale == Scale.LOG:
            return math.exp(u)
        return 1.0 / (1.0 + math.exp(-u))


PARAMETERS: tuple[Parameter, ...] = (
    Parameter(
        "gemm_efficiency",
        ("calibration", "gemm_efficiency"),
        Scale.LOGIT,
        "",
        "achieved fraction of peak FLOPs for systolic GEMMs",
    ),
    Parameter(
        "attention_efficiency",
        ("calibration", "attention_efficiency"),
        Scale.LOGIT,
        "",
        "achieved fraction of peak FLOPs for flash attention",
    ),
    Parameter(
        "simd_efficiency",
        ("calibration", "simd_efficiency"),
        Scale.LOGIT,
        "",
        "achieved fraction of a PCU's peak for SIMD element operations",
    ),
    Parameter(
        "hbm_efficiency",
        ("calibration", "hbm_efficiency"),
        Scale.LOGIT,
        "",
        "achieved fraction of peak HBM bandwidth",
    ),
    Parameter(
        "p2p_bandwidth",
        ("links", "p2p_bandwidth"),
        Scale.LOG,
        "B/s",
        "bytes per second a socket sends in a collective",
    ),
    Parameter(
        "p2p_latency_s",
        ("links", "p2p_latency_s"),
        Scale.LOG,
        "s",
        "one round of a collective on the links",
    ),
    Parameter(
        "config_bandwidth",
        ("calibration", "config_bandwidth"),
        Scale.LOG,
        "B/s",
        "program load: configuration bytes per second",
    ),
    Parameter(
        "argument_load_s",
        ("calibration", "argument_load_s"),
        Scale.LOG,
        "s",
        "argument load of one kernel call",
    ),
    Parameter(
        "host_round_trip_s",
        ("calibration", "host_round_trip_s"),
        Scale.LOG,
        "s",
        "what a host-issued call adds to an AGCU-issued one",
    ),
    Parameter(
        "hbm_usable_fraction",
        ("calibration", "hbm_usable_fraction"),
        Scale.LOGIT,
        "",
        "fraction of HBM the runtime leaves to weights, cache and workspace",
    ),
)

BY_NAME = {p.name: p for p in PARAMETERS}


def values_of(hw: Hardware) -> dict[str, float]:
    """Every calibrated parameter's value in `hw`."""
    return {p.name: p.get(hw) for p in PARAMETERS}


def with_values(hw: Hardware, values: dict[str, float]) -> Hardware:
    """A copy of `hw` with some calibrated parameters replaced; an unknown name, or a value off
    its parameter's range (a fraction outside (0, 1], a quantity not above 0), is a ValueError."""
    sections: dict[str, dict[str, Any]] = {}
    unknown = sorted(set(values) - set(BY_NAME))
    if unknown:
        raise ValueError(
            f"not calibrated parameters: {', '.join(unknown)} (known: {', '.join(BY_NAME)})"
        )
    for name, value in values.items():
        p = BY_NAME[name]
        if not (0 < value <= 1 if p.scale == Scale.LOGIT else 0 < value < math.inf):
            raise ValueError(f"{name} = {value} is off its range")
        section, field = p.path
        sections.setdefault(section, {})[field] = value
    update = {s: getattr(hw, s).model_copy(update=v) for s, v in sections.items()}
    return hw.model_copy(update=update)
