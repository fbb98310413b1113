"""Comparison tables (simulated vs published) and CSV/JSON writers.

Everything here turns results into text or bytes; `rdusim.outputs.write_files` is the one place
that puts a set of outputs on disk, all-or-nothing per file (temporary file, then rename).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rdusim.report.console import seconds, si, table, terminal_width, wrap_text

if TYPE_CHECKING:
    from rdusim.validation.cells import Cell

CELL_COLUMNS = (
    "table",
    "item",
    "unit",
    "simulated",
    "published",
    "deviation",
    "tolerance",
    "bound",
    "within_tolerance",
    "fitted",
    "status",
)


# --- numbers ---------------------------------------------------------------------------------


def _value(v: float, unit: str) -> str:
    if unit == "%":
        return f"{v:.2f} %"
    if unit == "x":
        return f"{v:.2f}x"
    if unit == "tokens/s":
        return f"{v:,.0f} tok/s"
    if unit == "seqs":
        return f"{v:g}"
    return f"{v:.4g} {unit}".rstrip()


def _deviation(c: Cell) -> str:
    d = c.deviation
    if c.unit == "%":
        return f"{d:+.2f} pt"
    if c.unit == "tokens/s":
        return f"{100 * d / c.published:+.1f}%" if c.published else f"{d:+,.0f}"
    if c.unit == "seqs":
        return f"{d:+g}"
    if c.unit == "x":
        return f"{d:+.2f}"
    return f"{d:+.3g}"


def _tolerance(c: Cell) -> str:
    if c.bound == "max":
        return "upper bound"
    if c.tolerance == 0:
        return "exact"
    if c.unit == "%":
        return f"±{c.tolerance:.2f} pt"
    if c.unit == "tokens/s":
        return f"±{100 * c.tolerance / c.published:.0f}%" if c.published else f"±{c.tolerance:,.0f}"
    if c.unit == "x":
        return f"±{c.tolerance:.2f}"
    return f"±{c.tolerance:g}"


def status(c: Cell) -> str:
    """'fitted' when the cell took part in calibration, else 'predicted'."""
    return "fitted" if c.fitted else "predicted"


# --- comparison table ------------------------------------------------------------------------


def _percent(v: float | None) -> str:
    return f"{100 * v:+.1f}%" if v is not None else ""


def comparison_rows(cells: Iterable[Cell]) -> list[list[str]]:
    rows = []
    for c in cells:
        pub = _value(c.published, c.unit)
        if c.bound == "max":
            pub = "< " + pub
        rows.append(
            [
                c.table,
                c.item,
                _value(c.simulated, c.unit),
                pub,
                _deviation(c),
                _tolerance(c),
                status(c),
                "ok" if c.within else ("known" if c.known_miss else "FAIL"),
            ]
        )
    return rows


COMPARISON_HEADERS = (
    "table",
    "cell",
    "simulated",
    "published",
    "deviation",
    "tolerance",
    "status",
    "check",
)


COMPARISON_LEGEND = (
    "status: fitted|predicted (fitted: the calibration was fitted on it); "
    "check: ok/FAIL (known: a listed miss, see below)"
)
NULL_HEADERS = ("predicted cell", "rdusim", "null: const", "null: roofline")


def null_model_rows(cells: Iterable[Cell]) -> list[list[str]]:
    """Relative errors of rdusim and of the two null models, for the predicted cells that have
    null-model values (a fitted cell is no test of them)."""
    return [
        [
            f"{c.table} {c.item}",
            _percent(c.error),
            _percent(c.null_constant_error),
            _percent(c.null_roofline_error),
        ]
        for c in cells
        if not c.fitted and (c.null_constant is not None or c.null_roofline is not None)
    ]


def render_comparison(cells: Sequence[Cell], title: str = "", width: int | None = None) -> str:
    """The comparison of simulated and published cells, the null models' errors on the
    predicted ones, and a summary, within `width` columns (default: the terminal's)."""
    width = width or terminal_width()
    body = table(
        COMPARISON_HEADERS,
        comparison_rows(cells),
        align="<<>>>><<",
        width=width,
        wrap=(1, 5, 4),
    )
    parts = [title, ""] if title else []
    parts += [body, wrap_text(COMPARISON_LEGEND, width)]
    nulls = null_model_rows(cells)
    if nulls:
        parts += [
            "",
            "relative error of rdusim and of the null models (constant step, roofline) on the "
            "predicted cells:",
            table(NULL_HEADERS, nulls, width=width),
        ]
    return "\n".join([*parts, "", *_comparison_summary(cells, width)])


def _comparison_summary(cells: Sequence[Cell], width: int) -> list[str]:
    """How many cells are within tolerance; the known misses with why; new misses; fixed ones."""
    failed = [c for c in cells if not c.within]
    n_fit = sum(c.fitted for c in cells)
    lines = [
        f"{len(cells) - len(failed)}/{len(cells)} cells within tolerance "
        f"({n_fit} fitted, {len(cells) - n_fit} predicted)"
    ]
    known = [c for c in failed if c.known_miss]
    new = [c for c in failed if not c.known_miss]
    fixed = [c for c in cells if c.within and c.known_miss]
    if known:
        lines.append(f"{len(known)} known misses (the model cannot reach them, and says why):")
        lines += [_wrapped(f"{c.table} {c.item}: {c.known_miss}", width) for c in known]
    if new:
        lines.append(
            wrap_text(
                "NEW misses: " + ", ".join(f"{c.table} {c.item}" for c in new), width, "", "  "
            )
        )
    if fixed:
        text = "known misses now within tolerance (update the list): " + ", ".join(
            f"{c.table} {c.item}" for c in fixed
        )
        lines.append(wrap_text(text, width, "", "  "))
    return lines


def _wrapped(text: str, width: int) -> str:
    return wrap_text(text, min(96, width), "  ", "    ")


def render_null_summary(summary: Mapping[str, Any], width: int | None = None) -> str:
    """Whether rdusim beats the null models on the predicted Table 5 cells: the verdict on the
    first line, the sums of squared relative errors below it."""
    width = width or terminal_width()
    verdict = (
        "beats both null models"
        if summary["beats_both"]
        else (
            "does NOT beat "
            + " and ".join(
                name
                for name, key in (("the constant step", "constant"), ("the roofline", "roofline"))
                if not summary[f"beats_null_{key}"]
            )
        )
    )
    errors = (
        f"sum of squared relative errors: rdusim {summary['sse_rdusim']:.4f}, constant step "
        f"{summary['sse_null_constant']:.4f}, roofline {summary['sse_null_roofline']:.4f}"
    )
    head = f"null models on the {summary['cells']} predicted Table 5 cells: rdusim {verdict}"
    return "\n" + wrap_text(head, width, "", "  ") + "\n" + wrap_text(errors, width, "  ", "  ")


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
    return c.as_dict() | {"item": c.item, "within_tolerance": c.within, "status": status(c)}


def cells_csv(cells: Iterable[Cell]) -> str:
    return to_csv(CELL_COLUMNS, (cell_record(c) for c in cells))


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


def cells_json(cells: Iterable[Cell], **meta: Any) -> str:
    return to_json(meta | {"cells": [cell_record(c) for c in cells]})


# --- calibration -----------------------------------------------------------------------------


def format_param(value: float) -> str:
    """A calibration value as written in a hardware YAML (4 significant digits)."""
    if value != 0 and not 1e-3 <= abs(value) < 1e4:
        return f"{value:.3e}"
    text = f"{value:.4g}"
    return text if any(ch in text for ch in ".e") else text + ".0"


def render_params(
    before: Mapping[str, float],
    after: Mapping[str, float],
    fitted_on: Mapping[str, str],
    stderr: Mapping[str, float] | None = None,
    width: int | None = None,
) -> str:
    """Each parameter before and after the fit, its standard error and what it is fitted on."""
    rows = []
    for name, old in before.items():
        new = after[name]
        change = f"{100 * (new / old - 1):+.1f}%" if old else "-"
        err = stderr.get(name) if stderr else None
        sigma = f"±{100 * err / abs(new):.0f}%" if err is not None and new else "-"
        rows.append(
            [name, format_param(old), format_param(new), sigma, change, fitted_on.get(name, "-")]
        )
    return table(
        ["parameter", "before", "after", "stderr", "change", "fitted on"],
        rows,
        align="<>>>><",
        width=width,
        wrap=(5,),
    )


def render_fit_statistics(fit: Mapping[str, Any], width: int | None = None) -> str:
    """Correlations, condition number and the identifiability verdict of a fit."""
    names = fit["parameter_order"]
    rows = [
        [n, *(f"{v:+.2f}" for v in row)] for n, row in zip(names, fit["correlation"], strict=True)
    ]
    short = [n.replace("_efficiency", "_eff").replace("_call_s", "_call") for n in names]
    body = table(["correlation", *short], rows, align="<" + ">" * len(names), width=width)
    verdict = "identifiable" if fit["identifiable"] else "NOT identifiable"
    return body + f"\n\ncondition number {fit['condition_number']:.3g}: {verdict}"


def render_residuals(
    before: Sequence[Cell], after: Sequence[Cell], width: int | None = None
) -> str:
    """Fitted cells before and after the fit; residual = deviation / tolerance."""

    def ratio(c: Cell) -> str:
        return f"{c.deviation / c.tolerance:+.2f}" if c.tolerance else "-"

    rows = []
    for b, a in zip(before, after, strict=True):
        rows.append(
            [
                f"{a.table} {a.item}",
                _value(b.simulated, b.unit),
                _value(a.simulated, a.unit),
                _value(a.published, a.unit),
                _tolerance(a),
                ratio(b),
                ratio(a),
            ]
        )
    cost_b = sum((c.deviation / c.tolerance) ** 2 for c in before if c.tolerance)
    cost_a = sum((c.deviation / c.tolerance) ** 2 for c in after if c.tolerance)
    body = table(
        [
            "fitted cell",
            "sim before",
            "sim after",
            "published",
            "tolerance",
            "dev/tol before",
            "dev/tol after",
        ],
        rows,
        align="<>>>>>>",
        width=width,
        wrap=(0,),
    )
    return body + f"\n\nsum of squared residuals: {cost_b:.4g} -> {cost_a:.4g}"


_ENTRY = re.compile(
    r"^(?P<head>[ \t]+(?P<key>[A-Za-z_]\w*):[ \t]*)(?P<value>[^#\r\n]*?)(?P<tail>[ \t]*(#.*)?\r?\n?)$"
)


def patch_calibration(text: str, values: Mapping[str, str]) -> str:
    """`text` (a hardware YAML) with the `calibration:` entries in `values` replaced in place.

    Only the value of each `  key: value` line changes; indentation, comments and every other line
    are kept as they are. Raises KeyError naming the keys the section does not have.
    """
    out = []
    inside = False
    seen: set[str] = set()
    for line in text.splitlines(keepends=True):
        if line.strip() and not line[0].isspace() and not line.startswith("#"):
            inside = line.split(":", 1)[0].strip() == "calibration"
        elif inside and (m := _ENTRY.match(line)) and m["key"] in values:
            line = m["head"] + values[m["key"]] + m["tail"]
            seen.add(m["key"])
        out.append(line)
    missing = set(values) - seen
    if missing:
        raise KeyError(", ".join(sorted(missing)))
    return "".join(out)


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


def render_sweep(
    rows: Sequence[Mapping[str, Any]], keys: Sequence[str], width: int | None = None
) -> str:
    """One line per sweep point: the varying keys, then the headline results."""
    columns = [*keys, *(c for c in SUMMARY_COLUMNS if c not in keys)]
    body = [[_sweep_cell(c, r.get(c)) for c in columns] for r in rows]
    headers = [SUMMARY_COLUMNS.get(c, c) if c not in keys else c for c in columns]
    align = "".join("<" if c in keys else ">" for c in columns)
    return table(headers, body, align=align, width=width)
