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

from rdusim.api import run_mapping

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


def cases() -> list[tuple[str, Path, list[str], Callable[[dict[str, Any]], str]]]:
    out = [
        ("R1 prefill, seq_len 131072", PREFILL, ["seq_len=131072"], _ttft),
        ("R1 decode step, batch 64", DECODE, ["batch=64"], _decode),
    ]
    for seq_len in (131072, 65536, 32768):
        for ss in (True, False):
            label = f"Table 5: seq_len {seq_len}, SnapStream {'on' if ss else 'off'}, batch max"
            overrides = [f"seq_len={seq_len}", f"snapstream.enabled={str(ss).lower()}", "batch=max"]
            out.append((label, DECODE, overrides, _decode))
    return out


def bench(path: Path, overrides: list[str], repeat: int) -> tuple[list[float], dict[str, Any]]:
    times = []
    report: dict[str, Any] = {}
    for _ in range(repeat):
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
    for label, path, overrides, summary in cases():
        times, report = bench(path, overrides, args.repeat)
        total += sum(times)
        print(
            f"| {label} | {statistics.median(times):.3f} | {min(times):.3f} | "
            f"{max(times):.3f} | {summary(report)} |"
        )
    print(f"\ntotal wall time: {total:.2f} s")


if __name__ == "__main__":
    main()
