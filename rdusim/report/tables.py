"""Comparison tables (simulated vs published) and CSV/JSON writers.

Everything here turns results into text or bytes; `rdusim.outputs.write_files` is the one place
that puts a set of outputs on disk, all-or-nothing per file (temporary file, then rename).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rdusim.report.console import (
    columns_to_show,
    fits,
    seconds,
    seconds_with,
    si,
    sig3,
    table,
    terminal_width,
    wrap_text,
)

if TYPE_CHECKING:
    from rdusim.report.cells import Cell

CELL_COLUMNS = (
    "table",
    "item",
    "unit",
    "simulated",
    "p05",
    "p95",
    "published",
    "published_high",
    "bound",
    "within_interval",
    "fitted",
    "status",
    "evidence",
)


# --- numbers ---------------------------------------------------------------------------------


def _value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "%":
        return f"{v:.2f} %"
    if unit == "x":
        return f"{v:.2f}x"
    if unit == "tokens/s":
        return f"{v:,.0f} tok/s"
    if unit == "seqs":
        return f"{v:g}"
    return f"{v:.4g} {unit}".rstrip()


def _bare(v: float | None, unit: str) -> str:
    """A value without its unit, as an interval's end."""
    if v is None:
        return "-"
    if unit == "%":
        return f"{v:.2f}"
    if unit in ("tokens/s",):
        return f"{v:,.0f}"
    return sig3(v)


def _interval(c: Cell) -> str:
    if c.p05 is None or c.p95 is None:
        return "-"
    return f"{_bare(c.p05, c.unit)}–{_bare(c.p95, c.unit)}"


def _published(c: Cell) -> str:
    text = _value(c.published, c.unit)
    if c.bound == "upper":
        return "< " + text
    if c.bound == "lower":
        return "> " + text
    if c.bound == "range":
        return f"{_bare(c.published, c.unit)}–{_value(c.high, c.unit)}"
    return text


def status(c: Cell) -> str:
    """'fitted' when the cell took part in calibration, else 'predicted'."""
    return "fitted" if c.fitted else "predicted"


# --- comparison table ------------------------------------------------------------------------


def _percent(v: float | None) -> str:
    return f"{100 * v:+.1f}%" if v is not None else ""


def comparison_rows(cells: Iterable[Cell]) -> list[list[str]]:
    return [
        [
            c.table,
            c.item,
            _value(c.simulated, c.unit),
            _interval(c),
            _published(c),
            status(c),
            "ok" if c.within else ("known" if c.known_miss else "MISS"),
        ]
        for c in cells
    ]


COMPARISON_HEADERS = ("table", "cell", "rdusim", "90% interval", "published", "status", "check")
COMPARISON_LEGEND = (
    "rdusim: the shipped mapping at the point calibration; 90% interval: the calibration "
    "ensemble's spread widened by the model's discrepancy; status: fitted|predicted (fitted: "
    "the calibration saw it); check: ok when the published figure is inside the interval "
    "(known: a known miss, see below)"
)


def render_comparison(cells: Sequence[Cell], title: str = "", width: int | None = None) -> str:
    """Simulated cells with their intervals beside the published figures, and a summary,
    within `width` columns (default: the terminal's)."""
    width = width or terminal_width()
    body = table(
        COMPARISON_HEADERS,
        comparison_rows(cells),
        align="<<>>><<",
        width=width,
        wrap=(1, 0),
    )
    parts = [title, ""] if title else []
    parts += [body, wrap_text(COMPARISON_LEGEND, width)]
    return "\n".join([*parts, "", *_comparison_summary(cells, width)])


def _comparison_summary(cells: Sequence[Cell], width: int) -> list[str]:
    """How many published figures fall inside their intervals; the known misses with why."""
    failed = [c for c in cells if not c.within]
    n_fit = sum(c.fitted for c in cells)
    lines = [
        f"{len(cells) - len(failed)}/{len(cells)} published figures inside rdusim's 90% "
        f"interval ({n_fit} fitted, {len(cells) - n_fit} predicted)"
    ]
    known = [c for c in failed if c.known_miss]
    new = [c for c in failed if not c.known_miss]
    if known:
        lines.append(
            f"{len(known)} known miss{'es' if len(known) != 1 else ''} (the model cannot reach "
            f"{'them' if len(known) != 1 else 'it'}, and says why):"
        )
        lines += [_wrapped(f"{c.table} {c.item}: {c.known_miss}", width) for c in known]
    if new:
        lines.append(
            wrap_text("outside: " + ", ".join(f"{c.table} {c.item}" for c in new), width, "", "  ")
        )
    return lines


def _wrapped(text: str, width: int) -> str:
    return wrap_text(text, min(96, width), "  ", "    ")


# --- CSV / JSON ------------------------------------------------------------------------------


def csv_value(v: Any) -> str:
    """CSV text of a value: booleans lower-case, None empty, floats at full precision."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def to_csv(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for row in rows:
        w.writerow([csv_value(row.get(c)) for c in columns])
    return buf.getvalue()


def cell_record(c: Cell) -> dict[str, Any]:
    """A cell as a CSV/JSON row: the comparison's own keys plus the table's column names."""
    return c.as_dict() | {
        "item": c.item,
        "within_interval": c.within,
        "status": status(c),
        "evidence": c.item_id,
    }


def cells_csv(cells: Iterable[Cell]) -> str:
    return to_csv(CELL_COLUMNS, (cell_record(c) for c in cells))


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


def cells_json(cells: Iterable[Cell], **meta: Any) -> str:
    return to_json(meta | {"cells": [cell_record(c) for c in cells]})


# --- sweep -----------------------------------------------------------------------------------


def _sweep_cell(column: str, v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "true" if v else "false"
    if column.endswith("latency_s") and isinstance(v, float):
        return seconds(v)
    if column.endswith("_bytes") and isinstance(v, float | int):
        return si(float(v), "B")
    if column.endswith("tokens_per_s") and isinstance(v, float | int):
        return f"{v:,.0f}"
    return str(v)


SUMMARY_COLUMNS = {
    "batch": "batch",
    "max_batch_size": "max batch",
    "total_latency_s": "latency (step/TTFT)",
    "throughput_tokens_per_s": "tokens/s",
    "sram_peak_bytes": "SRAM peak",
    "hbm_kv_cache_bytes": "HBM KV",
    "hbm_weights_bytes": "HBM weights",
}


# columns left out, in this order, when the sweep's table does not fit the terminal
SWEEP_DROP = ("hbm_weights_bytes", "sram_peak_bytes", "hbm_kv_cache_bytes", "max_batch_size")


def _with_interval(column: str, row: Mapping[str, Any], short: bool = False) -> str:
    """A sweep cell, with the row's 90% interval for a headline number that has one (its ends
    to three significant digits when `short`)."""
    text = _sweep_cell(column, row.get(column))
    lo, hi = row.get(f"{column}.p05"), row.get(f"{column}.p95")
    if lo is None or hi is None or lo == hi == row.get(column):  # no spread to show
        return text
    if column.endswith("latency_s"):
        if short:
            return seconds_with(row.get(column), {"p05": lo, "p95": hi})
        return f"{text} ({seconds(lo).split()[0]}–{seconds(hi)})"
    if short and column.endswith("tokens_per_s"):
        return f"{text} ({_three_digits(lo)}–{_three_digits(hi)})"
    return f"{text} ({_sweep_cell(column, lo)}–{_sweep_cell(column, hi)})"


def _three_digits(v: float) -> str:
    """An interval's end to three significant digits: 782, 5.72k, 24.8k."""
    return f"{v / 1e3:.3g}k" if abs(v) >= 1e3 else f"{v:.3g}"


def render_sweep(
    rows: Sequence[Mapping[str, Any]], keys: Sequence[str], width: int | None = None
) -> str:
    """One line per sweep point: the varying keys, then the headline results (with their 90%
    intervals over the calibration ensemble), within `width` columns (default: the
    terminal's). Narrower than the table, the intervals' ends are given to three significant
    digits, then a `status` column that says only "ok" and the columns of `SWEEP_DROP` are left
    out, in that order, and last the intervals; a line under the table says what is missing."""
    width = width or terminal_width()
    columns = [*keys, *(c for c in SUMMARY_COLUMNS if c not in keys)]
    headers = [SUMMARY_COLUMNS.get(c, c) if c not in keys else c for c in columns]
    align = "".join("<" if c in keys else ">" for c in columns)
    wrap = [i for i, c in enumerate(columns) if c in keys]
    body = [[_with_interval(c, r) for c in columns] for r in rows]
    if fits(headers, body, width, wrap):
        return table(headers, body, align=align, width=width)
    drop = [columns.index(c) for c in SWEEP_DROP if c in columns]
    if "status" in columns and all(r.get("status") == "ok" for r in rows):
        drop.insert(0, columns.index("status"))
    left: list[str] = []
    for intervals in (True, False):
        body = [
            [
                _with_interval(c, r, short=True) if intervals else _sweep_cell(c, r.get(c))
                for c in columns
            ]
            for r in rows
        ]
        show = columns_to_show(headers, body, width, drop=drop, wrap=wrap)
        shown = [[r[i] for i in show] for r in [headers, *body]]
        if fits(shown[0], shown[1:], width, [show.index(i) for i in wrap if i in show]):
            break
        left = ["the 90% intervals"]
    left = [
        headers[i] + (" (every point ok)" if columns[i] == "status" else "")
        for i in drop
        if i not in show
    ] + left
    text = table(headers, body, align=align, width=width, wrap=wrap, show=show)
    if not left:
        return text
    note = f"not shown in {width} columns: {', '.join(left)} (the sweep's CSV and JSON have them)"
    return "\n".join([text, wrap_text(note, width)])
