"""Sub-commands beyond `model`, registered here to keep cli.py small.

Every output path is checked before any work starts (a sweep or a calibration can take minutes),
and all of a command's files are written together through temporaries that are renamed into
place (`write_files`), so a failure leaves nothing half-written.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rdusim.errors import SpecError
from rdusim.outputs import output_dir, output_file, write_outputs
from rdusim.search.objective import Objective
from rdusim.spec.yamlio import check_path
from rdusim.studies.executors import ExecutorKind

if TYPE_CHECKING:
    from collections.abc import Callable

    from rdusim.api import MapRun
    from rdusim.search.mapper import SearchOptions

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
            ("--rank-by", args.rank_by),
        )
        if value is not None
    ]
    if args.rank_by is not None and not RANK_BY.fullmatch(args.rank_by):
        raise SpecError(
            f"expects mean or a percentile p1..p99, got {args.rank_by!r}",
            key="--rank-by",
            fix="e.g. --rank-by mean, or --rank-by p05 to rank throughput by its pessimistic end",
        )
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
        rank_by=args.rank_by or "mean",
    )


RANK_BY = re.compile(r"mean|p0?[1-9]|p[1-9][0-9]")


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
        files[out / "sweep.png"] = figure_bytes(sweep_figure(rows, x, y, groups, title), "png")
    return files


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


def _cmd_sweep(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from rdusim.studies import sweep

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
        "--rank-by",
        metavar="STAT",
        help="how the simulated finalists are ranked over the calibration ensemble: mean "
        "(default) of the objective, or a percentile such as p05 (throughput's pessimistic end) "
        "or p95 (a time's pessimistic end)",
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
