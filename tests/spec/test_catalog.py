"""Shipped models and mappings by name: an existing path wins, then a shipped name (with or
without `.yaml`), else "file not found" listing the shipped names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rdusim.errors import SpecError
from rdusim.spec.catalog import resolve_mapping, resolve_model, shipped_mappings, shipped_models
from rdusim.spec.mapping import load_mapping
from rdusim.spec.model import load_model_config

MODELS = [
    "deepseek-r1",
    "llama-3.1-405b",
    "llama-3.1-70b",
    "llama-3.1-8b",
    "llama-3.2-1b",
    "llama-3.2-3b",
    "mistral-7b-v0.3",
    "qwen2.5-7b",
]
MAPPINGS = [
    "llama31_405b_decode",
    "llama31_405b_decode_spec",
    "llama31_405b_prefill",
    "llama31_70b_decode",
    "llama31_70b_decode_spec",
    "llama31_70b_prefill",
    "llama31_8b_decode",
    "llama31_8b_prefill",
    "r1_decode",
    "r1_decode_paper",
    "r1_prefill",
]


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty current directory, away from the checkout's models/ and mappings/."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_shipped_names(models_dir: Path, mappings_dir: Path) -> None:
    assert list(shipped_models()) == MODELS
    assert list(shipped_mappings()) == MAPPINGS
    # the checkout's models/ and mappings/ are the package data, seen through symlinks
    assert shipped_models()["deepseek-r1"].samefile(models_dir / "deepseek-r1.yaml")
    assert shipped_mappings()["r1_prefill"].samefile(mappings_dir / "r1_prefill.yaml")


def test_evidence_names_shipped_mappings(elsewhere: Path) -> None:
    """Every evidence item's measure runs a shipped mapping, found from any directory."""
    from rdusim.validation.items import shipped_evidence

    ev = shipped_evidence()
    names = {d.mapping for f in ev.files for d in f.deployments.values()}
    names |= {
        i.measure.mapping for f in ev.files for i in f.items if i.measure and i.measure.mapping
    }
    names |= {
        i.measure.prefill for f in ev.files for i in f.items if i.measure and i.measure.prefill
    }
    assert names and names <= set(shipped_mappings())


@pytest.mark.parametrize("text", ["deepseek-r1", "deepseek-r1.yaml"])
def test_a_model_by_name(elsewhere: Path, text: str) -> None:
    assert resolve_model(text) == str(shipped_models()["deepseek-r1"])
    cfg = load_model_config(text)
    assert (cfg.name, cfg.model_type) == ("deepseek-r1", "deepseek_v3")


@pytest.mark.parametrize("text", ["r1_decode", "r1_decode.yaml"])
def test_a_mapping_by_name(elsewhere: Path, text: str) -> None:
    rm = load_mapping(text)
    assert rm.spec.name == "r1_decode"
    assert rm.model.name == "deepseek-r1"
    assert Path(rm.source.file).samefile(shipped_mappings()["r1_decode"])


def test_an_existing_path_wins(elsewhere: Path, model_file) -> None:
    """A local `deepseek-r1.yaml` (here a Llama) is read instead of the shipped model, and is
    reported under the name the user typed; the bare name still finds the shipped one."""
    local = elsewhere / "deepseek-r1.yaml"
    local.write_text(model_file("llama-3.1-8b").read_text(encoding="utf-8"), encoding="utf-8")
    assert resolve_model("deepseek-r1.yaml") == "deepseek-r1.yaml"
    assert load_model_config("deepseek-r1.yaml").model_type == "llama"
    assert load_model_config("deepseek-r1").model_type == "deepseek_v3"


def test_a_path_is_never_taken_for_a_name(elsewhere: Path) -> None:
    with pytest.raises(SpecError, match="file not found"):
        resolve_model("models/deepseek-r1.yaml")
    with pytest.raises(SpecError, match="file not found"):
        resolve_mapping("mappings/r1_prefill.yaml")


def test_the_checkout_paths_still_work(repo_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo_root)
    assert resolve_mapping("mappings/r1_prefill.yaml") == "mappings/r1_prefill.yaml"
    rm = load_mapping("mappings/r1_prefill.yaml")
    assert rm.source.file == "mappings/r1_prefill.yaml"
    assert rm.model.name == "deepseek-r1"


@pytest.mark.parametrize(
    ("load", "names"), [(load_model_config, MODELS), (load_mapping, MAPPINGS)], ids=["model", "map"]
)
def test_an_unknown_name_lists_the_shipped_names(elsewhere: Path, load, names) -> None:
    with pytest.raises(SpecError) as exc:
        load("deepseek-r2")
    assert exc.value.problem == "file not found"
    assert exc.value.file == "deepseek-r2"
    assert exc.value.fix is not None
    for name in names:
        assert name in exc.value.fix


def _mapping_naming(tmp_path: Path, mappings_dir: Path, model: str) -> Path:
    text = (mappings_dir / "llama31_8b_prefill.yaml").read_text(encoding="utf-8")
    text = text.replace("model: llama-3.1-8b\n", f"model: {model}\n")
    path = tmp_path / "mine.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("model", ["llama-3.1-8b", "llama-3.1-8b.yaml"])
def test_a_mapping_names_its_model_by_name(elsewhere: Path, mappings_dir: Path, model: str) -> None:
    rm = load_mapping(_mapping_naming(elsewhere, mappings_dir, model))
    assert rm.model.name == "llama-3.1-8b"


def test_a_model_file_next_to_the_mapping_wins(
    elsewhere: Path, mappings_dir: Path, model_file
) -> None:
    """`model: llama-3.1-8b.yaml` is a file next to the mapping when there is one."""
    folder = elsewhere / "specs"
    folder.mkdir()
    mine = model_file("llama-3.1-8b").read_text(encoding="utf-8")
    mine = mine.replace("name: llama-3.1-8b", "name: mine")
    (folder / "llama-3.1-8b.yaml").write_text(mine, encoding="utf-8")
    rm = load_mapping(_mapping_naming(folder, mappings_dir, "llama-3.1-8b.yaml"))
    assert rm.model.name == "mine"


def test_an_unknown_model_in_a_mapping_is_located(elsewhere: Path, mappings_dir: Path) -> None:
    path = _mapping_naming(elsewhere, mappings_dir, "llama-9")
    with pytest.raises(SpecError) as exc:
        load_mapping(path)
    err = exc.value
    assert (err.file, err.key) == (str(path), "model")
    assert err.line == 3
    assert "'llama-9' not found" in err.problem
    assert err.fix is not None and "llama-3.1-8b" in err.fix and "mapping file" in err.fix


# --- the command line ------------------------------------------------------------------------


def test_rdusim_model_by_name(elsewhere: Path, run_cli) -> None:
    code, out, err = run_cli(["model", "llama-3.1-8b", "--json"])
    assert code == 0, err
    assert json.loads(out)["model"] == "llama-3.1-8b"


def test_rdusim_map_by_name(elsewhere: Path, run_cli) -> None:
    code, out, err = run_cli(["map", "llama31_8b_prefill", "--set", "seq_len=16384", "--json"])
    assert code == 0, err
    report = json.loads(out)
    assert (report["mapping"], report["seq_len"]) == ("llama31_8b_prefill", 16384)


def test_rdusim_map_unknown_name(elsewhere: Path, run_cli) -> None:
    code, _, err = run_cli(["map", "r1_prefil"])
    assert code == 2
    assert "r1_prefil: file not found" in err
    assert "r1_prefill" in err and "rdusim list" in err


def test_rdusim_sweep_by_name(elsewhere: Path, run_cli) -> None:
    out = elsewhere / "out"
    code, _, err = run_cli(
        ["sweep", "llama31_8b_prefill", "--set", "seq_len=16384", "--jobs", "1", "--out", out]
    )
    assert code == 0, err
    assert json.loads((out / "sweep.json").read_text(encoding="utf-8"))["points"] == 1
