"""Throughput from a simulated step: what serving figures are made of.

Decode: batch x tokens accepted per step (MTP; the paper's 2.4) / step time.
Prefill: prompt tokens / time to first token.
"""

from __future__ import annotations

from rdusim.sim.model import SimResult


def throughput(result: SimResult) -> float:
    program = result.program
    wl = program.workload
    if program.phase == "decode":
        return wl.batch * program.tokens_per_step / result.total_latency_s
    return wl.batch * wl.seq / result.total_latency_s
