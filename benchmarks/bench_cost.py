"""Candidate kernels per second the closed-form cost model prices, on one core.

Run from the repository root:

    python benchmarks/bench_cost.py [--repeat 3]

Builds every contiguous fusion of a few real layers under every sharding plan the search tries
(the kernels the auto-mapper ranks), then times `rdusim.cost.analytic.kernel_latencies_s` over
all of them, and for scale the discrete-event simulator (`time_kernel`) over a sample. The issue
tracker's budget is 10,000 candidates per second on one core.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import time

from rdusim.compiler.program import Kernel
from rdusim.cost.analytic import kernel_latencies_s
from rdusim.search.segments import every_candidate
from rdusim.sim.kernel import time_kernel
from rdusim.spec.hardware import Hardware
from rdusim.spec.mapping import load_mapping

BUDGET = 10_000  # candidates per second
LAYERS = [
    ("r1_prefill", "moe", 1),
    ("r1_decode", "moe", 64),
    ("r1_decode", "dense", 1),
    ("llama31_8b_decode", "dense", 1),
]


def candidates(name: str, kind: str, batch: int) -> tuple[list[Kernel], Hardware]:
    rm = load_mapping(name, [])
    return list(every_candidate(rm, kind, batch)), rm.hardware


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed passes (median reported)")
    args = parser.parse_args()
    print(
        f"{datetime.date.today().isoformat()}, Python {platform.python_version()}, "
        f"nproc {os.cpu_count()}, {args.repeat} passes (median)\n"
    )
    print("| layer | candidates | closed form (cand/s) | simulator (cand/s, 50 sampled) |")
    print("|---|---:|---:|---:|")
    slow = []
    for name, kind, batch in LAYERS:
        kernels, hw = candidates(name, kind, batch)
        rates = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            kernel_latencies_s(kernels, hw)
            rates.append(len(kernels) / (time.perf_counter() - t0))
        rate = statistics.median(rates)
        sample = kernels[:: max(1, len(kernels) // 50)][:50]
        t0 = time.perf_counter()
        for k in sample:
            time_kernel(k, hw)
        sim_rate = len(sample) / (time.perf_counter() - t0)
        print(f"| {name} {kind} | {len(kernels)} | {rate:,.0f} | {sim_rate:,.0f} |")
        if rate < BUDGET:
            slow.append(f"{name} {kind}: {rate:,.0f}/s")
    if slow:
        raise SystemExit(f"under {BUDGET:,} candidates/s: " + "; ".join(slow))


if __name__ == "__main__":
    main()
