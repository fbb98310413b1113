"""`rdusim reproduce`: the SnapStream paper's Tables 4 and 5 from the shipped mappings, beside
the published figures (`rdusim.studies.paper`): plots, CSV and JSON, with intervals."""

from __future__ import annotations

import argparse
from pathlib import Path

from rdusim.cli.options import Subparsers, add_hardware, add_out, hardware_option

TABLES = ("table4", "table5")


def register(sub: Subparsers) -> None:
    r = sub.add_parser(
        "reproduce",
        help="the SnapStream paper's Tables 4 and 5: plots, CSV/JSON, with intervals",
    )
    r.add_argument(
        "which",
        nargs="?",
        choices=("table4", "table5", "all"),
        default="all",
        help="which table to write (default: all: both, and the paper's text figures printed)",
    )
    add_out(r, default="reproduce", help="output directory (default: reproduce/)")
    add_hardware(r, help="hardware preset or YAML file (default: the one the mappings name)")
    r.set_defaults(func=reproduce_command)


def reproduce_command(args: argparse.Namespace) -> int:
    from rdusim.outputs import output_dir, write_outputs
    from rdusim.report import plots
    from rdusim.report.tables import cells_csv, cells_json, render_comparison
    from rdusim.studies import paper

    tables = list(TABLES) if args.which == "all" else [args.which]
    names = [f"{t}.{ext}" for t in tables for ext in ("png", "svg", "csv", "json")]
    out = output_dir(args.out, "--out", names)
    hw = hardware_option(args.hardware)
    by_table = paper.comparison_cells(args.which, hw)
    files: dict[Path, str | bytes] = {}
    meta = paper.meta()
    for name in tables:
        cells = by_table[name]
        fig = plots.table4_figure(cells) if name == "table4" else plots.table5_figure(cells)
        for fmt in ("png", "svg"):
            files[out / f"{name}.{fmt}"] = plots.figure_bytes(fig, fmt)
        files[out / f"{name}.csv"] = cells_csv(cells)
        files[out / f"{name}.json"] = cells_json(
            cells, table=name, caption=paper.caption(name), **meta
        )
    write_outputs(files, dict.fromkeys(files, "--out"))
    cells = [c for cs in by_table.values() for c in cs]
    title = f"SnapStream paper vs rdusim (hardware: {hw.name if hw else 'as the mappings name'})"
    print(render_comparison(cells, title))
    print(f"\nwrote {', '.join(sorted(p.name for p in files))} to {out}/")
    return 0
