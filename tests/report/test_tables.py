"""Comparison tables, CSV/JSON writers and calibration YAML patching."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from rdusim.report.tables import (
    CELL_COLUMNS,
    cells_csv,
    cells_json,
    format_param,
    patch_calibration,
    render_comparison,
    render_fit_statistics,
    render_null_summary,
    render_params,
    render_sweep,
    to_csv,
)
from rdusim.spec.hardware import load_hardware, preset_path
from rdusim.validation.cells import Cell

CELLS = [
    Cell("table4", "MHA", 69.7, 69.4, 3.0, "%", True),
    Cell("table4", "SnapStream kernels (sum, must be below)", 2.4, 3.0, 0.0, "%", False, "max"),
    Cell("table5", "128K throughput (no SnapStream)", 600.0, 434.0, 65.1, "tokens/s", False),
    Cell("table5", "128K max batch (SnapStream)", 64, 64, 0.0, "seqs", True),
]


def _rows_by_cell(text: str) -> dict[str, list[str]]:
    """Comparison rows by cell name: their columns, split on two or more spaces."""
    rows = (re.split(r"\s{2,}", line.strip()) for line in text.splitlines())
    return {cols[1]: cols for cols in rows if cols[0] in ("table4", "table5") and len(cols) > 1}


def test_comparison_marks_ok_and_fail() -> None:
    text = render_comparison(CELLS, "title", width=120)
    rows = _rows_by_cell(text)
    assert rows["MHA"][-2:] == ["fitted", "ok"]
    assert rows["MHA"][4:6] == ["+0.30 pt", "±3.00 pt"]
    assert rows["128K throughput (no SnapStream)"][-2:] == ["predicted", "FAIL"]
    # a throughput's deviation and tolerance are relative to the published value
    assert rows["128K throughput (no SnapStream)"][4:6] == ["+38.2%", "±15%"]
    assert rows["SnapStream kernels (sum, must be below)"][3] == "< 3.00 %"
    assert rows["128K max batch (SnapStream)"][5] == "exact"
    assert "3/4 cells within tolerance (2 fitted, 2 predicted)" in text
    assert "NEW misses: table5 128K throughput (no SnapStream)" in text
    header = re.split(r"\s{2,}", text.splitlines()[2])
    assert header == [
        "table",
        "cell",
        "simulated",
        "published",
        "deviation",
        "tolerance",
        "status",
        "check",
    ]
    assert "status: fitted|predicted" in text and "check: ok/FAIL" in text  # the legend


def test_comparison_wraps_long_cell_names_to_the_width() -> None:
    words = [f"word{i}" for i in range(20)]
    long = Cell("table4", " ".join(words), 1.0, 1.0, 1.0, "%", True)
    text = render_comparison([*CELLS, long], width=100)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "(3 fitted, 2 predicted)" in text
    block = [line.split() for line in text.splitlines() if "word" in line]
    assert len(block) > 1  # continuation lines, every word kept, in order
    assert [w for line in block for w in line if w.startswith("word")] == words
    assert block[0][-2:] == ["fitted", "ok"]


def test_comparison_shows_null_model_errors_of_predicted_cells() -> None:
    cells = [
        Cell(
            "table5",
            "64K throughput (SnapStream)",
            3600.0,
            4000.0,
            400.0,
            "tokens/s",
            False,
            null_constant=3800.0,
            null_roofline=9000.0,
        ),
        Cell(
            "table5",
            "128K throughput (SnapStream)",
            1800.0,
            1800.0,
            180.0,
            "tokens/s",
            True,
            null_constant=1700.0,
            null_roofline=4000.0,
        ),
    ]
    text = render_comparison(cells, width=120)
    assert _rows_by_cell(text)["64K throughput (SnapStream)"][-1] == "ok"
    _, nulls = text.split("on the predicted cells:\n")
    header, _, row, *_ = nulls.splitlines()
    assert re.split(r"\s{2,}", header) == [
        "predicted cell",
        "rdusim",
        "null: const",
        "null: roofline",
    ]
    # 3600/4000 - 1, 3800/4000 - 1, 9000/4000 - 1
    assert re.split(r"\s{2,}", row) == [
        "table5 64K throughput (SnapStream)",
        "-10.0%",
        "-5.0%",
        "+125.0%",
    ]
    assert "128K" not in nulls.split("cells within tolerance")[0]  # a fitted cell tests nothing


@pytest.mark.parametrize(
    ("rdusim", "verdict"),
    [(0.01, "rdusim beats both null models"), (0.03, "rdusim does NOT beat the constant step")],
)
def test_null_summary_verdict(rdusim: float, verdict: str) -> None:
    summary = {
        "cells": 7,
        "sse_rdusim": rdusim,
        "sse_null_constant": 0.02,
        "sse_null_roofline": 9.0,
        "beats_null_constant": rdusim < 0.02,
        "beats_null_roofline": rdusim < 9.0,
        "beats_both": rdusim < 0.02,
    }
    text = render_null_summary(summary, width=120)
    first, errors = text.strip().splitlines()
    assert first.startswith("null models on the 7 predicted Table 5 cells")
    assert first.endswith(verdict)  # the verdict first, on the line that names the cells
    assert f"rdusim {rdusim:.4f}" in errors and "constant step 0.0200" in errors
    if "NOT" in verdict:
        assert "roofline" not in first


def test_fit_statistics_and_parameter_table() -> None:
    names = ["gemm_efficiency", "attention_efficiency", "software_call_s"]
    fit = {
        "parameter_order": names,
        "correlation": [[1.0, 0.83, -0.03], [0.83, 1.0, -0.07], [-0.03, -0.07, 1.0]],
        "condition_number": 3.28,
        "identifiable": True,
    }
    text = render_fit_statistics(fit)
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines()[2:5]}
    assert rows["gemm_efficiency"] == ["+1.00", "+0.83", "-0.03"]
    assert rows["software_call_s"] == ["-0.03", "-0.07", "+1.00"]
    assert text.rstrip().endswith("condition number 3.28: identifiable")
    assert "NOT identifiable" in render_fit_statistics(fit | {"identifiable": False})

    params = render_params(
        {"gemm_efficiency": 0.5, "software_call_s": 4e-4},
        {"gemm_efficiency": 0.4, "software_call_s": 4e-4},
        {"gemm_efficiency": "fitted: Table 4"},
        {"gemm_efficiency": 0.04, "software_call_s": 1e-4},
    )
    header, _, gemm, call = params.splitlines()
    assert header.split()[:5] == ["parameter", "before", "after", "stderr", "change"]
    assert gemm.split()[1:5] == ["0.5", "0.4", "±10%", "-20.0%"]
    assert "fitted: Table 4" in gemm
    assert call.split()[1:5] == ["4.000e-04", "4.000e-04", "±25%", "+0.0%"]


def test_cells_csv_and_json() -> None:
    rows = list(csv.DictReader(io.StringIO(cells_csv(CELLS))))
    assert tuple(rows[0]) == CELL_COLUMNS
    assert [r["item"] for r in rows] == [c.item for c in CELLS]
    assert float(rows[0]["simulated"]) == 69.7 and float(rows[0]["published"]) == 69.4
    assert [r["within_tolerance"] for r in rows] == ["true", "true", "false", "true"]
    assert [r["status"] for r in rows] == ["fitted", "predicted", "predicted", "fitted"]
    data = json.loads(cells_json(CELLS, table="table4", hardware="x"))
    assert data["table"] == "table4" and data["hardware"] == "x"
    # every CSV column is in the JSON record, with the same value
    for record, row in zip(data["cells"], rows, strict=True):
        for column, text in row.items():
            value = record[column]
            shown = {True: "true", False: "false", None: ""}.get(value, value)
            assert str(shown) == text or float(text) == pytest.approx(value), column
    assert data["cells"][2]["deviation"] == pytest.approx(166.0)


def test_csv_values() -> None:
    text = to_csv(["a", "b", "c", "d"], [{"a": True, "b": None, "c": 0.1 + 0.2, "d": "x,y"}])
    assert text == 'a,b,c,d\ntrue,,0.30000000000000004,"x,y"\n'


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.51234, "0.5123"), (1.0, "1.0"), (3.21e-4, "3.210e-04"), (0.0, "0.0"), (0.9, "0.9")],
)
def test_format_param(value: float, text: str) -> None:
    assert format_param(value) == text
    assert float(text) == pytest.approx(value, rel=1e-3)


YAML = """\
name: x  # gemm_efficiency: 9 (not calibration)
socket:
  gemm_efficiency: 7
calibration:
  # Fitted on: Table 4.
  gemm_efficiency: 0.513   # trailing comment
  software_call_s: 3.21e-4
links:
  software_call_s: 5
"""


def test_patch_calibration_edits_only_the_calibration_values() -> None:
    out = patch_calibration(YAML, {"gemm_efficiency": "0.6", "software_call_s": "4.000e-04"})
    assert out == YAML.replace("0.513   #", "0.6   #").replace("3.21e-4", "4.000e-04")
    crlf = patch_calibration(YAML.replace("\n", "\r\n"), {"gemm_efficiency": "0.6"})
    assert crlf.count("\r\n") == YAML.count("\n") and "0.6   # trailing comment\r\n" in crlf


def test_patch_calibration_missing_key() -> None:
    with pytest.raises(KeyError, match="hardware_call_s"):
        patch_calibration(YAML, {"hardware_call_s": "2.6e-05"})


def test_patch_shipped_preset_keeps_every_comment(tmp_path: Path) -> None:
    text = preset_path("sn40l-16").read_text(encoding="utf-8")
    out = patch_calibration(text, {"attention_efficiency": "0.5"})
    changed = [(a, b) for a, b in zip(text.splitlines(), out.splitlines(), strict=True) if a != b]
    assert len(changed) == 1
    old, new = changed[0]
    assert old.partition(":")[0] == new.partition(":")[0] == "  attention_efficiency"
    assert new.partition(":")[2].split("#")[0].strip() == "0.5"
    path = tmp_path / "hw.yaml"
    path.write_text(out, encoding="utf-8")
    assert load_hardware(path).calibration.attention_efficiency == 0.5


def test_render_sweep() -> None:
    rows = [
        {
            "seq_len": 8192,
            "snapstream.enabled": True,
            "batch": 16,
            "max_batch_size": 64,
            "total_latency_s": 0.078,
            "throughput_tokens_per_s": 495.5,
            "sram_peak_bytes": 3.1e7,
            "hbm_kv_cache_bytes": 1.5e8,
            "hbm_weights_bytes": 4.4e10,
        },
    ]
    text = render_sweep(rows, ["seq_len", "snapstream.enabled"])
    header, _, line = text.splitlines()
    assert header.split()[:2] == ["seq_len", "snapstream.enabled"]
    assert "tokens/s" in header and "max batch" in header
    assert "true" in line and "78.000 ms" in line and "496" in line and "44 GB" in line
