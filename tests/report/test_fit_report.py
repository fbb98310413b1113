"""`rdusim.report.fit_report`: the switch table is a matrix where it fits, else a row a pair."""

from __future__ import annotations

from typing import Any

from rdusim.compiler.residency import residency
from rdusim.report.fit_report import render_fit
from rdusim.spec.hardware import load_hardware
from rdusim.spec.model import load_model_config

NAMES = ["deepseek-r1", "llama-3.1-70b", "llama-3.1-8b", "llama-3.1-405b"]


def _report(names: list[str]) -> dict[str, Any]:
    return residency([load_model_config(n) for n in names], load_hardware("sn40l-16")).as_dict()


def test_the_matrix_where_it_fits_else_a_row_a_pair() -> None:
    r = _report(NAMES)
    wide = render_fit(r, 120)
    assert "from \\ to" in wide
    many = _report(NAMES * 2)
    narrow = render_fit(many, 80)
    assert "from \\ to" not in narrow
    assert all(len(line) <= 80 for line in narrow.splitlines())
    pairs = [x for x in narrow.splitlines() if x.split()[:2] == ["deepseek-r1", "llama-3.1-8b"]]
    assert len(pairs) == 4  # two copies of each, every ordered pair listed


def test_a_model_that_does_not_fit_hbm_says_so() -> None:
    r = residency([load_model_config("deepseek-r1")], load_hardware("sn40l-8")).as_dict()
    row = next(x for x in render_fit(r, 100).splitlines() if x.startswith("deepseek-r1 "))
    assert row.split()[5] == "no"  # model, weights and per socket (number, unit), fits HBM
