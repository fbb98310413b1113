"""Every text command fits the terminal: at COLUMNS=80, 100 and 120 no printed line is wider
than the terminal, and the output is plain text (no escape codes) when stdout is not a terminal.

Each command runs in-process through `rdusim.cli.main`, once per width, and its text is checked
against the command's own `--json`: narrower than a table, a report leaves its least telling
columns out (in a set order, naming them under the table), never splits a number, and wraps its
prose.

`rdusim validate` and `rdusim calibrate` take minutes, so their text is rendered from data shaped
exactly like their results (`tests.evidence_fakes`: the shipped evidence and ensemble) through the
renderers the commands use, at the widths of common terminals.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from rdusim.cli import main
from rdusim.report.console import seconds
from rdusim.report.evidence import render_calibration, render_validation
from rdusim.report.mapping_report import KERNEL_HEADERS
from rdusim.report.serving import point_label, render_points
from rdusim.report.tables import render_sweep
from tests.evidence_fakes import fake_calibration, fake_validation

WIDTHS = (80, 100, 120)
SERVE = ["serve", "--prefill", "r1_prefill", "--decode", "r1_decode", "--workload"]
# r1_disaggregated's requests, fewer: the grid's text, not its numbers, is under test
GRID_WORKLOAD = """\
name: grid
requests: 40
seed: 2
arrival: {process: poisson, rate: 1.0}
prompt_tokens: {dist: fixed, value: 130048}
output_tokens: {dist: fixed, value: 256}
slo: {ttft_s: 30, tpot_s: 0.2}
deployment: {mode: disaggregated, prefill_nodes: 16, decode_nodes: 1}
"""
# name: arguments ("{grid}": the workload above). All run at full size but the serving grid and
# the sweep, whose text does not depend on their size.
COMMANDS: dict[str, list[str]] = {
    "map r1_prefill": ["map", "r1_prefill"],
    "map r1_decode": ["map", "r1_decode"],
    "map llama31_8b_decode": ["map", "llama31_8b_decode"],
    "map auto --alternatives 2": [
        "map",
        "llama31_8b_prefill",
        "--set",
        "kernels=auto",
        "--alternatives",
        "2",
    ],
    "map r1_decode --ops": ["map", "r1_decode", "--ops"],
    "map r1_prefill --ops": ["map", "r1_prefill", "--ops"],
    "map with DDR placement --ops": [
        "map",
        "llama31_8b_decode",
        "--ops",
        "--set",
        "placement.dense=ddr",
        "--set",
        "placement.kv_cache=ddr",
    ],
    "model deepseek-r1": ["model", "deepseek-r1"],
    "fit": ["fit", "deepseek-r1", "llama-3.1-70b", "llama-3.1-8b", "llama-3.1-405b"],
    "serve": [*SERVE, "r1_disaggregated"],
    "serve --rate grid": [
        *SERVE,
        "{grid}",
        "--rate",
        "0.5,1",
        "--set",
        "snapstream.enabled=true,false",
    ],
    "serve colocated": [*SERVE, "r1_colocated"],
    "serve coe": ["serve", "--workload", "coe"],
    "sweep": [
        "sweep",
        "r1_decode",
        "--set",
        "seq_len=8192,16384",
        "--set",
        "snapstream.enabled=true,false",
        "--jobs",
        "1",
        "--out",
        "sweep",  # relative: the closing "wrote ... to sweep/" line is not the table's
    ],
}


class Runs:
    """Runs `rdusim <COMMANDS[name]>` at COLUMNS=width in a scratch directory, each once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        (folder / "grid.yaml").write_text(GRID_WORKLOAD, encoding="utf-8")
        self.done: dict[tuple[str, int, tuple[str, ...]], str] = {}

    def text(self, name: str, width: int, *extra: str) -> str:
        key = (name, width, extra)
        if key not in self.done:
            grid = self.folder / "grid.yaml"
            args = [a.format(grid=grid) for a in COMMANDS[name]] + list(extra)
            out, err = io.StringIO(), io.StringIO()
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("COLUMNS", str(width))
                mp.chdir(self.folder)
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code = main(args)
            assert code == 0, err.getvalue()
            self.done[key] = out.getvalue()
        return self.done[key]

    def data(self, name: str) -> Any:
        """What the command says, as its `--json` (the sweep: its sweep.json)."""
        if name == "sweep":
            written = self.folder / "sweep" / "sweep.json"
            if not written.exists():
                self.text(name, WIDTHS[0])
            return json.loads(written.read_text())
        return json.loads(self.text(name, WIDTHS[-1], "--json"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    yield Runs(tmp_path_factory.mktemp("width"))


def _too_wide(text: str, width: int) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


def _flat(text: str) -> str:
    """The words of `text` on one line: wrapped paragraphs joined."""
    return " ".join(text.split())


# --- map --------------------------------------------------------------------------------------

KERNEL_HEADER = re.compile(r"^kernel {2,}\S")
DROPPED_IN_ORDER = ["collectives", "PMUs", "SRAM", "sharding"]


def _check_map(out: str, width: int, r: dict[str, Any]) -> None:
    """Each kernel's row keeps its call, latency and share whole on one line, and all its ops;
    every layer kind shows the same columns, short of the full table only by a prefix of
    `DROPPED_IN_ORDER`, which the legend names; 'calibration:' lists every parameter whole and
    'rests on:' wraps under itself."""
    lines = out.splitlines()
    for layer in r["layers"].values():
        for k in layer["kernels"]:
            share = f"{100 * k['share']:.2f}%"
            row = [x for x in lines if seconds(k["latency_s"]) in x and share in x]
            assert row, (k["name"], width)
            assert (seconds(k["call_s"]) if k["call_s"] is not None else "-") in row[0]
            for op in k["ops"]:
                assert re.search(rf"\b{op}\b", out), op
    headers = {tuple(x.split()) for x in lines if KERNEL_HEADER.match(x)}
    assert len(headers) == 1, headers
    kept = list(next(iter(headers)))
    missing = [h for h in DROPPED_IN_ORDER if h not in kept]
    assert missing == DROPPED_IN_ORDER[: len(missing)], missing
    assert kept == [h for h in KERNEL_HEADERS if h not in missing]
    legend = _flat(out.split("\n\n")[0])
    left = [h for h in missing if h != "sharding"]
    if left:
        assert f"not shown in {width} columns: {', '.join(left)} (--json has them" in legend
    else:
        assert "not shown" not in legend
    if "sharding" in missing:  # each kernel's sharding moves to its ops line
        assert "ops (tp16): the kernel's sharding" in legend
        assert re.search(r"^  ops \(\w+\): ", out, re.M)

    start = next(i for i, x in enumerate(lines) if x.startswith("calibration: "))
    block = [lines[start]]
    block += [x for x in lines[start + 1 :] if x.startswith(" " * len("calibration: "))]
    values = [v.rstrip(",") for v in " ".join(block).split()[1:]]
    assert values == [f"{k}={v['value']:g}" for k, v in r["calibration"].items()]
    rests = next(i for i, x in enumerate(lines) if x.startswith("rests on: "))
    assert all(x.startswith("  ") for x in lines[rests + 1 : start])
    assert f"mapping {r['mapping']}" in _flat(out)


# --- serve ------------------------------------------------------------------------------------


def _check_serve(out: str, width: int, doc: dict[str, Any]) -> None:
    """What ran wraps whole; every latency and rate keeps its number."""
    flat = _flat(out)
    g = doc["graphs"]
    assert f"decode graph: {g['decode_slots']} slots x {g['cache_len']} positions" in flat
    for n, t in g["prefill_s"].items():
        assert f"{n} tokens {seconds(t)}" in flat
    lines = out.splitlines()
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        row = [x for x in lines if seconds(doc[key]["p50"]) in x]
        assert row and seconds(doc[key]["p99"]) in row[0]
    assert f"{doc['throughput_tokens_per_s']:,.1f}" in out
    goodput = next(x for x in lines if x.startswith("goodput"))
    assert f"{doc['goodput_requests_per_s']:.4g} requests/s" in goodput


def _check_models(out: str, width: int, doc: dict[str, Any]) -> None:
    """A many-model run: the switches, each model's graphs, and a row per model with its
    completed requests, median TTFT and switches."""
    flat = _flat(out)
    assert f"{doc['model_switches']} switches, {seconds(doc['switch_time_s'])} switching" in flat
    lines = out.splitlines()
    for name, m in doc["per_model"].items():
        assert f"{name}: decode graph: {m['graphs']['decode_slots']} slots" in flat
        row = [x for x in lines if x.startswith(name + " ") and f"{m['completed']:,}" in x]
        assert row and seconds(m["ttft_s"]["p50"]) in row[0], (name, width)
        assert f"{m['model_switches']} (" in row[0]


def _check_grid(out: str, width: int, data: dict[str, Any]) -> None:
    """A row per run; narrower than the flat table, the runs stand under their --set values
    with a row per rate, and a line names any column left out."""
    docs = data["points"]
    lines = out.splitlines()
    for d in docs:
        row = [x for x in lines if f"{d['throughput_tokens_per_s']:,.1f}" in x]
        assert len(row) == 1, width
        assert seconds(d["tpot_s"]["p50"]) in row[0]
    if lines[0].split()[0] == "point":
        for d in docs:
            assert point_label(d) in _flat(out)
    else:
        assert lines[0].split()[0] == "rate/s"
        for d in docs:
            assert f"{point_label(d, with_rate=False)}:" in lines
    if "in system" not in lines[0]:
        assert f"not shown in {width} columns: in system" in _flat(out)
    wide = render_points(docs, 200)  # where the flat table fits, it is printed as ever
    assert wide.splitlines()[0].split()[0] == "point"
    assert "snapstream.enabled=true, rate=0.5" in wide and "not shown" not in wide


# --- fit --------------------------------------------------------------------------------------


def _check_fit(out: str, width: int, data: dict[str, Any]) -> None:
    """A row per model with its load time, a row per tier, and every switch's time: in a matrix
    where it fits, else a row per pair."""
    lines = out.splitlines()
    for m in data["models"]:
        row = [x for x in lines if x.startswith(m["name"] + " ") and seconds(m["load_s"]) in x]
        assert row, (m["name"], width)
    n = len(data["models"])
    for name in ("HBM (usable)", "DDR"):
        assert any(x.startswith(name) and f" of {n}" in x for x in lines), (name, width)
    for s in data["switches"]:
        if s["seconds"]:
            assert seconds(s["seconds"]) in out
    assert "assumes:" in out


# --- sweep ------------------------------------------------------------------------------------


def _check_sweep(out: str, width: int, data: dict[str, Any]) -> None:
    """A row per point with its swept values, latency and tokens/s (intervals too); a line names
    the columns left out; where the full table fits, it is printed as ever."""
    lines = out.split("\n\n")[0].splitlines()
    assert lines[0].split()[:2] == ["seq_len", "snapstream.enabled"]
    for x, row in zip(lines[2:], data["rows"], strict=False):
        assert x.split()[:2] == [str(row["seq_len"]), str(row["snapstream.enabled"]).lower()]
        assert seconds(row["total_latency_s"]) in x
        assert f"{row['throughput_tokens_per_s']:,.0f} (" in x
    if "HBM weights" not in lines[0]:
        assert f"not shown in {width} columns: status (every point ok), HBM weights" in _flat(out)
    wide = render_sweep(data["rows"], ["seq_len", "snapstream.enabled", "status"], 200)
    assert "HBM weights" in wide and "status" in wide and "not shown" not in wide
    assert re.search(r"\d+\.\d{3} ms \(\d+\.\d{3}–\d+\.\d{3} ms\)", wide)


CHECKS: dict[str, Callable[[str, int, Any], None]] = {
    "map r1_prefill": _check_map,
    "map r1_decode": _check_map,
    "map llama31_8b_decode": _check_map,
    "map auto --alternatives 2": _check_map,
    "serve": _check_serve,
    "serve colocated": _check_serve,
    "serve coe": _check_models,
    "serve --rate grid": _check_grid,
    "sweep": _check_sweep,
    "fit": _check_fit,
}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", list(COMMANDS))
def test_output_fits_columns(runs: Runs, name: str, width: int) -> None:
    out = runs.text(name, width)
    assert len(out.splitlines()) > 5
    wide = _too_wide(out, width)
    assert not wide, f"{len(wide)} lines wider than {width}: {wide[0]!r}"
    assert "\x1b" not in out
    if name in CHECKS:
        CHECKS[name](out, width, runs.data(name))


def test_the_paper_mappings_show_the_full_kernel_table_at_120(runs: Runs) -> None:
    for name in ("map r1_prefill", "map r1_decode", "map llama31_8b_decode"):
        out = runs.text(name, 120)
        header = next(x for x in out.splitlines() if KERNEL_HEADER.match(x))
        assert header.split() == list(KERNEL_HEADERS)
        assert "not shown" not in out


def test_narrower_columns_narrow_the_map_report(run_cli, mappings_dir, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    _, wide, _ = run_cli(["map", mappings_dir / "r1_decode.yaml"])
    monkeypatch.setenv("COLUMNS", "100")
    _, narrow, _ = run_cli(["map", mappings_dir / "r1_decode.yaml"])
    assert max(len(line) for line in narrow.splitlines()) <= 100
    assert max(len(line) for line in wide.splitlines()) > 100  # rows on one line each


# --- validate and calibrate, from their results' data -----------------------------------------

RENDERERS: dict[str, tuple[Callable[..., str], Callable[[], Mapping[str, Any]]]] = {
    "validate": (render_validation, lambda: fake_validation().as_dict()),
    "calibrate": (render_calibration, lambda: fake_calibration().as_dict()),
}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("command", list(RENDERERS))
def test_evidence_commands_fit_columns(
    command: str, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The text `rdusim validate` / `rdusim calibrate` print, at COLUMNS=80, 100 and 120."""
    render, data = RENDERERS[command]
    monkeypatch.setenv("COLUMNS", str(width))
    text = render(data())  # the width from COLUMNS, as the commands get it
    assert len(text.splitlines()) > 10
    wide = _too_wide(text, width)
    assert not wide, f"{len(wide)} lines wider than {width}: {wide[0]!r}"
    assert "\x1b" not in text


@pytest.mark.parametrize("width", WIDTHS)
def test_validate_keeps_item_names_whole(width: int) -> None:
    """Where the ids do not fit, the items stand under their source's name; no name is cut."""
    data = fake_validation().as_dict()
    table = render_validation(data, width).split("\n\n")[1]
    for p in data["loo"]["items"]:
        source, item = p["id"].split("/", 1)
        whole = p["id"] in table or (f"{source}/" in table.splitlines() and item in table)
        assert whole, (p["id"], width)


def test_validate_shows_the_null_model_columns_only_when_there_is_room() -> None:
    data = fake_validation().as_dict()
    narrow, wide = render_validation(data, 100), render_validation(data, 160)
    assert "const" not in narrow.split("coverage:")[0] and "--json" in narrow
    assert "const" in wide.split("coverage:")[0] and "roof" in wide.split("coverage:")[0]
    assert not _too_wide(wide, 160)
