"""`rdusim sweep`: a mapping over a grid of `--set` values, one row per point
(`rdusim.studies.sweep`), written as CSV and JSON with an optional plot."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rdusim.cli.options import Subparsers, add_mapping, add_out, add_set
from rdusim.cli.progress import progress_bar
from rdusim.errors import SpecError
from rdusim.studies.executors import ExecutorKind


def register(sub: Subparsers) -> None:
    s = sub.add_parser("sweep", help="run a mapping over a grid of --set values")
    add_mapping(s)
    add_set(
        s,
        metavar="KEY=V1,V2,...",
        help="values of a mapping field (repeat for a grid; one value fixes it)",
    )
    s.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="parallel processes, or workers of a local dask cluster (default: min(4, CPU count))",
    )
    s.add_argument(
        "--executor",
        choices=[e.value for e in ExecutorKind],
        default=ExecutorKind.LOCAL.value,
        help="where points run: local processes (default) or a dask.distributed cluster",
    )
    s.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="with --executor dask: a running scheduler (e.g. tcp://host:8786); default: a "
        "local cluster",
    )
    add_out(s, default="sweep", help="output directory (default: sweep/)")
    s.add_argument(
        "--plot",
        metavar="X:Y",
        help="also draw DIR/sweep.png, e.g. seq_len:throughput_tokens_per_s",
    )
    s.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 if any point is infeasible (every row is still written)",
    )
    s.set_defaults(func=sweep_command)


def sweep_command(args: argparse.Namespace) -> int:
    from rdusim.outputs import write_outputs
    from rdusim.studies import sweep

    axes = sweep.parse_axes(args.set)
    plot = sweep.parse_plot(args.plot) if args.plot else None
    jobs = sweep.default_jobs() if args.jobs is None else args.jobs
    if jobs < 1:
        raise SpecError(f"must be at least 1, got {jobs}", key="--jobs")
    out = _sweep_outputs(args, plot is not None)
    points = sweep.grid(axes)
    sweep.check_points(args.mapping, points)
    if plot is not None:
        sweep.check_plot(*plot, sweep.columns(axes, []), kernels=True)
    with progress_bar(len(points), "sweep", "point") as bar:
        rows = sweep.run_sweep(
            args.mapping,
            points,
            jobs=jobs,
            checked=True,
            progress=bar.update,
            executor=ExecutorKind(args.executor),
            scheduler=args.scheduler,
        )
    files = _sweep_files(args, out, axes, rows, plot)
    write_outputs(files, dict.fromkeys(files, "--out"))
    _report_sweep(points, rows, [a.key for a in axes if len(a.values) > 1], plot is not None)
    points_word = "point" if len(rows) == 1 else "points"
    print(f"\n{len(rows)} {points_word}; wrote {', '.join(p.name for p in files)} to {out}/")
    return _sweep_exit(args, rows, out)


def _sweep_outputs(args: argparse.Namespace, plot: bool) -> Path:
    from rdusim.outputs import output_dir

    names = ["sweep.csv", "sweep.json"] + (["sweep.png"] if plot else [])
    return output_dir(args.out, "--out", names)


def _sweep_files(
    args: argparse.Namespace,
    out: Path,
    axes: Sequence[Any],
    rows: list[dict[str, Any]],
    plot: tuple[str, str] | None,
) -> dict[Path, str | bytes]:
    """sweep.csv and sweep.json with every row, and sweep.png of the feasible ones."""
    from rdusim.report.plots import figure_bytes, sweep_figure
    from rdusim.report.tables import to_csv, to_json
    from rdusim.studies import sweep

    cols = sweep.columns(axes, rows)
    infeasible = sum(not sweep.is_ok(r) for r in rows)
    meta = {
        "mapping": str(args.mapping),
        "set": {a.key: list(a.values) for a in axes},
        "points": len(rows),
        "infeasible": infeasible,
    }
    files: dict[Path, str | bytes] = {
        out / "sweep.csv": to_csv(cols, rows),
        out / "sweep.json": to_json(meta | {"columns": cols, "rows": rows}),
    }
    if plot is not None:
        x, y = plot
        # kernel columns exist only once a point ran
        sweep.check_plot(x, y, cols, kernels=infeasible == len(rows))
        groups = [a.key for a in axes if len(a.values) > 1 and a.key != x]
        title = f"{Path(args.mapping).stem}: {y} vs {x}"
        marks = _published(args.mapping, axes, rows, y)
        figure = sweep_figure(rows, x, y, groups, title, published=marks)
        files[out / "sweep.png"] = figure_bytes(figure, "png")
    return files


def _published(
    mapping: str, axes: Sequence[Any], rows: list[dict[str, Any]], y: str
) -> list[tuple[int, float]]:
    """The published figures of `y` at the sweep's points (rows follow the grid's order)."""
    from rdusim.studies import sweep
    from rdusim.studies.published import published_points

    sets = [sweep.overrides(p) for p in sweep.grid(axes)]
    ok = [sweep.is_ok(r) for r in rows]
    return [(p.row, p.value) for p in published_points(mapping, sets, ok, y)]


def _report_sweep(
    points: Sequence[Any], rows: list[dict[str, Any]], varying: list[str], plotted: bool
) -> None:
    """The console summary: one line per point, then why each infeasible point did not run."""
    from rdusim.report.tables import render_sweep
    from rdusim.studies import sweep

    print(render_sweep(rows, [*varying, "status"]))
    bad = [(p, r) for p, r in zip(points, rows, strict=True) if not sweep.is_ok(r)]
    if bad:
        print(f"\n{len(bad)} of {len(rows)} points infeasible:")
        for point, row in bad:
            print(f"  {sweep.describe(point)}: {row['reason']}")
        if plotted:
            print(f"the plot skips the {len(bad)} infeasible point{'s' if len(bad) != 1 else ''}")


def _sweep_exit(args: argparse.Namespace, rows: list[dict[str, Any]], out: Path) -> int:
    """0 when every point ran (or some did, without --strict), 1 with --strict and an
    infeasible point, and a user error (2) when no point ran."""
    from rdusim.studies import sweep

    infeasible = sum(not sweep.is_ok(r) for r in rows)
    if infeasible == len(rows):
        raise SpecError(
            f"none of the {len(rows)} sweep points ran; every one is infeasible "
            f"(the reasons are in {out / 'sweep.csv'})",
            file=str(args.mapping),
            fix="change the swept values so that some point fits, e.g. a smaller batch",
        )
    if infeasible and args.strict:
        print(f"rdusim: {infeasible} infeasible point(s) and --strict: exit 1", file=sys.stderr)
        return 1
    return 0
