"""Text of `rdusim validate` and `rdusim calibrate`: the evidence, the leave-one-out
predictions beside the null models, the posterior of each parameter, and the readings of each
shared deployment the evidence favours. Renders the plain data of `Validation.as_dict()` and
`Calibration.as_dict()`."""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from rdusim.report.console import fits, table, table_blocks, terminal_width, wrap_items, wrap_text

USE_WORDS = {
    "fit": "fitted",
    "holdout": "held out",
    "derived": "derived from others",
    "context": "kept for the record (not expressible yet)",
}


def value_text(v: float | None, unit: str = "") -> str:
    """A figure with its unit, three significant digits (thousands separated)."""
    if v is None:
        return "-"
    if unit == "%":
        return f"{v:.3g} %"
    if unit == "x":
        return f"{v:.3g}x"
    if unit == "B":
        return f"{v / 1e6:.3g} MB"
    if abs(v) >= 1000:
        return f"{v:,.0f} {unit}".rstrip()
    return f"{v:.3g} {unit}".rstrip()


def _published(item: Mapping[str, Any]) -> str:
    v, unit, bound = item["measured"], item["unit"], item["bound"]
    if bound == "range":
        return f"{value_text(v[0])}–{value_text(v[1], unit)}"
    text = value_text(v, unit)
    return {"upper": "< ", "lower": "> "}.get(bound, "") + text


def _error(e: float | None) -> str:
    return "-" if e is None else f"{e:+.2f}"


UNIT_SHOWN = {"tokens/s/user": "tok/s/user", "tokens/s": "tok/s", "sequences": "seqs"}


def loo_rows(items: Sequence[Mapping[str, Any]], nulls: bool) -> list[list[str]]:
    rows = []
    for p in items:
        unit = UNIT_SHOWN.get(p["unit"], p["unit"])
        shown = "B" if unit == "B" else ""
        interval = f"{value_text(p['p05'], shown)}–{value_text(p['p95'], shown)}"
        row = [
            p["id"],
            _published({**p, "unit": unit}),
            f"{value_text(p['point'], shown)} ({interval})",
            "yes" if p["inside_90"] else ("known" if p["known_miss"] else "NO"),
        ]
        if nulls:
            errors = p["log_error"]
            row += [_error(errors[k]) for k in ("rdusim", "null_constant", "null_roofline")]
        rows.append(row)
    return rows


LOO_HEADERS = ("item", "published", "rdusim (90% interval)", "in")
NULL_HEADERS = ("err", "const", "roof")
NULLS_FROM_WIDTH = 130  # the per-item null-model columns need this many columns
LOO_LEGEND = (
    "rdusim: the shipped mapping at the shipped calibration (what `rdusim map` prints for it), "
    "and the 90% interval of the item's predictive distribution from a posterior fitted without "
    "it (held-out items: with every fitted item)"
)
NULL_LEGEND = (
    "; err/const/roof: log error of rdusim's median and of the null models (constant step time; "
    "roofline: peak HBM or FLOPs, free calls), 0 for a bound or range it satisfies"
)


def _evidence_summary(d: Mapping[str, Any], width: int) -> list[str]:
    ev = d["evidence"]
    uses = Counter(e["use"] for e in ev)
    sources = len(d["sources"])
    parts = [f"{uses[u]} {USE_WORDS[u]}" for u in USE_WORDS if uses[u]]
    head = f"evidence: {len(ev)} items from {sources} sources: " + ", ".join(parts)
    return [wrap_text(head, width, "", "  ")]


def render_validation(d: Mapping[str, Any], width: int | None = None) -> str:
    """The evidence, each item's leave-one-out prediction beside the null models, the summary,
    the readings the evidence favours, and the misses with their reasons."""
    width = width or terminal_width()
    loo = d["loo"]
    lines = [*_evidence_summary(d, width), ""]
    nulls = width >= NULLS_FROM_WIDTH
    headers = LOO_HEADERS + (NULL_HEADERS if nulls else ())
    align = "<>>^" + (">>>" if nulls else "")
    lines += _loo_table(loo["items"], headers, align, nulls, width)
    lines.append(
        wrap_text(
            LOO_LEGEND + (NULL_LEGEND if nulls else " (--json: each item's null-model errors)"),
            width,
        )
    )
    lines.append("")
    items = loo["items"]
    inside = sum(p["inside_90"] for p in items)
    lines.append(
        wrap_text(
            f"coverage: {inside}/{len(items)} items inside their 90% interval "
            f"({loo['coverage_90']:.0%}); median relative half-width on decode throughput items "
            f"{loo['median_rel_half_width']:.0%}",
            width,
            "",
            "  ",
        )
    )
    sq = loo["sq_log_error"]
    beats = sq["rdusim"] < sq["null_constant"] and sq["rdusim"] < sq["null_roofline"]
    lines.append(
        wrap_text(
            f"squared log error over the {loo['compared_items']} items every model predicts: "
            f"rdusim {sq['rdusim']:.3g}, constant step {sq['null_constant']:.3g}, roofline "
            f"{sq['null_roofline']:.3g}: rdusim "
            + ("beats both null models" if beats else "does NOT beat both null models"),
            width,
            "",
            "  ",
        )
    )
    lines += render_runs(items, width)
    lines += render_readings(d.get("readings") or {}, width)
    lines += _misses(items, width)
    return "\n".join(lines)


def _loo_table(
    items: Sequence[Mapping[str, Any]], headers: Sequence[str], align: str, nulls: bool, width: int
) -> list[str]:
    """One row per item; where the ids do not fit whole, the items under their source's name
    (`source/`), each row naming the item within it."""
    rows = loo_rows(items, nulls)
    if fits(headers, rows, width):
        return table(headers, rows, align=align, width=width).splitlines()
    for row in rows:
        row[0] = row[0].split("/", 1)[-1]
    head, blocks = table_blocks(headers, rows, align, width=width, wrap=(0,))
    lines, source = list(head), None
    for p, block in zip(items, blocks, strict=True):
        if "/" in p["id"] and p["id"].split("/", 1)[0] != source:
            source = p["id"].split("/", 1)[0]
            lines.append(f"{source}/")
        lines += block
    return lines


def render_readings(readings: Mapping[str, Mapping[str, float]], width: int) -> list[str]:
    """Each shared deployment's readings the evidence favours, by posterior weight."""
    if not readings:
        return []
    out = ["", "what the sources leave open, as the evidence reads it (posterior weight):"]
    for name, weights in readings.items():
        ranked = sorted(weights.items(), key=lambda kv: -kv[1])
        shown = [f"{r or '(as shipped)'} {w:.0%}" for r, w in ranked if w >= 0.005]
        out += wrap_items(shown, width, prefix=f"  {name}: ", sep="; ")
    return out


def _run_text(run: Mapping[str, Any]) -> tuple[str, ...]:
    """A run as `MAPPING` then each `KEY=VALUE` (quoted where a shell needs it), its role
    before the mapping unless it is the item's main run."""
    role = "" if run["role"] == "main" else f"{run['role']}: "
    return (f"{role}{run['mapping']}", *(shlex.quote(s) for s in run["set"]))


def render_runs(items: Sequence[Mapping[str, Any]], width: int) -> list[str]:
    """The shipped mappings and `--set`s behind each item's value, items that share their runs
    together; of a figure that is the largest over choices, the first choice's runs (--json
    lists every run)."""
    groups: dict[tuple[tuple[str, ...], ...], list[str]] = {}
    more: dict[tuple[tuple[str, ...], ...], int] = {}
    for p in items:
        runs = p.get("runs") or []
        shown = runs[: _first_choice_size(runs)]
        key = tuple(_run_text(r) for r in shown)
        groups.setdefault(key, []).append(p["id"])
        more[key] = len(runs) - len(shown)
    if not groups:
        return []
    out = [
        "",
        wrap_text(
            "how each item was run (`rdusim map MAPPING --set KEY=VALUE ...`, shown as "
            "MAPPING KEY=VALUE ..., at the first reading of what its source leaves open; the "
            "readings below weigh the others; --json: every run of every item):",
            width,
            "",
            "  ",
        ),
    ]
    for key, ids in groups.items():
        out += wrap_items(ids, width, prefix="  ")
        for pieces in key:
            out += _pack(pieces, width, "    ", "      ")
        if more[key]:
            out.append(
                wrap_text(
                    f"and {more[key]} more run{'s' if more[key] != 1 else ''} over the choices "
                    "the figure is the largest of",
                    width,
                    "    ",
                    "      ",
                )
            )
    return out


def _pack(pieces: Sequence[str], width: int, first: str, rest: str) -> list[str]:
    """`pieces` joined by spaces into lines of `width`, never breaking inside a piece (one
    wider than a line is cut where `wrap_text` cuts it)."""
    lines: list[str] = []
    line = first
    for piece in pieces:
        bare = line in (first, rest)
        if not bare and len(line) + 1 + len(piece) > width:
            lines.append(line)
            line, bare = rest, True
        line += piece if bare else " " + piece
    lines.append(line)
    return [x for ln in lines for x in wrap_text(ln, width, "", rest).splitlines()]


def _first_choice_size(runs: Sequence[Mapping[str, Any]]) -> int:
    """How many runs the first of an item's choices takes: up to its second main run."""
    mains = [i for i, r in enumerate(runs) if r["role"] == "main"]
    return mains[1] if len(mains) > 1 else len(runs)


def _misses(items: Sequence[Mapping[str, Any]], width: int) -> list[str]:
    out = []
    known = [p for p in items if not p["inside_90"] and p["known_miss"]]
    new = [p for p in items if not p["inside_90"] and not p["known_miss"]]
    if known:
        out += [
            "",
            f"{len(known)} known miss{'es' if len(known) != 1 else ''} (the model cannot reach "
            f"{'them' if len(known) != 1 else 'it'}, and says why):",
        ]
        out += [
            wrap_text(f"{p['id']}: {p['known_miss']}", min(width, 100), "  ", "    ") for p in known
        ]
    if new:
        out += [
            "",
            wrap_text(
                "outside their interval: " + ", ".join(p["id"] for p in new), width, "", "  "
            ),
        ]
    return out


# --- calibrate ---------------------------------------------------------------------------------


def _param_value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "s":
        return f"{v * 1e3:.3g} ms" if v >= 1e-3 else f"{v * 1e6:.3g} us"
    if unit == "B/s":
        return f"{v / 1e12:.3g} TB/s" if v >= 1e12 else f"{v / 1e9:.3g} GB/s"
    return f"{v:.3g}"


def calibration_rows(params: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    rows = []
    for name, p in params.items():
        unit = p.get("unit", "")
        prior = p["prior"]
        rows.append(
            [
                name,
                f"{_param_value(prior['low'], unit)}–{_param_value(prior['high'], unit)}",
                _param_value(p["p50"], unit),
                f"{_param_value(p['p05'], unit)}–{_param_value(p['p95'], unit)}",
                f"{p['narrowing']:.2f}",
                ", ".join(p["pinned_by"][:2]) if p["narrowing"] < 0.8 else "(prior only)",
            ]
        )
    return rows


CALIBRATION_HEADERS = ("parameter", "prior 90%", "median", "posterior 90%", "width", "pinned by")
PINNED_INLINE_WIDTH = 120  # narrower, the items that pin each parameter are listed below


def render_calibration(d: Mapping[str, Any], width: int | None = None) -> str:
    width = width or terminal_width()
    rows = calibration_rows(d["parameters"])
    pinned_inline = width >= PINNED_INLINE_WIDTH
    headers = CALIBRATION_HEADERS if pinned_inline else CALIBRATION_HEADERS[:-1]
    body = table(
        headers,
        rows if pinned_inline else [r[:-1] for r in rows],
        align="<>>>><"[: len(headers)],
        width=width,
        wrap=(5, 0) if pinned_inline else (0,),
    )
    lines = [
        wrap_text(
            f"posterior of {len(d['parameters'])} calibrated parameters given "
            f"{len(d['fitted_items'])} fitted evidence items: {d['method']}",
            width,
            "",
            "  ",
        ),
        "",
        body,
        wrap_text(
            "width: the posterior's 90% interval over the prior's, on the parameter's free scale "
            "(1: the evidence does not narrow it); pinned by: the items carrying most of the "
            f"evidence's information on it. Model discrepancy: {d['discrepancy']:.3f} (log "
            "standard deviation).",
            width,
        ),
    ]
    if not pinned_inline:
        lines.append("pinned by:")
        for name, row in zip(d["parameters"], rows, strict=True):
            lines += wrap_items(row[-1].split(", "), width, prefix=f"  {name}: ")
    lines += render_readings(d.get("readings") or {}, width)
    return "\n".join(lines)
