"""One compared figure: the model's value with its interval beside the published figure.

`simulated` is the shipped mapping's value at the point calibration; `p05`/`p95` the 90%
predictive interval (the ensemble's spread widened by the model's discrepancy, or a
leave-one-out refit's). A published figure bounds the quantity as its evidence item says:
a value, a bound ("below 3%", "over 90%") or a range.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Cell:
    table: str
    item: str
    simulated: float
    published: float
    unit: str
    fitted: bool
    bound: str = "value"  # value | upper | lower | range (then `published_high` is the top)
    p05: float | None = None
    p95: float | None = None
    published_high: float | None = None
    item_id: str = ""  # the evidence item
    null_constant: float | None = None  # the constant-step null model's value of this cell
    null_roofline: float | None = None  # the roofline null model's value
    known_miss: str | None = None  # why the shipped model is known to miss this cell

    @property
    def high(self) -> float:
        return self.published if self.published_high is None else self.published_high

    @property
    def deviation(self) -> float:
        return self.simulated - self.published

    @property
    def within(self) -> bool:
        """The published figure is consistent with the interval (the point, without one)."""
        lo = self.simulated if self.p05 is None else self.p05
        hi = self.simulated if self.p95 is None else self.p95
        if self.bound == "upper":
            return lo <= self.high
        if self.bound == "lower":
            return hi >= self.published
        if self.bound == "range":
            return lo <= self.high and hi >= self.published
        return lo <= self.published <= hi

    @property
    def error(self) -> float | None:
        """Relative error of the point, simulated / published - 1 (None for bounds)."""
        if self.bound != "value" or not self.published:
            return None
        return self.simulated / self.published - 1.0

    def _null_error(self, value: float | None) -> float | None:
        if value is None or not self.published or self.bound != "value":
            return None
        return value / self.published - 1.0

    @property
    def null_constant_error(self) -> float | None:
        return self._null_error(self.null_constant)

    @property
    def null_roofline_error(self) -> float | None:
        return self._null_error(self.null_roofline)

    @property
    def unexpected(self) -> bool:
        """Outside its interval and not a known miss, or a known miss now inside."""
        return self.within == (self.known_miss is not None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "cell": self.item,
            "item": self.item_id,
            "simulated": self.simulated,
            "p05": self.p05,
            "p95": self.p95,
            "published": self.published,
            "published_high": self.published_high,
            "bound": self.bound,
            "unit": self.unit,
            "ok": self.within,
            "fitted": self.fitted,
            "deviation": self.deviation,
            "error": self.error,
            "null_constant_error": self.null_constant_error,
            "null_roofline_error": self.null_roofline_error,
            "known_miss": self.known_miss,
        }

    def fields(self) -> dict[str, Any]:
        return asdict(self)
