"""Kernels built by hand for the tests of what a kernel call costs: a call looks only at the PCUs
and PMUs a kernel configures (and the sockets it spans), so every other field is a placeholder."""

from __future__ import annotations

from rdusim.compiler.program import Kernel, OpPlan


def gemm_plan(name: str, pcus: int, pmus: int, degree: int = 16) -> OpPlan:
    """A GEMM's plan configuring `pcus` PCUs and `pmus` PMUs, moving no bytes."""
    return OpPlan(
        name=name,
        kind="gemm",
        cost_class="systolic",
        strategy="tp",
        degree=degree,
        flops=1e9,
        hbm_read=0.0,
        hbm_write=0.0,
        weight_bytes=0.0,
        stream_in=0.0,
        stream_out=0.0,
        pcus=pcus,
        pmus=pmus,
    )


def sized_kernel(pcus: int, pmus: int, *, ops: int = 1, degree: int = 16) -> Kernel:
    """A kernel configuring `pcus` PCUs and `pmus` PMUs in all, split as evenly as it goes over
    `ops` GEMMs."""
    plans = [
        gemm_plan(
            f"gemm{i}",
            pcus * (i + 1) // ops - pcus * i // ops,
            pmus * (i + 1) // ops - pmus * i // ops,
            degree,
        )
        for i in range(ops)
    ]
    return Kernel("k", plans)
