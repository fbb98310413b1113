"""The commands of `rdusim`, one module each:

- `model`: a model's parameter counts, KV bytes per token and one layer's ops;
- `map`: compile and simulate a mapping, with the auto-mapper's search when asked;
- `sweep`: a mapping over a grid of `--set` values;
- `list`: the shipped hardware presets, models and mappings;
- `reproduce`: the SnapStream paper's Tables 4 and 5;
- `validate`: leave-one-out over the public evidence, beside null models;
- `calibrate`: the posterior of the calibrated parameters given the evidence;
- `serve`: a request workload on a prefill and a decode mapping;
- `fit`: how many models a node holds at once in DDR and HBM, and what a switch costs.

Every output path is checked before any work starts (a sweep or a calibration can take minutes),
and all of a command's files are written together through temporaries that are renamed into
place (`rdusim.outputs`), so a failure leaves nothing half-written.
"""

from __future__ import annotations

from typing import Protocol

from rdusim.cli.commands import (
    calibrate,
    fit,
    list,
    map,
    model,
    reproduce,
    serve,
    sweep,
    validate,
)
from rdusim.cli.options import Subparsers


class Command(Protocol):
    """A command module: `register` adds its sub-parser, whose `func` default runs it."""

    def register(self, sub: Subparsers) -> None: ...


# in the order `rdusim --help` lists them
COMMANDS: tuple[Command, ...] = (
    model,
    map,
    sweep,
    list,
    reproduce,
    validate,
    calibrate,
    serve,
    fit,
)
