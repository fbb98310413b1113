"""`rdusim serve`: a request workload on a prefill and a decode mapping, as a discrete-event run.

    rdusim serve --prefill r1_prefill --decode r1_decode --workload r1_disaggregated \\
        --rate 0.5,1,1.5 --set snapstream.enabled=true,false --out serve/

Every input is checked before anything is simulated: the options, the output paths, the
workload, and both mappings at every `--set` combination; a mistake exits 2 with the file, the
key and a fix, and nothing is written. Outputs are written together through temporaries, so a
failure leaves none half-written. Progress goes to stderr (on a terminal only).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rdusim.cli.options import MAPPING_HELP, Subparsers, add_json, add_out, add_set
from rdusim.cli.progress import progress_bar
from rdusim.errors import RdusimError, SpecError

if TYPE_CHECKING:
    from rdusim.serving.serve import ServePoint, ServeRun
    from rdusim.spec.workload import ResolvedWorkload

OUT_NAMES = (
    "serve.json",
    "requests.csv",
    "latency_cdf.png",
    "throughput_tpot.png",
    "occupancy.png",
)


def register(sub: Subparsers) -> None:
    s = sub.add_parser(
        "serve",
        help="serve a request workload on a prefill and a decode mapping (TTFT, TPOT, goodput)",
        description="A request-level discrete-event simulation of continuous batching on static "
        "graphs; graph times come from simulating the two mappings.",
    )
    s.add_argument(
        "--prefill",
        metavar="MAPPING",
        help=f"prefill: {MAPPING_HELP} (not with a workload that lists its models:)",
    )
    s.add_argument(
        "--decode",
        metavar="MAPPING",
        help=f"decode: {MAPPING_HELP} (not with a workload that lists its models:)",
    )
    s.add_argument(
        "--workload",
        required=True,
        metavar="WORKLOAD",
        help="a workload YAML file, or the name of a shipped one (rdusim/workloads/)",
    )
    add_set(
        s,
        metavar="KEY=V1,V2,...",
        help="override a field of both mappings, e.g. --set snapstream.enabled=false; several "
        "values run each (with and without SnapStream: snapstream.enabled=true,false)",
    )
    s.add_argument(
        "--rate",
        metavar="R1,R2,...",
        help="arrival rates (requests/s) to run instead of the workload's, one run each; plain "
        "decimal or scientific numbers (0.5, 1e3), each giving the workload at least one and at "
        "most 1,000,000 requests",
    )
    add_json(s, help="print the metrics as JSON")
    add_out(
        s,
        help="write DIR/serve.json, requests.csv and plots (latency CDFs, throughput vs TPOT, "
        "slot occupancy)",
    )
    s.add_argument(
        "--trace",
        metavar="FILE",
        help="write a Chrome/Perfetto trace (ui.perfetto.dev) of the run: a track per decode "
        "slot and per prefill graph on each node",
    )
    s.set_defaults(func=serve_command, python_collector=True)  # see rdusim.cli.GC_THRESHOLD


# A number as a user writes it: plain decimal or scientific notation, ASCII digits only, with a
# sign (a negative number is a number, just not a rate). Python's float() would also take
# `1_000`, `inf`, `nan` and non-ASCII digits.
RATE_SYNTAX = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def parse_rate(item: str) -> float:
    """One `--rate` value: a finite number above 0 and at most `MAX_RATE` requests/s."""
    from rdusim.spec.workload import MAX_RATE
    from rdusim.spec.yamlio import shown_value

    text = item.strip()
    fix = (
        f"give requests per second above 0 and at most {MAX_RATE:g}, in plain decimal or "
        "scientific notation (0.5, 1000, 1e3; no underscores), separated by commas, e.g. "
        "--rate 0.5,1,2"
    )
    if not RATE_SYNTAX.fullmatch(text):
        raise SpecError(f"{shown_value(text)} is not a number", key="--rate", fix=fix)
    rate = float(text)
    if not (0 < rate <= MAX_RATE):
        raise SpecError(f"{shown_value(text)} is not an arrival rate", key="--rate", fix=fix)
    return rate


def parse_rates(text: str | None) -> list[float]:
    """`--rate 0.5,1,2` as positive, finite requests per second, each once. How many requests
    a rate gives with the workload is checked when the workload is known
    (`rdusim.serving.serve.workload_requests`)."""
    if text is None:
        return []
    rates: list[float] = []
    for item in text.split(","):
        rate = parse_rate(item)
        if rate in rates:
            raise SpecError(f"rate {rate:g} is listed twice", key="--rate", fix="list each once")
        rates.append(rate)
    return rates


def _axes(items: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    from rdusim.studies.sweep import parse_axes

    return [(a.key, a.values) for a in parse_axes(items)]


def _outputs(args: argparse.Namespace, points: int) -> dict[str, Path]:
    """The files this run writes, checked before any work."""
    from rdusim.outputs import output_dir, output_file

    outputs: dict[str, Path] = {}
    if args.trace is not None:
        if points > 1:
            raise SpecError(
                f"a trace shows one run, and these options ask for {points}",
                key="--trace",
                fix="give one --rate and one value per --set to trace a run",
            )
        outputs["--trace"] = output_file(args.trace, "--trace", "serve-trace.json")
    if args.out is not None:
        out = output_dir(args.out, "--out", OUT_NAMES)
        for name in OUT_NAMES:
            outputs[f"--out {name}"] = out / name
        if "--trace" in outputs and outputs["--trace"].resolve() in {
            p.resolve() for k, p in outputs.items() if k != "--trace"
        }:
            raise SpecError(
                "is also a file --out writes",
                file=str(outputs["--trace"]),
                key="--trace",
                fix="name a different trace file",
            )
    return outputs


def _check_points(
    args: argparse.Namespace, workload: ResolvedWorkload, points: Sequence[ServePoint]
) -> int:
    """Load both mappings at every distinct `--set` combination, and draw the requests at every
    rate, before simulating anything; the number of requests all the runs serve."""
    from rdusim.serving.models import served_models
    from rdusim.serving.serve import workload_requests
    from rdusim.spec.mapping import load_mapping

    for sets in dict.fromkeys(p.sets for p in points):
        overrides = [f"{k}={v}" for k, v in sets]
        served = served_models(workload, args.prefill, args.decode, overrides)
        pairs = [
            (m.name, phase, mapping, [*m.overrides, *overrides, *extra])
            for m in served
            for phase, mapping, extra in (
                ("prefill", m.prefill, m.prefill_overrides),
                ("decode", m.decode, m.decode_overrides),
            )
        ]
        for name, phase, mapping, applied in pairs:
            try:
                load_mapping(mapping, applied)
            except RdusimError as exc:
                if not (sets or name) or not isinstance(exc, SpecError):
                    raise
                where = f"{name}'s {phase} mapping" if name else ""
                given = f"with --set {' '.join(overrides)}" if sets else ""
                raise SpecError(
                    f"{', '.join(x for x in (where, given) if x)}: {exc.problem}",
                    file=exc.file,
                    key=exc.key,
                    line=exc.line,
                    fix=exc.fix,
                ) from None
    counts = {rate: len(workload_requests(workload, rate)) for rate in {p.rate for p in points}}
    return sum(counts[p.rate] for p in points)


def _files(
    runs: Sequence[ServeRun], document: Any, outputs: dict[str, Path]
) -> dict[Path, str | bytes]:
    files: dict[Path, str | bytes] = {}
    if "--trace" in outputs:
        from rdusim.serving.trace import serving_trace

        files[outputs["--trace"]] = json.dumps(serving_trace(runs[0].result))
    if "--out serve.json" not in outputs:
        return files
    from rdusim.report.plots import figure_bytes  # matplotlib: only for the figures
    from rdusim.report.serving import (
        dumps,
        latency_cdf_figure,
        occupancy_figure,
        point_label,
        requests_csv,
        throughput_tpot_figure,
    )

    docs = [r.document for r in runs]
    labels = [point_label(d) or "run" for d in docs]
    latencies = {
        label: {
            "ttft_s": [rec.ttft_s for rec in r.result.records],
            "tpot_s": [t for rec in r.result.records if (t := rec.tpot_s) is not None],
            "e2e_s": [rec.e2e_s for rec in r.result.records],
        }
        for label, r in zip(labels, runs, strict=True)
    }
    slo = docs[0]["settings"]["slo"]
    figures = {
        "latency_cdf.png": latency_cdf_figure(latencies, slo),
        "throughput_tpot.png": throughput_tpot_figure(docs),
        "occupancy.png": occupancy_figure(
            {label: d["slot_occupancy"] for label, d in zip(labels, docs, strict=True)}
        ),
    }
    files[outputs["--out serve.json"]] = dumps(document)
    files[outputs["--out requests.csv"]] = requests_csv(
        [(i, r.result.records) for i, r in enumerate(runs)],
        [list(r.metrics["per_model"]) for r in runs],
    )
    for name, fig in figures.items():
        files[outputs[f"--out {name}"]] = figure_bytes(fig, "png")
    return files


def serve_command(args: argparse.Namespace) -> int:
    from rdusim.outputs import write_outputs
    from rdusim.report.serving import dumps, render_point, render_points
    from rdusim.serving.serve import points_of, serve_points
    from rdusim.spec.workload import load_workload

    rates = parse_rates(args.rate)
    points = points_of(_axes(args.set), rates)
    outputs = _outputs(args, len(points))
    workload = load_workload(args.workload)
    total = _check_points(args, workload, points)
    with progress_bar(total, "serve", "req") as bar:

        def starting(i: int, point: ServePoint) -> None:
            where = f" {i + 1}/{len(points)} {point.label()}" if len(points) > 1 else ""
            bar.set_description(f"serve{where}", refresh=True)

        runs = serve_points(
            args.prefill, args.decode, workload, points, progress=bar.update, starting=starting
        )
    docs = [r.document for r in runs]
    document: Any = docs[0] if len(docs) == 1 else {"points": docs}
    files = _files(runs, document, outputs)
    write_outputs(files, {p: k.split(" ")[0] for k, p in outputs.items()})
    if args.json:
        print(dumps(document), end="")
    elif len(docs) == 1:
        print(render_point(docs[0]))
    else:
        print(render_points(docs))
    notes = sys.stderr if args.json else sys.stdout
    if "--trace" in outputs:
        print(f"wrote trace {outputs['--trace']} (open it in ui.perfetto.dev)", file=notes)
    if args.out is not None:
        print(f"wrote {', '.join(OUT_NAMES)} to {args.out}", file=notes)
    return 0
