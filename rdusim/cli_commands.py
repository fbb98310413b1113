"""Sub-commands beyond `model`, registered here to keep cli.py small.

Every output path is checked before any work starts (a sweep or a calibration can take minutes),
and all of a command's files are written together through temporaries that are renamed into
place (`write_files`), so a failure leaves nothing half-written.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rdusim.errors import SpecError
from rdusim.outputs import output_dir, output_file, write_outputs
from rdusim.search.objective import Objective
from rdusim.serving.executors import ExecutorKind
from rdusim.spec.yamlio import check_path

if TYPE_CHECKING:
    from collections.abc import Callable

    from rdusim.api import MapRun
    from rdusim.search.mapper import SearchOptions
    from rdusim.spec.hardware import Hardware
    from rdusim.validation.cells import Cell

# Keys of a mapping that name files, checked before the mapping is loaded.
MAPPING_PATH_KEYS = (("model",), ("hardware",), ("moe", "routing", "file"))
MAPPING_HELP = "a mapping YAML file, or the name of a shipped mapping (rdusim list)"


def _check_mapping_paths(mapping: str, overrides: Sequence[str]) -> None:
    """Refuse a file name in the mapping (after `--set`) that no file system accepts, naming
    its key, before loading the model and hardware it names. `mapping` may be a shipped name."""
    from rdusim.spec.catalog import resolve_mapping
    from rdusim.spec.mapping import apply_overrides
    from rdusim.spec.yamlio import check_path_keys, read_document, to_plain

    mapping = resolve_mapping(mapping)
    doc = read_document(mapping)
    data = to_plain(doc)
    if isinstance(data, dict):
        data = apply_overrides(data, list(overrides), mapping)
        check_path_keys(data, MAPPING_PATH_KEYS, file=mapping, doc=doc, base=Path(mapping).parent)


def _check_hardware_arg(text: str | None) -> None:
    if text is not None:
        check_path(text, file=text, key="--hardware")


def dump_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False) + "\n"


_TRACES = (("--trace", "trace"), ("--trace-full", "trace_full"))


def _map_outputs(args: argparse.Namespace) -> dict[str, Path]:
    """The files `rdusim map` will write, by option, checked before the run: no two the same."""
    outputs: dict[str, Path] = {}
    for key, attr in _TRACES:
        if getattr(args, attr) is not None:
            outputs[key] = output_file(getattr(args, attr), key, "trace.json")
    if args.out is not None:
        outputs["--out"] = output_dir(args.out, "--out", ["report.json"]) / "report.json"
    if args.emit_mapping is not None:
        outputs["--emit-mapping"] = output_file(args.emit_mapping, "--emit-mapping", "auto.yaml")
    seen: dict[Path, str] = {}
    for key in ("--out", "--trace", "--trace-full", "--emit-mapping"):
        if key not in outputs:
            continue
        other = seen.setdefault(outputs[key].resolve(), key)
        if other != key:
            what = "the report --out writes" if other == "--out" else f"the file {other} writes"
            raise SpecError(
                f"is also {what}",
                file=str(outputs[key]),
                key=key,
                fix="name a different trace file",
            )
    return outputs


def _trace_files(run: MapRun, outputs: Mapping[str, Path]) -> dict[Path, str | bytes]:
    """The trace files asked for: representative layers (--trace), every layer (--trace-full)."""
    from rdusim.sim.trace import chrome_trace, chrome_trace_full

    result = run.result
    assert result is not None
    files: dict[Path, str | bytes] = {}
    if "--trace" in outputs:
        files[outputs["--trace"]] = json.dumps(chrome_trace(result))
    if "--trace-full" in outputs:
        model = run.mapping.model
        order = [model.layer_kind(i) for i in range(model.num_hidden_layers)]
        files[outputs["--trace-full"]] = json.dumps(chrome_trace_full(result, layer_order=order))
    return files


def _cmd_map(args: argparse.Namespace) -> int:
    from rdusim.api import run_mapping
    from rdusim.report.mapping_report import render_map_report, render_op_timing

    outputs = _map_outputs(args)
    _check_mapping_paths(args.mapping, args.set)
    search = _search_options(args)
    traced = any(key in outputs for key, _ in _TRACES)
    run = run_mapping(args.mapping, args.set, trace=traced, search=search, progress=_progress(args))
    timed = _with_search_time(run)
    report = timed if args.timings else run.report
    files = _trace_files(run, outputs) if traced else {}
    if "--out" in outputs:
        files[outputs["--out"]] = dump_json(report)
    if "--emit-mapping" in outputs:
        files[outputs["--emit-mapping"]] = _emitted(run, outputs["--emit-mapping"], args.set)
    write_outputs(files, {path: key for key, path in outputs.items()})
    if args.json:
        print(dump_json(report), end="")
    else:
        print(render_map_report(timed))
        if args.ops:
            print()
            print(render_op_timing(report))
    notes = sys.stderr if args.json else sys.stdout
    for key, _ in _TRACES:
        if key in outputs:
            print(f"wrote trace {outputs[key]} (open it in ui.perfetto.dev)", file=notes)
    if "--out" in outputs:
        print(f"wrote report {outputs['--out']}", file=notes)
    if "--emit-mapping" in outputs:
        print(f"wrote mapping {outputs['--emit-mapping']}", file=notes)
    return 0


def _with_search_time(run: MapRun) -> dict[str, Any]:
    """The report with the auto-mapper's wall time (`search_seconds`), which the text report
    shows and the JSON has only with --timings (it differs from run to run)."""
    if run.auto is None:
        return run.report
    auto = {**run.report["auto_mapping"], "search_seconds": round(run.auto.seconds, 3)}
    return {**run.report, "auto_mapping": auto}


def _search_options(args: argparse.Namespace) -> SearchOptions | None:
    """The auto-mapper's options, refused when the mapping's kernels are written out."""
    from rdusim.search.mapper import SearchOptions

    given = [
        flag
        for flag, value in (
            ("--objective", args.objective),
            ("--latency-bound", args.latency_bound),
            ("--alternatives", args.alternatives or None),
            ("--timings", args.timings or None),
        )
        if value is not None
    ]
    if args.alternatives < 0:
        raise SpecError(
            f"must be 0 or more, got {args.alternatives}", key="--alternatives", fix="e.g. 3"
        )
    if args.latency_bound is not None and not 0 < args.latency_bound < math.inf:
        raise SpecError(
            f"must be a positive, finite number of seconds, got {args.latency_bound}",
            key="--latency-bound",
            fix="e.g. --latency-bound 0.05",
        )
    if not given:
        return None
    if not _is_auto(args.mapping, args.set):
        raise SpecError(
            "this mapping lists its kernels, so there is nothing to search",
            key=given[0],
            fix="add --set kernels=auto to let the auto-mapper choose them",
        )
    return SearchOptions(
        objective=Objective(args.objective) if args.objective else None,
        latency_bound_s=args.latency_bound,
        alternatives=args.alternatives,
    )


def _is_auto(mapping: str, overrides: list[str]) -> bool:
    from rdusim.spec.mapping import load_mapping

    return load_mapping(mapping, overrides).spec.kernels == "auto"


def progress_bar(total: int, desc: str, unit: str) -> Any:
    """A tqdm bar on stderr, shown only on a terminal (one that reports no size gets 80 x 24,
    where tqdm would draw nothing)."""
    import shutil

    from tqdm import tqdm

    shown = _stderr_is_tty()
    size = shutil.get_terminal_size((80, 24))
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        file=sys.stderr,
        disable=not shown,
        ncols=size.columns if shown else None,
        nrows=size.lines if shown else None,
    )


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def _progress(args: argparse.Namespace) -> Callable[[str], None] | None:
    """Search progress on stderr, when a person is watching it."""
    if not _stderr_is_tty():
        return None
    return lambda message: print(f"auto-mapper: {message.strip()}", file=sys.stderr)


def _emitted(run: MapRun, path: Path, overrides: list[str]) -> str:
    """The mapping that ran, as a file's text; hardware overrides cannot be part of it."""
    from rdusim.mapping_api import Mapping, auto_mapping_text

    roots = ("hardware.", "calibration.")
    hardware = [o for o in overrides if o.split("=", 1)[0].strip().startswith(roots)]
    if hardware:
        print(
            "note: --set " + ", ".join(hardware) + " changed the hardware, which a mapping "
            "file only names; run the written mapping with the same --set",
            file=sys.stderr,
        )
    if run.auto is not None:
        return auto_mapping_text(run.auto, path)
    rm = run.mapping
    return Mapping.from_spec(rm.spec, file=rm.source.file).yaml_text(path.resolve().parent)


def _hardware(name_or_path: str | None) -> Hardware | None:
    from rdusim.spec.hardware import load_hardware

    _check_hardware_arg(name_or_path)
    return load_hardware(name_or_path) if name_or_path else None


def _shown_hardware(hw: Hardware | None) -> Hardware:
    """The hardware a comparison ran on: `hw`, or the one the paper's mappings name."""
    if hw is not None:
        return hw
    from rdusim.spec.mapping import load_mapping
    from rdusim.validation.data import mappings_dir

    return load_mapping(mappings_dir() / "r1_prefill.yaml").hardware


def _comparison_cells(which: str, hw: Hardware | None) -> dict[str, list[Cell]]:
    """Cells by output table: Table 4 with the prefill-overhead predictions, Table 5 with the
    on-chip naive update, and (for `all`) the kernel-looping speed-up."""
    from rdusim.validation.paper import comparison_cells

    return comparison_cells(which, hw)


def _comparison_title(hw: Hardware | None) -> str:
    return f"SnapStream paper vs rdusim (hardware: {_shown_hardware(hw).name})"


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from rdusim.report import plots
    from rdusim.report.tables import cells_csv, cells_json, render_comparison
    from rdusim.validation.data import paper as published

    tables = ["table4", "table5"] if args.which == "all" else [args.which]
    names = [f"{t}.{ext}" for t in tables for ext in ("png", "svg", "csv", "json")]
    out = output_dir(args.out, "--out", names)
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
        if name not in tables:
            continue  # compared and printed, but no figure of its own
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
    write_outputs(files, dict.fromkeys(files, "--out"))
    cells = [c for cs in by_table.values() for c in cs]
    print(render_comparison(cells, _comparison_title(hw)))
    print(f"\nwrote {', '.join(sorted(p.name for p in files))} to {out}/")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from rdusim.report.tables import render_comparison, render_null_summary
    from rdusim.validation.paper import null_summary

    hw = _hardware(args.hardware)
    cells = [c for cs in _comparison_cells("all", hw).values() for c in cs]
    nulls = null_summary(cells)
    if args.json:
        shown = _shown_hardware(hw)
        print(
            dump_json(
                {
                    "hardware": shown.name,
                    "calibration": shown.calibration.model_dump(),
                    "cells": [c.as_dict() for c in cells],
                    "null_models": nulls,
                    "ok": all(c.within for c in cells),
                    "unexpected": [f"{c.table} {c.item}" for c in cells if c.unexpected],
                }
            ),
            end="",
        )
    else:
        print(render_comparison(cells, _comparison_title(hw)))
        print(render_null_summary(nulls))
    if args.strict:
        return 0 if all(c.within for c in cells) else 1
    return 1 if any(c.unexpected for c in cells) else 0


def _hardware_source(name_or_path: str) -> Path:
    from rdusim.spec.hardware import PRESETS, preset_path

    return preset_path(name_or_path) if name_or_path in PRESETS else Path(name_or_path)


def _check_hardware_text(text: str, target: Path) -> None:
    """Validate `text` as a hardware spec (reported against `target`) before writing it."""
    from rdusim.spec.hardware import Hardware
    from rdusim.spec.yamlio import parse_document, to_plain, validate

    doc = parse_document(text, file=str(target))
    validate(Hardware, to_plain(doc), file=str(target), doc=doc)


def _patched(source: Path, text: str, values: Mapping[str, str]) -> str:
    """`text` (the hardware YAML `source`) with its calibration entries set to `values`."""
    from rdusim.report.tables import patch_calibration

    try:
        return patch_calibration(text, values)
    except KeyError as exc:
        raise SpecError(
            f"no calibration entries {exc.args[0]} to replace",
            file=str(source),
            key="--write",
            fix="write from a YAML hardware file with a "
            "calibration: section of `  key: value` lines",
        ) from None


def _calibration_target(args: argparse.Namespace, hw: Hardware, source: Path) -> str | None:
    """Before fitting: check --write, and that the source's calibration section can be
    patched; the source text, or None without --write."""
    from rdusim.report.tables import format_param
    from rdusim.validation.calibrate import FITTED_PARAMS

    if args.write is None:
        return None
    output_file(args.write, "--write", "my-sn40l.yaml")
    text = source.read_text(encoding="utf-8-sig")
    _patched(source, text, {n: format_param(getattr(hw.calibration, n)) for n in FITTED_PARAMS})
    return text


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from rdusim.report.tables import (
        format_param,
        render_fit_statistics,
        render_params,
        render_residuals,
    )
    from rdusim.spec.hardware import load_hardware
    from rdusim.validation.calibrate import FITTED_ON, FITTED_PARAMS, fit, fit_cells

    if args.max_evals < 1:
        raise SpecError(f"must be at least 1, got {args.max_evals}", key="--max-evals")
    _check_hardware_arg(args.hardware)
    hw = load_hardware(args.hardware)
    source = _hardware_source(args.hardware)
    source_text = _calibration_target(args, hw, source)
    before_cells = fit_cells(hw)
    # the number of evaluations depends on how fast the fit converges: count them, no ETA
    with tqdm(
        desc="calibrate", unit="eval", file=sys.stderr, disable=not sys.stderr.isatty()
    ) as bar:

        def progress(r: list[float]) -> None:
            bar.update(1)
            bar.set_postfix(cost=f"{sum(x * x for x in r):.3g}", refresh=False)

        result = fit(hw, max_evals=args.max_evals, progress=progress)
    text = {n: format_param(result.values[n]) for n in FITTED_PARAMS}
    if args.json:
        print(dump_json({"hardware": hw.name, **result.as_dict()}), end="")
    else:
        before_v = {n: getattr(hw.calibration, n) for n in FITTED_PARAMS}
        print(f"calibration of {hw.name} ({source}), at most {args.max_evals} evaluations\n")
        print(render_params(before_v, result.values, FITTED_ON, result.stderr))
        print("\n" + render_fit_statistics(result.as_dict()))
        print(
            "\nresiduals of the fitted cells (deviation / tolerance; the fit minimises their "
            "squares)"
        )
        print(render_residuals(before_cells, result.cells))
        print("\npaste into the calibration: section of the hardware YAML:")
        print("\n".join(f"  {n}: {v}" for n, v in text.items()))
    if not result.identifiable:
        print(
            "rdusim: the fit does not identify its parameters:\n  "
            + "\n  ".join(result.problems)
            + "\n  (fix the data or the parameter set before trusting these values)",
            file=sys.stderr,
        )
        return 1
    if source_text is not None:
        target = Path(args.write)
        new_text = _patched(source, source_text, text)
        _check_hardware_text(new_text, target)
        write_outputs({target: new_text}, {target: "--write"})
        notes = sys.stderr if args.json else sys.stdout
        print(f"wrote {target} (a copy of {source} with the new calibration values)", file=notes)
    return 0


def _sweep_outputs(args: argparse.Namespace, plot: bool) -> Path:
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
    from rdusim.serving import sweep

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
        files[out / "sweep.png"] = figure_bytes(sweep_figure(rows, x, y, groups, title), "png")
    return files


def _report_sweep(
    points: Sequence[Any], rows: list[dict[str, Any]], varying: list[str], plotted: bool
) -> None:
    """The console summary: one line per point, then why each infeasible point did not run."""
    from rdusim.report.tables import render_sweep
    from rdusim.serving import sweep

    print(render_sweep(rows, [*varying, "status"]))
    bad = [(p, r) for p, r in zip(points, rows, strict=True) if not sweep.is_ok(r)]
    if bad:
        print(f"\n{len(bad)} of {len(rows)} points infeasible:")
        for point, row in bad:
            print(f"  {sweep.describe(point)}: {row['reason']}")
        if plotted:
            print(f"the plot skips the {len(bad)} infeasible point{'s' if len(bad) != 1 else ''}")


def _cmd_sweep(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from rdusim.serving import sweep

    axes = sweep.parse_axes(args.set)
    plot = sweep.parse_plot(args.plot) if args.plot else None
    jobs = sweep.default_jobs() if args.jobs is None else args.jobs
    if jobs < 1:
        raise SpecError(f"must be at least 1, got {jobs}", key="--jobs")
    out = _sweep_outputs(args, plot is not None)
    points = sweep.grid(axes)
    for point in points:
        _check_mapping_paths(args.mapping, sweep.overrides(point))
    sweep.check_points(args.mapping, points)
    if plot is not None:
        sweep.check_plot(*plot, sweep.columns(axes, []), kernels=True)
    with tqdm(total=len(points), desc="sweep", unit="point", file=sys.stderr) as bar:
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


def _sweep_exit(args: argparse.Namespace, rows: list[dict[str, Any]], out: Path) -> int:
    """0 when every point ran (or some did, without --strict), 1 with --strict and an
    infeasible point, and a user error (2) when no point ran."""
    from rdusim.serving import sweep

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


# --- rdusim list ----------------------------------------------------------------------------


def _mapping_row(name: str, path: Path) -> dict[str, Any]:
    """A shipped mapping's phase, model and hardware, read from its YAML (nothing compiled)."""
    from rdusim.spec.catalog import resolve_model
    from rdusim.spec.yamlio import read_document, to_plain

    data = to_plain(read_document(path))
    model = Path(resolve_model(str(data["model"]), path.parent)).name.removesuffix(".yaml")
    return {
        "name": name,
        "phase": data["phase"],
        "model": model,
        "hardware": data["hardware"],
        "file": str(path),
    }


def _catalog() -> dict[str, list[dict[str, Any]]]:
    """What ships with rdusim and can be named instead of a path: presets, models, mappings."""
    from rdusim.ir.model import summarize
    from rdusim.spec.catalog import shipped_mappings, shipped_models
    from rdusim.spec.hardware import PRESETS, load_hardware, preset_path
    from rdusim.spec.model import load_model_config

    hardware = [
        {"name": n, "sockets": load_hardware(n).sockets, "file": str(preset_path(n))}
        for n in PRESETS
    ]
    models = []
    for name, path in shipped_models().items():
        s = summarize(load_model_config(path))
        row = {"name": name, "family": s.family, "params_total": int(s.params_total)}
        models.append(row | {"file": str(path)})
    mappings = [_mapping_row(n, p) for n, p in shipped_mappings().items()]
    return {"hardware": hardware, "models": models, "mappings": mappings}


def _render_catalog(cat: Mapping[str, list[dict[str, Any]]]) -> str:
    """Three compact tables, then how to use the names."""
    from rdusim.report.console import si, table

    hw = table(["hardware", "sockets"], [[h["name"], h["sockets"]] for h in cat["hardware"]])
    models = table(
        ["model", "family", "parameters"],
        [[m["name"], m["family"], si(m["params_total"])] for m in cat["models"]],
        "<<>",
    )
    keys = ("name", "phase", "model", "hardware")
    rows = [[m[k] for k in keys] for m in cat["mappings"]]
    mappings = table(["mapping", *keys[1:]], rows, "<<<<")
    note = "name any of these instead of a path: rdusim map r1_prefill, rdusim model deepseek-r1"
    return "\n\n".join([hw, models, mappings, note])


def _cmd_list(args: argparse.Namespace) -> int:
    cat = _catalog()
    if args.json:
        print(dump_json(cat), end="")
    else:
        print(_render_catalog(cat))
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the mapping, simulation and reproduction commands."""
    m = sub.add_parser("map", help="compile and simulate a mapping (the main command)")
    m.add_argument("mapping", help=MAPPING_HELP)
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
        "--trace",
        metavar="FILE",
        help="write a Chrome/Perfetto trace (ui.perfetto.dev) of one representative layer per "
        "kind, then the other kernels, with per-op and HBM/P2P slices: the pipeline of each "
        "kernel, not the run's timeline (it is one layer of each kind long)",
    )
    m.add_argument(
        "--trace-full",
        metavar="FILE",
        help="write a Chrome/Perfetto trace of the whole run: every layer in execution order "
        "(embedding, layers in the model's order, head, MTP drafts), ending at the report's "
        "total latency; per-op and HBM/P2P slices for the first layer of each kind only",
    )
    m.add_argument(
        "--ops",
        action="store_true",
        help="also print per-op sharding, busy/stall time and bounds, and each collective",
    )
    auto = m.add_argument_group(
        "auto-mapping (kernels: auto, or --set kernels=auto)",
        "the auto-mapper searches fusion, sharding, K/V tiling and kernel looping",
    )
    auto.add_argument(
        "--objective",
        choices=[o.value for o in Objective],
        help="what to optimise (default: ttft in prefill; in decode, throughput at batch: max, "
        "else step-time)",
    )
    auto.add_argument(
        "--latency-bound",
        type=float,
        metavar="SECONDS",
        help="per-step bound for --objective throughput-under-latency",
    )
    auto.add_argument(
        "--alternatives",
        type=int,
        default=0,
        metavar="N",
        help="also report the N best runner-up mappings (JSON key alternatives)",
    )
    auto.add_argument(
        "--timings",
        action="store_true",
        help="also report the search's wall time (search_seconds): it differs from run to run, "
        "so it is left out of the report unless asked for",
    )
    m.add_argument(
        "--emit-mapping",
        metavar="OUT.yaml",
        help="write the mapping that ran (the auto-mapper's choice, or the file with its --set "
        "overrides applied) as an ordinary mapping file that reproduces the result",
    )
    m.set_defaults(func=_cmd_map)

    r = sub.add_parser("reproduce", help="the paper's Tables 4 and 5: plots, CSV/JSON, comparison")
    r.add_argument(
        "which",
        nargs="?",
        choices=("table4", "table5", "all"),
        default="all",
        help="table4: Table 4's prefill time shares per kernel, with SnapStream's prefill "
        "overhead; table5: Table 5's decode max batch and throughput with and without "
        "SnapStream, with the on-chip naive cache update; all (default): both, and the "
        "kernel-looping speed-up in the printed comparison",
    )
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
        "validate",
        help="compare with published figures; exit 1 on a miss not listed as known "
        "(rdusim/data/known_misses.yaml), or a listed one that now passes",
    )
    v.add_argument(
        "--hardware",
        metavar="PRESET_OR_FILE",
        help="hardware preset or YAML file (default: the one the mappings name)",
    )
    v.add_argument("--json", action="store_true", help="print the cells and null models as JSON")
    v.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 on any cell outside its tolerance, known misses included",
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
    c.add_argument(
        "--json",
        action="store_true",
        help="print parameters (value, stderr, at_bound), correlations and condition number",
    )
    c.set_defaults(func=_cmd_calibrate)

    s = sub.add_parser("sweep", help="run a mapping over a grid of --set values")
    s.add_argument("mapping", help=MAPPING_HELP)
    s.add_argument(
        "--set",
        action="append",
        default=[],
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
    s.add_argument(
        "--out", metavar="DIR", default="sweep", help="output directory (default: sweep/)"
    )
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
    s.set_defaults(func=_cmd_sweep)

    ls = sub.add_parser("list", help="the shipped hardware presets, models and mappings, by name")
    ls.add_argument("--json", action="store_true", help="print them as JSON")
    ls.set_defaults(func=_cmd_list)
