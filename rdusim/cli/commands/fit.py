"""`rdusim fit`: how many of the given models a node holds at once in DDR and in HBM, and what a
switch between each pair costs (`rdusim.compiler.residency`)."""

from __future__ import annotations

import argparse

from rdusim.cli.options import Subparsers, add_hardware, add_json, dump_json, hardware_option


def register(sub: Subparsers) -> None:
    f = sub.add_parser(
        "fit", help="how many models fit in a node's DDR and HBM at once, and each switch's cost"
    )
    f.add_argument(
        "models",
        nargs="+",
        metavar="MODEL",
        help="model YAML files, Hugging Face config.json files, or shipped models' names "
        "(rdusim list), in the order they are loaded",
    )
    add_hardware(f, help="hardware preset or YAML file (default: the mappings' default, sn40l-16)")
    add_json(f)
    f.set_defaults(func=fit_command)


def fit_command(args: argparse.Namespace) -> int:
    from rdusim.compiler.residency import residency
    from rdusim.report.fit_report import render_fit
    from rdusim.spec.hardware import load_hardware
    from rdusim.spec.mapping import MappingSpec
    from rdusim.spec.model import load_model_config

    hw = hardware_option(args.hardware) or load_hardware(
        MappingSpec.model_fields["hardware"].default
    )
    models = [load_model_config(m) for m in args.models]
    report = residency(models, hw).as_dict()
    print(dump_json(report) if args.json else render_fit(report), end="" if args.json else "\n")
    return 0
