"""`rdusim serve`: text, JSON and files; sweeps over --set and --rate; user errors exit 2 with
the file, the key and a fix, and write nothing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

WORKLOAD = """\
name: cli
requests: 40
seed: 2
arrival: {process: poisson, rate: 1.0}
prompt_tokens: {dist: uniform, low: 1000, high: 100000}
output_tokens: {dist: fixed, value: 256}
slo: {ttft_s: 30, tpot_s: 0.2}
deployment: {mode: disaggregated, prefill_nodes: 8, decode_nodes: 1, prefill_buckets: [16384, 65536]}
"""
ISSUE_KEYS = [
    "requests",
    "completed",
    "output_tokens",
    "duration_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "throughput_tokens_per_s",
    "goodput_requests_per_s",
    "mean_requests_in_system",
    "arrival_rate",
]
MAPPINGS = ["--prefill", "r1_prefill", "--decode", "r1_decode"]


@pytest.fixture
def workload(tmp_path: Path) -> Path:
    path = tmp_path / "w.yaml"
    path.write_text(WORKLOAD, encoding="utf-8")
    return path


def serve(run_cli, workload: Path | str, *extra: str):
    return run_cli(["serve", *MAPPINGS, "--workload", str(workload), *extra])


def assert_user_error(result, *needles: str) -> str:
    code, out, err = result
    assert code == 2, (out, err)
    assert "Traceback" not in err and "fix:" in err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def test_text_report(run_cli, workload: Path) -> None:
    code, out, err = serve(run_cli, workload)
    assert code == 0, err
    assert "serving cli: 40 requests, 40 completed" in out
    flat = " ".join(out.split())  # the graphs' line wraps
    assert "prefill graph(s) run: 16384 tokens" in flat
    # each graph's time with its interval, as the JSON gives them
    data = json.loads(serve(run_cli, workload, "--json")[1])
    step = data["intervals"]["graphs.decode_step_s"]
    assert step["p05"] <= data["graphs"]["decode_step_s"] == step["p50"] <= step["p95"]
    assert re.search(r"step \d+\.\d+ ms \(\d[\d.]*–\d[\d.]*\)", flat), flat


def test_every_headline_number_of_the_json_has_its_interval(run_cli, workload: Path) -> None:
    """TTFT, TPOT and end-to-end latency (each statistic), throughput, goodput, SLO attainment,
    occupancy and both graphs' times each have {p05, p50, p95}: the point's run in the middle,
    the two bounding members' runs at the ends; counts and settings have none."""
    code, out, err = serve(run_cli, workload, "--json")
    assert code == 0, err
    data = json.loads(out)
    iv = data["intervals"]
    headline = [f"{m}.{s}" for m in ("ttft_s", "tpot_s", "e2e_s") for s in ("p50", "p90", "p99")]
    headline += ["throughput_tokens_per_s", "goodput_requests_per_s", "slo_attainment"]
    headline += ["mean_requests_in_system", "slot_occupancy.mean", "graphs.decode_step_s"]
    headline += [f"graphs.prefill_s.{n}" for n in data["graphs"]["prefill_s"]]
    for name in headline:
        q = iv[name]
        value = data
        for part in name.split(".") if not name.startswith("graphs.prefill_s.") else []:
            value = value[part]
        if name.startswith("graphs.prefill_s."):
            value = data["graphs"]["prefill_s"][name.rsplit(".", 1)[1]]
        assert q["p05"] <= q["p50"] == value <= q["p95"], name
    # the graphs' times move with the calibration: the two ends differ
    assert iv["graphs.decode_step_s"]["p05"] < iv["graphs.decode_step_s"]["p95"]
    assert "requests" not in iv and "arrival_rate" not in iv


def test_json_has_the_issue_keys_and_is_reproducible(run_cli, workload: Path) -> None:
    code, first, err = serve(run_cli, workload, "--json")
    assert code == 0, err
    data = json.loads(first)
    assert set(ISSUE_KEYS) <= set(data)
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        assert set(data[key]) == {"p50", "p90", "p99", "mean"}
    assert data["requests"] == data["completed"] == 40
    assert data["output_tokens"] == 40 * 256
    _, second, _ = serve(run_cli, workload, "--json")
    assert first == second


def test_sweep_writes_files_and_a_trace(
    run_cli, workload: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # wide enough for a row per point, labelled in full
    out = tmp_path / "out"
    code, text, err = serve(
        run_cli,
        workload,
        "--rate",
        "0.5,1",
        "--set",
        "snapstream.enabled=true,false",
        "--out",
        str(out),
    )
    assert code == 0, err
    assert text.count("snapstream.enabled=") == 4
    data = json.loads((out / "serve.json").read_text())
    assert len(data["points"]) == 4
    assert [p["settings"]["rate"] for p in data["points"]] == [0.5, 1.0, 0.5, 1.0]
    assert [p["graphs"]["decode_slots"] for p in data["points"]] == [64, 64, 16, 16]
    for name in ("latency_cdf.png", "throughput_tpot.png", "occupancy.png"):
        assert (out / name).read_bytes().startswith(b"\x89PNG")
    assert (out / "requests.csv").read_text().count("\n") == 4 * 40 + 1
    trace = tmp_path / "t.json"
    code, _, err = serve(run_cli, workload, "--trace", str(trace))
    assert code == 0, err
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and "name" in e["args"]}
    assert {"prefill graph", "decode graph", "slot 0", "decode node 0"} <= names


def test_shipped_workload_by_name(run_cli) -> None:
    code, out, err = serve(run_cli, "trace_example")
    assert code == 0, err
    assert "serving trace-example: 24 requests" in out


def test_a_misspelt_workload_key(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(WORKLOAD.replace("seed:", "sed:"), encoding="utf-8")
    out = tmp_path / "out"
    err = assert_user_error(
        serve(run_cli, path, "--out", str(out)), "bad.yaml:3: sed", "did you mean 'seed'?"
    )
    assert err.startswith("rdusim: error:")
    assert not out.exists()


def test_too_long_prompts_write_nothing(run_cli, workload: Path, tmp_path: Path) -> None:
    workload.write_text(WORKLOAD.replace("high: 100000", "high: 200000"), encoding="utf-8")
    out = tmp_path / "out"
    assert_user_error(serve(run_cli, workload, "--out", str(out)), "prompt_tokens", "--set seq_len")
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--rate", "0,1"], ["--rate", "'0' is not an arrival rate"]),
        (["--rate", "-1"], ["--rate", "'-1' is not an arrival rate", "above 0"]),
        (["--rate=-0.5e1"], ["--rate", "'-0.5e1' is not an arrival rate"]),
        (["--rate", "1_000"], ["--rate", "'1_000' is not a number", "no underscores"]),
        (["--rate", "inf"], ["--rate", "'inf' is not a number"]),
        (["--rate", "nan"], ["--rate", "'nan' is not a number"]),
        (["--rate", "0x10"], ["--rate", "is not a number"]),
        (["--rate", "\u0663"], ["--rate", "is not a number"]),
        (["--rate", "2e6"], ["--rate", "not an arrival rate", "at most 1e+06"]),
        (["--rate", "1e-308"], ["--rate", "40 requests at rate 1e-308/s", "at least 4e-06/s"]),
        (["--rate", "1,x"], ["--rate", "'x'"]),
        (["--rate", "1,1"], ["--rate", "twice"]),
        (["--rate", "1,2", "--trace", "t.json"], ["--trace", "ask for 2"]),
        (["--set", "snapstream.enable=false"], ["--set snapstream.enable", "did you mean"]),
        (["--set", "seq_len=4096,8192", "--set", "seq_len=1"], ["set twice"]),
    ],
)
def test_option_errors(run_cli, workload: Path, args: list[str], needles: list[str]) -> None:
    assert_user_error(serve(run_cli, workload, *args), *needles)


@pytest.mark.parametrize("rate", ["1e3", "1E3", "+1000", "1000.", ".5e4", " 1000 "])
def test_rates_in_decimal_and_scientific_notation(rate: str) -> None:
    from rdusim.cli.commands.serve import parse_rate

    assert parse_rate(rate) in (1000.0, 5000.0)


DURATION_WORKLOAD = WORKLOAD.replace("requests: 40", "duration_s: 3600")


@pytest.mark.parametrize(
    ("rate", "needles"),
    [
        ("1000", ["3,600,000 requests", "more than 1,000,000", "at most 278/s"]),
        ("1e-308", ["expects 3.6e-305 requests, fewer than one", "at least 0.000278/s"]),
    ],
)
def test_a_rate_bounded_by_the_requests_it_gives(
    run_cli, tmp_path: Path, rate: str, needles: list[str]
) -> None:
    path = tmp_path / "d.yaml"
    path.write_text(DURATION_WORKLOAD, encoding="utf-8")
    out = tmp_path / "out"
    assert_user_error(serve(run_cli, path, "--rate", rate, "--out", str(out)), "--rate", *needles)
    assert not out.exists()


def test_rate_with_a_trace(run_cli) -> None:
    assert_user_error(serve(run_cli, "trace_example", "--rate", "2"), "--rate", "trace")


def test_a_missing_workload_lists_the_shipped_ones(run_cli) -> None:
    assert_user_error(serve(run_cli, "nowhere.yaml"), "nowhere.yaml", "r1_disaggregated")


def test_mappings_in_the_wrong_roles(run_cli, workload: Path) -> None:
    result = run_cli(
        ["serve", "--prefill", "r1_decode", "--decode", "r1_prefill", "--workload", str(workload)]
    )
    assert_user_error(result, "phase", "--prefill needs a prefill mapping")


def test_help(run_cli) -> None:
    code, out, _ = run_cli(["serve", "--help"])
    assert code == 0 and "--workload" in out and "--rate" in out
    _, top, _ = run_cli(["--help"])
    assert "serve" in top


def test_a_workload_without_slo_runs_with_goodput_not_applicable(
    run_cli, workload: Path, tmp_path: Path
) -> None:
    workload.write_text(WORKLOAD.replace("slo: {ttft_s: 30, tpot_s: 0.2}\n", ""), encoding="utf-8")
    code, text, err = serve(run_cli, workload)
    assert code == 0, err
    assert "goodput         not applicable: the workload sets no slo" in text
    code, out, err = serve(run_cli, workload, "--json", "--rate", "1,2", "--out", tmp_path / "o")
    assert code == 0, err
    for point in json.loads(out)["points"]:
        assert point["goodput_requests_per_s"] is None and point["settings"]["slo"] is None
        assert "not applicable" in point["goodput_note"]
    assert (tmp_path / "o" / "latency_cdf.png").exists()


@pytest.mark.slow
def test_the_coe_workload_switches_models_and_its_resident_variant_does_not(run_cli) -> None:
    code, out, err = run_cli(["serve", "--workload", "coe", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    per = doc["per_model"]
    assert len(per) >= 3
    assert doc["model_switches"] > 0 and doc["switch_time_s"] > 0
    assert sum(m["completed"] for m in per.values()) == doc["completed"] == doc["requests"]
    code, out, err = run_cli(["serve", "--workload", "coe_resident", "--json"])
    assert code == 0, err
    resident = json.loads(out)
    assert resident["model_switches"] == 0 and resident["switch_time_s"] == 0
    assert len(resident["per_model"]) == len(per)


def test_mappings_from_neither_the_command_nor_the_workload(run_cli, workload: Path) -> None:
    result = run_cli(["serve", "--workload", str(workload)])
    assert_user_error(result, "--prefill", "no prefill mapping")


def test_mappings_from_both_the_command_and_the_workload(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        WORKLOAD.replace(
            "deployment: {mode: disaggregated, prefill_nodes: 8, decode_nodes: 1, "
            "prefill_buckets: [16384, 65536]}",
            "models: [{model: llama-3.1-8b}]",
        ),
        encoding="utf-8",
    )
    assert_user_error(serve(run_cli, path), "--prefill", "names its models' mappings")


def test_serve_without_out_does_not_load_matplotlib(workload: Path) -> None:
    # the report and --json need no figures: matplotlib (0.3 s) loads only for --out
    probe = (
        "import contextlib, io, sys\n"
        "from rdusim.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['serve', '--prefill', 'r1_prefill', '--decode', 'r1_decode',\n"
        f"                 '--workload', {str(workload)!r}, '--json']) == 0\n"
        "print('matplotlib' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split()[-1] == "False", done.stdout
