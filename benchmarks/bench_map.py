"""`rdusim map` on every shipped mapping, with the intervals over the calibration ensemble.

Run from the repository root:

    python benchmarks/bench_map.py [--repeat 3]

Each case is `rdusim map NAME` in a fresh process, in CPU seconds (`benchmarks/timing.py`):
start-up, loading, the largest batch that fits (decode at `batch: max`), compiling, simulating,
and pricing the 64-member ensemble for every time's 90% interval and what it rests on. The
script exits non-zero when a median is over the budget (the issue tracker's 1 s for a `map` with
intervals).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from timing import header, timed

BUDGET_S = 1.0
MAPPINGS = sorted(
    p.stem for p in (Path(__file__).resolve().parents[1] / "rdusim" / "mappings").glob("*.yaml")
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (median reported)")
    args = parser.parse_args()
    print(header(args.repeat) + "\n")
    print("| rdusim map ... | CPU (s) | min (s) | max (s) | wall (s) |")
    print("|---|---:|---:|---:|---:|")
    over = []
    for name in MAPPINGS:
        t = timed(["map", name], args.repeat)
        print(f"| {name} | {t.cpu:.2f} | {min(t.cpu_s):.2f} | {max(t.cpu_s):.2f} | {t.wall:.2f} |")
        if t.cpu > BUDGET_S:
            over.append(f"{name}: {t.cpu:.2f} s")
    if over:
        print(f"over {BUDGET_S} s: " + "; ".join(over), file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
