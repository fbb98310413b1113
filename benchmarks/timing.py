"""What the benchmarks measure a command by: the CPU seconds of a fresh `python -m rdusim`
process (user + system, its children included), so that other work on a shared machine slows
the wall clock but not the figure; the wall time is kept beside it.

A command is measured as a user's second run of it finds things: Python's compiled byte code of
rdusim written (pip writes it for an installed package; an editable install writes it on the
first run), so each case runs once untimed first, and the child processes may write byte code
even where the environment says not to (`PYTHONDONTWRITEBYTECODE`)."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Run:
    cpu_s: float
    wall_s: float
    stdout: str


# the child's environment: this one's, byte code allowed
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_rdusim(args: list[str]) -> Run:
    """`python -m rdusim ARGS` in a fresh interpreter: its CPU and wall seconds and output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "rdusim", *args],
        check=True,
        capture_output=True,
        text=True,
        env=CHILD_ENV,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(cpu, wall, done.stdout)


@dataclass(frozen=True)
class Timed:
    cpu_s: list[float]
    wall_s: list[float]
    stdout: str  # the last run's

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpu_s)

    @property
    def wall(self) -> float:
        return statistics.median(self.wall_s)


def timed(args: list[str], repeat: int) -> Timed:
    """`repeat` timed runs of `rdusim ARGS`, after one untimed run (byte code written)."""
    run_rdusim(args)
    runs = [run_rdusim(args) for _ in range(repeat)]
    return Timed([r.cpu_s for r in runs], [r.wall_s for r in runs], runs[-1].stdout)


def header(repeat: int) -> str:
    import datetime
    import platform

    return (
        f"{datetime.date.today().isoformat()}, Python {platform.python_version()}, "
        f"nproc {os.cpu_count()}, {repeat} runs per case, CPU seconds of the whole process "
        "(median)"
    )
