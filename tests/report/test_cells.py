"""A compared cell: whether the published figure is consistent with the model's 90% interval
(a value inside it; a bound or range reached by it), its relative error, the null models'
errors, and when a miss is unexpected."""

from __future__ import annotations

import pytest

from rdusim.report.cells import Cell


def cell(simulated: float, published: float, **kw) -> Cell:
    kw.setdefault("fitted", False)
    return Cell("t", "c", simulated, published, kw.pop("unit", "%"), **kw)


@pytest.mark.parametrize(
    ("p05", "p95", "within"),
    [
        (9.0, 11.0, True),
        (10.0, 10.5, True),
        (9.5, 10.0, True),
        (10.1, 12.0, False),
        (8, 9.9, False),
    ],
)
def test_a_value_is_within_when_inside_the_interval(p05: float, p95: float, within: bool) -> None:
    c = cell(10.4, 10.0, p05=p05, p95=p95)
    assert c.within is within
    assert c.deviation == pytest.approx(0.4)


def test_without_an_interval_the_point_must_match() -> None:
    assert cell(16.0, 16.0).within
    assert not cell(15.0, 16.0).within
    assert not cell(17.0, 16.0).within


@pytest.mark.parametrize(
    ("p05", "p95", "within"),
    # "below 3": the interval's low end must reach under the bound; its top may exceed it
    [(2.0, 2.9, True), (2.5, 3.6, True), (3.0, 4.0, True), (3.1, 4.0, False)],
)
def test_upper_bound(p05: float, p95: float, within: bool) -> None:
    assert cell(2.8, 3.0, bound="upper", p05=p05, p95=p95).within is within


def test_upper_bound_without_an_interval() -> None:
    assert cell(2.9, 3.0, bound="upper").within
    assert not cell(3.1, 3.0, bound="upper").within


@pytest.mark.parametrize(
    ("p05", "p95", "within"),
    # "over 90": the interval's top must reach the bound
    [(91.0, 99.0, True), (80.0, 90.0, True), (85.0, 95.0, True), (80.0, 89.9, False)],
)
def test_lower_bound(p05: float, p95: float, within: bool) -> None:
    assert cell(88.0, 90.0, bound="lower", p05=p05, p95=p95).within is within


def test_lower_bound_without_an_interval() -> None:
    assert cell(91.0, 90.0, bound="lower").within
    assert not cell(89.0, 90.0, bound="lower").within


@pytest.mark.parametrize(
    ("p05", "p95", "within"),
    # "about 2-5": the interval must overlap [2, 5]
    [
        (2.5, 4.0, True),
        (1.0, 2.0, True),
        (4.9, 8.0, True),
        (1.0, 9.0, True),
        (0.5, 1.9, False),
        (5.1, 6.0, False),
    ],
)
def test_range(p05: float, p95: float, within: bool) -> None:
    c = cell(3.0, 2.0, bound="range", published_high=5.0, p05=p05, p95=p95)
    assert c.high == 5.0
    assert c.within is within


def test_range_without_an_interval() -> None:
    c = cell(3.0, 2.0, bound="range", published_high=5.0)
    assert c.within and c.error is None
    assert not cell(5.5, 2.0, bound="range", published_high=5.0).within
    assert not cell(1.5, 2.0, bound="range", published_high=5.0).within


def test_high_is_the_published_figure_unless_a_range() -> None:
    assert cell(1.0, 3.0).high == 3.0
    assert cell(1.0, 3.0, bound="upper").high == 3.0


def test_errors_are_relative_to_the_published_value() -> None:
    c = cell(110.0, 100.0, unit="tokens/s", null_constant=95.0, null_roofline=250.0)
    assert c.error == pytest.approx(0.10)
    assert c.null_constant_error == pytest.approx(-0.05)
    assert c.null_roofline_error == pytest.approx(1.5)
    # a bound or a range has no relative error, nor do the null models against it
    bounded = cell(2.9, 3.0, bound="upper", null_constant=1.0, null_roofline=1.0)
    assert bounded.error is None and bounded.null_constant_error is None
    assert bounded.null_roofline_error is None
    assert cell(110.0, 100.0).null_constant_error is None  # no null model, no error
    assert cell(1.0, 0.0).error is None  # nothing to divide by


def test_as_dict_carries_the_interval_and_the_evidence() -> None:
    c = cell(
        110.0,
        100.0,
        unit="tokens/s",
        p05=90.0,
        p95=130.0,
        item_id="src/item",
        null_constant=95.0,
        null_roofline=250.0,
        known_miss=None,
    )
    d = c.as_dict()
    keys = {"table", "cell", "item", "simulated", "p05", "p95", "published", "published_high"}
    keys |= {"bound", "unit", "ok", "fitted", "deviation", "error", "known_miss"}
    keys |= {"null_constant_error", "null_roofline_error"}
    assert keys <= set(d)
    assert (d["p05"], d["p95"], d["item"], d["cell"]) == (90.0, 130.0, "src/item", "c")
    assert d["ok"] is True and d["fitted"] is False and d["bound"] == "value"
    assert d["error"] == pytest.approx(0.10) and d["deviation"] == pytest.approx(10.0)
    assert d["null_roofline_error"] == pytest.approx(1.5)
    assert not cell(110.0, 100.0, p05=101.0, p95=120.0).as_dict()["ok"]


def test_a_cell_is_unexpected_when_it_misses_anew_or_a_known_miss_passes() -> None:
    ok = cell(10.0, 10.0, p05=9.0, p95=11.0)
    miss = cell(20.0, 10.0, p05=18.0, p95=22.0)
    assert not ok.unexpected and miss.unexpected
    miss.known_miss = "why"
    ok.known_miss = "why"
    assert not miss.unexpected and ok.unexpected
    assert miss.as_dict()["known_miss"] == "why"
