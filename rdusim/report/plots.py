"""Figures: the paper's Tables 4 and 5 (simulated beside published) and parameter sweeps.

Figures are built on `matplotlib.figure.Figure` (no pyplot state, rendered by the Agg canvas for
PNG) and returned as bytes, so the caller decides where and how they are written.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

if TYPE_CHECKING:
    from rdusim.report.cells import Cell

PUBLISHED_STYLE: dict[str, Any] = {
    "hatch": "///",
    "alpha": 0.45,
    "edgecolor": "black",
    "linewidth": 0.8,
}
SIMULATED_STYLE: dict[str, Any] = {"edgecolor": "black", "linewidth": 0.8}
SIM_COLOR = "tab:blue"
NO_SS_COLOR = "tab:gray"
SS_COLOR = "tab:orange"
OK_COLOR = "tab:green"
BAD_COLOR = "tab:red"
BAND_COLOR = "gold"


def figure_bytes(fig: Figure, fmt: str) -> bytes:
    """The figure rendered as `fmt` ("png" or "svg")."""
    if fmt == "png":
        FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(
        buf,
        format=fmt,
        dpi=150,
        bbox_inches="tight",
        metadata={"Date": None} if fmt == "svg" else None,
    )
    return buf.getvalue()


# --- Table 4 ---------------------------------------------------------------------------------


def _yerr(c: Cell) -> list[list[float]] | None:
    """The cell's interval as error bars around its simulated value (None without one)."""
    if c.p05 is None or c.p95 is None:
        return None
    return [[max(0.0, c.simulated - c.p05)], [max(0.0, c.p95 - c.simulated)]]


def table4_figure(cells: Sequence[Cell]) -> Figure:
    """Grouped horizontal bars: each kernel's share, published and simulated with its 90%
    interval."""
    kernels = [c for c in cells if c.table == "table4" and c.bound == "value"]
    extra = [c for c in cells if c.table == "table4" and c.bound == "upper"]
    fig = Figure(figsize=(10.5, 6.2), layout="constrained")
    ax = fig.add_subplot()
    h = 0.38
    ys = list(range(len(kernels)))[::-1]
    right = max(max(c.p95 or c.simulated, c.published) for c in kernels)
    for y, c in zip(ys, kernels, strict=True):
        ax.barh(y + h / 2, c.published, h, color=NO_SS_COLOR, **PUBLISHED_STYLE)
        ax.barh(y - h / 2, c.simulated, h, color=SIM_COLOR, **SIMULATED_STYLE)
        err = _yerr(c)
        if err:
            ax.errorbar(
                c.simulated,
                y - h / 2,
                xerr=err,
                fmt="none",
                ecolor="black",
                elinewidth=1.2,
                capsize=4,
            )
        ax.text(
            c.published + 0.008 * right,
            y + h / 2,
            f"{c.published:.2f}%",
            va="center",
            fontsize=8.5,
            color="dimgray",
        )
        ax.text(
            max(c.simulated, c.p95 or 0.0) + 0.008 * right,
            y - h / 2,
            f"{c.simulated:.2f}%"
            + (f"  ({c.p05:.2f}–{c.p95:.2f})" if c.p05 is not None and c.p95 is not None else ""),
            va="center",
            fontsize=8.5,
            fontweight="bold",
            color=OK_COLOR if c.within else BAD_COLOR,
        )
    ax.set_yticks(ys, [c.item for c in kernels])
    ax.set_xlim(0, right * 1.35)
    ax.set_xlabel("share of the MoE layer's latency (%)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    fitted = sum(c.fitted for c in kernels)
    ax.set_title(
        "Table 4 — latency share per kernel, one prefill MoE layer of DeepSeek-R1, 128K prompt\n"
        f"simulated (rdusim, with its 90% interval) vs published (SnapStream paper); {fitted} of "
        f"{len(kernels)} shares took part in the calibration",
        fontsize=11,
    )
    handles = [
        Patch(facecolor=NO_SS_COLOR, label="published (paper)", **PUBLISHED_STYLE),
        Patch(facecolor=SIM_COLOR, label="simulated (rdusim)", **SIMULATED_STYLE),
        Patch(
            facecolor="none",
            edgecolor="none",
            label="bars: 90% interval; label: simulated (interval);\n"
            "green = published inside, red = outside",
        ),
    ]
    ax.legend(handles=handles, loc="lower right", fontsize=9, framealpha=0.95)
    for c in extra:
        mark = "ok" if c.within else "MISS"
        fig.text(
            0.01,
            -0.01,
            f"SnapStream kernels (SnapKV Compression + Streaming Ring Buffer): "
            f"{c.simulated:.2f}% simulated; paper: below {c.published:g}% [{mark}]",
            fontsize=9,
            va="top",
        )
    return fig


# --- Table 5 ---------------------------------------------------------------------------------

_T5_ITEM = re.compile(
    r"^(\d+)K (max batch|throughput|improvement)(?: \((no SnapStream|SnapStream)\))?$"
)


def table5_values(cells: Sequence[Cell]) -> dict[str, dict[str, Cell]]:
    """Table 5 cells by prompt label ("128K") and role ("batch_ss", "tput_no_ss", "improvement")."""
    out: dict[str, dict[str, Cell]] = {}
    for c in cells:
        if c.table != "table5":
            continue
        m = _T5_ITEM.match(c.item)
        if not m:
            raise ValueError(f"unexpected Table 5 cell {c.item!r}")
        label, what, ss = m.groups()
        role = {"max batch": "batch", "throughput": "tput", "improvement": "improvement"}[what]
        if ss:
            role += "_ss" if ss == "SnapStream" else "_no_ss"
        out.setdefault(f"{label}K", {})[role] = c
    return out


def _bar_label(
    ax: Axes, x: float, y: float, text: str, color: str = "black", bold: bool = False
) -> None:
    ax.annotate(
        text,
        (x, y),
        xytext=(0, 2),
        textcoords="offset points",
        ha="center",
        va="bottom",
        fontsize=7.5,
        color=color,
        fontweight="bold" if bold else "normal",
    )


def _t5_panel(ax: Axes, groups: dict[str, dict[str, Cell]], what: str) -> float:
    """Four bars per prompt length; returns the panel's top value."""
    w = 0.2
    offsets = {
        ("no_ss", "pub"): -1.5 * w,
        ("no_ss", "sim"): -0.5 * w,
        ("ss", "pub"): 0.5 * w,
        ("ss", "sim"): 1.5 * w,
    }
    top = 0.0
    for i, roles in enumerate(groups.values()):
        for tag, color in (("no_ss", NO_SS_COLOR), ("ss", SS_COLOR)):
            c = roles[f"{what}_{tag}"]
            xp, xs = i + offsets[(tag, "pub")], i + offsets[(tag, "sim")]
            ax.bar(xp, c.published, w, color=color, **PUBLISHED_STYLE)
            ax.bar(xs, c.simulated, w, color=color, **SIMULATED_STYLE)
            err = _yerr(c)
            if err:
                ax.errorbar(
                    xs, c.simulated, yerr=err, fmt="none", ecolor="black", elinewidth=1, capsize=3
                )
            fmt = "{:,.0f}" if what == "tput" else "{:g}"
            _bar_label(ax, xp, c.published, fmt.format(c.published), "dimgray")
            star = "*" if c.fitted and what == "tput" else ""
            _bar_label(
                ax,
                xs,
                c.simulated,
                fmt.format(c.simulated) + star,
                OK_COLOR if c.within else BAD_COLOR,
                bold=True,
            )
            top = max(top, c.published, c.p95 or c.simulated, c.simulated)
    return top


def table5_figure(cells: Sequence[Cell], compressed: Mapping[str, int] | None = None) -> Figure:
    """(a) max batch and (b) throughput for each prompt length, without and with SnapStream."""
    groups = table5_values(cells)
    labels = list(groups)
    fig = Figure(figsize=(13.5, 6.0), layout="constrained")
    ax_b, ax_t = fig.subplots(1, 2)
    xt = range(len(labels))
    ticks = [
        f"{lab} prompt"
        + (
            f"\n(SnapStream KV: {compressed[lab] // 1024}K)"
            if compressed and lab in compressed
            else ""
        )
        for lab in labels
    ]

    top = _t5_panel(ax_b, groups, "batch")
    ax_b.set_yscale("log", base=2)
    ax_b.set_ylim(4, top * 3)
    ax_b.set_ylabel("max batch size (sequences, log scale)")
    ax_b.set_title("(a) maximum batch that fits in HBM (a power of two)")
    ax_b.yaxis.set_major_formatter(lambda v, _pos: f"{v:g}")

    top = _t5_panel(ax_t, groups, "tput")
    ax_t.set_ylim(0, top * 1.28)
    ax_t.set_ylabel("decode throughput (tokens/s, incl. ×2.4 MTP)")
    ax_t.set_title("(b) decode throughput (improvement = with / without SnapStream)")
    ax_t.yaxis.set_major_formatter(lambda v, _pos: f"{v:,.0f}")
    for i, roles in enumerate(groups.values()):
        imp = roles.get("improvement")
        if imp is None:
            continue
        tputs = [roles[f"tput_{t}"] for t in ("no_ss", "ss")]
        y = max(max(c.published, c.p95 or c.simulated) for c in tputs) + 0.07 * top
        ax_t.text(
            i,
            y,
            f"SnapStream improvement\n×{imp.simulated:.2f} simulated / ×{imp.published:g} paper",
            ha="center",
            va="bottom",
            fontsize=8.5,
            color=OK_COLOR if imp.within else BAD_COLOR,
            fontweight="bold",
            bbox={"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": "lightgray"},
        )
    for ax in (ax_b, ax_t):
        ax.set_xticks(list(xt), ticks)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    handles = [
        Patch(facecolor=NO_SS_COLOR, label="without SnapStream, published", **PUBLISHED_STYLE),
        Patch(facecolor=NO_SS_COLOR, label="without SnapStream, simulated", **SIMULATED_STYLE),
        Patch(facecolor=SS_COLOR, label="with SnapStream, published", **PUBLISHED_STYLE),
        Patch(facecolor=SS_COLOR, label="with SnapStream, simulated", **SIMULATED_STYLE),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize=9)
    fig.suptitle(
        "Table 5 — DeepSeek-R1 decode on 16×SN40L (r1_decode_paper), simulated (solid, with its "
        "90% interval) vs published (hatched)\nbold labels: simulated (green = published inside "
        "the interval, red = outside); * = a cell the calibration saw",
        fontsize=11,
    )
    return fig


# --- sweeps ----------------------------------------------------------------------------------


def _label(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def sweep_figure(
    rows: Sequence[Mapping[str, Any]],
    x: str,
    y: str,
    group_keys: Sequence[str],
    title: str = "",
    published: Sequence[tuple[int, float]] = (),
) -> Figure:
    """`y` against `x`, one line per combination of the `group_keys` values.

    Rows whose `status` is not `ok` (infeasible sweep points) are skipped, and the title says how
    many, so a gap in a line is explained on the figure itself. Axes say what they show in words
    and units (a time in s, ms or µs as suits it; sequence lengths as 32K, 64K, 128K), and a
    line told apart by SnapStream keeps its colour (on orange, off grey). `published` are
    (row index, value) pairs: a published figure at that row's point, drawn as a hollow marker
    in its line's colour, so the model is read against the measurement.
    """
    from rdusim.report.axes import (
        axis_label,
        is_seconds,
        plain_ticks,
        series_color,
        time_unit,
        tokens_label,
    )

    lines: dict[tuple[Any, ...], list[tuple[Any, Any]]] = {}
    skipped = sum(1 for r in rows if r.get("status", "ok") != "ok")
    for r in rows:
        if r.get("status", "ok") != "ok" or r.get(x) is None or r.get(y) is None:
            continue
        lines.setdefault(tuple(r.get(k) for k in group_keys), []).append((r[x], r[y]))
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.add_subplot()
    xs_all: list[float] = []
    numeric = all(
        isinstance(px, int | float) and not isinstance(px, bool)
        for pts in lines.values()
        for px, _ in pts
    )
    seconds = is_seconds(y)
    scale, unit = time_unit(py for pts in lines.values() for _, py in pts) if seconds else (1, "")
    colors: dict[tuple[Any, ...], str] = {}
    for i, (combo, pts) in enumerate(lines.items()):
        label = ", ".join(f"{k}={_label(v)}" for k, v in zip(group_keys, combo, strict=True))
        colors[combo] = series_color(label, i)
        style: dict[str, Any] = {
            "marker": "o",
            "label": label or y,
            "color": colors[combo],
        }
        if numeric:
            pts = sorted(pts)
            xs_all += [float(px) for px, _ in pts]
            ax.plot([px for px, _ in pts], [py * scale for _, py in pts], **style)
        else:
            ax.plot([_label(px) for px, _ in pts], [py * scale for _, py in pts], **style)
    tokens = x == "seq_len" or x.endswith(".seq_len")
    if numeric and xs_all and min(xs_all) > 0 and max(xs_all) / min(xs_all) >= 8:
        ax.set_xscale("log", base=2)
        ticks = sorted(set(xs_all))
        ax.set_xticks(ticks, [tokens_label(t) if tokens else f"{t:g}" for t in ticks])
        ax.minorticks_off()
    elif numeric and tokens and xs_all:
        ticks = sorted(set(xs_all))
        ax.set_xticks(ticks, [tokens_label(t) for t in ticks])
    elif numeric:
        plain_ticks(ax, "x")
    _published_markers(ax, rows, x, group_keys, published, colors, scale, numeric)
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(axis_label(y, unit if seconds else None))
    ax.yaxis.set_major_formatter(lambda v, _pos: f"{v:,.6g}")
    ax.grid(alpha=0.3)
    if group_keys or published:
        ax.legend(fontsize=9)
    title = title or f"{axis_label(y)} vs {axis_label(x)}"
    if skipped:
        title += f"\n({skipped} infeasible point{'s' if skipped != 1 else ''} skipped)"
    ax.set_title(title)
    if not lines:
        ax.text(0.5, 0.5, "no values to plot", transform=ax.transAxes, ha="center")
    return fig


def _published_markers(
    ax: Any,
    rows: Sequence[Mapping[str, Any]],
    x: str,
    group_keys: Sequence[str],
    published: Sequence[tuple[int, float]],
    colors: Mapping[tuple[Any, ...], str],
    scale: float,
    numeric: bool,
) -> None:
    """Each published figure at its row's x, hollow, in its line's colour; one legend entry."""
    hollow: dict[str, Any] = {
        "linestyle": "none",
        "marker": "D",
        "markersize": 9,
        "markerfacecolor": "none",
        "markeredgewidth": 1.6,
    }
    for i, value in published:
        row = rows[i]
        combo = tuple(row.get(k) for k in group_keys)
        px = row[x] if numeric else _label(row[x])
        ax.plot([px], [value * scale], color=colors.get(combo, "black"), **hollow)
    if published:
        ax.plot([], [], color="black", label="published figure", **hollow)


def front_figure(
    fronts: Mapping[str, Sequence[tuple[float, float, int]]],
    sram_capacity_bytes: float | None = None,
    title: str = "",
) -> Figure:
    """Layer time against peak kernel SRAM per socket: one stepped line per layer kind.

    `fronts` maps a label to (peak SRAM bytes, layer seconds, kernels) points, as the
    auto-mapper's `front()` gives them; each point is annotated with its kernel count where the
    label has room, so the trade (fewer, bigger kernels for less time) is read off the figure.
    Times are in the unit that suits them (ms for a prefill layer, µs for a decode one).
    """
    from rdusim.report.axes import declutter, plain_ticks, series_color, time_unit

    fig = Figure(figsize=(7, 4.2), layout="constrained")
    ax = fig.add_subplot()
    scale, unit = time_unit(p[1] for points in fronts.values() for p in points)
    labels = []
    for i, (label, points) in enumerate(fronts.items()):
        pts = sorted(points)
        xs = [p[0] / 1e6 for p in pts]
        ys = [p[1] * scale for p in pts]
        ax.step(xs, ys, where="post", marker="o", label=label, color=series_color(label, i))
        for x, y, (_, _, kernels) in zip(xs, ys, pts, strict=True):
            labels.append(
                ax.annotate(
                    f"{kernels} kernel{'s' if kernels != 1 else ''}",
                    (x, y),
                    textcoords="offset points",
                    xytext=(4, 4),
                    fontsize=8,
                )
            )
    if sram_capacity_bytes:
        ax.axvline(sram_capacity_bytes / 1e6, color="gray", linestyle=":", label="socket SRAM")
    ax.set_xscale("log", base=2)
    plain_ticks(ax, "x")
    ax.set_xlabel("peak kernel SRAM per socket (MB)")
    ax.set_ylabel(f"layer time ({unit}, closed-form estimate)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9)
    ax.set_title(title or "latency against SRAM: the fastest mapping under each SRAM cap")
    declutter(fig, labels)
    return fig
