"""`rdusim fit`: its text and JSON, and user errors (exit 2, a message, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path

from rdusim.report.console import seconds

MODELS = ["deepseek-r1", "llama-3.1-70b", "llama-3.1-8b"]


def test_fit_json(run_cli) -> None:
    code, out, err = run_cli(["fit", *MODELS, "--json"])
    assert code == 0, err
    d = json.loads(out)
    assert set(d) == {
        "hardware",
        "sockets",
        "switch_bandwidth_per_socket",
        "models",
        "tiers",
        "switches",
        "assumptions",
    }
    assert d["hardware"] == "sn40l-16" and d["sockets"] == 16
    assert [m["name"] for m in d["models"]] == MODELS
    for m in d["models"]:
        assert set(m) == {"name", "weight_bytes", "per_socket_bytes", "fits_hbm", "load_s"}
        assert m["fits_hbm"] is True
    assert set(d["tiers"]) == {"hbm", "ddr"}
    for tier in d["tiers"].values():
        assert set(tier) == {
            "capacity_per_socket_bytes",
            "needed_per_socket_bytes",
            "all_fit",
            "fit_in_order",
        }
    assert d["tiers"]["ddr"]["fit_in_order"] == 3
    assert len(d["switches"]) == 9
    assert {(s["from"], s["to"]) for s in d["switches"]} == {(a, b) for a in MODELS for b in MODELS}
    assert all((s["seconds"] == 0) == (s["from"] == s["to"]) for s in d["switches"])
    assert run_cli(["fit", *MODELS, "--json"])[1] == out  # deterministic


def test_fit_text_and_hardware(run_cli) -> None:
    code, out, err = run_cli(["fit", "llama-3.1-8b", "--hardware", "sn40l-8"])
    assert code == 0, err
    assert "1 model on sn40l-8 (8 sockets)" in out
    _, js, _ = run_cli(["fit", "llama-3.1-8b", "--hardware", "sn40l-8", "--json"])
    assert seconds(json.loads(js)["models"][0]["load_s"]) in out
    assert "HBM (usable)" in out and "DDR" in out


def test_fit_takes_a_model_file(run_cli, model_file, tmp_path: Path) -> None:
    copy = tmp_path / "my-llama.yaml"
    copy.write_text(model_file("llama-3.1-8b").read_text(encoding="utf-8"), encoding="utf-8")
    code, out, err = run_cli(["fit", str(copy), "llama-3.1-8b", "--json"])
    assert code == 0, err
    a, b = json.loads(out)["models"]
    assert a["weight_bytes"] == b["weight_bytes"]


def test_fit_errors_exit_2(run_cli) -> None:
    code, out, err = run_cli(["fit", "no-such-model"])
    assert code == 2 and out == ""
    assert "no-such-model: file not found" in err and "llama-3.1-8b" in err
    assert "Traceback" not in err
    code, _, err = run_cli(["fit", "llama-3.1-8b", "--hardware", "no-such-node"])
    assert code == 2 and "unknown hardware 'no-such-node'" in err and "sn40l-16" in err
    code, _, err = run_cli(["fit"])
    assert code == 2 and "MODEL" in err
