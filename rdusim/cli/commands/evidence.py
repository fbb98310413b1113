"""`rdusim validate` and `rdusim calibrate`: the model against the public evidence
(leave-one-out, beside null models) and the posterior of its calibrated parameters."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rdusim.cli.options import Subparsers, add_json, add_out, dump_json
from rdusim.cli.progress import clear_status_line, status_line
from rdusim.errors import SpecError


def register(sub: Subparsers) -> None:
    _register_validate(sub)
    _register_calibrate(sub)


def _register_validate(sub: Subparsers) -> None:
    v = sub.add_parser(
        "validate",
        help="every fitted evidence item predicted without it (leave-one-out), with null "
        "models; exit 1 when fewer than 80%% of the items fall inside their 90%% interval or "
        "rdusim does not beat both null models",
    )
    add_json(v, help="print evidence, loo and readings as JSON")
    v.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 on any item outside its 90%% interval, known misses included",
    )
    v.set_defaults(func=validate_command)


def _register_calibrate(sub: Subparsers) -> None:
    from rdusim.validation.defaults import DRAWS, SEED

    c = sub.add_parser(
        "calibrate",
        help="the posterior of the calibrated parameters given the evidence (about 2 minutes)",
    )
    c.add_argument(
        "--draws",
        type=int,
        default=DRAWS,
        metavar="N",
        help=f"parameter sets priced exactly for the importance weights (default: {DRAWS})",
    )
    c.add_argument(
        "--seed", type=int, default=SEED, metavar="N", help=f"random seed (default: {SEED})"
    )
    c.add_argument(
        "--write",
        action="store_true",
        help="write the ensemble (ensemble.json) and its median into every hardware preset "
        "(each *.yaml of rdusim's hardware folder), in that folder or --out DIR",
    )
    add_out(c, help="with --write: the folder to write into")
    add_json(c, help="print the posterior summary as JSON")
    c.set_defaults(func=calibrate_command)


def validate_command(args: argparse.Namespace) -> int:
    from rdusim.report.evidence import render_validation
    from rdusim.validation.check import COVERAGE_GOAL, validate

    progress = status_line()
    try:
        result = validate(progress=progress)
    finally:
        clear_status_line(progress)
    data = result.as_dict()
    if args.json:
        print(dump_json(data), end="")
    else:
        print(render_validation(data))
    loo = result.summary
    sq = loo.sq_log_error
    # a 90% interval misses one item in ten by design: single misses are listed, and the run
    # fails on the coverage and the null models (or, with --strict, on any miss)
    failed = loo.coverage_90 < COVERAGE_GOAL or not (
        sq["rdusim"] < sq["null_constant"] and sq["rdusim"] < sq["null_roofline"]
    )
    if args.strict:
        failed = failed or any(not p.inside_90 for p in result.predictions)
    return 1 if failed else 0


def calibrate_command(args: argparse.Namespace) -> int:
    from rdusim.report.evidence import render_calibration
    from rdusim.spec.catalog import shipped_presets
    from rdusim.validation.calibrate import calibrate, write_calibration
    from rdusim.validation.defaults import DRAWS

    if args.draws < 32:
        raise SpecError(
            f"must be at least 32, got {args.draws}", key="--draws", fix="e.g. --draws 512"
        )
    folder = _calibration_folder(args)
    progress = status_line()
    try:
        cal = calibrate(draws=args.draws or DRAWS, seed=args.seed, progress=progress)
    finally:
        clear_status_line(progress)
    data = cal.as_dict()
    written = []
    if folder is not None:  # the fit took minutes: keep it before anything is printed
        folder.mkdir(parents=True, exist_ok=True)
        written = write_calibration(cal, folder, list(shipped_presets().values()))
    if args.json:
        print(dump_json(data), end="")
    else:
        print(render_calibration(data))
    if written:
        notes = sys.stderr if args.json else sys.stdout
        print(f"wrote {', '.join(p.name for p in written)} to {folder}/", file=notes)
    return 0


def _calibration_folder(args: argparse.Namespace) -> Path | None:
    """Where `--write` puts the ensemble and presets (checked before the fit), or None."""
    from rdusim.outputs import output_dir
    from rdusim.spec.catalog import package_dir, shipped_presets
    from rdusim.uncertainty.ensemble import ENSEMBLE_FILE

    if args.write:
        names = [ENSEMBLE_FILE, *(p.name for p in shipped_presets().values())]
        return output_dir(args.out, "--out", names) if args.out else package_dir("hardware")
    if args.out:
        raise SpecError("--out only applies with --write", key="--out", fix="add --write")
    return None
