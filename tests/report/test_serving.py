"""`rdusim serve`'s report: the text, sorted JSON, the per-request CSV and the figures."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from rdusim.report.plots import figure_bytes
from rdusim.report.serving import (
    REQUEST_COLUMNS,
    dumps,
    latency_cdf_figure,
    occupancy_figure,
    render_point,
    render_points,
    requests_csv,
    throughput_tpot_figure,
)
from rdusim.serving.metrics import summary
from rdusim.serving.serve import ServePoint, point_document
from rdusim.spec.workload import load_workload
from tests.serving.synthetic import disaggregated, requests, run, shape

WORKLOAD = """\
name: tiny
requests: 3
arrival: {process: constant, rate: 2}
prompt_tokens: {dist: fixed, value: 10}
output_tokens: {dist: fixed, value: 3}
slo: {ttft_s: 1.5, tpot_s: 0.5}
deployment: {mode: disaggregated}
"""


@pytest.fixture
def docs(tmp_path: Path) -> list[dict]:
    path = tmp_path / "w.yaml"
    path.write_text(WORKLOAD, encoding="utf-8")
    wl = load_workload(path)
    out = []
    for rate, sets in (
        (2.0, (("snapstream.enabled", "true"),)),
        (4.0, (("snapstream.enabled", "false"),)),
    ):
        result = run(requests((0.0, 10, 3), (0.5, 10, 1), (1.0, 10, 3)), shape(2), disaggregated())
        out.append(point_document(ServePoint(sets, rate), wl, result, summary(result, wl.spec.slo)))
    return out


def test_render_point(docs: list[dict]) -> None:
    text = render_point(docs[0])
    assert text.startswith("serving tiny: 3 requests, 3 completed")
    for needle in ("disaggregated", "TTFT", "TPOT", "end to end", "goodput", "slot occupancy"):
        assert needle in text


def test_render_points_has_a_row_per_run(docs: list[dict]) -> None:
    text = render_points(docs, width=200)
    assert "snapstream.enabled=true, rate=2" in text and "snapstream.enabled=false, rate=4" in text


def test_json_is_sorted_and_strict(docs: list[dict]) -> None:
    text = dumps(docs[0])
    data = json.loads(text)
    assert list(data) == sorted(data)
    assert data["settings"]["set"] == {"snapstream.enabled": "true"}
    assert data["tpot_s"]["p50"] is not None and "NaN" not in text


def test_requests_csv(docs: list[dict]) -> None:
    result = run(requests((0.0, 10, 3), (0.0, 10, 1)), shape(1), disaggregated())
    rows = list(csv.DictReader(io.StringIO(requests_csv([(0, result.records)]))))
    assert tuple(rows[0]) == REQUEST_COLUMNS
    assert [r["id"] for r in rows] == ["0", "1"]
    assert rows[1]["tpot_s"] == "" and rows[1]["transfer_start_s"] == ""  # one token: no decode


def test_figures_render(docs: list[dict]) -> None:
    series = {"a": {"ttft_s": [1.0, 2.0], "tpot_s": [0.1], "e2e_s": [2.0, 3.0]}}
    for fig in (
        latency_cdf_figure(series, {"ttft_s": 1.5, "tpot_s": 0.5}),
        throughput_tpot_figure(docs),
        occupancy_figure({"a": docs[0]["slot_occupancy"]}),
    ):
        assert figure_bytes(fig, "png").startswith(b"\x89PNG")
    lines = throughput_tpot_figure(docs).axes[0].get_lines()
    assert [ln.get_label() for ln in lines] == [
        "snapstream.enabled=true",
        "snapstream.enabled=false",
    ]


def test_without_slo_goodput_is_not_applicable(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(WORKLOAD.replace("slo: {ttft_s: 1.5, tpot_s: 0.5}\n", ""), encoding="utf-8")
    wl = load_workload(path)
    assert wl.spec.slo is None
    result = run(requests((0.0, 10, 3), (0.5, 10, 1)), shape(2), disaggregated())
    doc = point_document(ServePoint(), wl, result, summary(result, wl.spec.slo))
    assert doc["settings"]["slo"] is None and doc["goodput_requests_per_s"] is None
    assert "goodput         not applicable: the workload sets no slo" in render_point(doc)
    row = render_points([doc, doc], width=200).splitlines()[-1]
    assert "n/a" in row
    fig = latency_cdf_figure({"a": {"ttft_s": [1.0], "tpot_s": [0.1], "e2e_s": [2.0]}}, None)
    assert figure_bytes(fig, "png").startswith(b"\x89PNG")
