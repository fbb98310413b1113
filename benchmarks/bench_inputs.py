"""How fast bad inputs are refused: deep nesting, alias bombs, and deep text as a --set value.

Run from the repository root:

    python benchmarks/bench_inputs.py [--repeat 5]

Each case must be refused (or parsed) in under BUDGET_S seconds, so a hostile or broken spec
cannot stall the CLI; the script exits non-zero when a median is over budget.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from rdusim.errors import SpecError
from rdusim.spec.yamlio import parse_document, parse_value

BUDGET_S = 1.0


def _refused(text: str) -> Callable[[], None]:
    def run() -> None:
        try:
            parse_document(text, file="bench.yaml")
        except SpecError:
            return
        raise AssertionError("the input was accepted")

    return run


def cases() -> dict[str, Callable[[], None]]:
    aliases = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    aliases += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    deep_block = "".join(" " * i + f"k{i}:\n" for i in range(200)) + " " * 200 + "v\n"
    return {
        "10,000 open flow lists": _refused("x: " + "[" * 10_000),
        "10,000 closed flow lists": _refused("x: " + "[" * 10_000 + "]" * 10_000),
        "200 nested block mappings": _refused(deep_block),
        "alias bomb (10 levels of 10)": _refused("\n".join(aliases)),
        "--set value of 10,000 brackets": lambda: parse_value("[" * 10_000) and None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print("| input | median (s) | max (s) |")
    print("|---|---:|---:|")
    over = []
    for label, run in cases().items():
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        median = statistics.median(times)
        print(f"| {label} | {median:.4f} | {max(times):.4f} |")
        if median > BUDGET_S:
            over.append(label)
    if over:
        raise SystemExit(f"over the {BUDGET_S} s budget: {', '.join(over)}")


if __name__ == "__main__":
    main()
