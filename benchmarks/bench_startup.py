"""How long the command line takes: `rdusim --version`, `rdusim --help`, and a whole
`rdusim map r1_prefill` (load, compile, simulate, price the 64-member ensemble, print).

Run from the repository root, with rdusim installed:

    python benchmarks/bench_startup.py [--repeat 3]

Each case starts a fresh interpreter (`python -m rdusim ...`) and is measured in CPU seconds of
that process (`benchmarks/timing.py`): interpreter start, the imports the command pays, and its
work. Heavy imports (simpy, pydantic, numpy, matplotlib, the search, serving) belong to the
commands that need them; a regression that pulls them into start-up shows here. The script
exits non-zero when a median is over its budget.
"""

from __future__ import annotations

import argparse
import sys

from timing import header, timed

# (command, budget in CPU seconds: the issue tracker's targets)
CASES = {
    "rdusim --version": (["--version"], 0.3),
    "rdusim --help": (["--help"], 0.3),
    "rdusim map r1_prefill": (["map", "r1_prefill"], 0.4),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()
    print(header(opts.repeat) + "\n")
    print("| case | CPU (s) | min (s) | max (s) | wall (s) | budget (s) |")
    print("|---|---:|---:|---:|---:|---:|")
    over = []
    for name, (args, budget) in CASES.items():
        t = timed(args, opts.repeat)
        print(
            f"| {name} | {t.cpu:.2f} | {min(t.cpu_s):.2f} | {max(t.cpu_s):.2f} | "
            f"{t.wall:.2f} | {budget} |"
        )
        if t.cpu > budget:
            over.append(f"{name}: {t.cpu:.2f} s")
    if over:
        print("over budget: " + "; ".join(over), file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
