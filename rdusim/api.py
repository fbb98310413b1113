"""The Python API behind `rdusim map`: load → (max batch) → compile → simulate → report.

from rdusim.api import run_mapping
run = run_mapping("mappings/r1_prefill.yaml", ["seq_len=65536"])
run.report["total_latency_s"]
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rdusim.compiler.compile import compile_mapping
from rdusim.compiler.program import Program
from rdusim.errors import InfeasibleError, SpecError
from rdusim.report.schema import build_report
from rdusim.serving.capacity import max_batch, not_even_one
from rdusim.sim.model import SimResult, simulate
from rdusim.spec.hardware import Hardware
from rdusim.spec.mapping import ResolvedMapping, load_mapping


@dataclass
class MapRun:
    mapping: ResolvedMapping
    program: Program
    result: SimResult | None
    report: dict[str, Any]


def calibration_summary(rm: ResolvedMapping) -> dict[str, Any]:
    from rdusim.validation.calibrate import FITTED_ON

    cal = rm.hardware.calibration.model_dump()
    return {k: {"value": v, "fitted_on": FITTED_ON.get(k)} for k, v in cal.items()}


def run_mapping(
    path: str | Path,
    overrides: list[str] | None = None,
    *,
    simulate_it: bool = True,
    trace: bool = False,
    sockets: int = 1,
    hardware: Hardware | None = None,
) -> MapRun:
    """Compile and simulate a mapping; `hardware` replaces the one the mapping names (what-ifs,
    calibration)."""
    rm = load_mapping(path, overrides)
    if hardware is not None:
        rm = replace(rm, hardware=hardware)
    capacity_batch: int | None = None
    if rm.spec.batch == "max":
        capacity_batch, program = max_batch(rm)
    else:
        program = compile_mapping(rm)
        if not program.hbm.fits:
            hbm = program.hbm
            if hbm.weights > hbm.capacity:
                raise not_even_one(rm, program)
            if program.phase == "decode":
                try:
                    capacity_batch = max_batch(rm)[0]
                except SpecError:
                    capacity_batch = None
            raise InfeasibleError(
                f"batch {program.workload.batch} needs {hbm.used / 1e9:.1f} GB of HBM per socket "
                f"(weights {hbm.weights / 1e9:.1f}, KV cache {hbm.kv_cache / 1e9:.1f}, workspace "
                f"{hbm.workspace / 1e9:.1f}); {hbm.capacity / 1e9:.1f} GB are usable",
                file=rm.source.file,
                key="batch",
                fix=f"use batch {capacity_batch} or less (`batch: max`), enable snapstream, "
                "or shorten seq_len"
                if capacity_batch
                else "shorten seq_len or use more sockets",
            )
    result = simulate(program, rm.hardware, trace=trace, sockets=sockets) if simulate_it else None
    extra: dict[str, Any] = {}
    if program.phase == "decode" and program.snapstream:
        from rdusim.snapstream.onchip import decode_update_sram

        extra["decode_update_sram_bytes"] = decode_update_sram(program)
    report = build_report(
        program, result, snapstream_extra=extra, calibration=calibration_summary(rm)
    )
    report["max_batch_size"] = capacity_batch
    return MapRun(rm, program, result, report)
