"""Published figures (package data) and the shipped mappings the comparisons run."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from rdusim.spec.catalog import package_dir


def _load(name: str) -> dict[str, Any]:
    text = resources.files("rdusim.data").joinpath(name).read_text(encoding="utf-8")
    data: dict[str, Any] = YAML(typ="safe").load(text)
    return data


@cache
def paper() -> dict[str, Any]:
    """The SnapStream paper's Tables 4 and 5 and figures from its text."""
    return _load("snapstream_paper.yaml")


@cache
def facts() -> dict[str, Any]:
    """Published SN40L figures from other sources (kernel looping)."""
    return _load("sn40l_facts.yaml")


@cache
def known_misses() -> dict[tuple[str, str], str]:
    """(table, cell) -> why the shipped model misses it."""
    data = _load("known_misses.yaml")
    return {(m["table"], m["cell"]): " ".join(m["reason"].split()) for m in data["misses"]}


def mappings_dir() -> Path:
    """The shipped mappings (package data), so comparisons run from any directory."""
    return package_dir("mappings")
