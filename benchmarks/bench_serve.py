"""Wall time of `rdusim serve`'s request-level simulation: 10,000 requests on the paper's R1
mappings, in under 10 s each.

Run from the repository root:

    python benchmarks/bench_serve.py [--repeat 3] [--requests 10000]

Each case is timed twice: *cold*, from nothing (the graph times simulated, then the requests
drawn, checked, run and summarised), and *warm*, the same run once the graph times are kept
(what each further point of a `--rate` sweep costs). The occupied-step-cost case's cold run
includes simulating its interpolation grid (35 decode graphs). Prints a markdown table of the median (and
min/max) of `--repeat` warm runs, the cold run, and the run's throughput and TPOT as a sanity
check; exits non-zero when a cold or warm median exceeds BUDGET_S.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass

from rdusim.serving import step_times
from rdusim.serving.serve import ServePoint, ServeRun, serve
from rdusim.spec.workload import parse_workload

BUDGET_S = 10.0

WORKLOAD = """
name: {name}
requests: {requests}
seed: 0
arrival: {{process: poisson, rate: {rate}}}
prompt_tokens: {prompt}
output_tokens: {output}
slo: {{ttft_s: 30, tpot_s: 0.2}}
deployment: {deployment}
"""


@dataclass(frozen=True)
class Case:
    name: str
    sets: tuple[tuple[str, str], ...]  # --set values
    rate: float  # requests/s
    prompt: str  # prompt_tokens distribution
    output: str  # output_tokens distribution
    deployment: str


CASES = (
    Case(
        "R1 128K, disaggregated 16+1, SnapStream, 1 req/s",
        (),
        1.0,
        "{dist: fixed, value: 130048}",
        "{dist: fixed, value: 1024}",
        "{mode: disaggregated, prefill_nodes: 16, decode_nodes: 1}",
    ),
    Case(
        "R1 128K, disaggregated 16+1, no SnapStream, 1 req/s (overloaded)",
        (("snapstream.enabled", "false"),),
        1.0,
        "{dist: fixed, value: 130048}",
        "{dist: fixed, value: 1024}",
        "{mode: disaggregated, prefill_nodes: 16, decode_nodes: 1}",
    ),
    Case(
        "R1 128K, disaggregated 16+1, SnapStream, occupied step cost (grid), 1 req/s",
        (),
        1.0,
        "{dist: uniform, low: 16384, high: 130048}",
        "{dist: fixed, value: 1024}",
        "{mode: disaggregated, prefill_nodes: 16, decode_nodes: 1, decode_step: occupied}",
    ),
    Case(
        "R1 32K, colocated prefill-first, lognormal lengths, 4 buckets, 0.3 req/s",
        (("seq_len", "32768"),),
        0.3,
        "{dist: lognormal, median: 8000, sigma: 1.0, max: 28672}",
        "{dist: lognormal, median: 600, sigma: 0.7, max: 4096}",
        "{mode: colocated, policy: prefill-first, prefill_buckets: [4096, 8192, 16384]}",
    ),
    Case(
        "R1 32K, 4 colocated nodes, mixed, 2 req/s",
        (("seq_len", "32768"),),
        2.0,
        "{dist: uniform, low: 1000, high: 30000}",
        "{dist: uniform, low: 64, high: 2048}",
        "{mode: colocated, nodes: 4, policy: mixed, decode_steps_per_prefill: 8}",
    ),
)


def one(case: Case, requests: int) -> tuple[float, ServeRun]:
    """Seconds to serve one case's workload, and the run."""
    text = WORKLOAD.format(
        name=case.name,
        requests=requests,
        rate=case.rate,
        prompt=case.prompt,
        output=case.output,
        deployment=case.deployment,
    )
    t0 = time.perf_counter()
    run = serve("r1_prefill", "r1_decode", parse_workload(text), ServePoint(case.sets))
    return time.perf_counter() - t0, run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--requests", type=int, default=10_000)
    opts = parser.parse_args()
    print(
        f"{datetime.date.today()}, Python {platform.python_version()}, nproc {os.cpu_count()}, "
        f"{opts.requests:,} requests per run, {opts.repeat} warm runs per case\n"
    )
    print("| case | cold (s) | warm median (s) | min (s) | max (s) | decode steps | simulated |")
    print("|---|---:|---:|---:|---:|---:|---|")
    over = 0
    for case in CASES:
        step_times._cached.cache_clear()
        cold, run = one(case, opts.requests)
        warm = [one(case, opts.requests)[0] for _ in range(opts.repeat)]
        median = statistics.median(warm)
        over += cold > BUDGET_S or median > BUDGET_S
        m = run.metrics
        sim = (
            f"{m['throughput_tokens_per_s']:,.0f} tok/s, TPOT p50 {1e3 * m['tpot_s']['p50']:.1f} ms,"
            f" TTFT p50 {m['ttft_s']['p50']:.2f} s"
        )
        print(
            f"| {case.name} | {cold:.2f} | {median:.2f} | {min(warm):.2f} | {max(warm):.2f} | "
            f"{run.result.decode_steps:,} | {sim} |"
        )
    print(f"\nbudget: {BUDGET_S:g} s per run, cold or warm")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
