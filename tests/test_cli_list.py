"""`rdusim list`: the names a user may give instead of a path, as a table and as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rdusim.spec.catalog import shipped_mappings, shipped_models
from rdusim.spec.hardware import presets


@pytest.fixture
def listed(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`rdusim list ARGS` run from an empty directory: (exit code, stdout, stderr)."""
    monkeypatch.chdir(tmp_path)
    return lambda *args: run_cli(["list", *args])


def test_json_lists_every_shipped_name(listed) -> None:
    code, out, err = listed("--json")
    assert code == 0, err
    cat = json.loads(out)
    assert [h["name"] for h in cat["hardware"]] == list(presets())
    assert [m["name"] for m in cat["models"]] == list(shipped_models())
    assert [m["name"] for m in cat["mappings"]] == list(shipped_mappings())


def test_json_rows(listed) -> None:
    cat = json.loads(listed("--json")[1])
    hw = {h["name"]: h for h in cat["hardware"]}
    assert (hw["sn40l-16"]["sockets"], hw["sn40l-8"]["sockets"]) == (16, 8)
    models = {m["name"]: m for m in cat["models"]}
    r1 = models["deepseek-r1"]
    assert r1["family"] == "deepseek_v3"
    assert 670e9 < r1["params_total"] < 672e9  # DeepSeek-R1: 671 B
    assert models["llama-3.1-8b"]["family"] == "llama"
    assert 8.0e9 < models["llama-3.1-8b"]["params_total"] < 8.1e9
    prefill = {m["name"]: m for m in cat["mappings"]}["r1_prefill"]
    assert {k: prefill[k] for k in ("phase", "model", "hardware")} == {
        "phase": "prefill",
        "model": "deepseek-r1",
        "hardware": "sn40l-16",
    }
    for section in cat.values():
        assert all(Path(row["file"]).is_file() for row in section)


def test_text_tables(listed) -> None:
    code, out, err = listed()
    assert code == 0, err
    assert err == ""
    lines = out.splitlines()
    for header in (
        ["hardware", "sockets"],
        ["model", "family", "parameters"],
        ["mapping", "phase", "model", "hardware"],
    ):
        assert header in [line.split() for line in lines]
    rows = {line.split()[0]: line.split()[1:] for line in lines if line.strip()}
    assert rows["sn40l-8"] == ["8"]
    assert rows["deepseek-r1"] == ["deepseek_v3", "671", "G"]
    assert rows["llama31_8b_decode"] == ["decode", "llama-3.1-8b", "sn40l-16"]
    assert "rdusim map r1_prefill" in out


def test_every_listed_name_loads(listed, run_cli) -> None:
    """What the list shows is accepted by name, from a directory holding none of the files."""
    from rdusim.spec.mapping import load_mapping

    cat = json.loads(listed("--json")[1])
    for m in cat["models"]:
        assert run_cli(["model", m["name"], "--json"])[0] == 0
    for m in cat["mappings"]:
        assert load_mapping(m["name"]).model.name == m["model"]
