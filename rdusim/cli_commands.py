"""Sub-commands beyond `model`, registered here to keep cli.py small."""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rdusim.errors import SpecError

if TYPE_CHECKING:
    from rdusim.serving.reproduce import Cell
    from rdusim.spec.hardware import Hardware


def _write_atomic(path: Path, text: str, *, key: str, dir_fix: str) -> None:
    """Write via a temporary file so that nothing is left half-written.

    A path that is an existing directory, or one that cannot be written (no permission, a parent
    that cannot be created), is a `SpecError` on option `key`; the temporary file never outlives
    a failure. `dir_fix` is the advice when `path` is a directory.
    """
    if path.is_dir():
        raise SpecError("is a directory, not a file", file=str(path), key=key, fix=dir_fix)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise SpecError(
                f"cannot write the file: {exc.strerror or exc}",
                file=str(path),
                key=key,
                fix="check that its directory exists or can be created, and that you may "
                "write there",
            ) from None
        raise


def dump_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False) + "\n"


def _cmd_map(args: argparse.Namespace) -> int:
    from rdusim.api import run_mapping
    from rdusim.report.mapping_report import render_map_report, render_op_timing

    run = run_mapping(args.mapping, args.set, trace=bool(args.trace))
    report = run.report
    if args.trace:
        from rdusim.sim.trace import chrome_trace

        assert run.result is not None
        _write_atomic(
            Path(args.trace),
            json.dumps(chrome_trace(run.result)),
            key="--trace",
            dir_fix=f"name a file to write, e.g. --trace {Path(args.trace) / 'trace.json'}",
        )
    if args.out:
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise SpecError(
                "exists and is not a directory", file=str(out), key="--out", fix="name a directory"
            )
        _write_atomic(
            out / "report.json",
            dump_json(report),
            key="--out",
            dir_fix="remove that directory or name another --out directory",
        )
    if args.json:
        print(dump_json(report), end="")
    else:
        print(render_map_report(report))
        if args.ops:
            print()
            print(render_op_timing(report))
    return 0


def _out_dir(text: str, flag: str = "--out") -> Path:
    out = Path(text)
    if out.exists() and not out.is_dir():
        raise SpecError(
            "exists and is not a directory",
            file=str(out),
            key=flag,
            fix="name a directory (it is created if missing)",
        )
    return out


def _hardware(name_or_path: str | None) -> Hardware | None:
    from rdusim.spec.hardware import load_hardware

    return load_hardware(name_or_path) if name_or_path else None


def _shown_hardware(hw: Hardware | None) -> Hardware:
    """The hardware a comparison ran on: `hw`, or the one the paper's mappings name."""
    if hw is not None:
        return hw
    from rdusim.serving.reproduce import mappings_dir
    from rdusim.spec.mapping import load_mapping

    return load_mapping(mappings_dir() / "r1_prefill.yaml").hardware


def _comparison_cells(which: str, hw: Hardware | None) -> dict[str, list[Cell]]:
    """Cells by output table: Table 4 with the prefill-overhead predictions, and Table 5."""
    from rdusim.serving import reproduce as rp

    out: dict[str, list[Cell]] = {}
    if which in ("table4", "all"):
        out["table4"] = rp.table4(hw) + rp.prefill_overhead(hardware=hw)
    if which in ("table5", "all"):
        out["table5"] = rp.table5(hw)
    return out


def _comparison_title(hw: Hardware | None) -> str:
    return f"SnapStream paper vs rdusim (hardware: {_shown_hardware(hw).name})"


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from rdusim.report import plots
    from rdusim.report.tables import cells_csv, cells_json, render_comparison, write_files
    from rdusim.serving.reproduce import published

    out = _out_dir(args.out)
    hw = _hardware(args.hardware)
    by_table = _comparison_cells(args.which, hw)
    pub = published()
    shown = _shown_hardware(hw)
    meta = {
        "source": pub["source"],
        "hardware": shown.name,
        "calibration": shown.calibration.model_dump(),
    }
    files: dict[Path, str | bytes] = {}
    for name, cells in by_table.items():
        if name == "table4":
            fig = plots.table4_figure(cells)
        else:
            compressed = {f"{r['seq_len'] // 1024}K": r["compressed"] for r in pub[name]["rows"]}
            fig = plots.table5_figure(cells, compressed)
        for fmt in ("png", "svg"):
            files[out / f"{name}.{fmt}"] = plots.figure_bytes(fig, fmt)
        files[out / f"{name}.csv"] = cells_csv(cells)
        files[out / f"{name}.json"] = cells_json(
            cells, table=name, caption=pub[name]["caption"], **meta
        )
    write_files(files)
    cells = [c for cs in by_table.values() for c in cs]
    print(render_comparison(cells, _comparison_title(hw)))
    print(f"\nwrote {', '.join(sorted(p.name for p in files))} to {out}/")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from rdusim.report.tables import render_comparison

    hw = _hardware(args.hardware)
    cells = [c for cs in _comparison_cells("all", hw).values() for c in cs]
    print(render_comparison(cells, _comparison_title(hw)))
    return 0 if all(c.within for c in cells) else 1


def _hardware_source(name_or_path: str) -> Path:
    from rdusim.spec.hardware import PRESETS, preset_path

    return preset_path(name_or_path) if name_or_path in PRESETS else Path(name_or_path)


def _check_hardware_text(text: str, target: Path) -> None:
    """Load `text` as a hardware spec (from a scratch file beside `target`) before writing it."""
    from rdusim.spec.hardware import load_hardware

    scratch = target.with_name(f".{target.stem}.check.yaml")
    scratch.parent.mkdir(parents=True, exist_ok=True)
    try:
        scratch.write_text(text, encoding="utf-8")
        load_hardware(scratch)
    finally:
        scratch.unlink(missing_ok=True)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    import sys

    from tqdm import tqdm

    from rdusim.calibration import FITTED_ON, FITTED_PARAMS, fit, fit_cells, with_calibration
    from rdusim.report.tables import (
        format_param,
        patch_calibration,
        render_params,
        render_residuals,
        write_files,
    )
    from rdusim.spec.hardware import load_hardware

    if args.max_evals < 1:
        raise SpecError(f"must be at least 1, got {args.max_evals}", key="--max-evals")
    hw = load_hardware(args.hardware)
    source = _hardware_source(args.hardware)
    target = Path(args.write) if args.write else None
    if target is not None and target.is_dir():
        raise SpecError(
            "is a directory",
            file=str(target),
            key="--write",
            fix="name the hardware YAML file to write",
        )
    before_cells = fit_cells(hw)
    # Each evaluation with a numerical Jacobian costs one call per parameter beyond the first.
    total = args.max_evals * (len(FITTED_PARAMS) + 1)
    with tqdm(total=total, desc="calibrate", unit="eval", file=sys.stderr) as bar:

        def progress(r: list[float]) -> None:
            bar.update(1)
            bar.set_postfix(cost=f"{sum(x * x for x in r):.3g}", refresh=False)

        fitted, _ = fit(hw, max_evals=args.max_evals, progress=progress)
        bar.total = bar.n
        bar.refresh()
    text = {n: format_param(getattr(fitted.calibration, n)) for n in FITTED_PARAMS}
    after = with_calibration(hw, **{n: float(v) for n, v in text.items()})
    after_cells = fit_cells(after)
    before_v = {n: getattr(hw.calibration, n) for n in FITTED_PARAMS}
    after_v = {n: getattr(after.calibration, n) for n in FITTED_PARAMS}
    print(f"calibration of {hw.name} ({source}), at most {args.max_evals} evaluations\n")
    print(render_params(before_v, after_v, FITTED_ON))
    print(
        "\nresiduals of the fitted cells (deviation / tolerance; the fit minimises their squares)"
    )
    print(render_residuals(before_cells, after_cells))
    print("\npaste into the calibration: section of the hardware YAML:")
    print("\n".join(f"  {n}: {v}" for n, v in text.items()))
    if target is not None:
        try:
            new_text = patch_calibration(source.read_text(encoding="utf-8"), text)
        except KeyError as exc:
            raise SpecError(
                f"no calibration entries {exc.args[0]} to replace",
                file=str(source),
                key="--write",
                fix="write from a YAML hardware file with a "
                "calibration: section of `  key: value` lines",
            ) from None
        _check_hardware_text(new_text, target)
        write_files({target: new_text})
        print(f"\nwrote {target} (a copy of {source} with the new calibration values)")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    import sys

    from tqdm import tqdm

    from rdusim.report.plots import figure_bytes, sweep_figure
    from rdusim.report.tables import render_sweep, to_csv, to_json, write_files
    from rdusim.serving import sweep

    axes = sweep.parse_axes(args.set)
    plot = sweep.parse_plot(args.plot) if args.plot else None
    jobs = sweep.default_jobs() if args.jobs is None else args.jobs
    if jobs < 1:
        raise SpecError(f"must be at least 1, got {jobs}", key="--jobs")
    out = _out_dir(args.out)
    points = sweep.grid(axes)
    sweep.check_points(args.mapping, points)
    if plot is not None:
        sweep.check_plot(*plot, sweep.columns(axes, []), kernels=True)
    with tqdm(total=len(points), desc="sweep", unit="point", file=sys.stderr) as bar:
        rows = sweep.run_sweep(args.mapping, points, jobs=jobs, checked=True, progress=bar.update)
    cols = sweep.columns(axes, rows)
    files: dict[Path, str | bytes] = {
        out / "sweep.csv": to_csv(cols, rows),
        out / "sweep.json": to_json(
            {
                "mapping": str(args.mapping),
                "set": {a.key: list(a.values) for a in axes},
                "columns": cols,
                "rows": rows,
            }
        ),
    }
    varying = [a.key for a in axes if len(a.values) > 1]
    if plot is not None:
        x, y = plot
        sweep.check_plot(x, y, cols)
        groups = [k for k in varying if k != x]
        title = f"{Path(args.mapping).stem}: {y} vs {x}"
        files[out / "sweep.png"] = figure_bytes(sweep_figure(rows, x, y, groups, title), "png")
    write_files(files)
    print(render_sweep(rows, varying))
    print(f"\n{len(rows)} points; wrote {', '.join(p.name for p in files)} to {out}/")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the mapping, simulation and reproduction commands."""
    m = sub.add_parser("map", help="compile and simulate a mapping (the main command)")
    m.add_argument("mapping", help="mappings/*.yaml")
    m.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a mapping field by dotted path, e.g. --set seq_len=65536",
    )
    m.add_argument("--json", action="store_true", help="print the JSON report")
    m.add_argument("--out", metavar="DIR", help="also write DIR/report.json")
    m.add_argument(
        "--trace", metavar="FILE", help="write a Chrome/Perfetto trace (ui.perfetto.dev)"
    )
    m.add_argument(
        "--ops", action="store_true", help="also print per-op busy/stall time and bounds"
    )
    m.set_defaults(func=_cmd_map)

    r = sub.add_parser("reproduce", help="the paper's Tables 4 and 5: plots, CSV/JSON, comparison")
    r.add_argument("which", nargs="?", choices=("table4", "table5", "all"), default="all")
    r.add_argument(
        "--out", metavar="DIR", default="reproduce", help="output directory (default: reproduce/)"
    )
    r.add_argument(
        "--hardware",
        metavar="PRESET_OR_FILE",
        help="hardware preset or YAML file (default: the one the mappings name)",
    )
    r.set_defaults(func=_cmd_reproduce)

    v = sub.add_parser(
        "validate", help="compare with the paper; exit 1 if a cell is out of tolerance"
    )
    v.add_argument(
        "--hardware",
        metavar="PRESET_OR_FILE",
        help="hardware preset or YAML file (default: the one the mappings name)",
    )
    v.set_defaults(func=_cmd_validate)

    c = sub.add_parser("calibrate", help="re-fit the calibration parameters to the paper")
    c.add_argument(
        "--hardware",
        metavar="PRESET_OR_FILE",
        default="sn40l-16",
        help="hardware preset or YAML file to start from (default: sn40l-16)",
    )
    c.add_argument(
        "--max-evals",
        type=int,
        default=200,
        metavar="N",
        help="evaluations of the least-squares fit (default: 200)",
    )
    c.add_argument(
        "--write",
        metavar="FILE",
        help="write a copy of the hardware YAML with the fitted values to FILE",
    )
    c.set_defaults(func=_cmd_calibrate)

    s = sub.add_parser("sweep", help="run a mapping over a grid of --set values")
    s.add_argument("mapping", help="mappings/*.yaml")
    s.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="values of a mapping field (repeat for a grid; one value fixes it)",
    )
    s.add_argument(
        "--jobs", type=int, metavar="N", help="parallel processes (default: min(4, CPU count))"
    )
    s.add_argument(
        "--out", metavar="DIR", default="sweep", help="output directory (default: sweep/)"
    )
    s.add_argument(
        "--plot",
        metavar="X:Y",
        help="also draw DIR/sweep.png, e.g. seq_len:throughput_tokens_per_s",
    )
    s.set_defaults(func=_cmd_sweep)
