"""Figures of Tables 4 and 5 and of sweeps, from hand-made cells (no simulation here): bars of
the published figure beside rdusim's with its 90% interval as error bars, rdusim's label green
when the published figure is inside the interval and red when not. Published figures are read
from the evidence."""

from __future__ import annotations

import io
from typing import Any

import matplotlib.image
import numpy as np
import pytest
from matplotlib.colors import to_rgba
from matplotlib.container import BarContainer, ErrorbarContainer

from rdusim.report.cells import Cell
from rdusim.report.plots import (
    BAD_COLOR,
    OK_COLOR,
    figure_bytes,
    front_figure,
    sweep_figure,
    table4_figure,
    table5_figure,
    table5_values,
)
from rdusim.studies import paper as pp
from rdusim.validation.items import shipped_evidence

EV = shipped_evidence()
SRC = pp.SOURCE
OUTLIER = 1  # the Table 4 kernel drawn outside its interval
PROMPTS = [(tag, f"{seq // 1024}K") for seq, tag in pp.TABLE5_PROMPTS]


def published(item_id: str) -> float:
    return EV.item(f"{SRC}/{item_id}").low


def table4_cells() -> list[Cell]:
    cells = []
    for k, item_id in enumerate(pp.TABLE4):
        m = EV.item(f"{SRC}/{item_id}").measure
        assert m is not None and m.kernels is not None
        p = published(item_id)
        sim = p + 5.0 if k == OUTLIER else 1.05 * p
        cells.append(
            Cell(
                "table4",
                m.kernels[0],
                sim,
                p,
                "%",
                True,
                p05=0.8 * sim if k != OUTLIER else p + 1.0,
                p95=1.2 * sim,
                item_id=f"{SRC}/{item_id}",
            )
        )
    parts = [c for c in cells if c.item in pp.SNAPSTREAM_KERNELS]
    cells.append(
        Cell(
            "table4",
            "SnapStream kernels (sum, must be below)",
            sum(c.simulated for c in parts),
            published(pp.SNAPSTREAM_SUM),
            "%",
            False,
            bound="upper",
        )
    )
    return cells


def table5_cells(miss: str = "64K throughput (SnapStream)") -> list[Cell]:
    cells = []
    for tag, label in PROMPTS:
        tput = {}
        for suffix, name in (("base", "no SnapStream"), ("snap", "SnapStream")):
            b = published(f"table5-maxbatch-{tag}-{suffix}")
            cells.append(Cell("table5", f"{label} max batch ({name})", b, b, "seqs", True))
            p = published(f"table5-throughput-{tag}-{suffix}")
            cell_name = f"{label} throughput ({name})"
            sim = 1.6 * p if cell_name == miss else 0.95 * p
            tput[suffix] = Cell(
                "table5", cell_name, sim, p, "tokens/s", suffix == "snap", p05=0.85 * sim,
                p95=1.15 * sim,
            )  # fmt: skip
            cells.append(tput[suffix])
        cells.append(
            Cell(
                "table5",
                f"{label} improvement",
                tput["snap"].simulated / tput["base"].simulated,
                published(f"table5-improvement-{tag}"),
                "x",
                False,
                p05=tput["snap"].p05 / tput["base"].p95,
                p95=tput["snap"].p95 / tput["base"].p05,
            )
        )
    return cells


def _png(data: bytes) -> tuple[int, int]:
    img = matplotlib.image.imread(io.BytesIO(data), format="png")
    return img.shape[0], img.shape[1]


def _errorbars(ax: Any) -> list[ErrorbarContainer]:
    return [c for c in ax.containers if isinstance(c, ErrorbarContainer)]


def _color(text: Any) -> tuple[float, ...]:
    return to_rgba(text.get_color())


def test_table4_figure_renders() -> None:
    cells = table4_cells()
    fig = table4_figure(cells)
    h, w = _png(figure_bytes(fig, "png"))
    assert h > 500 and w > 800
    svg = figure_bytes(fig, "svg")
    assert b"<svg" in svg and cells[0].item.encode() in svg
    ax = fig.axes[0]
    kernels = [c for c in cells if c.bound == "value"]
    assert ax.get_yticklabels()[0].get_text() == kernels[0].item
    assert len([c for c in ax.containers if isinstance(c, BarContainer)]) == 2 * len(kernels)
    assert len(_errorbars(ax)) == len(kernels)  # every kernel has its interval
    assert "share" in ax.get_xlabel() and "%" in ax.get_xlabel()
    legend = ax.get_legend()
    assert legend is not None
    labels = [t.get_text() for t in legend.get_texts()]
    assert any("published" in t for t in labels) and any("simulated" in t for t in labels)
    assert any("90% interval" in t for t in labels)


def test_table4_error_bars_span_the_interval() -> None:
    cells = [c for c in table4_cells() if c.bound == "value"]
    bars = _errorbars(table4_figure(cells).axes[0])
    for c, bar in zip(cells, bars, strict=True):
        (segments,) = [lc.get_segments() for lc in bar.lines[2]]
        (x0, _), (x1, _) = segments[0]
        assert (min(x0, x1), max(x0, x1)) == pytest.approx((c.p05, c.p95))


def test_table4_labels_are_green_inside_and_red_outside() -> None:
    cells = table4_cells()
    assert [c.within for c in cells[: len(pp.TABLE4)]].count(False) == 1
    ax = table4_figure(cells).axes[0]
    for c in cells[: len(pp.TABLE4)]:
        (label,) = [t for t in ax.texts if t.get_text().startswith(f"{c.simulated:.2f}%  (")]
        assert f"({c.p05:.2f}–{c.p95:.2f})" in label.get_text()
        assert _color(label) == to_rgba(OK_COLOR if c.within else BAD_COLOR), c.item


def test_table4_without_intervals_has_no_error_bars() -> None:
    cells = [
        Cell("table4", c.item, c.simulated, c.published, "%", True)
        for c in table4_cells()
        if c.bound == "value"
    ]
    ax = table4_figure(cells).axes[0]
    assert _errorbars(ax) == []
    colours = {
        _color(t) for t in ax.texts if t.get_text().endswith("%") and "(" not in t.get_text()
    }
    assert to_rgba(BAD_COLOR) in colours  # a point that is not the published figure misses


def test_table4_states_the_snapstream_bound() -> None:
    cells = table4_cells()
    bound = cells[-1]
    fig = table4_figure(cells)
    (note,) = [t.get_text() for t in fig.texts if "SnapStream kernels" in t.get_text()]
    assert f"below {bound.published:g}%" in note and f"{bound.simulated:.2f}%" in note
    assert note.endswith("[ok]" if bound.within else "[MISS]")
    over = Cell("table4", bound.item, 2 * bound.published, bound.published, "%", False, "upper")
    fig = table4_figure([*cells[:-1], over])
    assert any(t.get_text().endswith("[MISS]") for t in fig.texts)


def test_table5_figure_has_two_panels_with_improvement() -> None:
    fig = table5_figure(table5_cells(), {"128K": 32768, "64K": 16384, "32K": 8192})
    h, w = _png(figure_bytes(fig, "png"))
    assert h > 500 and w > 1000
    assert b"<svg" in figure_bytes(fig, "svg")
    ax_b, ax_t = fig.axes[:2]
    assert "batch" in ax_b.get_ylabel() and "tokens/s" in ax_t.get_ylabel()
    assert ax_b.get_yscale() == "log"
    assert ax_t.get_xticklabels()[0].get_text().startswith(PROMPTS[0][1])
    assert "SnapStream KV: 32K" in ax_t.get_xticklabels()[0].get_text()
    assert len(ax_b.patches) == len(ax_t.patches) == 4 * len(PROMPTS)
    assert _errorbars(ax_b) == []  # a maximum batch has no interval
    assert len(_errorbars(ax_t)) == 2 * len(PROMPTS)
    notes = [t.get_text() for t in ax_t.texts if "improvement" in t.get_text()]
    assert len(notes) == len(PROMPTS)
    for tag, _ in PROMPTS:
        assert any(f"×{published(f'table5-improvement-{tag}'):g} paper" in n for n in notes)


def test_table5_labels_are_green_inside_and_red_outside() -> None:
    cells = table5_cells()
    ax_t = table5_figure(cells).axes[1]
    for c in cells:
        if "throughput" not in c.item:
            continue
        text = f"{c.simulated:,.0f}" + ("*" if c.fitted else "")
        (label,) = [t for t in ax_t.texts if t.get_text() == text]
        assert _color(label) == to_rgba(OK_COLOR if c.within else BAD_COLOR), c.item
    assert sum(not c.within for c in cells if "throughput" in c.item) == 1
    # each improvement note, in prompt order, is coloured by its own interval
    notes = [t for t in ax_t.texts if "improvement" in t.get_text()]
    imps = [c for c in cells if c.item.endswith("improvement")]
    assert len(notes) == len(imps) and {c.within for c in imps} == {True, False}
    for note, c in zip(notes, imps, strict=True):
        assert f"×{c.simulated:.2f} simulated" in note.get_text()
        assert _color(note) == to_rgba(OK_COLOR if c.within else BAD_COLOR), c.item


def test_an_improvement_outside_its_interval_is_red() -> None:
    cells = [
        Cell(c.table, c.item, c.simulated, c.published, c.unit, c.fitted, p05=0.5, p95=1.0)
        if c.item.endswith("improvement")
        else c
        for c in table5_cells(miss="")
    ]
    notes = [t for t in table5_figure(cells).axes[1].texts if "improvement" in t.get_text()]
    assert notes and all(_color(t) == to_rgba(BAD_COLOR) for t in notes)


def test_table5_values_rejects_unknown_items() -> None:
    labels = {label for _, label in PROMPTS}
    assert set(table5_values(table5_cells())) == labels
    # cells of other tables printed beside Table 5 (the naive decode update) are left out
    naive = Cell("text", "naive decode: on-chip memory vs ring buffer", 16.7, 4.6, "x", False)
    assert table5_values([*table5_cells(), naive]) == table5_values(table5_cells())
    table5_figure([*table5_cells(), naive])
    with pytest.raises(ValueError, match="unexpected"):
        table5_values([Cell("table5", "something else", 1, 1, "x", False)])


def test_sweep_figure_one_line_per_combination() -> None:
    rows: list[dict[str, Any]] = [
        {"seq_len": s, "ss": ss, "batch": 16, "tput": s / 1000 * (2 if ss else 1)}
        for s in (32768, 8192, 65536, 16384)
        for ss in (True, False)
    ]
    fig = sweep_figure(rows, "seq_len", "tput", ["ss"])
    ax = fig.axes[0]
    assert len(ax.lines) == 2
    assert sorted(str(line.get_label()) for line in ax.lines) == ["ss=false", "ss=true"]
    assert np.asarray(ax.lines[0].get_xdata()).tolist() == [8192, 16384, 32768, 65536]
    assert ax.get_xscale() == "log"  # x spans a factor of 8 or more
    narrow = sweep_figure([r for r in rows if r["seq_len"] <= 32768], "seq_len", "tput", ["ss"])
    assert narrow.axes[0].get_xscale() == "linear"
    assert _png(figure_bytes(fig, "png"))[0] > 300


def test_sweep_figure_categorical_x_and_missing_values() -> None:
    rows: list[dict[str, Any]] = [{"batch": "max", "y": 1.0}, {"batch": "16", "y": None}]
    fig = sweep_figure(rows, "batch", "y", [])
    assert len(fig.axes[0].lines) == 1
    figure_bytes(fig, "png")


def test_front_figure_one_stepped_line_per_layer_with_kernel_counts() -> None:
    fronts = {
        "moe": [(20e6, 1.2e-3, 1), (8e6, 1.9e-3, 3), (15e6, 1.5e-3, 2)],
        "dense": [(21e6, 0.7e-3, 1)],
    }
    fig = front_figure(fronts, sram_capacity_bytes=520e6)
    (ax,) = fig.axes
    lines = [ln for ln in ax.get_lines() if ln.get_label() in fronts]
    assert [ln.get_label() for ln in lines] == ["moe", "dense"]
    xs = list(lines[0].get_xdata())
    assert xs == sorted(xs) == [8.0, 15.0, 20.0]  # MB, sorted by SRAM
    assert list(lines[0].get_ydata()) == pytest.approx([1.9, 1.5, 1.2])  # ms, as suits them
    assert "(ms" in ax.get_ylabel()
    labels = sorted(t.get_text() for t in ax.texts)
    assert labels == ["1 kernel", "1 kernel", "2 kernels", "3 kernels"]
    assert ax.get_xscale() == "log"


def test_sweep_figure_draws_published_figures_on_their_lines() -> None:
    """Each (row, value) is a hollow diamond at that row's x and the value, in the colour of
    the row's line; one legend entry names them all."""
    rows: list[dict[str, Any]] = [
        {"seq_len": s, "ss": ss, "tput": s / 1000 * (2 if ss else 1)}
        for s in (32768, 65536)
        for ss in (True, False)
    ]
    fig = sweep_figure(rows, "seq_len", "tput", ["ss"], published=[(0, 70.0), (3, 60.0)])
    ax = fig.axes[0]
    marks = [ln for ln in ax.lines if ln.get_marker() == "D" and len(ln.get_xdata())]
    assert [(ln.get_xdata()[0], ln.get_ydata()[0]) for ln in marks] == [
        (32768, 70.0),
        (65536, 60.0),
    ]
    by_label = {str(ln.get_label()): ln.get_color() for ln in ax.lines if ln.get_marker() == "o"}
    assert [ln.get_color() for ln in marks] == [by_label["ss=true"], by_label["ss=false"]]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels.count("published figure") == 1
    plain = sweep_figure(rows, "seq_len", "tput", ["ss"])
    assert not [ln for ln in plain.axes[0].lines if ln.get_marker() == "D"]
