"""Speed of `rdusim serve`: requests per CPU-second at scale, and five workloads of 10,000.

Run from the repository root:

    python benchmarks/bench_serve.py [--repeat 3] [--requests 10000]
    python benchmarks/bench_serve.py --scale 100000,1000000 --scale-repeat 3 --cases 0

*Scale* (issue 20's figures): `rdusim serve --json` as a whole process, on R1 128K requests
disaggregated 16+1 at 1 request/s with SnapStream (the shipped `r1_disaggregated` with more
requests), each request count run `--scale-repeat` times. It reports the CPU time of the process
(user + system, from the operating system, so other work on the machine does not count), the
requests per CPU-second, and the peak memory (resident set). A point runs three simulations
(the point and the two calibration members of its intervals) and draws the accepted tokens of
every step once; a second table splits one 100,000-request point into its parts. Targets:
TARGET_RATE requests per CPU-second, 1,000,000 requests in TARGET_1M_S CPU seconds and
TARGET_MB of memory.

*Cases*: each of five workloads of `--requests` requests is timed (CPU seconds of this process)
twice: *cold*, from nothing
(the graph times simulated, then the requests drawn, checked, run and summarised), and *warm*,
the same run once the graph times are kept (what each further point of a `--rate` sweep costs).
The occupied-step-cost case's cold run includes simulating its interpolation grid (35 decode
graphs). Prints a markdown table of the median (and min/max) of `--repeat` warm runs, the cold
run, and the run's throughput and TPOT as a sanity check.

Exits non-zero when a cold or warm case exceeds BUDGET_S or a scale target is missed.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from rdusim.serving import step_times
from rdusim.serving.serve import ServePoint, ServeRun, serve
from rdusim.spec.workload import parse_workload

BUDGET_S = 10.0
TARGET_RATE = 100_000  # requests per CPU-second, a whole `rdusim serve`
TARGET_1M_S = 15.0  # CPU seconds for 1,000,000 requests
TARGET_MB = 1024.0  # peak memory, MB

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
    """CPU seconds to serve one case's workload (a point with its intervals), and the run."""
    text = WORKLOAD.format(
        name=case.name,
        requests=requests,
        rate=case.rate,
        prompt=case.prompt,
        output=case.output,
        deployment=case.deployment,
    )
    t0 = time.process_time()
    run = serve("r1_prefill", "r1_decode", parse_workload(text), ServePoint(case.sets))
    return time.process_time() - t0, run


@dataclass(frozen=True)
class Usage:
    cpu_s: float  # user + system
    peak_mb: float


def scale_workload(requests: int) -> str:
    return WORKLOAD.format(
        name=f"r1-disaggregated-{requests}",
        requests=requests,
        rate=1.0,
        prompt="{dist: fixed, value: 130048}",
        output="{dist: fixed, value: 1024}",
        deployment="{mode: disaggregated, prefill_nodes: 16, decode_nodes: 1}",
    )


def serve_process(workload: Path) -> Usage:
    """`rdusim serve --json` in a process of its own: its CPU time and peak memory."""
    argv = [sys.executable, "-m", "rdusim", "serve", "--prefill", "r1_prefill", "--decode"]
    argv += ["r1_decode", "--workload", str(workload), "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)  # ru_maxrss: kB on Linux
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"rdusim serve failed on {workload}")
    return Usage(usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def scale(counts: list[int], repeat: int) -> int:
    """The scale table; how many targets were missed."""
    print(f"R1 128K disaggregated 16+1, 1 req/s, SnapStream; CPU median of {repeat} processes\n")
    print(
        "| requests | CPU median (s) | min (s) | max (s) | requests per CPU-s | peak memory (MB) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    missed = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            path = Path(tmp) / f"w{n}.yaml"
            path.write_text(scale_workload(n), encoding="utf-8")
            runs = [serve_process(path) for _ in range(repeat)]
            cpu = statistics.median(u.cpu_s for u in runs)
            peak = max(u.peak_mb for u in runs)
            print(
                f"| {n:,} | {cpu:.1f} | {min(u.cpu_s for u in runs):.1f} | "
                f"{max(u.cpu_s for u in runs):.1f} | {n / cpu:,.0f} | {peak:,.0f} |"
            )
            if n / cpu < TARGET_RATE:
                missed.append(f"{n:,} requests: {n / cpu:,.0f} requests per CPU-s")
            if n >= 1_000_000 and cpu * 1_000_000 / n > TARGET_1M_S:
                missed.append(f"{n:,} requests: {cpu:.1f} s CPU")
            if peak > TARGET_MB:
                missed.append(f"{n:,} requests: {peak:,.0f} MB")
    print(
        f"\ntargets: {TARGET_RATE:,} requests per CPU-s, 1,000,000 requests in "
        f"{TARGET_1M_S:g} s CPU, {TARGET_MB:,.0f} MB; missed: {'; '.join(missed) or 'none'}"
    )
    return len(missed)


def parts(requests: int) -> None:
    """One point's parts, in this process: CPU seconds of each."""
    from rdusim.serving import serve as S
    from rdusim.serving.engine import Engine, RequestSet, drawn_steps_of
    from rdusim.serving.metrics import summary

    clock = time.process_time
    workload = parse_workload(scale_workload(requests))
    t0 = clock()
    runs = S.model_runs("r1_prefill", "r1_decode", workload, ServePoint())
    t1 = clock()
    columns = S.workload_requests(workload, None)
    S.check_requests(columns, runs[0].shape, workload)
    shared = RequestSet(columns)
    t2 = clock()
    config = S.engine_config(workload.spec.deployment, runs[0].times.facts)
    config = replace(config, seed=workload.spec.seed)
    graphs = [r.graphs() for r in runs]
    drawn_steps_of(shared, graphs, config.seed)
    t3 = clock()
    engine = Engine(shared, graphs, config)
    result = engine.run()
    t4 = clock()
    summary(result, workload.spec.slo)
    t5 = clock()
    one = t5 - t3
    events = engine.env.processed
    print(f"\none point of {requests:,} requests, CPU seconds by part (graph times cold):\n")
    print(
        "| graph times | requests | accepted-token draws | one run | its metrics | "
        "run + metrics per CPU-s |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {t1 - t0:.2f} | {t2 - t1:.2f} | {t3 - t2:.2f} | {t4 - t3:.2f} | {t5 - t4:.2f} | "
        f"{requests / one:,.0f} |"
    )
    floor(requests, events, t4 - t3)


def floor(requests: int, events: int, run_s: float) -> None:
    """What the simulation's events cost by themselves, in this process: as many events as the
    run processed, each scheduled and processed with nothing to do, by the engine's environment
    (as an event with callbacks, `at`, and as a function, `call_at`, which the run's arrivals,
    prefills and transfers are) and by the least an event queue in Python does (a heap of
    (time, priority, order, function) and a call). For a point of a million requests (three
    simulations) each is a floor that no change to what an event does can go below; the bare
    heap bounds any engine, simpy or not, that takes an event per state change."""
    from heapq import heappop, heappush
    from itertools import count

    from rdusim.serving.events import ServingEnvironment

    def nothing(_: object = None) -> None:
        pass

    def engine_events() -> None:
        env = ServingEnvironment()
        for i in range(events):
            env.at(float(i), 1).callbacks.append(nothing)
        env.run_all()

    def engine_calls() -> None:
        env = ServingEnvironment()
        for i in range(events):
            env.call_at(float(i), 1, nothing)
        env.run_all()

    def bare_heap() -> None:
        queue: list[tuple[float, int, int, Callable[[], None]]] = []
        order = count()
        for i in range(events):
            heappush(queue, (float(i), 1, next(order), nothing))
        while queue:
            heappop(queue)[3]()

    print(f"\nthe simulation's {events:,} events ({events / requests:.2f} per request), alone:\n")
    print("| event queue | CPU (s) | of the simulation | µs per event | 1,000,000 requests (s) |")
    print("|---|---:|---:|---:|---:|")
    for name, queue in (
        ("the engine's, as events (`at`)", engine_events),
        ("the engine's, as functions (`call_at`)", engine_calls),
        ("a bare heap", bare_heap),
    ):
        t0 = time.process_time()
        queue()
        seconds = time.process_time() - t0
        million = 3 * seconds / requests * 1_000_000
        print(
            f"| {name} | {seconds:.2f} | {seconds / run_s:.0%} | {1e6 * seconds / events:.2f} | "
            f"{million:.1f} |"
        )


def cases(requests: int, repeat: int) -> int:
    """The five workloads' table; how many went over the budget."""
    print(
        f"{requests:,} requests per run, {repeat} warm runs per case (CPU time, a point "
        "with its intervals)\n"
    )
    print("| case | cold (s) | warm median (s) | min (s) | max (s) | decode steps | simulated |")
    print("|---|---:|---:|---:|---:|---:|---|")
    over = 0
    for case in CASES:
        step_times._cached.cache_clear()
        cold, run = one(case, requests)
        warm = [one(case, requests)[0] for _ in range(repeat)]
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
    print(f"\nbudget: {BUDGET_S:g} s CPU per run, cold or warm")
    return over


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--cases", type=int, default=1, help="0: skip the five workloads")
    parser.add_argument("--scale", default="100000,1000000", help="request counts ('': none)")
    parser.add_argument("--scale-repeat", type=int, default=3)
    parser.add_argument("--parts", type=int, default=100_000, help="0: skip the split")
    opts = parser.parse_args()
    print(f"{datetime.date.today()}, Python {platform.python_version()}, nproc {os.cpu_count()}\n")
    bad = 0
    if opts.scale:
        bad += scale([int(n) for n in opts.scale.split(",")], opts.scale_repeat)
    if opts.parts:
        parts(opts.parts)
    if opts.cases:
        print()
        bad += cases(opts.requests, opts.repeat)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
