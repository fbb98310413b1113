"""`rdusim.serving.reproduce`: every published cell is compared, flagged fitted or predicted,
and lies within its tolerance with the shipped calibration.

The reproduction runs once for the module; the published figures come from `published()` only.
"""

from __future__ import annotations

import pytest

from rdusim.calibration import fit_cells, residuals
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


def test_fit_cells_are_the_fitted_comparison_cells(cells: dict[str, list[Cell]]) -> None:
    """The fit matches the fitted Table 4 shares and the one fitted Table 5 throughput, exactly
    as `rdusim validate` compares them; its residuals are their deviations over tolerances."""
    hw = load_hardware("sn40l-16")
    got = fit_cells(hw)
    want = [c for c in cells["table4"] if c.fitted]
    want += [c for c in cells["table5"] if c.item == _throughput_item(*TABLE5_FITTED_CELL)]
    assert len(want) == len(PUB["table4"]["shares_percent"]) + 1 and len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert (g.table, g.item, g.unit, g.fitted) == (w.table, w.item, w.unit, w.fitted)
        assert g.simulated == pytest.approx(w.simulated, rel=1e-12)
        assert (g.published, g.tolerance) == (w.published, w.tolerance)
    r = residuals(hw)
    assert len(r) == len(want) and all(abs(x) <= 1.0 for x in r)  # the shipped fit is in band
    assert r == pytest.approx([(w.simulated - w.published) / w.tolerance for w in want])
