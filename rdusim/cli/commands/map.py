"""`rdusim map`: compile and simulate a mapping (the main command), with the auto-mapper's
search when the mapping's kernels are `auto`."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rdusim.cli.options import (
    Subparsers,
    add_json,
    add_mapping,
    add_out,
    add_set,
    dump_json,
)
from rdusim.cli.progress import search_messages
from rdusim.errors import SpecError
from rdusim.search.objective import Objective

if TYPE_CHECKING:
    from rdusim.api import MapRun
    from rdusim.search.mapper import SearchOptions

_TRACES = (("--trace", "trace"), ("--trace-full", "trace_full"))
RANK_BY = re.compile(r"mean|p0?[1-9]|p[1-9][0-9]")


def register(sub: Subparsers) -> None:
    m = sub.add_parser("map", help="compile and simulate a mapping (the main command)")
    add_mapping(m)
    add_set(
        m,
        metavar="KEY=VALUE",
        help="override a mapping field by dotted path, e.g. --set seq_len=65536",
    )
    add_json(m)
    add_out(m, help="also write DIR/report.json")
    _add_trace_options(m)
    m.add_argument(
        "--ops",
        action="store_true",
        help="also print per-op sharding, busy/stall time and bounds, and each collective",
    )
    _add_search_options(m)
    m.add_argument(
        "--emit-mapping",
        metavar="OUT.yaml",
        help="write the mapping that ran (the auto-mapper's choice, or the file with its --set "
        "overrides applied) as an ordinary mapping file that reproduces the result",
    )
    m.set_defaults(func=map_command)


def _add_trace_options(m: argparse.ArgumentParser) -> None:
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


def _add_search_options(m: argparse.ArgumentParser) -> None:
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


def map_command(args: argparse.Namespace) -> int:
    from rdusim.api import run_mapping
    from rdusim.outputs import write_outputs

    outputs = _map_outputs(args)
    search = _search_options(args)
    traced = any(key in outputs for key, _ in _TRACES)
    run = run_mapping(
        args.mapping, args.set, trace=traced, search=search, progress=search_messages()
    )
    timed = _with_search_time(run)
    report = timed if args.timings else run.report
    files = _trace_files(run, outputs) if traced else {}
    if "--out" in outputs:
        files[outputs["--out"]] = dump_json(report)
    if "--emit-mapping" in outputs:
        files[outputs["--emit-mapping"]] = _emitted(run, outputs["--emit-mapping"], args.set)
    write_outputs(files, {path: key for key, path in outputs.items()})
    _print_report(args, report, timed)
    _print_written(outputs, sys.stderr if args.json else sys.stdout)
    return 0


def _print_report(args: argparse.Namespace, report: dict[str, Any], timed: dict[str, Any]) -> None:
    from rdusim.report.mapping_report import render_map_report, render_op_timing

    if args.json:
        print(dump_json(report), end="")
        return
    print(render_map_report(timed))
    if args.ops:
        print()
        print(render_op_timing(report))


def _print_written(outputs: Mapping[str, Path], notes: Any) -> None:
    for key, _ in _TRACES:
        if key in outputs:
            print(f"wrote trace {outputs[key]} (open it in ui.perfetto.dev)", file=notes)
    if "--out" in outputs:
        print(f"wrote report {outputs['--out']}", file=notes)
    if "--emit-mapping" in outputs:
        print(f"wrote mapping {outputs['--emit-mapping']}", file=notes)


def _map_outputs(args: argparse.Namespace) -> dict[str, Path]:
    """The files `rdusim map` will write, by option, checked before the run: no two the same."""
    from rdusim.outputs import output_dir, output_file

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


def _with_search_time(run: MapRun) -> dict[str, Any]:
    """The report with the auto-mapper's wall time (`search_seconds`), which the text report
    shows and the JSON has only with --timings (it differs from run to run)."""
    if run.auto is None:
        return run.report
    auto = {**run.report["auto_mapping"], "search_seconds": round(run.auto.seconds, 3)}
    return {**run.report, "auto_mapping": auto}


def _search_options(args: argparse.Namespace) -> SearchOptions | None:
    """The auto-mapper's options, refused when the mapping's kernels are written out."""
    _check_search_values(args)
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
    if not given:
        return None
    if not _is_auto(args.mapping, args.set):
        raise SpecError(
            "this mapping lists its kernels, so there is nothing to search",
            key=given[0],
            fix="add --set kernels=auto to let the auto-mapper choose them",
        )
    from rdusim.search.mapper import SearchOptions

    return SearchOptions(
        objective=Objective(args.objective) if args.objective else None,
        latency_bound_s=args.latency_bound,
        alternatives=args.alternatives,
        rank_by=args.rank_by or "mean",
    )


def _check_search_values(args: argparse.Namespace) -> None:
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


def _is_auto(mapping: str, overrides: list[str]) -> bool:
    from rdusim.spec.mapping import load_mapping

    return load_mapping(mapping, overrides).spec.kernels == "auto"


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
