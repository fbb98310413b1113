"""Typed hardware spec: an SN40L socket, its links, a node, and the simulator's calibration.

Presets ship as package data: every `rdusim/hardware/*.yaml` is one, named by its stem, so a new
hardware generation is one YAML file dropped into that folder (`presets()`). A user may also point
a mapping at their own file to ask "what if the socket had twice the SRAM".
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from rdusim.errors import SpecError
from rdusim.spec.base import Strict
from rdusim.spec.catalog import shipped_presets
from rdusim.spec.yamlio import load_model

# Every physical quantity is finite, and bounded below and above far from any real machine, so a
# typo (1e300, 1e-300) is an error instead of an overflow, a NaN or an hour-long simulation.
Bytes = Annotated[float, Field(ge=1e3, le=1e18, allow_inf_nan=False)]
Bandwidth = Annotated[float, Field(ge=1e6, le=1e18, allow_inf_nan=False)]
UnitBytes = Annotated[float, Field(ge=1, le=1e9, allow_inf_nan=False)]
Count = Annotated[int, Field(gt=0, le=1_000_000)]
Fraction = Annotated[float, Field(ge=0.01, le=1, allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=0, le=1.0, allow_inf_nan=False)]

MAX_SOCKETS = 1024  # sockets per node; the simulator's work grows with it


class Memory(Strict):
    capacity_bytes: Bytes
    bandwidth: Bandwidth = Field(description="peak bytes/s")


class PCUGeometry(Strict):
    """One Pattern Compute Unit: `lanes` SIMD lanes (systolic columns) by `stages` pipeline
    stages (systolic rows). A systolic PCU does lanes x stages multiply-adds a cycle; a SIMD PCU
    runs up to `stages` element operations in a pipeline on `lanes` elements at once."""

    lanes: Count
    stages: Count


class Socket(Strict):
    tiles: Count
    pcus: Count
    pmus: Count
    pmu_bytes: int = Field(gt=0, le=1_000_000_000)
    pcu: PCUGeometry
    staging_pmus_per_pcu: float = Field(
        ge=0,
        le=16,
        allow_inf_nan=False,
        description="PMUs that stage a working PCU's operands and accumulators",
    )
    config_bytes_per_pcu: UnitBytes = Field(description="configuration a call loads per PCU")
    config_bytes_per_pmu: UnitBytes = Field(description="configuration a call loads per PMU")
    sram_bytes: Bytes
    clock_hz: float = Field(ge=1e6, le=1e12, allow_inf_nan=False)
    peak_bf16_flops: float = Field(ge=1e9, le=1e18, allow_inf_nan=False)
    hbm: Memory
    ddr: Memory

    @property
    def flops_per_pcu(self) -> float:
        return self.peak_bf16_flops / self.pcus

    @model_validator(mode="after")
    def _sram_consistent(self) -> Socket:
        total = self.pmus * self.pmu_bytes
        if abs(total - self.sram_bytes) > 0.1 * self.sram_bytes:
            raise ValueError(
                f"pmus x pmu_bytes = {total:.3g} disagrees with sram_bytes = {self.sram_bytes:.3g}"
                " by more than 10%"
            )
        return self


class Topology(StrEnum):
    """How the sockets of a node are linked."""

    FULLY_CONNECTED = "fully-connected"  # every socket has a direct link to every other
    RING = "ring"  # socket i links to i-1 and i+1 only


class Links(Strict):
    p2p_bandwidth: Bandwidth = Field(description="bytes/s each socket can send (and receive)")
    p2p_latency_s: Seconds = Field(description="one round of a collective")
    topology: Topology = Topology.FULLY_CONNECTED

    @field_validator("topology", mode="before")
    @classmethod
    def _renamed(cls, v: Any) -> Any:
        if v == "all-to-all":
            raise PydanticCustomError(
                "renamed",
                "topology 'all-to-all' is now called 'fully-connected' (every socket has a "
                "direct link to every other)",
            )
        return v


class Node(Strict):
    sockets: int = Field(gt=0, le=MAX_SOCKETS)


class Calibration(Strict):
    """The simulator's few calibrated parameters; the preset's comments say what pins each."""

    gemm_efficiency: Fraction
    attention_efficiency: Fraction
    simd_efficiency: Fraction
    hbm_efficiency: Fraction
    config_bandwidth: Bandwidth = Field(
        description="bytes/s at which a kernel call loads its program into the units it uses"
    )
    argument_load_s: Seconds = Field(description="loading one kernel call's arguments")
    host_round_trip_s: Seconds = Field(
        description="what a host-issued call adds to an AGCU-issued one: the host's issue and "
        "completion round trip"
    )
    hbm_usable_fraction: Fraction

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and {"software_call_s", "hardware_call_s"} & set(data):
            raise PydanticCustomError(
                "renamed",
                "software_call_s and hardware_call_s are replaced by a call's parts: "
                "config_bandwidth (program load), argument_load_s and host_round_trip_s "
                "(see rdusim/hardware/sn40l-16.yaml)",
            )
        return data

    def efficiency(self, cost_class: str) -> float:
        """Achieved fraction of peak for an op's cost class (data movement: 1, it has no
        arithmetic)."""
        key = _EFFICIENCY_OF.get(cost_class)
        return float(getattr(self, key)) if key else 1.0


_EFFICIENCY_OF = {
    "systolic": "gemm_efficiency",
    "attention": "attention_efficiency",
    "simd": "simd_efficiency",
}


class Hardware(Strict):
    name: str
    socket: Socket
    links: Links
    node: Node
    calibration: Calibration

    @property
    def sockets(self) -> int:
        return self.node.sockets


def presets() -> tuple[str, ...]:
    """The names of the shipped hardware presets, sorted: the stems of `rdusim/hardware/*.yaml`."""
    return tuple(shipped_presets())


def preset_path(name: str) -> Path:
    """The YAML file of the shipped preset `name`."""
    path = shipped_presets().get(name)
    if path is None:
        raise SpecError(f"unknown hardware preset {name!r}", fix=f"name a preset ({_names()})")
    return path


def _names() -> str:
    return ", ".join(presets())


def load_hardware(name_or_path: str | Path, *, base_dir: Path | None = None) -> Hardware:
    """A preset by name (`sn40l-16`) or a hardware YAML file by path."""
    text = str(name_or_path)
    if text in shipped_presets():
        return load_model(Hardware, preset_path(text))
    path = Path(text)
    if not path.is_absolute() and base_dir is not None:
        # like a mapping's model: relative to the mapping file first, then the current directory
        candidates = [base_dir / path, path]
        found = next((c for c in candidates if c.exists()), None)
        if found is None and path.suffix in (".yaml", ".yml", ".json"):
            raise SpecError(
                f"hardware file {text!r} not found next to the mapping ({base_dir}) or in the "
                "current directory",
                fix=f"give a path relative to the mapping file, or a preset ({_names()})",
            )
        path = found or path
    if path.suffix not in (".yaml", ".yml", ".json") and not path.exists():
        raise SpecError(
            f"unknown hardware {text!r}",
            fix=f"name a preset ({_names()}) or the path of a hardware YAML file",
        )
    return load_model(Hardware, path)
