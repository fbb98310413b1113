"""Typed hardware spec: an SN40L socket, its links, a node, and the simulator's calibration.

Presets ship as package data (`rdusim/hardware/*.yaml`); a user may point a mapping at their own
file to ask "what if the socket had twice the SRAM".
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import (
    Field,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from rdusim.errors import SpecError
from rdusim.spec.base import Strict
from rdusim.spec.yamlio import load_model


class Memory(Strict):
    capacity_bytes: PositiveFloat
    bandwidth: PositiveFloat = Field(description="peak bytes/s")


class Socket(Strict):
    tiles: PositiveInt
    pcus: PositiveInt
    pmus: PositiveInt
    pmu_bytes: PositiveInt
    sram_bytes: PositiveFloat
    clock_hz: PositiveFloat
    peak_bf16_flops: PositiveFloat
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


class Links(Strict):
    p2p_bandwidth: PositiveFloat = Field(description="bytes/s each socket can send (and receive)")
    p2p_latency_s: float = Field(ge=0, description="one hop of a collective")
    topology: Literal["ring", "all-to-all"] = "all-to-all"


class Node(Strict):
    sockets: PositiveInt


class Calibration(Strict):
    """The simulator's few fitted parameters; the preset's comments say what each was fitted on."""

    gemm_efficiency: float = Field(gt=0, le=1)
    attention_efficiency: float = Field(gt=0, le=1)
    simd_efficiency: float = Field(gt=0, le=1)
    hbm_efficiency: float = Field(gt=0, le=1)
    p2p_efficiency: float = Field(gt=0, le=1)
    kernel_launch_s: float = Field(ge=0)
    hbm_usable_fraction: float = Field(gt=0, le=1)


class Hardware(Strict):
    name: str
    socket: Socket
    links: Links
    node: Node
    calibration: Calibration

    @property
    def sockets(self) -> int:
        return self.node.sockets


PRESETS = ("sn40l-16", "sn40l-8")


def preset_path(name: str) -> Path:
    return Path(str(resources.files("rdusim.hardware").joinpath(f"{name}.yaml")))


def load_hardware(name_or_path: str | Path, *, base_dir: Path | None = None) -> Hardware:
    """A preset by name (`sn40l-16`) or a hardware YAML file by path."""
    text = str(name_or_path)
    if text in PRESETS:
        return load_model(Hardware, preset_path(text))
    path = Path(text)
    if not path.is_absolute() and base_dir is not None and not path.exists():
        path = base_dir / path
    if path.suffix not in (".yaml", ".yml", ".json") and not path.exists():
        raise SpecError(
            f"unknown hardware {text!r}",
            fix=f"name a preset ({', '.join(PRESETS)}) or the path of a hardware YAML file",
        )
    return load_model(Hardware, path)
