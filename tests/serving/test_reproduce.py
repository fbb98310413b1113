"""`rdusim.serving.reproduce`: every published cell is compared, flagged fitted or predicted,
and lies within its tolerance with the shipped calibration.

The reproduction runs once for the module; the published figures come from `published()` only.
"""

from __future__ import annotations

import pytest

from rdusim.calibration import residuals
from rdusim.cli_commands import fit_cells
from rdusim.serving import reproduce
from rdusim.serving.reproduce import (
    TABLE5_FITTED_CELL,
    Cell,
    prefill_overhead,
    published,
    table4,
    table5,
)
from rdusim.spec.hardware import load_hardware

PUB = published()


@pytest.fixture(scope="module")
def cells() -> dict[str, list[Cell]]:
    return {"table4": table4(), "table5": table5(), "text": prefill_overhead()}


def test_every_table4_share_is_compared(cells: dict[str, list[Cell]]) -> None:
    by_item = {c.item: c for c in cells["table4"]}
    for name, value in PUB["table4"]["shares_percent"].items():
        assert by_item[name].published == value
        assert by_item[name].unit == "%"
        assert by_item[name].fitted
    assert sum(c.simulated for c in cells["table4"] if c.bound == "band") == pytest.approx(
        100.0, abs=0.5
    )


def test_every_table5_cell_is_compared(cells: dict[str, list[Cell]]) -> None:
    items = {c.item: c for c in cells["table5"]}
    for row in PUB["table5"]["rows"]:
        label = f"{row['seq_len'] // 1024}K"
        for tag, name in (("no_ss", "no SnapStream"), ("ss", "SnapStream")):
            assert items[f"{label} max batch ({name})"].published == row[f"batch_{tag}"]
            assert items[f"{label} throughput ({name})"].published == row[f"tput_{tag}"]
        assert items[f"{label} improvement"].published == row["improvement"]
    assert len(items) == 5 * len(PUB["table5"]["rows"])


def _throughput_item(seq: int, ss: bool) -> str:
    return f"{seq // 1024}K throughput ({'SnapStream' if ss else 'no SnapStream'})"


def test_only_the_declared_table5_throughputs_are_fitted(cells: dict[str, list[Cell]]) -> None:
    declared = {TABLE5_FITTED_CELL, *getattr(reproduce, "TABLE5_SAME_AS_FITTED", ())}
    fitted = {c.item for c in cells["table5"] if c.fitted and c.unit == "tokens/s"}
    assert fitted == {_throughput_item(*cell) for cell in declared}
    assert not any(c.fitted for c in cells["table5"] if c.unit == "x")
    assert not any(c.fitted for c in cells["text"])


def test_shipped_calibration_is_within_every_tolerance(cells: dict[str, list[Cell]]) -> None:
    outside = [c.as_dict() for cs in cells.values() for c in cs if not c.within]
    assert not outside


def test_cell_bounds() -> None:
    band = Cell("t", "a", 10.0, 12.0, 2.0, "%", True)
    assert band.within and band.deviation == pytest.approx(-2.0)
    assert not Cell("t", "a", 9.9, 12.0, 2.0, "%", True).within
    assert Cell("t", "s", 2.9, 3.0, 0.0, "%", False, bound="max").within
    assert not Cell("t", "s", 3.1, 3.0, 0.0, "%", False, bound="max").within
    d = band.as_dict()
    assert d["within_tolerance"] is True and d["deviation"] == pytest.approx(-2.0)


def test_fit_cells_are_the_residuals_the_fit_minimises() -> None:
    hw = load_hardware("sn40l-16")
    ratios = [c.deviation / c.tolerance for c in fit_cells(hw)]
    assert ratios == pytest.approx(residuals(hw))
