"""`rdusim sweep`: grids, parallel runs with deterministic rows, plots and user errors."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from rdusim.errors import SpecError
from rdusim.spec.yamlio import parse_value
from rdusim.studies.sweep import (
    INTERVAL_METRICS,
    RESULT_COLUMNS,
    STATUS_COLUMNS,
    Axis,
    columns,
    grid,
    infeasible_row,
    parse_axes,
    parse_plot,
    result_row,
)

Cli = Callable[[Sequence[object]], tuple[int, str, str]]
GRID = [
    "--set",
    "seq_len=8192,16384",
    "--set",
    "snapstream.enabled=true,false",
    "--set",
    "batch=16",
]


def test_parse_axes_and_grid_order() -> None:
    axes = parse_axes(["seq_len=8192, 16384", "snapstream.enabled=true,false", "batch=16"])
    assert axes == [
        Axis("seq_len", ("8192", "16384")),
        Axis("snapstream.enabled", ("true", "false")),
        Axis("batch", ("16",)),
    ]
    points = grid(axes)
    assert len(points) == 4
    assert [dict(p)["seq_len"] for p in points] == ["8192", "8192", "16384", "16384"]
    assert [dict(p)["snapstream.enabled"] for p in points] == ["true", "false"] * 2
    assert grid([]) == [()]


@pytest.mark.parametrize(
    ("items", "needle"),
    [
        (["seq_len"], "key=v1,v2"),
        (["=1,2"], "key=v1,v2"),
        (["seq_len=1,,2"], "empty value"),
        (["seq_len=1", "seq_len=2"], "set twice"),
        (["seq_len=1,1"], "repeated value"),
    ],
)
def test_parse_axes_errors(items: list[str], needle: str) -> None:
    with pytest.raises(SpecError, match=needle):
        parse_axes(items)


def test_parse_plot_and_values() -> None:
    assert parse_plot("seq_len:throughput_tokens_per_s") == ("seq_len", "throughput_tokens_per_s")
    for bad in ("seq_len", "a:", ":b", "a:b:c"):
        with pytest.raises(SpecError):
            parse_plot(bad)
    assert parse_value("8192") == 8192 and parse_value("true") is True
    assert parse_value("max") == "max" and parse_value("0.5") == 0.5
    assert parse_value("[1, 2]") == "[1, 2]" and parse_value("null") == "null"
    assert parse_value("a: b: c") == "a: b: c"  # malformed YAML stays text


def test_result_row_keeps_the_swept_value() -> None:
    report = {
        "batch": 64,
        "max_batch_size": 64,
        "total_latency_s": 0.1,
        "throughput_tokens_per_s": 1536.0,
        "sram_peak_bytes": 1.0,
        "hbm_bytes": {"kv_cache": 2.0, "weights": 3.0},
        "layers": {
            "dense": {"kernels": [{"name": "MLA", "latency_s": 0.5}]},
            "moe": {"kernels": [{"name": "FFN", "latency_s": 0.7}]},
        },
    }
    row = result_row((("batch", "max"),), report)
    assert row["batch"] == "max" and row["max_batch_size"] == 64
    assert (row["status"], row["reason"]) == ("ok", "")
    assert row["hbm_kv_cache_bytes"] == 2.0 and row["dense.MLA.latency_s"] == 0.5
    assert "moe.FFN.latency_s" not in row  # the first layer kind only
    cols = columns([Axis("batch", ("max",))], [row])
    assert cols[0] == "batch" and cols.count("batch") == 1
    assert tuple(cols[1:3]) == STATUS_COLUMNS
    assert set(RESULT_COLUMNS) <= set(cols) and cols[-1] == "dense.MLA.latency_s"


def _read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


@pytest.fixture(scope="module")
def serial_out(tmp_path_factory: pytest.TempPathFactory, mappings_dir: Path) -> Path:
    """The 2x2 grid run with --jobs 1 (once for the module)."""
    import contextlib

    from rdusim.cli import main

    out = tmp_path_factory.mktemp("sweep1")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(
            ["sweep", str(mappings_dir / "r1_decode.yaml"), *GRID, "--jobs", "1", "--out", str(out)]
        )
    assert code == 0
    return out


def test_sweep_rows(serial_out: Path) -> None:
    rows = _read_csv(serial_out / "sweep.csv")
    assert [(r["seq_len"], r["snapstream.enabled"]) for r in rows] == [
        ("8192", "true"),
        ("8192", "false"),
        ("16384", "true"),
        ("16384", "false"),
    ]
    for r in rows:
        assert r["batch"] == "16"
        assert float(r["throughput_tokens_per_s"]) > 0 and float(r["total_latency_s"]) > 0
        # the largest batch is computed when it is asked for (batch=max) or needed
        assert r["max_batch_size"] == "" or int(r["max_batch_size"]) >= 16
        assert float(r["hbm_weights_bytes"]) > float(r["hbm_kv_cache_bytes"]) > 0
        assert any(k.endswith(".latency_s") and "." in k[:-10] for k in r)
    # SnapStream keeps a quarter of the cache
    kv = {(r["seq_len"], r["snapstream.enabled"]): float(r["hbm_kv_cache_bytes"]) for r in rows}
    assert kv[("16384", "false")] == pytest.approx(4 * kv[("16384", "true")])
    data = json.loads((serial_out / "sweep.json").read_text())
    assert len(data["rows"]) == 4 and data["set"]["batch"] == ["16"]
    assert data["rows"][0]["snapstream.enabled"] is True and data["rows"][0]["seq_len"] == 8192


def test_parallel_rows_are_identical(
    serial_out: Path, run_cli: Cli, tmp_path: Path, mappings_dir: Path
) -> None:
    code, out, err = run_cli(
        [
            "sweep",
            mappings_dir / "r1_decode.yaml",
            *GRID,
            "--jobs",
            "2",
            "--out",
            tmp_path,
            "--plot",
            "seq_len:throughput_tokens_per_s",
        ]
    )
    assert code == 0, err
    assert (tmp_path / "sweep.csv").read_bytes() == (serial_out / "sweep.csv").read_bytes()
    assert (tmp_path / "sweep.json").read_bytes() == (serial_out / "sweep.json").read_bytes()
    img = matplotlib.image.imread(tmp_path / "sweep.png")
    assert img.shape[0] > 300 and img.shape[1] > 400
    assert err == ""  # the progress bar is for a terminal (tests/test_progress.py)
    assert "seq_len" in out and "snapstream.enabled" in out and "tokens/s" in out
    assert "4 points" in out
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--set", "snapstream.nosuch=1,2"], "unknown mapping field"),
        (["--set", "seq_len=8192,lots"], "seq_len=lots"),
        (["--set", "seq_len=8192", "--plot", "seq_len"], "X:Y"),
        (["--set", "seq_len=8192", "--plot", "seq_len:speed"], "not a sweep column"),
        (["--set", "seq_len=8192", "--jobs", "0"], "at least 1"),
    ],
)
def test_user_errors_exit_2_and_write_nothing(
    run_cli: Cli, tmp_path: Path, mappings_dir: Path, args: list[str], needle: str
) -> None:
    out = tmp_path / "out"
    code, _, err = run_cli(["sweep", mappings_dir / "r1_decode.yaml", *args, "--out", out])
    assert code == 2
    assert needle in err and "Traceback" not in err
    assert not out.exists()


INFEASIBLE_GRID = ["--set", "seq_len=131072", "--set", "batch=16,4096"]


def _sweep(run_cli: Cli, mappings_dir: Path, out: Path, *args: object) -> tuple[int, str, str]:
    return run_cli(["sweep", mappings_dir / "r1_decode.yaml", *args, "--out", out])


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_infeasible_point_becomes_a_row(
    run_cli: Cli, tmp_path: Path, mappings_dir: Path, jobs: str
) -> None:
    """Batch 4096 at 128K does not fit in HBM: its row says why, and the sweep goes on."""
    out = tmp_path / "out"
    code, stdout, err = _sweep(
        run_cli,
        mappings_dir,
        out,
        *INFEASIBLE_GRID,
        "--jobs",
        jobs,
        "--plot",
        "batch:throughput_tokens_per_s",
    )
    assert code == 0, err
    rows = _read_csv(out / "sweep.csv")
    assert [(r["batch"], r["status"]) for r in rows] == [("16", "ok"), ("4096", "infeasible")]
    ok, bad = rows
    assert ok["reason"] == "" and float(ok["throughput_tokens_per_s"]) > 0
    assert bad["reason"].startswith("batch 4096 needs") and "fix:" in bad["reason"]
    assert bad["throughput_tokens_per_s"] == "" and "\n" not in bad["reason"]
    data = json.loads((out / "sweep.json").read_text())
    assert (data["points"], data["infeasible"]) == (2, 1)
    assert data["columns"][:4] == ["seq_len", "batch", "status", "reason"]
    assert data["rows"][1]["status"] == "infeasible" and data["rows"][1]["total_latency_s"] is None
    assert (out / "sweep.png").exists()
    assert "1 of 2 points infeasible" in stdout and "batch=4096: batch 4096 needs" in stdout
    assert "the plot skips the 1 infeasible point" in stdout


def test_strict_exits_1_after_writing_every_row(
    run_cli: Cli, tmp_path: Path, mappings_dir: Path
) -> None:
    out = tmp_path / "out"
    code, _, err = _sweep(run_cli, mappings_dir, out, *INFEASIBLE_GRID, "--jobs", "1", "--strict")
    assert code == 1 and "--strict" in err and "Traceback" not in err
    assert len(_read_csv(out / "sweep.csv")) == 2


def test_no_feasible_point_exits_2_with_every_row_written(
    run_cli: Cli, tmp_path: Path, mappings_dir: Path
) -> None:
    out = tmp_path / "out"
    code, _, err = _sweep(
        run_cli, mappings_dir, out, "--set", "seq_len=131072", "--set", "batch=4096,8192"
    )
    assert code == 2
    assert "none of the 2 sweep points ran" in err and "fix:" in err
    assert [r["status"] for r in _read_csv(out / "sweep.csv")] == ["infeasible"] * 2


def test_a_point_that_does_not_load_still_stops_the_sweep(
    run_cli: Cli, tmp_path: Path, mappings_dir: Path
) -> None:
    out = tmp_path / "out"
    code, _, err = _sweep(
        run_cli, mappings_dir, out, "--set", f"hardware=sn40l-16,{tmp_path}/no.yaml"
    )
    assert code == 2 and "sweep point hardware=" in err and "not found" in err
    assert not out.exists()


def test_sweep_figure_skips_infeasible_rows() -> None:
    from rdusim.report.plots import sweep_figure

    rows = [
        {"seq_len": 8192, "status": "ok", "total_latency_s": 0.1},
        {"seq_len": 16384, "status": "infeasible", "total_latency_s": None},
        {"seq_len": 32768, "status": "infeasible", "total_latency_s": None},
    ]
    fig = sweep_figure(rows, "seq_len", "total_latency_s", [], "t")
    ax = fig.axes[0]
    assert "(2 infeasible points skipped)" in ax.get_title()
    assert [float(v) for v in np.asarray(ax.lines[0].get_xdata())] == [8192]


def test_infeasible_row_has_every_result_column_empty() -> None:
    row = infeasible_row((("batch", "4096"),), "batch: too big")
    assert row["batch"] == 4096 and row["status"] == "infeasible"
    assert row["reason"] == "batch: too big"
    assert all(row[c] is None for c in RESULT_COLUMNS if c != "batch")


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_mapping_mistake_found_only_when_compiling_stops_the_sweep(
    run_cli: Cli, tmp_path: Path, mappings_dir: Path, jobs: str
) -> None:
    """An override keyed by no op of its kernel loads fine but is a mistake, not an infeasible
    point: the sweep exits 2, names the point and writes nothing."""
    text = (mappings_dir / "r1_decode.yaml").read_text(encoding="utf-8")
    text = text.replace("        attention: {dp: 16}", "        atention: {dp: 16}", 1)
    mapping = tmp_path / "typo.yaml"
    mapping.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    code, _, err = run_cli(["sweep", mapping, "--set", "batch=1,2", "--jobs", jobs, "--out", out])
    assert code == 2, err
    assert "sweep point batch=1" in err and "atention" in err and "did you mean" in err
    assert not out.exists()


def test_result_row_carries_the_headline_intervals() -> None:
    """Each headline number's p05/p95 as columns (CSV) and the report's intervals nested (JSON)."""
    iv = {"total_latency_s": {"p05": 0.09, "p50": 0.1, "p95": 0.12}}
    report = {"batch": 8, "total_latency_s": 0.1, "intervals": {**iv, "layers.moe.x": {}}}
    row = result_row((("batch", "8"),), report)
    assert row["total_latency_s.p05"] == 0.09 and row["total_latency_s.p95"] == 0.12
    assert row["tpot_s.p05"] is None  # a metric the report has no interval for
    assert row["intervals"] == iv  # the headline metrics only
    cols = columns([Axis("batch", ("8",))], [row])
    assert "intervals" not in cols and "total_latency_s.p05" in cols


def test_result_row_gives_each_kernel_column_its_interval() -> None:
    """A kernel latency column of the most numerous layer kind carries the report's interval
    of `layers.<kind>.<kernel>.latency_s` under the column's own name, and so does the max
    batch."""
    iv = {
        "max_batch_size": {"p05": 16, "p50": 32, "p95": 32},
        "layers.moe.MLA.latency_s": {"p05": 1e-3, "p50": 1.1e-3, "p95": 1.3e-3},
        "layers.moe.FFN.latency_s": {"p05": 2e-3, "p50": 2.2e-3, "p95": 2.5e-3},
        "layers.dense.MLA.latency_s": {"p05": 9.0, "p50": 9.0, "p95": 9.0},  # not the kind shown
    }
    kernels = [{"name": "MLA", "latency_s": 1.1e-3}, {"name": "FFN", "latency_s": 2.2e-3}]
    report = {
        "batch": 32,
        "max_batch_size": 32,
        "layers": {"dense": {"count": 3, "kernels": []}, "moe": {"count": 58, "kernels": kernels}},
        "intervals": iv,
    }
    row = result_row((("seq_len", "8192"),), report)
    assert (row["moe.MLA.latency_s.p05"], row["moe.MLA.latency_s.p95"]) == (1e-3, 1.3e-3)
    assert (row["moe.FFN.latency_s.p05"], row["moe.FFN.latency_s.p95"]) == (2e-3, 2.5e-3)
    assert (row["max_batch_size.p05"], row["max_batch_size.p95"]) == (16, 32)
    assert row["intervals"] == {
        "max_batch_size": iv["max_batch_size"],
        "moe.MLA.latency_s": iv["layers.moe.MLA.latency_s"],
        "moe.FFN.latency_s": iv["layers.moe.FFN.latency_s"],
    }
    cols = columns([Axis("seq_len", ("8192",))], [row])
    at = cols.index("moe.MLA.latency_s")
    assert cols[at : at + 3] == [
        "moe.MLA.latency_s",
        "moe.MLA.latency_s.p05",
        "moe.MLA.latency_s.p95",
    ]


def test_every_headline_number_of_a_sweep_row_has_its_interval(serial_out: Path) -> None:
    """sweep.json: each ok row's headline numbers (step, throughput, TPOT, call time, max batch
    and every kernel column) have {p05, p50, p95} in the row's `intervals`, ordered, with the
    same ends as the CSV's columns."""
    data = json.loads((serial_out / "sweep.json").read_text())
    csv_rows = _read_csv(serial_out / "sweep.csv")
    for row, flat in zip(data["rows"], csv_rows, strict=True):
        assert row["status"] == "ok"
        kernels = [k for k in row if k.endswith(".latency_s") and k != "total_latency_s"]
        assert kernels
        headline = [*INTERVAL_METRICS, *kernels]
        assert set(row["intervals"]) == set(headline)
        for metric in headline:
            q = row["intervals"][metric]
            assert q["p05"] <= q["p50"] <= q["p95"], metric
            assert float(flat[f"{metric}.p05"]) == pytest.approx(q["p05"], rel=1e-12)
            assert float(flat[f"{metric}.p95"]) == pytest.approx(q["p95"], rel=1e-12)
