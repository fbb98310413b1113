"""Parameter sweeps: `run_mapping` over the cartesian product of `--set key=v1,v2,...` values.

Points run in parallel on local cores (one process each) and come back in grid order, so the
rows do not depend on the number of jobs. A user mistake at any point is a `SpecError` naming the
point; nothing of a failed sweep is returned.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rdusim.errors import RdusimError, SpecError
from rdusim.spec.yamlio import parse_value

RESULT_COLUMNS = (
    "batch",
    "max_batch_size",
    "total_latency_s",
    "throughput_tokens_per_s",
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
    return ", ".join(f"{k}={v}" for k, v in point) or "(no --set)"


def result_row(point: Point, report: dict[str, Any]) -> dict[str, Any]:
    """One sweep row: the point's settings, headline results, and kernel latencies of the most
    numerous layer kind (columns `<kind>.<kernel>.latency_s`). A swept key that is also a result column
    (`batch=16,max`) keeps the value as set; `max_batch_size` shows what `max` became."""
    hbm = report.get("hbm_bytes") or {}
    row: dict[str, Any] = {k: parse_value(v) for k, v in point}
    results = {
        "batch": report.get("batch"),
        "max_batch_size": report.get("max_batch_size"),
        "total_latency_s": report.get("total_latency_s"),
        "throughput_tokens_per_s": report.get("throughput_tokens_per_s"),
        "sram_peak_bytes": report.get("sram_peak_bytes"),
        "hbm_kv_cache_bytes": hbm.get("kv_cache"),
        "hbm_weights_bytes": hbm.get("weights"),
    }
    # a swept key named like a result (batch=max) keeps the value as set
    row |= {k: v for k, v in results.items() if k not in row}
    layers = report.get("layers") or {}
    if layers:
        kind, layer = max(layers.items(), key=lambda kv: kv[1].get("count", 0))
        for k in layer["kernels"]:
            row[f"{kind}.{k['name']}.latency_s"] = k["latency_s"]
    return row


@dataclass(frozen=True)
class PointError:
    """A user error at one point, in a form that crosses process boundaries."""

    problem: str
    file: str | None = None
    key: str | None = None
    line: int | None = None
    fix: str | None = None

    @classmethod
    def of(cls, exc: RdusimError) -> PointError:
        if isinstance(exc, SpecError):
            return cls(exc.problem, exc.file, exc.key, exc.line, exc.fix)
        return cls(str(exc))

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
) -> list[dict[str, Any]]:
    """Rows for every point, in grid order.

    Every point's mapping is loaded first unless `checked` says `check_points` already did. A user
    error at a point stops the sweep (points not yet started are cancelled) and is raised
    as a SpecError naming the point.
    """
    path = str(path)
    if not checked:
        check_points(path, points)
    results: list[dict[str, Any] | PointError | None] = [None] * len(points)
    if jobs <= 1 or len(points) <= 1:
        for i, point in enumerate(points):
            results[i] = run_point(path, point)
            if progress:
                progress()
            if isinstance(results[i], PointError):
                break
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(points))) as pool:
            futures: dict[Future[dict[str, Any] | PointError], int] = {
                pool.submit(run_point, path, p): i for i, p in enumerate(points)
            }
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    results[futures[fut]] = fut.result()
                    if progress:
                        progress()
                if any(isinstance(r, PointError) for r in results):
                    pool.shutdown(cancel_futures=True)
                    break
    for point, res in zip(points, results, strict=True):
        if isinstance(res, PointError):
            raise res.at(point)
    return [r for r in results if isinstance(r, dict)]


def columns(axes: Sequence[Axis], rows: Sequence[dict[str, Any]]) -> list[str]:
    """Swept keys, the result columns, then kernel latency columns in order of appearance."""
    cols = [a.key for a in axes] + [c for c in RESULT_COLUMNS if c not in {a.key for a in axes}]
    for r in rows:
        cols += [c for c in r if c not in cols]
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
