"""A small mutation run: do the fast tests notice a plausible mistake in the cost model, the cut
search or the serving metrics?

Run from the repository root:

    python benchmarks/mutation.py             # every mutant, 2 at a time
    python benchmarks/mutation.py --jobs 1    # one at a time
    python benchmarks/mutation.py --only ahead --only metrics.py
    python benchmarks/mutation.py --list      # the mutants, nothing run

`MUTANTS` is a fixed list of source edits (operator swaps, constants changed, a boundary moved,
a term dropped) in `rdusim/cost/`, `rdusim/search/boundaries.py` and `rdusim/serving/metrics.py`,
each standing for a mistake someone could make. The script copies the package and the tests to
a temporary directory (never touching the working tree), checks that the tests pass there
unmutated, then applies one mutant at a time and runs that file's fast tests (`TESTS`) with
`python -m pytest -x -q` (hypothesis derandomized with `--hypothesis-seed=0`). A mutant is
*killed* when a test fails (the first failure is reported) and *survives* when every test
passes. Each mutant's text must occur exactly once in its file (`tests/test_mutation_list.py`
checks that the list still applies). Exits 1 if a mutant survived. Equivalent mutants (edits
no reachable input can tell apart, listed above `MUTANTS` with the reason) are left out.
Results: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ANALYTIC = "rdusim/cost/analytic.py"
CALLS = "rdusim/cost/calls.py"
BOUNDARIES = "rdusim/search/boundaries.py"
METRICS = "rdusim/serving/metrics.py"

# the fast tests that pin each file, quickest first (-x stops at the first failure)
COST_TESTS = (
    "tests/cost/test_pipeline_steps.py",
    "tests/cost/test_calls.py",
    "tests/cost/test_analytic.py",
    "tests/cost/test_pipeline_regression.py",
)
TESTS: dict[str, tuple[str, ...]] = {
    ANALYTIC: COST_TESTS,
    CALLS: COST_TESTS,
    BOUNDARIES: ("tests/search/test_boundaries.py",),
    METRICS: tuple(
        str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests/serving").glob("test_metrics*.py"))
    ),
}
TIMEOUT_S = 300  # per mutant: a mutant that hangs the tests counts as killed


@dataclass(frozen=True)
class Mutant:
    path: str  # relative to the repository root
    old: str  # the text replaced; must occur exactly once in the file
    new: str
    what: str  # the mistake it stands for


# Left out as equivalent (no input the code can receive tells them apart):
# - analytic.estimate, `max(hbm, p2p, pipeline_s(loaded, hw))` without p2p: the pipeline's own
#   links makespan is at least the links' whole work, p2p;
# - metrics.time_average_in_system, `area += count * (end - t_prev)` with `end - start`: at the
#   window's end (the last completion) no request is left, count is 0;
# - metrics.summary, slo_attainment over `records` instead of `done`: the engine completes every
#   request exactly once or raises;
# - boundaries.best_cuts, `cut < here[m + 1]` with `<=`: two cuts with the same kernel count
#   and the same ends are the same cut.
MUTANTS: tuple[Mutant, ...] = (
    # ---- rdusim/cost/analytic.py: the closed-form pipeline
    Mutant(ANALYTIC, "ahead = min(2, n) / n", "ahead = min(1, n) / n", "single buffering"),
    Mutant(
        ANALYTIC,
        "finish = max(finish, release) + work",
        "finish = finish + work",
        "makespan ignores release times",
    ),
    Mutant(ANALYTIC, "if work > 0:  #", "if work >= 0:  #", "an empty job holds the channel"),
    Mutant(
        ANALYTIC,
        "if used + cap * remaining <= 1.0:",
        "if used + cap * remaining < 1.0:",
        "tile rate: boundary of a capped loader",
    ),
    Mutant(
        ANALYTIC,
        "return (1.0 - used) / remaining",
        "return (1.0 + used) / remaining",
        "tile rate: capped loaders' share added",
    ),
    Mutant(
        ANALYTIC,
        "rate = p.pcus * fpp * eff",
        "rate = p.pcus * fpp",
        "compute at peak, efficiency dropped",
    ),
    Mutant(
        ANALYTIC,
        "hbm_in / hbm_rate,",
        "p.hbm_read / hbm_rate,",
        "weights and spills not loaded",
    ),
    Mutant(
        ANALYTIC,
        "default=0) + int(s.blocking)",
        "default=0) + 0",
        "a blocking op starts no phase",
    ),
    Mutant(
        ANALYTIC,
        "_Pipeline(max(1, kernel.tiles),",
        "_Pipeline(max(2, kernel.tiles),",
        "at least two tiles",
    ),
    Mutant(
        ANALYTIC,
        "return t.start[f.src] + pl.stages[f.src].compute_s / pl.tiles + f.latency_s",
        "return t.start[f.src] + pl.stages[f.src].compute_s / pl.tiles",
        "collective from an op: latency dropped",
    ),
    Mutant(
        ANALYTIC,
        "last = max(t.end[f.src] + f.transfer_s / n, last)",
        "last = last",
        "collective's last tile not held by its source's end",
    ),
    Mutant(
        ANALYTIC,
        "return _Arrival(emitted + f.transfer_s / n, last)",
        "return _Arrival(emitted + f.transfer_s, last)",
        "collective's first tile after its whole transfer",
    ),
    Mutant(
        ANALYTIC,
        "first, last = max(s.load_s, s.ddr_load_s) / n, 0.0",
        "first, last = max(s.load_s, s.ddr_load_s), 0.0",
        "first tile waits for every load",
    ),
    Mutant(
        ANALYTIC,
        "first = max(first, t.start[u] + pl.stages[u].compute_s / n)",
        "first = max(first, t.start[u])",
        "producer's first tile takes no compute",
    ),
    Mutant(
        ANALYTIC,
        "return max(a.first_s, a.last_s) if s.blocking else a.first_s",
        "return a.first_s",
        "blocking op starts on its first input tile",
    ),
    Mutant(
        ANALYTIC,
        "jobs.append((start, s.load_s * (1.0 - ahead)))",
        "jobs.append((0.0, s.load_s * (1.0 - ahead)))",
        "every load released at time 0",
    ),
    Mutant(
        ANALYTIC,
        "jobs.append((start + s.compute_s / n, s.write_s))",
        "jobs.append((0.0, s.write_s))",
        "writes released at time 0",
    ),
    Mutant(
        ANALYTIC,
        "[(s.load_s + s.write_s) / n for s in ops]",
        "[s.load_s / n for s in ops]",
        "tile rate ignores writes",
    ),
    Mutant(
        ANALYTIC,
        "return s.load_s > 0 and s.compute_s < n / rate",
        "return s.load_s > 0 and s.compute_s <= n / rate",
        "paced: boundary",
    ),
    Mutant(
        ANALYTIC,
        "return s.load_s > 0 and s.compute_s < n / rate",
        "return s.compute_s < n / rate",
        "an op that loads nothing is paced",
    ),
    Mutant(
        ANALYTIC,
        "return max(start_s + s.compute_s, last_input_s + s.compute_s / n)",
        "return max(start_s + s.compute_s, last_input_s)",
        "no tile of compute after the last input",
    ),
    Mutant(
        ANALYTIC,
        "        if pl.phase[u] == k:\n",
        "        if pl.phase[u] != k:\n",
        "held by producers of other phases",
    ),
    Mutant(
        ANALYTIC,
        "e = max(e, t.end[f.src] + f.transfer_s / n + tile)",
        "e = max(e, t.end[f.src] + tile)",
        "held by a collective's source without its last tile's transfer",
    ),
    Mutant(
        ANALYTIC,
        "e = max(e, reads_done_s + tile)",
        "e = max(e, reads_done_s)",
        "paced op ends with the reads, no tile of compute",
    ),
    Mutant(
        ANALYTIC,
        "return t.end[o] + max(s.write_s, s.ddr_write_s) / n",
        "return t.end[o]",
        "no last tile of writes",
    ),
    Mutant(
        ANALYTIC,
        "ddr_rate = hw.socket.ddr.bandwidth  # peak",
        "ddr_rate = hw.socket.hbm.bandwidth  # peak",
        "DDR streamed at HBM's bandwidth",
    ),
    Mutant(
        ANALYTIC,
        "t.ddr_jobs.extend(_hbm_jobs(pl, t, on_ddr))",
        "t.jobs.extend(_hbm_jobs(pl, t, on_ddr))",
        "DDR bytes queued on the HBM channel",
    ),
    Mutant(
        ANALYTIC,
        "finish = max(finish, t.end[f.src] + f.transfer_s / n)",
        "finish = max(finish, t.end[f.src])",
        "collective into a later kernel: last tile's transfer dropped",
    ),
    Mutant(
        ANALYTIC,
        "return max(finish, _makespan(_link_jobs(pl, t)))",
        "return finish",
        "links' makespan ignored",
    ),
    Mutant(
        ANALYTIC,
        "(self.executions - 1) * self.period_s",
        "self.executions * self.period_s",
        "looped call: the first execution paid twice",
    ),
    Mutant(
        ANALYTIC,
        "hbm_bytes += h\n        ddr_bytes += d\n    hbm = hbm_bytes / hbm_rate",
        "hbm_bytes += p.hbm_in_bytes\n        ddr_bytes += d\n    hbm = hbm_bytes / hbm_rate",
        "channel work without writes",
    ),
    Mutant(
        ANALYTIC,
        "if looped_executions > 1 and kernel.prefetch_iteration:",
        "if looped_executions > 1:",
        "every looped kernel prefetches",
    ),
    # ---- rdusim/cost/calls.py: a kernel call
    Mutant(
        CALLS,
        "kernel.pcus * socket.config_bytes_per_pcu + kernel.pmus * socket.config_bytes_per_pmu",
        "kernel.pcus * socket.config_bytes_per_pcu",
        "PMUs' configuration not loaded",
    ),
    Mutant(
        CALLS,
        "host_round_trip_s=cal.host_round_trip_s if host else 0.0",
        "host_round_trip_s=cal.host_round_trip_s",
        "hardware-issued calls pay the host's round trip",
    ),
    Mutant(
        CALLS,
        "return rounds * hw.links.p2p_latency_s",
        "return hw.links.p2p_latency_s",
        "barrier of one round on any topology",
    ),
    # ---- rdusim/search/boundaries.py: the cut dynamic programme
    Mutant(
        BOUNDARIES,
        "for i in range(j - 1, -1, -1):",
        "for i in range(j - 1, 0, -1):",
        "no kernel starts at op 0",
    ),
    Mutant(
        BOUNDARIES,
        "if stop is not None and stop(i, j):\n                    break",
        "if stop is not None and stop(i, j):\n                    continue",
        "stop does not stop",
    ),
    Mutant(
        BOUNDARIES,
        "cut = Cut(prefix.total_s + c, (*prefix.ends, j))",
        "cut = Cut(max(prefix.total_s, c), (*prefix.ends, j))",
        "kernels overlap instead of adding",
    ),
    Mutant(
        BOUNDARIES,
        "if m + 1 not in here or cut < here[m + 1]:",
        "if m + 1 not in here or cut > here[m + 1]:",
        "keeps the slowest cut",
    ),
    Mutant(
        BOUNDARIES,
        "starts = (0, *self.ends[:-1])",
        "starts = (1, *self.ends[:-1])",
        "first kernel starts at op 1",
    ),
    Mutant(
        BOUNDARIES,
        "if not math.isfinite(c):",
        "if math.isnan(c):",
        "impossible kernels kept",
    ),
    # ---- rdusim/serving/metrics.py
    Mutant(
        METRICS,
        "return area / (end - start) if end > start else 0.0",
        "return area / (end + start) if end > start else 0.0",
        "requests in system over a window from 0",
    ),
    Mutant(
        METRICS,
        "mean_slots = float(area.sum() / span) if span > 0 else 0.0",
        "mean_slots = float(area.sum() / end) if span > 0 else 0.0",
        "occupancy over a window from 0",
    ),
    Mutant(
        METRICS,
        "overlap = np.minimum(t1[k], edges[b + 1]) - np.maximum(t0[k], edges[b])",
        "overlap = np.minimum(t1[k], edges[b + 1]) - t0[k]",
        "occupancy timeline: a bin's overlap from the interval's start",
    ),
    Mutant(
        METRICS,
        "decoded = math.floor(rec.steps * tokens_per_step + 1e-9)",
        "decoded = math.ceil(rec.steps * tokens_per_step + 1e-9)",
        "fractional tokens rounded up",
    ),
    Mutant(
        METRICS,
        "return 1 + min(rec.output_tokens - 1, decoded)",
        "return min(rec.output_tokens, decoded)",
        "the prefill's token not counted",
    ),
    Mutant(
        METRICS,
        "(ttft <= slo.ttft_s)",
        "(ttft < slo.ttft_s)",
        "SLO: a TTFT at the objective misses",
    ),
    Mutant(
        METRICS,
        "(np.isnan(tpot) | (tpot <= slo.tpot_s))",
        "(~np.isnan(tpot) & (tpot <= slo.tpot_s))",
        "SLO: a one-token request misses",
    ),
    Mutant(METRICS, "PERCENTILES = (50, 90, 99)", "PERCENTILES = (50, 90, 95)", "p99 is p95"),
    Mutant(METRICS, "SIGNIFICANT = 6", "SIGNIFICANT = 5", "five significant digits"),
    Mutant(
        METRICS,
        "rounded((len(arrivals) - 1) / arrival_span)",
        "rounded(len(arrivals) / arrival_span)",
        "arrival rate counts n, not n - 1, gaps",
    ),
    Mutant(METRICS, "duration = end - start", "duration = end", "duration from time 0"),
)


def mutate(source: str, m: Mutant) -> str:
    """`source` with `m` applied; its text must occur exactly once."""
    count = source.count(m.old)
    if count != 1:
        raise ValueError(f"{m.path}: {m.old!r} occurs {count} times (expected once)")
    return source.replace(m.old, m.new)


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    killed: bool
    by: str  # the first failing test, or why the run failed
    seconds: float


def _copy_tree(dest: Path) -> None:
    """The package, the tests and what they read (the linked data folders) into `dest`."""
    ignore = shutil.ignore_patterns("__pycache__", ".hypothesis", ".pytest_cache")
    shutil.copytree(ROOT / "rdusim", dest / "rdusim", ignore=ignore)
    shutil.copytree(ROOT / "tests", dest / "tests", ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    for name in ("models", "mappings", "workloads"):
        link = ROOT / name
        if link.is_symlink():
            os.symlink(os.readlink(link), dest / name)


def _drop_bytecode(source: Path) -> None:
    """Remove `source`'s cached bytecode: a same-sized edit within the same second as the copy
    could otherwise be read from a stale .pyc."""
    for pyc in (source.parent / "__pycache__").glob(f"{source.stem}.*.pyc"):
        pyc.unlink()


def _env(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(copy)
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _pytest(copy: Path, tests: Sequence[str]) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-x",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "--hypothesis-seed=0",
        *tests,
    ]
    return subprocess.run(
        command, cwd=copy, env=_env(copy), capture_output=True, text=True, timeout=TIMEOUT_S
    )


def _first_failure(output: str) -> str:
    found = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.MULTILINE)
    if found is None:
        return "the run failed (no test named)"
    return found.group(1).split("/")[-1]


def _check_copy(copy: Path) -> None:
    """Refuse a copy that imports rdusim from anywhere but itself (an installed package)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import rdusim; print(rdusim.__file__)"],
        cwd=copy,
        env=_env(copy),
        capture_output=True,
        text=True,
        check=True,
    )
    if not Path(probe.stdout.strip()).resolve().is_relative_to(copy.resolve()):
        raise SystemExit(f"the copy imports rdusim from {probe.stdout.strip()}, not {copy}")


def run_mutant(copy: Path, m: Mutant) -> Outcome:
    target = copy / m.path
    original = target.read_text()
    target.write_text(mutate(original, m))
    _drop_bytecode(target)
    t0 = time.perf_counter()
    try:
        proc = _pytest(copy, TESTS[m.path])
        killed, by = proc.returncode != 0, _first_failure(proc.stdout + proc.stderr)
    except subprocess.TimeoutExpired:
        killed, by = True, f"timed out after {TIMEOUT_S} s"
    finally:
        target.write_text(original)
        _drop_bytecode(target)
    return Outcome(m, killed, by if killed else "", time.perf_counter() - t0)


@contextmanager
def copies(n: int) -> Iterator[list[Path]]:
    with tempfile.TemporaryDirectory(prefix="rdusim-mutation-") as tmp:
        paths = []
        for i in range(n):
            path = Path(tmp) / f"copy{i}"
            path.mkdir()
            _copy_tree(path)
            _check_copy(path)
            paths.append(path)
        yield paths


def run(mutants: Sequence[Mutant], jobs: int) -> list[Outcome]:
    """Every mutant in its own pytest run, `jobs` at a time, each in a private copy."""
    for m in mutants:  # fail early on a mutant that no longer applies
        mutate((ROOT / m.path).read_text(), m)
    with copies(max(1, min(jobs, len(mutants)))) as paths:
        baseline = _pytest(paths[0], sorted({t for m in mutants for t in TESTS[m.path]}))
        if baseline.returncode != 0:
            raise SystemExit("the tests fail unmutated:\n" + baseline.stdout[-3000:])
        free: queue.Queue[Path] = queue.Queue()
        for p in paths:
            free.put(p)

        def one(m: Mutant) -> Outcome:
            copy = free.get()
            try:
                return run_mutant(copy, m)
            finally:
                free.put(copy)

        with ThreadPoolExecutor(len(paths)) as pool:
            return list(pool.map(one, mutants))


def report(outcomes: Sequence[Outcome]) -> str:
    lines = ["| file | mutation | stands for | result |", "|---|---|---|---|"]
    for o in outcomes:
        m = o.mutant
        old, new = (" ".join(s.split()) for s in (m.old, m.new))
        result = f"killed by `{o.by}`" if o.killed else "**survived**"
        lines.append(f"| {Path(m.path).name} | `{old}` → `{new}` | {m.what} | {result} |")
    killed = sum(o.killed for o in outcomes)
    lines.append("")
    lines.append(f"{len(outcomes)} mutants: {killed} killed, {len(outcomes) - killed} survived")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="run the mutants whose file, text or description contains this (repeatable)",
    )
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args(argv)
    chosen = [
        m
        for m in MUTANTS
        if not args.only or any(s in f"{m.path} {m.old} {m.what}" for s in args.only)
    ]
    if args.list:
        for m in chosen:
            print(f"{m.path}: {m.old!r} -> {m.new!r}  ({m.what})")
        return 0
    t0 = time.perf_counter()
    outcomes = run(chosen, args.jobs)
    print(report(outcomes))
    print(f"wall time {time.perf_counter() - t0:.0f} s, {args.jobs} at a time")
    return 0 if all(o.killed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
