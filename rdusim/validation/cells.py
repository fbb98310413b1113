"""One compared figure: simulated beside published, its tolerance, and for predicted figures
the errors of two null models that know nothing of the machine's internals."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Cell:
    """`bound` "max" means the simulated value must stay below `published`; "band" within
    `tolerance` (absolute, in the cell's unit)."""

    table: str
    item: str
    simulated: float
    published: float
    tolerance: float
    unit: str
    fitted: bool
    bound: str = "band"
    null_constant: float | None = None  # the constant-step null model's value of this cell
    null_roofline: float | None = None  # the roofline null model's value
    known_miss: str | None = None  # why the shipped model is known to miss this cell

    @property
    def deviation(self) -> float:
        return self.simulated - self.published

    @property
    def within(self) -> bool:
        if self.bound == "max":
            return self.simulated < self.published
        return abs(self.deviation) <= self.tolerance + 1e-12

    @property
    def error(self) -> float | None:
        """Relative error, simulated / published - 1 (None for bounds)."""
        if self.bound == "max" or not self.published:
            return None
        return self.simulated / self.published - 1.0

    def _null_error(self, value: float | None) -> float | None:
        if value is None or not self.published:
            return None
        return value / self.published - 1.0

    @property
    def null_constant_error(self) -> float | None:
        return self._null_error(self.null_constant)

    @property
    def null_roofline_error(self) -> float | None:
        return self._null_error(self.null_roofline)

    def as_dict(self) -> dict[str, Any]:
        predicted = not self.fitted
        return {
            "table": self.table,
            "cell": self.item,
            "simulated": self.simulated,
            "published": self.published,
            "ok": self.within,
            "fitted": self.fitted,
            "unit": self.unit,
            "tolerance": self.tolerance,
            "bound": self.bound,
            "deviation": self.deviation,
            "error": self.error if predicted else None,
            "null_constant_error": self.null_constant_error if predicted else None,
            "null_roofline_error": self.null_roofline_error if predicted else None,
            "known_miss": self.known_miss,
        }

    @property
    def unexpected(self) -> bool:
        """Outside its tolerance and not a known miss, or a known miss that now passes."""
        return self.within == (self.known_miss is not None)

    def fields(self) -> dict[str, Any]:
        return asdict(self)
