"""Plain-text tables for the terminal (no dependency: columns sized to their content)."""

from __future__ import annotations

from collections.abc import Sequence


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """1.23e9 -> '1.23 G' + unit."""
    if value is None:
        return "-"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}".rstrip()


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1:
        return f"{value:.3f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3f} ms"
    return f"{value * 1e6:.1f} us"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """A fixed-width table; `align` has one of '<' or '>' per column (default: text left)."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    al = align or "<" + ">" * (len(headers) - 1)

    def fmt(row: Sequence[str]) -> str:
        return "  ".join(f"{c:{al[i]}{widths[i]}}" for i, c in enumerate(row)).rstrip()

    lines = [fmt(list(headers)), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in cells]
    return "\n".join(lines)
