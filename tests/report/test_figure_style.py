"""Figures read as a person would want: times in the unit that suits them (ms, not 4x10^-2 s),
sequence lengths as 32K/64K/128K, words on the axes, SnapStream on and off in the same two
colours in every figure, and point labels that do not overlap."""

from __future__ import annotations

from typing import Any

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rdusim.report.axes import NO_SS_COLOR, SS_COLOR, axis_label, series_color, tokens_label
from rdusim.report.plots import front_figure, sweep_figure
from rdusim.report.serving import latency_cdf_figure, occupancy_figure, throughput_tpot_figure


def _tick_texts(fig: Figure) -> list[str]:
    FigureCanvasAgg(fig).draw()
    return [t.get_text() for ax in fig.axes for t in (*ax.get_xticklabels(), *ax.get_yticklabels())]


def _doc(snapstream: bool, rate: float, tpot: float, tput: float) -> dict[str, Any]:
    return {
        "tpot_s": {"p50": tpot},
        "throughput_tokens_per_s": tput,
        "settings": {"set": {"snapstream.enabled": str(snapstream).lower()}, "rate": rate},
        "slot_occupancy": {"timeline": [[0.0, 1.0], [1.0, 2.0]], "slots": 4, "mean": 0.5},
    }


DOCS = [
    _doc(ss, rate, tpot, tput)
    for ss in (True, False)
    for rate, tpot, tput in ((0.5, 0.038, 500.0), (0.55, 0.0381, 505.0), (1.0, 0.045, 900.0))
]


def test_tpot_is_in_ms_with_plain_ticks() -> None:
    series = {
        "SnapStream": {"ttft_s": [7.6, 8.0, 9.1], "tpot_s": [0.038, 0.04], "e2e_s": [47.0, 48.0]},
        "no SnapStream": {"ttft_s": [8.5, 9.0], "tpot_s": [0.26, 0.72], "e2e_s": [300.0, 700.0]},
    }
    fig = latency_cdf_figure(series, {"ttft_s": 30, "tpot_s": 0.1})
    labels = [ax.get_xlabel() for ax in fig.axes]
    assert labels == ["TTFT (s)", "TPOT (ms)", "end to end (s)"]
    ticks = _tick_texts(fig)
    assert not any("10^" in t or "times" in t or "$" in t for t in ticks), ticks
    tpot = throughput_tpot_figure(DOCS)
    assert tpot.axes[0].get_xlabel() == "median TPOT (ms)"
    assert not any("$" in t for t in _tick_texts(tpot))


def test_snapstream_on_and_off_keep_their_colours_in_every_figure() -> None:
    cdf = latency_cdf_figure(
        {
            "snapstream.enabled=false": {"ttft_s": [1.0], "tpot_s": [0.1], "e2e_s": [2.0]},
            "snapstream.enabled=true": {"ttft_s": [1.0], "tpot_s": [0.1], "e2e_s": [2.0]},
        }
    )
    tpot = throughput_tpot_figure(DOCS)
    occupancy = occupancy_figure(
        {
            "snapstream.enabled=true": DOCS[0]["slot_occupancy"],
            "snapstream.enabled=false": DOCS[3]["slot_occupancy"],
        }
    )
    rows = [
        {"seq_len": s, "snapstream.enabled": ss, "throughput_tokens_per_s": s / 100}
        for s in (32768, 65536, 131072)
        for ss in (False, True)
    ]
    sweep = sweep_figure(rows, "seq_len", "throughput_tokens_per_s", ["snapstream.enabled"])
    for fig in (cdf, tpot, occupancy, sweep):
        colours = {
            str(line.get_label()): line.get_color()
            for line in fig.axes[0].get_lines()
            if "snapstream" in str(line.get_label())
        }
        assert colours == {
            "snapstream.enabled=true": SS_COLOR,
            "snapstream.enabled=false": NO_SS_COLOR,
        }, colours
    assert series_color("SnapStream", 1) == SS_COLOR
    assert series_color("no SnapStream", 0) == NO_SS_COLOR
    assert series_color("batch=8", 2) == "C2"


def test_sequence_lengths_tick_as_k_and_axes_speak_words() -> None:
    rows = [
        {"seq_len": s, "total_latency_s": s / 1e7, "status": "ok"} for s in (32768, 65536, 131072)
    ]
    fig = sweep_figure(rows, "seq_len", "total_latency_s", [])
    ax = fig.axes[0]
    FigureCanvasAgg(fig).draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["32K", "64K", "128K"]
    assert ax.get_xlabel() == "sequence length (tokens)"
    assert ax.get_ylabel() == "latency per prompt or step (ms)"
    assert list(ax.lines[0].get_ydata()) == pytest.approx([3.2768, 6.5536, 13.1072])
    assert tokens_label(4096) == "4K" and tokens_label(1000) == "1000"
    assert axis_label("moe.MHA.latency_s", "ms") == "MHA (moe) latency (ms)"


def _overlaps(fig: Figure) -> list[tuple[str, str]]:
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    shown = [t for ax in fig.axes for t in ax.texts if t.get_visible() and t.get_text()]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in shown]
    return [
        (a, b)
        for i, (a, box_a) in enumerate(boxes)
        for b, box_b in boxes[i + 1 :]
        if box_a.overlaps(box_b)
    ]


def test_point_labels_do_not_overlap() -> None:
    tpot = throughput_tpot_figure(DOCS)
    assert not _overlaps(tpot)
    assert any(t.get_visible() for t in tpot.axes[0].texts)
    front = front_figure(
        {
            "prefill": [(20e6, 0.1012, 4), (21e6, 0.1011, 5), (22e6, 0.101, 6), (8e6, 0.12, 7)],
            "decode": [(20.5e6, 0.1011, 1)],
        },
        sram_capacity_bytes=520e6,
    )
    assert not _overlaps(front)
    assert "(ms" in front.axes[0].get_ylabel()
