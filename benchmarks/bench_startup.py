"""How long the CLI takes to answer before it does any work: `rdusim --version` and `--help`.

Run from the repository root, with rdusim installed:

    python benchmarks/bench_startup.py [--repeat 10]

Each case starts a fresh interpreter (`python -m rdusim ...`), so it measures interpreter start
plus the imports the CLI pays before dispatching. Heavy imports (simpy, pydantic, numpy,
matplotlib) belong to the commands that need them; a regression that pulls them into start-up
shows here. The script exits non-zero when a median is over BUDGET_S.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

BUDGET_S = 0.3
CASES = {"rdusim --version": ["--version"], "rdusim --help": ["--help"]}


def time_once(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rdusim", *args], check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    opts = parser.parse_args()
    over = 0
    print("| case | median (s) | min (s) | max (s) | budget (s) |\n|---|---:|---:|---:|---:|")
    for name, args in CASES.items():
        times = [time_once(args) for _ in range(opts.repeat)]
        median = statistics.median(times)
        over += median > BUDGET_S
        print(f"| {name} | {median:.3f} | {min(times):.3f} | {max(times):.3f} | {BUDGET_S} |")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
