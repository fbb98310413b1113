"""Allocation pass: PCUs and PMUs per op inside a kernel, balanced by work.

A spatial pipeline runs at the pace of its slowest stage, so PCUs go to ops in proportion to
their compute time at unit rate; PMUs follow each op's buffers.
"""

from __future__ import annotations

import math

from rdusim.compiler.program import Kernel
from rdusim.ir.graph import CostClass
from rdusim.spec.hardware import Hardware


def efficiency(hw: Hardware, cost_class: CostClass) -> float:
    return hw.calibration.efficiency(cost_class)


def allocate(kernel: Kernel, hw: Hardware) -> None:
    """Give every compute op at least one PCU and split the rest by work (largest remainder)."""
    total_pcus = hw.socket.pcus
    work = {
        p.name: p.flops / efficiency(hw, p.cost_class)
        for p in kernel.ops
        if p.cost_class != CostClass.MEMORY and p.flops > 0
    }
    compute_ops = list(work)
    pcus = dict.fromkeys(compute_ops, 1)
    spare = total_pcus - len(compute_ops)
    total_work = sum(work.values())
    if spare > 0 and total_work > 0:
        shares = {n: spare * w / total_work for n, w in work.items()}
        floors = {n: math.floor(s) for n, s in shares.items()}
        left = spare - sum(floors.values())
        by_rem = sorted(compute_ops, key=lambda n: (floors[n] - shares[n], compute_ops.index(n)))
        for n in by_rem[:left]:
            floors[n] += 1
        for n in compute_ops:
            pcus[n] += floors[n]
    pmu_bytes = hw.socket.pmu_bytes
    for p in kernel.ops:
        p.pcus = pcus.get(p.name, 0)
        p.pmus = max(1, math.ceil(p.sram_bytes / pmu_bytes))
