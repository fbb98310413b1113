"""Comparison tables (rdusim's value and 90% interval beside the published figure) and the
CSV/JSON writers, from hand-made cells (no simulation here)."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from rdusim.report.cells import Cell
from rdusim.report.tables import (
    CELL_COLUMNS,
    cell_record,
    cells_csv,
    cells_json,
    render_comparison,
    render_sweep,
    status,
    to_csv,
)

REASON = "known miss: the step stays flat as the batch grows"
CELLS = [
    Cell("table4", "MHA", 67.2, 69.4, "%", True, p05=53.9, p95=83.8, item_id="src/mha"),
    Cell(
        "table4",
        "SnapStream kernels (sum, must be below)",
        2.79,
        3.0,
        "%",
        False,
        bound="upper",
        p05=2.1,
        p95=3.6,
        item_id="src/sum",
    ),
    Cell(
        "table5",
        "128K throughput (no SnapStream)",
        600.0,
        434.0,
        "tokens/s",
        False,
        p05=500.0,
        p95=700.0,
        item_id="src/tput",
    ),
    Cell("table5", "128K max batch (SnapStream)", 64.0, 64.0, "seqs", True, item_id="src/batch"),
    Cell(
        "text",
        "prefill overhead (128K)",
        2.87,
        2.0,
        "%",
        True,
        bound="range",
        published_high=5.0,
        item_id="src/overhead",
    ),
    Cell("text", "peak fraction", 95.0, 90.0, "%", False, bound="lower", p05=85.0, p95=99.0),
    Cell(
        "table5",
        "32K throughput (SnapStream)",
        7257.0,
        7903.0,
        "tokens/s",
        True,
        p05=5600.0,
        p95=7800.0,
        item_id="src/miss",
        known_miss=REASON,
    ),
]
HEADERS = ["table", "cell", "rdusim", "90% interval", "published", "status", "check"]


def _rows_by_cell(text: str) -> dict[str, list[str]]:
    """Comparison rows by cell name: their columns, split on two or more spaces."""
    rows = (re.split(r"\s{2,}", line.strip()) for line in text.splitlines())
    return {
        cols[1]: cols for cols in rows if cols[0] in ("table4", "table5", "text") and len(cols) > 1
    }


def test_comparison_columns_and_checks() -> None:
    text = render_comparison(CELLS, "title", width=120)
    assert text.splitlines()[0] == "title"
    assert re.split(r"\s{2,}", text.splitlines()[2]) == HEADERS
    rows = _rows_by_cell(text)
    assert len(rows) == len(CELLS)
    assert rows["MHA"][2:] == ["67.20 %", "53.90–83.80", "69.40 %", "fitted", "ok"]
    assert rows["SnapStream kernels (sum, must be below)"][2:] == [
        "2.79 %",
        "2.10–3.60",
        "< 3.00 %",
        "predicted",
        "ok",
    ]
    assert rows["128K throughput (no SnapStream)"][2:] == [
        "600 tok/s",
        "500–700",
        "434 tok/s",
        "predicted",
        "MISS",
    ]
    assert rows["128K max batch (SnapStream)"][2:] == ["64", "-", "64", "fitted", "ok"]
    assert rows["prefill overhead (128K)"][2:] == ["2.87 %", "-", "2.00–5.00 %", "fitted", "ok"]
    assert rows["peak fraction"][4] == "> 90.00 %"
    assert rows["32K throughput (SnapStream)"][2:] == [
        "7,257 tok/s",
        "5,600–7,800",
        "7,903 tok/s",
        "fitted",
        "known",
    ]


def test_comparison_summary_lists_known_and_new_misses() -> None:
    text = render_comparison(CELLS, width=120)
    assert "5/7 published figures inside rdusim's 90% interval (4 fitted, 3 predicted)" in text
    known = text.split("known miss", 1)[1]
    assert f"table5 32K throughput (SnapStream): {REASON}" in " ".join(known.split())
    outside = next(line for line in text.splitlines() if line.startswith("outside:"))
    assert outside == "outside: table5 128K throughput (no SnapStream)"
    # the legend says what each column means
    flat = " ".join(text.split())
    assert "90% interval:" in flat and "status: fitted|predicted" in flat and "known:" in flat


def test_comparison_without_misses_lists_none() -> None:
    good = [c for c in CELLS if c.within and not c.known_miss]
    text = render_comparison(good, width=120)
    assert f"{len(good)}/{len(good)} published figures inside" in text
    assert "known misses" not in text and "outside:" not in text


def test_comparison_wraps_long_cell_names_to_the_width() -> None:
    words = [f"word{i}" for i in range(20)]
    long = Cell("table4", " ".join(words), 1.0, 1.0, "%", True, p05=0.9, p95=1.1)
    text = render_comparison([*CELLS, long], width=100)
    assert max(len(line) for line in text.splitlines()) <= 100
    block = [line.split() for line in text.splitlines() if "word" in line]
    assert len(block) > 1  # continuation lines, every word kept, in order
    assert [w for line in block for w in line if w.startswith("word")] == words
    assert block[0][-2:] == ["fitted", "ok"]


@pytest.mark.parametrize("width", [80, 100, 120])
def test_comparison_fits_the_width(width: int) -> None:
    text = render_comparison(CELLS, "a title", width=width)
    assert max(len(line) for line in text.splitlines()) <= width


def test_status_is_fitted_or_predicted() -> None:
    assert [status(c) for c in CELLS[:3]] == ["fitted", "predicted", "predicted"]


def test_cells_csv_has_the_interval_and_the_evidence() -> None:
    rows = list(csv.DictReader(io.StringIO(cells_csv(CELLS))))
    assert tuple(rows[0]) == CELL_COLUMNS
    assert {"p05", "p95", "evidence", "within_interval", "bound"} <= set(CELL_COLUMNS)
    assert [r["item"] for r in rows] == [c.item for c in CELLS]
    assert [r["evidence"] for r in rows] == [c.item_id for c in CELLS]
    assert (float(rows[0]["simulated"]), float(rows[0]["p05"]), float(rows[0]["p95"])) == (
        67.2,
        53.9,
        83.8,
    )
    assert rows[3]["p05"] == rows[3]["p95"] == ""  # no interval: empty
    assert (rows[4]["bound"], rows[4]["published"], rows[4]["published_high"]) == (
        "range",
        "2.0",
        "5.0",
    )
    assert [r["within_interval"] for r in rows] == ["true" if c.within else "false" for c in CELLS]
    assert "false" in {r["within_interval"] for r in rows}
    assert [r["status"] for r in rows] == [status(c) for c in CELLS]


def test_cells_json_matches_the_csv() -> None:
    rows = list(csv.DictReader(io.StringIO(cells_csv(CELLS))))
    data = json.loads(cells_json(CELLS, table="table4", caption="x", interval="90%"))
    assert (data["table"], data["caption"], data["interval"]) == ("table4", "x", "90%")
    assert len(data["cells"]) == len(rows)
    # every CSV column is in the JSON record, with the same value
    for record, row in zip(data["cells"], rows, strict=True):
        for column, text in row.items():
            value = record[column]
            if isinstance(value, bool) or value is None:
                assert text == {True: "true", False: "false", None: ""}[value], column
            elif isinstance(value, float):
                assert float(text) == value, column
            else:
                assert text == str(value), column
    miss = data["cells"][-1]
    assert miss["known_miss"] == REASON and miss["ok"] is False
    assert miss["error"] == pytest.approx(7257.0 / 7903.0 - 1)


def test_cell_record_names_the_cell_and_its_evidence() -> None:
    r = cell_record(CELLS[0])
    assert (r["item"], r["cell"], r["evidence"]) == ("MHA", "MHA", "src/mha")
    assert r["within_interval"] is True and r["status"] == "fitted"


def test_csv_values() -> None:
    text = to_csv(["a", "b", "c", "d"], [{"a": True, "b": None, "c": 0.1 + 0.2, "d": "x,y"}])
    assert text == 'a,b,c,d\ntrue,,0.30000000000000004,"x,y"\n'


def test_render_sweep() -> None:
    rows = [
        {
            "seq_len": 8192,
            "snapstream.enabled": True,
            "batch": 16,
            "max_batch_size": 64,
            "total_latency_s": 0.078,
            "throughput_tokens_per_s": 495.5,
            "throughput_tokens_per_s.p05": 450.2,
            "throughput_tokens_per_s.p95": 540.7,
            "sram_peak_bytes": 3.1e7,
            "hbm_kv_cache_bytes": 1.5e8,
            "hbm_weights_bytes": 4.4e10,
        },
    ]
    text = render_sweep(rows, ["seq_len", "snapstream.enabled"], width=200)
    header, _, line = text.splitlines()
    assert header.split()[:2] == ["seq_len", "snapstream.enabled"]
    assert "tokens/s" in header and "max batch" in header
    assert "true" in line and "78.000 ms" in line and "44 GB" in line
    assert "496 (450–541)" in line  # the headline's 90% interval beside it
