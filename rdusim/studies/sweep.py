"""Parameter sweeps: `run_mapping` over the cartesian product of `--set key=v1,v2,...` values.

Points run in parallel on local cores (one process each) and come back in grid order, so the
rows do not depend on the number of jobs. Every point's mapping must load (a bad key or value is
a `SpecError` naming the point, before anything runs); a point that loads but cannot run (it does
not fit in HBM, say) becomes a row with `status: infeasible` and the reason, and the sweep goes on.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rdusim.errors import InfeasibleError, RdusimError, SpecError
from rdusim.spec.yamlio import parse_value, shortened
from rdusim.studies.executors import ExecutorKind, run_points

STATUS_OK = "ok"
STATUS_INFEASIBLE = "infeasible"
# `status` is `ok` or `infeasible`; `reason` is empty, or the user error that stopped the point.
STATUS_COLUMNS = ("status", "reason")
# headline numbers whose 90% interval over the calibration ensemble each row carries, as
# `<metric>.p05` / `<metric>.p95` columns and, in JSON, the report's `intervals` mapping (the
# kernel latency columns carry theirs too)
INTERVAL_METRICS = (
    "max_batch_size",
    "total_latency_s",
    "throughput_tokens_per_s",
    "tpot_s",
    "kernel_call_time_s",
)
INTERVALS = "intervals"  # a row's nested intervals: JSON only, not a CSV column

RESULT_COLUMNS = (
    "batch",
    "max_batch_size",
    "total_latency_s",
    "throughput_tokens_per_s",
    "tokens_per_step",
    "tpot_s",
    "kernel_calls",
    "kernel_call_time_s",
    "hbm_traffic_bytes",
    "sram_peak_bytes",
    "hbm_kv_cache_bytes",
    "hbm_weights_bytes",
)


@dataclass(frozen=True)
class Axis:
    key: str
    values: tuple[str, ...]


Point = tuple[tuple[str, str], ...]  # ((key, value text), ...) in axis order


def default_jobs() -> int:
    return min(4, os.cpu_count() or 1)


def parse_axes(items: Sequence[str]) -> list[Axis]:
    """`["seq_len=8192,16384", "batch=16"]` -> axes (a single value is a fixed setting)."""
    axes: list[Axis] = []
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecError(
                f"--set expects key=v1,v2,..., got {item!r}",
                key="--set",
                fix="write e.g. --set seq_len=8192,16384",
            )
        values = tuple(v.strip() for v in text.split(","))
        if any(not v for v in values):
            raise SpecError(
                f"empty value in {item!r}",
                key=f"--set {key}",
                fix="separate values with single commas, e.g. batch=16,32",
            )
        if key in (a.key for a in axes):
            raise SpecError(
                f"{key!r} is set twice",
                key=f"--set {key}",
                fix="give all values of a key in one --set, e.g. batch=16,32",
            )
        if len(set(values)) != len(values):
            raise SpecError(
                f"repeated value in {item!r}", key=f"--set {key}", fix="list each value once"
            )
        axes.append(Axis(key, values))
    return axes


def grid(axes: Sequence[Axis]) -> list[Point]:
    """The cartesian product, first axis slowest (the row order of the results)."""
    return [
        tuple(zip((a.key for a in axes), combo, strict=True))
        for combo in itertools.product(*(a.values for a in axes))
    ]


def overrides(point: Point) -> list[str]:
    return [f"{k}={v}" for k, v in point]


def describe(point: Point) -> str:
    """The point as its `--set`s, each value cut short so a huge one cannot flood a message."""
    return ", ".join(f"{k}={shortened(v)}" for k, v in point) or "(no --set)"


def settings(point: Point) -> dict[str, Any]:
    """The point's swept values, typed as YAML reads them."""
    return {k: parse_value(v) for k, v in point}


def result_row(point: Point, report: dict[str, Any]) -> dict[str, Any]:
    """One sweep row: the point's settings, `status: ok`, headline results, and kernel latencies
    of the most numerous layer kind (columns `<kind>.<kernel>.latency_s`). A swept key that is
    also a result column (`batch=16,max`) keeps the value as set; `max_batch_size` shows what
    `max` became."""
    hbm = report.get("hbm_bytes") or {}
    row: dict[str, Any] = settings(point) | {"status": STATUS_OK, "reason": ""}
    results = {
        "batch": report.get("batch"),
        "max_batch_size": report.get("max_batch_size"),
        "total_latency_s": report.get("total_latency_s"),
        "throughput_tokens_per_s": report.get("throughput_tokens_per_s"),
        "tokens_per_step": report.get("tokens_per_step"),
        "tpot_s": report.get("tpot_s"),
        "kernel_calls": report.get("kernel_calls"),
        "kernel_call_time_s": report.get("kernel_call_time_s"),
        "hbm_traffic_bytes": (report.get("traffic_bytes") or {}).get("hbm"),
        "sram_peak_bytes": report.get("sram_peak_bytes"),
        "hbm_kv_cache_bytes": hbm.get("kv_cache"),
        "hbm_weights_bytes": hbm.get("weights"),
    }
    # a swept key named like a result (batch=max) keeps the value as set
    row |= {k: v for k, v in results.items() if k not in row}
    reported = report.get("intervals") or {}
    intervals = {m: q for m, q in reported.items() if m in INTERVAL_METRICS}
    for metric in INTERVAL_METRICS:
        q = intervals.get(metric) or {}
        row[f"{metric}.p05"] = q.get("p05")
        row[f"{metric}.p95"] = q.get("p95")
    layers = report.get("layers") or {}
    if layers:
        kind, layer = max(layers.items(), key=lambda kv: kv[1].get("count", 0))
        for k in layer["kernels"]:
            column = f"{kind}.{k['name']}.latency_s"
            row[column] = k["latency_s"]
            q = reported.get(f"layers.{column}")
            if q:
                row[f"{column}.p05"], row[f"{column}.p95"] = q["p05"], q["p95"]
                intervals[column] = q
    row[INTERVALS] = intervals
    return row


def infeasible_row(point: Point, reason: str) -> dict[str, Any]:
    """The row of a point that loaded but could not run: its settings and why."""
    row = settings(point) | {"status": STATUS_INFEASIBLE, "reason": reason}
    return row | {k: None for k in RESULT_COLUMNS if k not in row}


def is_ok(row: dict[str, Any]) -> bool:
    return bool(row.get("status") == STATUS_OK)


@dataclass(frozen=True)
class PointError:
    """A user error at one point, in a form that crosses process boundaries."""

    problem: str
    file: str | None = None
    key: str | None = None
    line: int | None = None
    fix: str | None = None
    infeasible: bool = False  # the point does not fit; anything else is a mistake in the mapping

    @classmethod
    def of(cls, exc: RdusimError) -> PointError:
        if isinstance(exc, SpecError):
            infeasible = isinstance(exc, InfeasibleError)
            return cls(exc.problem, exc.file, exc.key, exc.line, exc.fix, infeasible)
        return cls(str(exc))

    def reason(self) -> str:
        """The error on one line, for the `reason` column."""
        leaf = (self.key or "").rsplit(".", 1)[-1]
        named = self.key and not self.problem.startswith(leaf)
        text = f"{self.key}: {self.problem}" if named else self.problem
        text = " ".join(text.split())
        return f"{text}; fix: {' '.join(self.fix.split())}" if self.fix else text

    def at(self, point: Point) -> SpecError:
        return SpecError(
            f"sweep point {describe(point)}: {self.problem}",
            file=self.file,
            key=self.key,
            line=self.line,
            fix=self.fix,
        )


def run_point(path: str, point: Point) -> dict[str, Any] | PointError:
    """Run one point (in a worker process): its row, or the user error it hit."""
    from rdusim.api import run_mapping

    try:
        return result_row(point, run_mapping(path, overrides(point)).report)
    except RdusimError as exc:
        return PointError.of(exc)


def check_points(path: str, points: Sequence[Point]) -> None:
    """Load every point's mapping before running any, so a bad key or value fails fast."""
    from rdusim.spec.mapping import load_mapping

    for point in points:
        try:
            load_mapping(path, overrides(point))
        except RdusimError as exc:
            raise PointError.of(exc).at(point) from None


def run_sweep(
    path: str | Path,
    points: Sequence[Point],
    *,
    jobs: int = 1,
    checked: bool = False,
    progress: Callable[[], None] | None = None,
    executor: ExecutorKind = ExecutorKind.LOCAL,
    scheduler: str | None = None,
) -> list[dict[str, Any]]:
    """One row per point, in grid order; a point that does not fit is an infeasible row, and a
    mistake in the mapping that only compiling finds (an unknown op, a stray override) stops the
    sweep as a SpecError naming the point.

    Every point's mapping is loaded first unless `checked` says `check_points` already did (a
    point that does not load raises a SpecError naming it). An exception that is not a user
    error is a bug: it cancels the points not yet started and propagates.
    """
    path = str(path)
    if not checked:
        check_points(path, points)
    results = run_points(
        run_point,
        path,
        points,
        executor=executor,
        jobs=jobs,
        scheduler=scheduler,
        progress=progress,
    )
    for p, r in zip(points, results, strict=True):
        if isinstance(r, PointError) and not r.infeasible:
            raise r.at(p)  # a mistake in the mapping, found only when it compiled
    return [
        infeasible_row(p, r.reason()) if isinstance(r, PointError) else r
        for p, r in zip(points, results, strict=True)
    ]


def columns(axes: Sequence[Axis], rows: Sequence[dict[str, Any]]) -> list[str]:
    """Swept keys, status and reason, the result columns, then kernel latency columns in order
    of appearance."""
    swept = [a.key for a in axes]
    cols = swept + [c for c in (*STATUS_COLUMNS, *RESULT_COLUMNS) if c not in swept]
    for r in rows:
        cols += [c for c in r if c not in cols and c != INTERVALS]
    return cols


def parse_plot(spec: str) -> tuple[str, str]:
    x, sep, y = spec.partition(":")
    if not sep or not x.strip() or not y.strip() or ":" in y:
        raise SpecError(
            f"--plot expects X:Y, got {spec!r}",
            key="--plot",
            fix="write e.g. --plot seq_len:throughput_tokens_per_s",
        )
    return x.strip(), y.strip()


def check_plot(x: str, y: str, cols: Sequence[str], *, kernels: bool = False) -> None:
    """Both names must be columns (`kernels`: also accept any `<kind>.<kernel>.latency_s`, for a
    check before the kernel columns are known)."""
    for name in (x, y):
        if name not in cols and not (kernels and name.endswith(".latency_s")):
            raise SpecError(
                f"{name!r} is not a sweep column",
                key="--plot",
                fix="use one of: " + ", ".join(cols),
            )
