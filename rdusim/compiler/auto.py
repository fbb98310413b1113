"""Auto-mapper: a greedy fusion and sharding for any supported model and phase.

Rules: every op is tensor-parallel over the whole node; in prefill, attention gets a kernel of
its own (it dominates and wants all PCUs); in decode, attention is data-parallel over the batch
(each socket keeps its own sequences' KV); otherwise consecutive ops fuse until the kernel's
SRAM estimate would pass a budget, when a new kernel starts.
"""

from __future__ import annotations

from collections.abc import Callable

from rdusim.ir.graph import Graph, Phase
from rdusim.spec.mapping import KernelSpec, Sharding, Tiling

# A greedy kernel closes when its SRAM estimate would pass this fraction of a socket's SRAM,
# leaving headroom for the estimate's error (the compiler still checks the full budget).
SRAM_BUDGET_FRACTION = 0.6


def auto_kernels(
    graph: Graph,
    phase: Phase,
    sockets: int,
    estimate_sram: Callable[[list[str]], float],
    sram_bytes: float,
) -> list[KernelSpec]:
    """Greedy kernels for `graph`; `estimate_sram(ops)` returns a candidate kernel's SRAM bytes."""
    kernels: list[list[str]] = []
    current: list[str] = []
    attention_ops = {n for n, op in graph.ops.items() if op.traits.is_attention}
    for name in graph.order():
        solo = phase == Phase.PREFILL and name in attention_ops
        if solo:
            if current:
                kernels.append(current)
            kernels.append([name])
            current = []
            continue
        trial = [*current, name]
        if current and estimate_sram(trial) > SRAM_BUDGET_FRACTION * sram_bytes:
            kernels.append(current)
            current = [name]
        else:
            current = trial
    if current:
        kernels.append(current)
    specs = []
    for i, ops in enumerate(kernels):
        overrides = {}
        if phase == Phase.DECODE:
            overrides = {n: Sharding(dp=sockets) for n in ops if n in attention_ops}
        tiling = (
            Tiling(kv_block=8192)
            if phase == Phase.PREFILL and set(ops) & attention_ops
            else Tiling()
        )
        specs.append(
            KernelSpec(
                name=f"K{i}:{ops[0]}",
                ops=ops,
                sharding=Sharding(tp=sockets),
                overrides=overrides,
                tiling=tiling,
            )
        )
    return specs
