"""`rdusim reproduce`, `rdusim validate` and `rdusim calibrate` end to end (in-process).

The full reproduction runs once for the module; published figures come from the paper's data
file (`rdusim.validation.data.paper()`). With the shipped calibration exactly the cells in
`tests/known_misses.py` are outside their tolerance, so `rdusim validate` exits 1 because of them
and of nothing else.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest

from rdusim.spec.hardware import load_hardware, preset_path
from rdusim.validation import calibrate
from rdusim.validation.data import facts, paper
from tests.known_misses import KNOWN_MISSES

Cli = Callable[[Sequence[object]], tuple[int, str, str]]
PUB = paper()
OUTPUTS = [f"{t}.{ext}" for t in ("table4", "table5") for ext in ("png", "svg", "csv", "json")]
FITTED = ("gemm_efficiency", "attention_efficiency", "software_call_s", "hardware_call_s")
CALIBRATION_KEYS = {
    "gemm_efficiency",
    "attention_efficiency",
    "simd_efficiency",
    "hbm_efficiency",
    "software_call_s",
    "hardware_call_s",
    "hbm_usable_fraction",
}
TABLES = ("table4", "table5", "text", "looping")
TPS = PUB["table5"]["tokens_per_step"]
ROWS = PUB["table5"]["rows"]
# Every comparison: Table 4's shares and its bound, SnapStream's prefill overhead at 64K and 128K,
# five cells per Table 5 row, the two naive-decode cells and kernel looping's speed-up.
N_CELLS = len(PUB["table4"]["shares_percent"]) + 1 + 2 + 5 * len(ROWS) + 2 + 1
# The Table 5 throughputs a parameter is fitted on: 128K with SnapStream, and 32K without, which
# is the same configuration (batch 64, a 32K cache).
FITTED_THROUGHPUTS = {"128K throughput (SnapStream)", "32K throughput (no SnapStream)"}


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`rdusim reproduce all --out DIR`: (DIR, stdout)."""
    from rdusim.cli import main

    out = tmp_path_factory.mktemp("reproduce")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["reproduce", "all", "--out", str(out)])
    assert code == 0
    return out, buf.getvalue()


@pytest.fixture(scope="module")
def validated() -> tuple[int, dict[str, Any]]:
    """`rdusim validate --json`: (exit code, parsed output)."""
    from rdusim.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["validate", "--json"])
    return code, json.loads(buf.getvalue())


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


def comparison(text: str) -> dict[tuple[str, str], list[str]]:
    """The printed comparison table by (table, cell): the row's columns (split on 2+ spaces)."""
    out = {}
    for line in text.splitlines():
        cols = re.split(r"\s{2,}", line.strip())
        if cols[0] in TABLES and len(cols) >= 8:
            out[(cols[0], cols[1])] = cols
    return out


def _floats(value: Any) -> Iterator[float]:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int | float):
        yield float(value)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _floats(v)
    elif isinstance(value, list):
        for v in value:
            yield from _floats(v)


# --- reproduce -------------------------------------------------------------------------------


def test_reproduce_writes_every_output(reproduced: tuple[Path, str]) -> None:
    out, _ = reproduced
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUTS)  # no temporaries left
    for name in ("table4.png", "table5.png"):
        img = matplotlib.image.imread(out / name)
        assert img.shape[0] > 500 and img.shape[1] > 800 and img.std() > 0.05
        assert (out / name).stat().st_size > 20_000
    for name in ("table4.svg", "table5.svg"):
        assert "<svg" in (out / name).read_text(encoding="utf-8")[:2000]


def test_csv_has_every_cell_with_both_values(reproduced: tuple[Path, str]) -> None:
    out, _ = reproduced
    t4 = _rows(out / "table4.csv")
    for col in ("simulated", "published", "deviation", "tolerance", "within_tolerance", "status"):
        assert col in t4[0]
    items = {r["item"]: r for r in t4}
    for name, value in PUB["table4"]["shares_percent"].items():
        assert float(items[name]["published"]) == value
        assert float(items[name]["simulated"]) > 0
        assert items[name]["status"] == "fitted"
    overhead = {r["item"]: r["status"] for r in t4 if r["table"] == "text"}
    # at Table 4's 128K the overhead follows from the fitted shares
    assert overhead == {
        "prefill overhead at 64K": "predicted",
        "prefill overhead at 128K": "fitted",
    }
    t5_rows = _rows(out / "table5.csv")
    t5 = {r["item"]: r for r in t5_rows if r["table"] == "table5"}
    for row in ROWS:
        label = f"{row['seq_len'] // 1024}K"
        assert float(t5[f"{label} throughput (SnapStream)"]["published"]) == row["tput_ss"]
        assert float(t5[f"{label} max batch (no SnapStream)"]["published"]) == row["batch_no_ss"]
        assert float(t5[f"{label} improvement"]["published"]) == row["improvement"]
    assert len(t5) == 5 * len(ROWS)
    naive = [r for r in t5_rows if r["table"] == "text"]
    assert len(naive) == 2 and all(r["item"].startswith("naive decode") for r in naive)
    assert {r["status"] for r in t5.values()} == {"fitted", "predicted"}
    for r in [*t4, *t5_rows]:
        assert r["status"] == ("fitted" if r["fitted"] == "true" else "predicted")
        missed = (r["table"], r["item"]) in KNOWN_MISSES
        assert r["within_tolerance"] == ("false" if missed else "true"), r["item"]


def test_json_matches_csv(reproduced: tuple[Path, str]) -> None:
    out, _ = reproduced
    for name in ("table4", "table5"):
        data = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
        rows = _rows(out / f"{name}.csv")
        assert data["table"] == name and data["hardware"] == "sn40l-16"
        assert set(data["calibration"]) == CALIBRATION_KEYS
        assert len(data["cells"]) == len(rows)
        for record, row in zip(data["cells"], rows, strict=True):
            for column, text in row.items():
                value = record[column]  # every CSV column is in the JSON record
                if isinstance(value, bool) or value is None:
                    assert text == {True: "true", False: "false", None: ""}[value], column
                elif isinstance(value, float):
                    assert float(text) == value, column
                else:
                    assert text == str(value), column


def test_comparison_table_is_printed(reproduced: tuple[Path, str]) -> None:
    _, text = reproduced
    for header in (
        "cell",
        "simulated",
        "published",
        "deviation",
        "tolerance",
        "fitted|predicted",
        "ok/FAIL",
        "null: const",
        "null: roofline",
    ):
        assert header in text
    rows = comparison(text)
    assert len(rows) == N_CELLS
    for name in PUB["table4"]["shares_percent"]:
        assert ("table4", name) in rows
    known = {key for key, cols in rows.items() if cols[7] == "known"}
    assert known == set(KNOWN_MISSES)
    assert all(cols[7] == "ok" for key, cols in rows.items() if key not in known)
    m = re.search(r"(\d+)/(\d+) cells within tolerance", text)
    assert m and (int(m[1]), int(m[2])) == (N_CELLS - len(KNOWN_MISSES), N_CELLS)


def test_reproduce_one_table(run_cli: Cli, tmp_path: Path) -> None:
    code, out, err = run_cli(["reproduce", "table4", "--out", tmp_path])
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(OUTPUTS[:4])
    assert "table5" not in out.split("wrote")[0]


def test_reproduce_out_is_a_file(run_cli: Cli, tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("keep")
    code, _, err = run_cli(["reproduce", "table4", "--out", f])
    assert code == 2 and "not a directory" in err
    assert f.read_text() == "keep"


def test_reproduce_out_under_a_file_is_checked_first(run_cli: Cli, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("keep", encoding="utf-8")
    code, out, err = run_cli(["reproduce", "--out", blocker / "sub"])
    assert code == 2 and out == "" and "is a file, not a directory" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


# --- validate --------------------------------------------------------------------------------


def test_validate_marks_the_known_misses_with_their_reasons(run_cli: Cli) -> None:
    """Only the known misses are outside their tolerance, each shown with why; validate exits 0
    (no new miss), and 1 with --strict (a cell is outside)."""
    code, out, err = run_cli(["validate"])
    assert code == 0, out + err
    rows = comparison(out)
    assert len(rows) == N_CELLS
    known = {key for key, cols in rows.items() if cols[7] == "known"}
    assert known == set(KNOWN_MISSES)
    assert not any(cols[7] == "FAIL" for cols in rows.values())
    listed = " ".join(out.split("known misses")[1].split("null models")[0].split())
    for (table, item), reason in KNOWN_MISSES.items():
        assert f"{table} {item}: {reason}" in listed
    assert "NEW misses" not in out
    strict, _, _ = run_cli(["validate", "--strict"])
    assert strict == 1
    # the null models' summary on the predicted Table 5 cells, with its verdict
    summary = next(line for line in out.splitlines() if line.startswith("null models"))
    assert "predicted Table 5 cells" in summary and "rdusim" in summary
    assert "beats both null models" in summary or "does NOT beat" in summary


def test_validate_json(validated: tuple[int, dict[str, Any]]) -> None:
    code, data = validated
    assert code == 0
    assert set(data) == {"hardware", "calibration", "cells", "null_models", "ok", "unexpected"}
    assert data["hardware"] == "sn40l-16" and data["ok"] is False and data["unexpected"] == []
    assert set(data["calibration"]) == CALIBRATION_KEYS
    assert all(math.isfinite(v) for v in _floats(data))
    cells = data["cells"]
    assert len(cells) == N_CELLS
    keys = {"table", "cell", "simulated", "published", "ok", "fitted", "error"}
    keys |= {"null_constant_error", "null_roofline_error"}
    for c in cells:
        assert keys <= set(c), c
        assert c["ok"] is ((c["table"], c["cell"]) not in KNOWN_MISSES), c["cell"]
        assert (c["known_miss"] is not None) is ((c["table"], c["cell"]) in KNOWN_MISSES)
        if c["fitted"]:
            assert c["error"] is None and c["null_constant_error"] is None
        elif c["error"] is not None:
            assert c["error"] == pytest.approx(c["simulated"] / c["published"] - 1)
    by_cell = {(c["table"], c["cell"]): c for c in cells}
    for name, value in PUB["table4"]["shares_percent"].items():
        assert (
            by_cell[("table4", name)]["published"] == value and by_cell[("table4", name)]["fitted"]
        )
    fitted_tput = {
        c["cell"]
        for c in cells
        if c["table"] == "table5" and "throughput" in c["cell"] and c["fitted"]
    }
    assert fitted_tput == FITTED_THROUGHPUTS
    looping = [c for c in cells if c["table"] == "looping"]
    assert len(looping) == 1
    assert looping[0]["published"] == facts()["kernel_looping"]["max_decode_speedup"]


def test_validate_json_null_models(validated: tuple[int, dict[str, Any]]) -> None:
    """The null models' errors, recomputed from the paper's Table 5 alone: the constant step is
    the mean published step (batch x 2.4 / throughput) of the two fitted cells."""
    _, data = validated
    by_cell = {c["cell"]: c for c in data["cells"] if c["table"] == "table5"}
    fitted_rows = [(r, "ss") for r in ROWS if r["seq_len"] == 131072]
    fitted_rows += [(r, "no_ss") for r in ROWS if r["seq_len"] == 32768]
    step = sum(r[f"batch_{t}"] * TPS / r[f"tput_{t}"] for r, t in fitted_rows) / len(fitted_rows)
    predicted = []
    for row in ROWS:
        label = f"{row['seq_len'] // 1024}K"
        for tag, name in (("no_ss", "no SnapStream"), ("ss", "SnapStream")):
            cell = by_cell[f"{label} throughput ({name})"]
            if cell["fitted"]:
                continue
            predicted.append(cell)
            constant = row[f"batch_{tag}"] * TPS / step
            assert cell["null_constant_error"] == pytest.approx(constant / row[f"tput_{tag}"] - 1)
            # the roofline has no calls and no inefficiency: it is faster than rdusim
            assert cell["null_roofline_error"] > cell["error"]
        cell = by_cell[f"{label} improvement"]
        predicted.append(cell)
        ratio = row["batch_ss"] / row["batch_no_ss"]  # 4: equal steps leave the batch ratio
        assert cell["null_constant_error"] == pytest.approx(ratio / row["improvement"] - 1)
    nulls = data["null_models"]
    assert {"sse_rdusim", "sse_null_constant", "sse_null_roofline", "beats_both"} <= set(nulls)
    assert nulls["cells"] == len(predicted) == 3 * len(ROWS) - 2
    for key, field in (
        ("sse_rdusim", "error"),
        ("sse_null_constant", "null_constant_error"),
        ("sse_null_roofline", "null_roofline_error"),
    ):
        assert nulls[key] == pytest.approx(sum(c[field] ** 2 for c in predicted))
    others = (nulls["sse_null_constant"], nulls["sse_null_roofline"])
    assert nulls["beats_both"] is (nulls["sse_rdusim"] < min(others))


def _edited_preset(tmp_path: Path, **values: str) -> Path:
    text = preset_path("sn40l-16").read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        key = line.strip().split(":", 1)[0]
        if line.startswith("  ") and key in values:
            lines[i] = f"  {key}: {values.pop(key)}\n"
    assert not values, f"not in the preset: {values}"
    path = tmp_path / "hw.yaml"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def test_validate_fails_with_a_bad_calibration(run_cli: Cli, tmp_path: Path) -> None:
    assert ("table4", "MHA") not in KNOWN_MISSES
    bad = _edited_preset(tmp_path, attention_efficiency="0.2")
    code, out, _ = run_cli(["validate", "--hardware", bad])
    assert code == 1
    assert comparison(out)[("table4", "MHA")][7] == "FAIL"
    assert "NEW misses:" in out and "table4 MHA" in out.split("NEW misses:")[1]


def test_validate_unknown_hardware_is_a_user_error(run_cli: Cli, tmp_path: Path) -> None:
    code, _, err = run_cli(["validate", "--hardware", tmp_path / "missing.yaml"])
    assert code == 2 and "Traceback" not in err


# --- calibrate -------------------------------------------------------------------------------


def test_calibrate_json_of_a_short_fit(run_cli: Cli) -> None:
    """One evaluation and a numerical Jacobian: the statistics at the shipped values."""
    code, out, err = run_cli(["calibrate", "--max-evals", "1", "--json"])
    data = json.loads(out)
    assert set(data) == {
        "hardware",
        "parameters",
        "parameter_order",
        "correlation",
        "condition_number",
        "identifiable",
        "problems",
        "residuals",
    }
    assert data["hardware"] == "sn40l-16"
    assert all(math.isfinite(v) for v in _floats(data))
    assert data["parameter_order"] == list(FITTED) and set(data["parameters"]) == set(FITTED)
    shipped = load_hardware("sn40l-16").calibration
    for name in FITTED:
        p = data["parameters"][name]
        assert set(p) == {"value", "stderr", "at_bound"}
        assert p["value"] == pytest.approx(getattr(shipped, name), rel=1e-6)  # one evaluation
        assert p["stderr"] > 0 and p["at_bound"] is False
    corr = data["correlation"]
    assert len(corr) == len(FITTED) and all(len(row) == len(FITTED) for row in corr)
    for i, row in enumerate(corr):
        assert row[i] == pytest.approx(1.0)
        for j, r in enumerate(row):
            assert -1.0 - 1e-9 <= r <= 1.0 + 1e-9 and r == pytest.approx(corr[j][i], abs=1e-9)
    assert data["condition_number"] >= 1.0
    assert data["identifiable"] is (data["problems"] == [])
    assert code == (0 if data["identifiable"] else 1), err
    names = [(r["table"], r["cell"]) for r in data["residuals"]]
    want = [("table4", n) for n in PUB["table4"]["shares_percent"]]
    want += [("table5", "128K throughput (SnapStream)")]
    assert names[: len(want)] == want and [t for t, _ in names[len(want) :]] == ["looping"]
    for r in data["residuals"]:
        assert r["relative_error"] == pytest.approx(r["simulated"] / r["published"] - 1)


def test_calibrate_exits_1_when_the_fit_is_not_identifiable(
    run_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a condition-number limit of 1 no fit qualifies: the command says why, exits 1, and
    writes nothing."""
    monkeypatch.setattr(calibrate, "MAX_CONDITION", 1.0)
    target = tmp_path / "fitted.yaml"
    code, out, err = run_cli(["calibrate", "--max-evals", "1", "--json", "--write", target])
    assert code == 1
    data = json.loads(out)
    assert data["identifiable"] is False
    assert any("condition number" in p for p in data["problems"])
    assert "does not identify" in err and "condition number" in err
    assert not target.exists()


def test_calibrate_prints_statistics_and_writes_a_loadable_copy(
    run_cli: Cli, tmp_path: Path
) -> None:
    shipped = preset_path("sn40l-16").read_bytes()
    start = _edited_preset(tmp_path, gemm_efficiency="0.45")
    target = tmp_path / "fitted.yaml"
    code, out, err = run_cli(
        ["calibrate", "--hardware", start, "--max-evals", "2", "--write", target]
    )
    assert code == 0, err
    params, rest = out.split("\ncorrelation", 1)
    assert "stderr" in params.splitlines()[2]
    for name in FITTED:
        row = next(line for line in params.splitlines() if line.startswith(name))
        assert re.search(r"±\d+%", row), row  # its standard error
    matrix = [line.split() for line in rest.splitlines()[2 : 2 + len(FITTED)]]
    assert [r[0] for r in matrix] == list(FITTED)
    assert [r[1 + i] for i, r in enumerate(matrix)] == ["+1.00"] * len(FITTED)
    assert re.search(r"condition number [\d.e+]+: identifiable", out)
    assert "dev/tol before" in out and "table4 MHA" in out and "sum of squared residuals" in out
    assert "fitted: Table 4" in out  # what each parameter is fitted on
    paste = out.split("paste into the calibration: section")[1].splitlines()[1:5]
    assert [line.split(":")[0] for line in paste] == [f"  {n}" for n in FITTED]

    hw = load_hardware(target)
    assert hw.calibration.gemm_efficiency != 0.45  # moved by the fit
    old, new = start.read_text().splitlines(), target.read_text().splitlines()
    assert len(old) == len(new)
    assert [line for line in old if line.lstrip().startswith("#")] == [
        line for line in new if line.lstrip().startswith("#")
    ]
    changed = {a.split(":")[0].strip() for a, b in zip(old, new, strict=True) if a != b}
    assert changed <= set(FITTED) and "gemm_efficiency" in changed
    for line in paste:
        key, value = line.strip().split(": ")
        assert getattr(hw.calibration, key) == float(value)
    assert preset_path("sn40l-16").read_bytes() == shipped
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fitted.yaml", "hw.yaml"]


@pytest.mark.slow
def test_calibrate_full_fit_returns_to_the_shipped_values(run_cli: Cli, tmp_path: Path) -> None:
    """From three of the four parameters moved well away, the full fit finds the shipped
    calibration again, to within a small fraction of each standard error."""
    start = _edited_preset(
        tmp_path, gemm_efficiency="0.45", attention_efficiency="0.6", software_call_s="5.0e-4"
    )
    code, out, err = run_cli(["calibrate", "--hardware", start, "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert data["identifiable"] is True and data["problems"] == []
    shipped = load_hardware("sn40l-16").calibration
    for name in FITTED:
        p = data["parameters"][name]
        assert abs(p["value"] - getattr(shipped, name)) < 0.05 * p["stderr"], name


def test_calibrate_rejects_bad_arguments(run_cli: Cli, tmp_path: Path) -> None:
    code, _, err = run_cli(["calibrate", "--max-evals", "0"])
    assert code == 2 and "--max-evals" in err
    code, _, err = run_cli(["calibrate", "--write", tmp_path])
    assert code == 2 and "directory" in err


def test_calibrate_checks_write_before_fitting(run_cli: Cli, tmp_path: Path) -> None:
    """A --write path under a regular file fails at once, before any evaluation of the fit."""
    blocker = tmp_path / "file.txt"
    blocker.write_text("keep", encoding="utf-8")
    code, out, err = run_cli(["calibrate", "--write", blocker / "hw.yaml"])
    assert code == 2 and out == ""
    assert "--write: cannot write here" in err and "is a file, not a directory" in err
    assert "eval" not in err  # no progress bar: the fit never started
    assert blocker.read_text(encoding="utf-8") == "keep"


def test_calibrate_checks_the_source_has_calibration_lines_before_fitting(
    run_cli: Cli, tmp_path: Path
) -> None:
    flow = tmp_path / "flow.yaml"
    text = preset_path("sn40l-16").read_text(encoding="utf-8")
    lines = text.splitlines()
    start = lines.index("calibration:")
    body = [ln.split("#")[0].strip() for ln in lines[start + 1 :] if ln.startswith("  ")]
    inline = "calibration: {" + ", ".join(b for b in body if b) + "}"
    flow.write_text("\n".join([*lines[:start], inline]) + "\n", encoding="utf-8")
    code, _, err = run_cli(["calibrate", "--hardware", flow, "--write", tmp_path / "out.yaml"])
    assert code == 2 and "no calibration entries" in err and "eval" not in err
    assert not (tmp_path / "out.yaml").exists()
