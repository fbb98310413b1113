"""A compared cell: its band, its relative error and the null models' errors."""

from __future__ import annotations

import pytest

from rdusim.validation.cells import Cell


def test_band_and_bound():
    band = Cell("t", "a", 10.0, 12.0, 2.0, "%", True)
    assert band.within and band.deviation == pytest.approx(-2.0)
    assert not Cell("t", "a", 9.9, 12.0, 2.0, "%", True).within
    assert Cell("t", "s", 2.9, 3.0, 0.0, "%", False, bound="max").within
    assert not Cell("t", "s", 3.1, 3.0, 0.0, "%", False, bound="max").within


def test_errors_are_relative_to_the_published_value():
    c = Cell(
        "table5",
        "x",
        110.0,
        100.0,
        10.0,
        "tokens/s",
        False,
        null_constant=95.0,
        null_roofline=250.0,
    )
    assert c.error == pytest.approx(0.10)
    assert c.null_constant_error == pytest.approx(-0.05)
    assert c.null_roofline_error == pytest.approx(1.5)
    assert Cell("t", "s", 2.9, 3.0, 0.0, "%", False, bound="max").error is None


def test_json_keys_and_fitted_cells_carry_no_errors():
    predicted = Cell(
        "table5",
        "x",
        110.0,
        100.0,
        10.0,
        "tokens/s",
        False,
        null_constant=95.0,
        null_roofline=250.0,
    ).as_dict()
    keys = {"table", "cell", "simulated", "published", "ok", "fitted", "error"}
    keys |= {"null_constant_error", "null_roofline_error"}
    assert keys <= set(predicted)
    assert predicted["ok"] is True and predicted["fitted"] is False
    assert predicted["error"] == pytest.approx(0.10)
    fitted = Cell(
        "table5", "x", 110.0, 100.0, 10.0, "tokens/s", True, null_constant=95.0, null_roofline=250.0
    ).as_dict()
    assert fitted["error"] is None and fitted["null_constant_error"] is None


def test_a_cell_is_unexpected_when_it_misses_anew_or_a_known_miss_passes():
    ok = Cell("t", "a", 10.0, 10.0, 1.0, "%", True)
    miss = Cell("t", "a", 20.0, 10.0, 1.0, "%", True)
    assert not ok.unexpected and miss.unexpected
    miss.known_miss = "why"
    ok.known_miss = "why"
    assert not miss.unexpected and ok.unexpected
    assert miss.as_dict()["known_miss"] == "why"
