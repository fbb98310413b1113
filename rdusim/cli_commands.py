"""Sub-commands beyond `model`, registered here to keep cli.py small."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the mapping, simulation and reproduction commands."""
