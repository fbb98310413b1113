"""`rdusim reproduce`, `rdusim validate` and `rdusim calibrate` end to end (in-process).

The full reproduction runs once for the module; published figures come from `published()`.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib.image
import pytest

from rdusim.calibration import FITTED_PARAMS
from rdusim.serving.reproduce import published
from rdusim.spec.hardware import load_hardware, preset_path

Cli = Callable[[Sequence[object]], tuple[int, str, str]]
PUB = published()
OUTPUTS = [f"{t}.{ext}" for t in ("table4", "table5") for ext in ("png", "svg", "csv", "json")]


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


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


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
    overhead = [r for r in t4 if r["table"] == "text"]
    assert overhead and all(r["status"] == "predicted" for r in overhead)
    t5 = {r["item"]: r for r in _rows(out / "table5.csv")}
    for row in PUB["table5"]["rows"]:
        label = f"{row['seq_len'] // 1024}K"
        assert float(t5[f"{label} throughput (SnapStream)"]["published"]) == row["tput_ss"]
        assert float(t5[f"{label} max batch (no SnapStream)"]["published"]) == row["batch_no_ss"]
        assert float(t5[f"{label} improvement"]["published"]) == row["improvement"]
    assert len(t5) == 5 * len(PUB["table5"]["rows"])
    statuses = {r["status"] for r in t5.values()}
    assert statuses == {"fitted", "predicted"}
    for r in [*t4, *t5.values()]:
        assert r["within_tolerance"] in ("true", "false")
        assert r["status"] == ("fitted" if r["fitted"] == "true" else "predicted")


def test_json_matches_csv(reproduced: tuple[Path, str]) -> None:
    out, _ = reproduced
    for name in ("table4", "table5"):
        data = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
        rows = _rows(out / f"{name}.csv")
        assert data["table"] == name and data["hardware"] == "sn40l-16"
        assert [c["item"] for c in data["cells"]] == [r["item"] for r in rows]
        assert [c["simulated"] for c in data["cells"]] == [float(r["simulated"]) for r in rows]


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
    ):
        assert header in text
    for name in PUB["table4"]["shares_percent"]:
        assert name in text
    assert "FAIL" not in text.replace("ok/FAIL", "")
    m = re.search(r"(\d+)/(\d+) cells within tolerance", text)
    assert m and m[1] == m[2] and int(m[1]) >= 5 * len(PUB["table5"]["rows"]) + 7


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


def test_validate_passes_with_the_shipped_calibration(run_cli: Cli) -> None:
    code, out, err = run_cli(["validate"])
    assert code == 0, out + err
    assert " ok" in out and "FAIL" not in out.replace("ok/FAIL", "")


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
    bad = _edited_preset(tmp_path, attention_efficiency="0.2")
    code, out, _ = run_cli(["validate", "--hardware", bad])
    assert code == 1
    mha = next(line for line in out.splitlines() if line.startswith("table4  MHA"))
    assert mha.rstrip().endswith("FAIL")


def test_validate_unknown_hardware_is_a_user_error(run_cli: Cli, tmp_path: Path) -> None:
    code, _, err = run_cli(["validate", "--hardware", tmp_path / "missing.yaml"])
    assert code == 2 and "Traceback" not in err


def test_calibrate_prints_residuals_and_writes_a_loadable_copy(
    run_cli: Cli, tmp_path: Path
) -> None:
    shipped = preset_path("sn40l-16").read_bytes()
    start = _edited_preset(tmp_path, gemm_efficiency="0.45")
    target = tmp_path / "fitted.yaml"
    code, out, err = run_cli(
        ["calibrate", "--hardware", start, "--max-evals", "3", "--write", target]
    )
    assert code == 0, err
    assert "calibrate" in err  # the progress bar
    for name in FITTED_PARAMS:
        assert name in out
    assert "dev/tol before" in out and "table4 MHA" in out and "sum of squared residuals" in out
    assert "fitted: Table 4" in out  # FITTED_ON
    paste = out.split("paste into the calibration: section")[1].splitlines()[1:5]
    assert [line.split(":")[0] for line in paste] == [f"  {n}" for n in FITTED_PARAMS]

    hw = load_hardware(target)
    assert hw.calibration.gemm_efficiency != 0.45  # moved by the fit
    old, new = start.read_text().splitlines(), target.read_text().splitlines()
    assert len(old) == len(new)
    assert [line for line in old if line.lstrip().startswith("#")] == [
        line for line in new if line.lstrip().startswith("#")
    ]
    changed = {a.split(":")[0].strip() for a, b in zip(old, new, strict=True) if a != b}
    assert changed <= set(FITTED_PARAMS) and "gemm_efficiency" in changed
    for line in paste:
        key, value = line.strip().split(": ")
        assert getattr(hw.calibration, key) == float(value)
    assert preset_path("sn40l-16").read_bytes() == shipped
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fitted.yaml", "hw.yaml"]


def test_calibrate_rejects_bad_arguments(run_cli: Cli, tmp_path: Path) -> None:
    code, _, err = run_cli(["calibrate", "--max-evals", "0"])
    assert code == 2 and "--max-evals" in err
    code, _, err = run_cli(["calibrate", "--write", tmp_path])
    assert code == 2 and "directory" in err


def test_calibrate_checks_write_before_fitting(run_cli: Cli, tmp_path: Path) -> None:
    """A --write path under a regular file fails at once, before any evaluation of the fit."""
    blocker = tmp_path / "file.txt"
    blocker.write_text("keep", encoding="utf-8")
    start = time.perf_counter()
    code, out, err = run_cli(["calibrate", "--write", blocker / "hw.yaml"])
    assert code == 2 and out == ""
    assert "--write: cannot write here" in err and "is a file, not a directory" in err
    assert "eval" not in err  # no progress bar: the fit never started
    assert time.perf_counter() - start < 2
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


def test_reproduce_out_under_a_file_is_checked_first(run_cli: Cli, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("keep", encoding="utf-8")
    code, out, err = run_cli(["reproduce", "--out", blocker / "sub"])
    assert code == 2 and out == "" and "is a file, not a directory" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
