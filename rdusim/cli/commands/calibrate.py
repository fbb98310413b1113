"""`rdusim calibrate`: the posterior of the calibrated parameters given the public evidence, and
with `--write` the ensemble and its median written into every hardware preset."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rdusim.cli.options import Subparsers, add_json, add_out, dump_json
from rdusim.cli.progress import clear_status_line, status_line
from rdusim.errors import SpecError


def register(sub: Subparsers) -> None:
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
