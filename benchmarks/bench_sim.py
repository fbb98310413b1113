"""Wall time of the simulator on the paper's workloads (compile + simulate, via `run_mapping`).

Run from the repository root:

    python benchmarks/bench_sim.py [--repeat 3]

Prints a markdown table: the median (and min/max) of `--repeat` runs of each case, measured with
time.perf_counter, plus the simulated figure each run produced as a sanity check.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rdusim.api import clear_caches, run_mapping

ROOT = Path(__file__).resolve().parent.parent
PREFILL = ROOT / "mappings" / "r1_prefill.yaml"
DECODE = ROOT / "mappings" / "r1_decode.yaml"


def _ttft(report: dict[str, Any]) -> str:
    return f"TTFT {report['total_latency_s']:.3f} s"


def _decode(report: dict[str, Any]) -> str:
    return (
        f"batch {report['batch']}, step {1e3 * report['total_latency_s']:.1f} ms, "
        f"{report['throughput_tokens_per_s']:.0f} tok/s"
    )


# Budgets the issue tracker holds the simulator to, in seconds of wall time per case.
BUDGETS = {"R1 prefill, seq_len 131072": 0.5, "R1 decode step, batch 64": 0.5}
LLAMA = ROOT / "mappings" / "llama31_8b_decode.yaml"
PAPER_DECODE = ROOT / "mappings" / "r1_decode_paper.yaml"


def cases() -> list[tuple[str, Path, list[str], Callable[[dict[str, Any]], str]]]:
    out = [
        ("R1 prefill, seq_len 131072", PREFILL, ["seq_len=131072"], _ttft),
        ("R1 decode step, batch 64", DECODE, ["batch=64"], _decode),
        ("R1 decode step, batch 1", DECODE, ["batch=1"], _decode),
        ("Llama-3.1-8B decode, batch 1, looped", LLAMA, ["batch=1"], _decode),
    ]
    for seq_len in (131072, 65536, 32768):
        for ss in (True, False):
            label = f"Table 5: seq_len {seq_len}, SnapStream {'on' if ss else 'off'}, batch max"
            overrides = [f"seq_len={seq_len}", f"snapstream.enabled={str(ss).lower()}"]
            out.append((label, PAPER_DECODE, overrides, _decode))
    return out


# What the intervals cost: a run priced under the calibration ensemble against the same run
# without (CPU seconds, median); the budget is what the whole `map` may take.
INTERVAL_CASES = (
    ("R1 prefill, seq_len 131072", PREFILL, ["seq_len=131072"]),
    ("R1 decode, batch max", DECODE, []),
)
INTERVAL_BUDGET_S = 0.5


def interval_costs(repeat: int) -> list[tuple[str, float, float]]:
    """(case, CPU seconds without intervals, with them): the ensemble's share of a run."""
    rows = []
    for label, path, overrides in INTERVAL_CASES:
        costs = {}
        for uncertainty in (False, True):
            samples = []
            for _ in range(repeat):
                clear_caches()  # each run cold, as a fresh `rdusim map` is
                t0 = time.process_time()
                run_mapping(path, overrides, uncertainty=uncertainty)
                samples.append(time.process_time() - t0)
            costs[uncertainty] = statistics.median(samples)
        rows.append((label, costs[False], costs[True]))
    return rows


def routing_statistics(repeat: int) -> list[tuple[str, float]]:
    """Seconds per call of the routing expectations the sharding pass asks for, E=256, k=8."""
    from rdusim.compiler import routing as r

    models = {"uniform": r.uniform_routing(256, 8), "zipf 1.0": r.zipf_routing(256, 8, 1.0)}
    rows = []
    for name, model in models.items():
        for tokens in (1, 256, 131072):
            for fn in (r.expected_max_experts_touched, r.expected_max_token_slots):
                t0 = time.perf_counter()
                for _ in range(repeat * 20):
                    fn(model, tokens, 16)
                per_call = (time.perf_counter() - t0) / (repeat * 20)
                rows.append((f"{fn.__name__}, {name}, n={tokens}, 16 sockets", per_call))
    return rows


def bench(path: Path, overrides: list[str], repeat: int) -> tuple[list[float], dict[str, Any]]:
    times = []
    report: dict[str, Any] = {}
    for _ in range(repeat):
        clear_caches()  # each run cold, as a fresh `rdusim map` is
        t0 = time.perf_counter()
        report = run_mapping(path, overrides).report
        times.append(time.perf_counter() - t0)
    return times, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (median reported)")
    args = parser.parse_args()

    print(
        f"{datetime.date.today().isoformat()}, Python {platform.python_version()}, "
        f"nproc {os.cpu_count()}, {args.repeat} runs per case (median, min, max)\n"
    )
    print("| case | median (s) | min (s) | max (s) | simulated |")
    print("|---|---:|---:|---:|---|")
    total = 0.0
    over = []
    for label, path, overrides, summary in cases():
        times, report = bench(path, overrides, args.repeat)
        total += sum(times)
        median = statistics.median(times)
        if median > BUDGETS.get(label, float("inf")):
            over.append(f"{label}: {median:.3f} s > {BUDGETS[label]} s")
        print(
            f"| {label} | {median:.3f} | {min(times):.3f} | {max(times):.3f} | {summary(report)} |"
        )
    print(f"\ntotal wall time: {total:.2f} s\n")
    print("| intervals over the ensemble | CPU s without | CPU s with | added |")
    print("|---|---:|---:|---:|")
    for label, without, with_ in interval_costs(args.repeat):
        print(f"| {label} | {without:.3f} | {with_:.3f} | {with_ - without:.3f} |")
        if with_ - without > INTERVAL_BUDGET_S:
            over.append(f"intervals of {label}: {with_ - without:.3f} s > {INTERVAL_BUDGET_S} s")
    print()
    print("| routing expectation | ms per call |")
    print("|---|---:|")
    for label, per_call in routing_statistics(args.repeat):
        print(f"| {label} | {1e3 * per_call:.3f} |")
    if over:
        raise SystemExit("over budget: " + "; ".join(over))


if __name__ == "__main__":
    main()
