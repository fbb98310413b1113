"""Figures of Tables 4 and 5 and of sweeps, from hand-made cells (no simulation here)."""

from __future__ import annotations

import io
from typing import Any

import matplotlib.image
import numpy as np
import pytest
from matplotlib.colors import to_rgba

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
from rdusim.validation.cells import Cell
from rdusim.validation.data import paper

PUB = paper()


def table4_cells() -> list[Cell]:
    cells = [
        Cell("table4", name, value + 0.5, value, 2.0, "%", True)
        for name, value in PUB["table4"]["shares_percent"].items()
    ]
    cells[1] = Cell(
        "table4", cells[1].item, cells[1].published + 5.0, cells[1].published, 3.0, "%", True
    )  # outside its band
    cells.append(
        Cell(
            "table4",
            "SnapStream kernels (sum, must be below)",
            2.5,
            3.0,
            0.0,
            "%",
            False,
            bound="max",
        )
    )
    return cells


def table5_cells() -> list[Cell]:
    tol = PUB["table5"]["tolerance"]
    cells = []
    for row in PUB["table5"]["rows"]:
        label = f"{row['seq_len'] // 1024}K"
        for tag, name in (("no_ss", "no SnapStream"), ("ss", "SnapStream")):
            cells.append(
                Cell(
                    "table5",
                    f"{label} max batch ({name})",
                    row[f"batch_{tag}"],
                    row[f"batch_{tag}"],
                    0.0,
                    "seqs",
                    True,
                )
            )
        for tag, name in (("no_ss", "no SnapStream"), ("ss", "SnapStream")):
            p = row[f"tput_{tag}"]
            cells.append(
                Cell(
                    "table5",
                    f"{label} throughput ({name})",
                    0.95 * p,
                    p,
                    tol["throughput_relative"] * p,
                    "tokens/s",
                    False,
                )
            )
        cells.append(
            Cell(
                "table5",
                f"{label} improvement",
                4.0,
                row["improvement"],
                tol["improvement_absolute"],
                "x",
                False,
            )
        )
    return cells


def _png(data: bytes) -> tuple[int, int]:
    img = matplotlib.image.imread(io.BytesIO(data), format="png")
    return img.shape[0], img.shape[1]


def test_table4_figure_renders_and_flags_the_outlier() -> None:
    fig = table4_figure(table4_cells())
    h, w = _png(figure_bytes(fig, "png"))
    assert h > 500 and w > 800
    svg = figure_bytes(fig, "svg")
    assert b"<svg" in svg and b"QKV" in svg
    ax = fig.axes[0]
    assert ax.get_yticklabels()[0].get_text() == "QKV"
    colors = {t.get_text(): to_rgba(t.get_color()) for t in ax.texts}
    bad = next(k for k in colors if "(+5.00 pt)" in k)
    good = next(k for k in colors if "(+0.50 pt)" in k)
    assert colors[bad] == to_rgba(BAD_COLOR) and colors[good] == to_rgba(OK_COLOR)
    assert "share" in ax.get_xlabel() and "%" in ax.get_xlabel()
    legend = ax.get_legend()
    assert legend is not None
    labels = [t.get_text() for t in legend.get_texts()]
    assert any("published" in t for t in labels) and any("simulated" in t for t in labels)


def test_table5_figure_has_two_panels_with_improvement() -> None:
    fig = table5_figure(table5_cells(), {"128K": 32768, "64K": 16384, "32K": 8192})
    h, w = _png(figure_bytes(fig, "png"))
    assert h > 500 and w > 1000
    ax_b, ax_t = fig.axes[:2]
    assert "batch" in ax_b.get_ylabel() and "tokens/s" in ax_t.get_ylabel()
    assert ax_t.get_xticklabels()[0].get_text().startswith("128K")
    notes = [t.get_text() for t in ax_t.texts]
    assert sum("×4.00 simulated" in n for n in notes) == 3
    assert len(ax_b.patches) == len(ax_t.patches) == 12  # 3 prompt lengths x 4 bars


def test_table5_values_rejects_unknown_items() -> None:
    assert set(table5_values(table5_cells())) == {"128K", "64K", "32K"}
    # cells of other tables printed beside Table 5 (the naive decode update) are left out
    naive = Cell("text", "naive decode: on-chip memory vs ring buffer", 16.7, 4.6, 1.2, "x", False)
    assert table5_values([*table5_cells(), naive]) == table5_values(table5_cells())
    table5_figure([*table5_cells(), naive], {"128K": 32768, "64K": 16384, "32K": 8192})
    with pytest.raises(ValueError, match="unexpected"):
        table5_values([Cell("table5", "something else", 1, 1, 0, "x", False)])


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
    assert np.asarray(ax.lines[0].get_xdata()).tolist() == [
        8192,
        16384,
        32768,
        65536,
    ]  # sorted along x
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
