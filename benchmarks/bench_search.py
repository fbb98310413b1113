"""Wall time of the auto-mapper's search for one model and phase (`kernels: auto`).

Run from the repository root:

    python benchmarks/bench_search.py [--repeat 3]

Each case is what `rdusim map NAME --set kernels=auto` does before it reports: the search
(candidate kernels compiled and costed in closed form, finalists compiled and simulated) plus the
final compile and simulation. The issue tracker's budget is 10 s wall per case on 2 cores. The
table also shows the hand mapping's figure next to the searched one.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import time

from rdusim.api import run_mapping

BUDGET_S = 10.0
CASES = [
    ("R1 prefill, 131072, SnapStream", "r1_prefill", []),
    ("R1 decode, batch max (paper settings)", "r1_decode", []),
    ("Llama-3.1-8B decode, batch 1", "llama31_8b_decode", ["batch=1"]),
    (
        "Llama-3.1-70B decode, batch 1, sn40l-8",
        "llama31_70b_decode",
        ["hardware=sn40l-8", "batch=1"],
    ),
]


def _figure(report: dict) -> str:
    if report["phase"] == "prefill":
        return f"TTFT {report['total_latency_s']:.3f} s"
    return (
        f"batch {report['batch']}, step {1e3 * report['total_latency_s']:.2f} ms, "
        f"{report['throughput_tokens_per_s']:.0f} tok/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (median reported)")
    args = parser.parse_args()
    print(
        f"{datetime.date.today().isoformat()}, Python {platform.python_version()}, "
        f"nproc {os.cpu_count()}, {args.repeat} runs per case (median)\n"
    )
    print("| case | search + run (s) | searched | hand mapping |")
    print("|---|---:|---|---|")
    over = []
    for label, name, overrides in CASES:
        times = []
        report: dict = {}
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            report = run_mapping(name, [*overrides, "kernels=auto"]).report
            times.append(time.perf_counter() - t0)
        try:
            hand = _figure(run_mapping(name, overrides).report)
        except Exception as exc:  # the hand mapping may not fit this hardware: say so
            hand = f"does not run ({type(exc).__name__})"
        median = statistics.median(times)
        print(f"| {label} | {median:.2f} | {_figure(report)} | {hand} |")
        if median > BUDGET_S:
            over.append(f"{label}: {median:.1f} s")
    if over:
        raise SystemExit(f"over {BUDGET_S} s: " + "; ".join(over))


if __name__ == "__main__":
    main()
