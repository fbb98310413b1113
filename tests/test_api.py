"""The Python API (`rdusim.load_mapping`, `rdusim.run`, `Mapping`, `Report`, docs/api.md).

The acceptance case: a script using only the documented API edits the paper's prefill mapping,
runs it, and gets the report `rdusim map` gives on the file `to_yaml` writes. Edits are checked
as they are made; an edited mapping's errors name its kernels and ops, never a line of the file
it came from; the report round-trips to the JSON text key for key.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from ruamel.yaml import YAML

import rdusim
from rdusim.api import run_mapping
from rdusim.errors import SpecError

CliResult = tuple[int, str, str]
RunCli = Callable[[Sequence[str]], CliResult]
HEAVY_MODULES = ("simpy", "numpy", "pydantic", "matplotlib")
SEQ = 8192  # a short prompt keeps the runs quick; the kernels are the paper's


@pytest.fixture
def paper() -> rdusim.Mapping:
    return rdusim.load_mapping("r1_prefill").set(seq_len=SEQ)


def cli_report(run_cli: RunCli, path: Path | str, *sets: str) -> str:
    args = ["map", str(path), "--json"]
    for s in sets:
        args += ["--set", s]
    code, out, err = run_cli(args)
    assert code == 0, err
    return out


def names(m: rdusim.Mapping, layer: str) -> list[str]:
    return [k.name for k in m.kernels(layer)]


def message(exc: pytest.ExceptionInfo[SpecError]) -> str:
    return str(exc.value)


# --- import cost ---------------------------------------------------------------------------


def test_import_loads_no_heavy_module() -> None:
    """`rdusim --version` stays fast: importing the package loads none of the heavy modules."""
    probe = "import sys, rdusim; print(rdusim.__version__); print(*sorted(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    ).stdout
    version, modules = out.splitlines()
    loaded = set(modules.split())
    assert version == rdusim.__version__
    assert not loaded & set(HEAVY_MODULES), f"import rdusim loads {loaded & set(HEAVY_MODULES)}"
    assert not loaded & {"rdusim.api", "rdusim.mapping_api", "rdusim.report.typed"}


def test_public_names_load_on_first_use() -> None:
    from rdusim.api import run
    from rdusim.mapping_api import Mapping, load_mapping
    from rdusim.report.typed import Report

    assert rdusim.run is run and rdusim.load_mapping is load_mapping
    assert rdusim.Mapping is Mapping and rdusim.Report is Report
    assert {"run", "load_mapping", "Mapping", "Report"} <= set(dir(rdusim))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = rdusim.nope  # type: ignore[attr-defined]


# --- the acceptance case -------------------------------------------------------------------


def test_moved_op_runs_as_rdusim_map_on_the_written_yaml(tmp_path: Path, run_cli: RunCli) -> None:
    m = rdusim.load_mapping("r1_prefill")
    m.move_op("attn_residual", to="Output Proj", layer="moe")
    report = rdusim.run(m)
    path = m.to_yaml(tmp_path / "moved.yaml")
    out = cli_report(run_cli, path)
    assert report.total_latency_s == json.loads(out)["total_latency_s"]
    assert report.to_json() == out
    moe = {k.name: k.ops for k in report.layers["moe"].kernels}
    assert moe["Output Proj"] == ["o_proj", "attn_residual"]
    assert "attn_residual" not in moe["Router"]
    unedited = rdusim.run("r1_prefill")
    assert report.total_latency_s != unedited.total_latency_s


def test_run_matches_run_mapping_with_overrides() -> None:
    report = rdusim.run("r1_prefill", seq_len=SEQ, set={"snapstream.enabled": False})
    expected = run_mapping("r1_prefill", [f"seq_len={SEQ}", "snapstream.enabled=false"]).report
    assert report.to_dict() == expected
    assert report.snapstream.enabled is False and report.seq_len == SEQ


def test_run_sets_hardware_fields_as_set_does() -> None:
    sets = {"calibration.gemm_efficiency": 0.5, "hardware.links.p2p_bandwidth": 2e11}
    report = rdusim.run("r1_prefill", seq_len=SEQ, set=sets)
    items = [f"seq_len={SEQ}", *(f"{k}={v}" for k, v in sets.items())]
    assert report.to_dict() == run_mapping("r1_prefill", items).report
    assert report.to_dict() == run_mapping(rdusim.load_mapping("r1_prefill"), items).report
    assert report.calibration and report.calibration["gemm_efficiency"].value == 0.5
    with pytest.raises(SpecError, match=r"did you mean .calibration\.gemm_efficiency."):
        rdusim.run("r1_prefill", set={"calibration.gemm_eficiency": 0.5})


def test_run_leaves_the_mapping_it_is_given_unchanged(paper: rdusim.Mapping) -> None:
    before = paper.to_dict()
    rdusim.run(paper, seq_len=4096, set={"snapstream.enabled": False})
    assert paper.to_dict() == before


def test_run_takes_a_dict(paper: rdusim.Mapping) -> None:
    data = paper.to_dict()
    assert isinstance(data, dict)
    assert rdusim.run(data).to_dict() == rdusim.run(paper).to_dict()
    run = run_mapping(data, ["batch=1"])  # the lower-level function takes one too
    assert run.report["total_latency_s"] == rdusim.run(paper).total_latency_s


def test_a_dict_is_checked_on_load() -> None:
    with pytest.raises(SpecError) as exc:
        rdusim.load_mapping({"model": "deepseek-r1", "phase": "prefill", "seq_len": 0})
    assert "seq_len" in message(exc) and exc.value.line is None
    with pytest.raises(TypeError, match="shipped mapping's name, a dict or a Mapping, not int"):
        rdusim.load_mapping(3)  # type: ignore[arg-type]


# --- API mistakes are rdusim errors with a key and a fix ---------------------------------------


@pytest.fixture(scope="module")
def llama() -> rdusim.Mapping:
    return rdusim.load_mapping("llama31_8b_decode")


API_MISTAKES: dict[str, tuple[Callable[[rdusim.Mapping], object], type[Exception], str]] = {
    "set={1: 2}": (lambda m: rdusim.run(m, set={1: 2}), TypeError, "set"),  # type: ignore[dict-item]
    "set='seq_len=1024'": (lambda m: rdusim.run(m, set="seq_len=1024"), TypeError, "set"),  # type: ignore[arg-type]
    "from_spec(None)": (lambda m: rdusim.Mapping.from_spec(None), TypeError, "spec"),  # type: ignore[arg-type]
    "Mapping(None)": (lambda m: rdusim.Mapping(None), TypeError, "data"),  # type: ignore[arg-type]
    "to_yaml('.')": (lambda m: m.to_yaml("."), SpecError, "path"),
    "to_yaml('/proc/x.yaml')": (lambda m: m.to_yaml("/proc/x.yaml"), SpecError, "path"),
    "to_yaml(None)": (lambda m: m.to_yaml(None), TypeError, "path"),  # type: ignore[arg-type]
    "move_op(layer=0)": (
        lambda m: m.copy().move_op("attn_residual", to="Decoder", layer=0),  # type: ignore[arg-type]
        TypeError,
        "layer",
    ),
    "kernel(None)": (lambda m: m.kernel(None), TypeError, "name"),  # type: ignore[arg-type]
    "ops(1)": (lambda m: m.ops(1), TypeError, "layer"),  # type: ignore[arg-type]
    "set_override(op=5)": (lambda m: m.copy().set_override("Decoder", 5), TypeError, "op"),  # type: ignore[arg-type]
    "run_mapping(overrides=str)": (
        lambda m: run_mapping("llama31_8b_decode", "seq_len=1024"),  # type: ignore[arg-type]
        TypeError,
        "overrides",
    ),
    "load_mapping(3)": (lambda m: rdusim.load_mapping(3), TypeError, "source"),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("case", list(API_MISTAKES))
def test_api_mistakes_are_rdusim_errors_with_key_and_fix(llama: rdusim.Mapping, case: str) -> None:
    call, kind, key = API_MISTAKES[case]
    with pytest.raises(rdusim.RdusimError) as exc:
        call(llama)
    err = exc.value
    assert isinstance(err, rdusim.SpecError) and isinstance(err, kind), repr(err)
    assert err.key == key and err.fix, str(err)
    if kind is TypeError:
        assert isinstance(err, rdusim.SpecTypeError)
    assert not llama.edited  # a refused call changes nothing


def test_error_classes_are_exported() -> None:
    from rdusim import errors

    for name in ("RdusimError", "SpecError", "SpecErrors", "SpecTypeError", "InfeasibleError"):
        assert getattr(rdusim, name) is getattr(errors, name)
        assert name in rdusim.__all__
    assert issubclass(rdusim.SpecTypeError, TypeError)
    assert issubclass(rdusim.InfeasibleError, rdusim.SpecError)


def test_to_yaml_into_a_directory_writes_nothing(llama: rdusim.Mapping, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="is a directory"):
        llama.to_yaml(tmp_path)
    assert list(tmp_path.iterdir()) == []


# --- errors name kernels and ops -------------------------------------------------------------


def test_unknown_kernel_names_kernel_and_op_with_a_suggestion(paper: rdusim.Mapping) -> None:
    with pytest.raises(SpecError) as exc:
        paper.move_op("attn_residual", to="Output Prj", layer="moe")
    text = message(exc)
    assert "'Output Prj'" in text and "'attn_residual'" in text
    assert "did you mean 'Output Proj'?" in text


def test_unknown_op_names_kernel_and_op_with_a_suggestion(paper: rdusim.Mapping) -> None:
    with pytest.raises(SpecError) as exc:
        paper.move_op("attn_residul", to="Output Proj", layer="moe")
    text = message(exc)
    assert "'attn_residul'" in text and "'Output Proj'" in text
    assert "did you mean 'attn_residual'?" in text
    with pytest.raises(SpecError, match=r"did you mean 'attention'\?") as exc:
        paper.set_override("MHA", "atention", layer="moe", dp=16)
    assert "'MHA'" in message(exc)


def test_unknown_layer_and_ambiguous_kernel(paper: rdusim.Mapping) -> None:
    with pytest.raises(SpecError, match=r"did you mean 'moe'\?"):
        paper.kernels("moee")
    with pytest.raises(SpecError, match="'QKV' is in the moe and dense layers"):
        paper.move_op("attn_norm", to="QKV")
    assert paper.kernel("Router").name == "Router"  # one layer kind has it: no layer= needed


def test_a_failed_edit_changes_nothing(paper: rdusim.Mapping) -> None:
    before = paper.to_dict()
    for edit in (
        lambda: paper.move_op("attn_residual", to="Nowhere", layer="moe"),
        lambda: paper.set(seq_len=0),
        lambda: paper.set_sharding("MHA", layer="moe", tp=4, dp=4),
        lambda: paper.set_tiling("MHA", layer="moe", kv_blok=16),
    ):
        with pytest.raises(SpecError):
            edit()
    assert paper.to_dict() == before


def test_an_edited_mapping_error_names_kernel_and_op_and_no_line(paper: rdusim.Mapping) -> None:
    paper.move_op("ffn_norm", to="Output Proj", layer="moe")  # before its producer
    with pytest.raises(SpecError) as exc:
        rdusim.run(paper)
    text = message(exc)
    assert text.startswith("<r1_prefill, edited>: ")
    assert "'ffn_norm'" in text and "'Output Proj'" in text and "'attn_residual'" in text
    assert exc.value.line is None and ".yaml" not in text


def test_an_unedited_file_error_keeps_its_line(tmp_path: Path, paper: rdusim.Mapping) -> None:
    bad = paper.copy().move_op("ffn_norm", to="Output Proj", layer="moe")
    path = bad.to_yaml(tmp_path / "bad.yaml")
    with pytest.raises(SpecError) as exc:
        rdusim.run(path)
    assert exc.value.file == str(path) and exc.value.line is not None
    with pytest.raises(SpecError) as exc:
        rdusim.run(path, seq_len=4096)  # an override is an edit
    assert exc.value.file == "<r1_prefill, edited>" and exc.value.line is None


# --- edits ------------------------------------------------------------------------------------


def test_move_op_drops_an_emptied_kernel(paper: rdusim.Mapping) -> None:
    paper.move_op("o_proj", to="MHA", layer="moe")
    assert "Output Proj" not in names(paper, "moe")
    assert paper.kernel("MHA", "moe").ops == ["attention", "o_proj"]
    assert rdusim.run(paper).layers["moe"].kernels[3].ops == ["attention", "o_proj"]


def test_move_op_takes_one_op_out_of_a_pattern(paper: rdusim.Mapping) -> None:
    ring = [op for op in paper.ops("moe") if op.startswith("ring_")]
    paper.move_op(ring[-1], to="MHA", layer="moe")
    assert paper.kernel("Streaming Ring Buffer", "moe").ops == ring[:-1]
    assert paper.kernel("MHA", "moe").ops == ["attention", ring[-1]]
    paper.move_op("snapkv_*", to="Streaming Ring Buffer", layer="moe")  # a pattern as listed
    assert "SnapKV Compression" not in names(paper, "moe")


def test_move_op_carries_the_ops_override() -> None:
    m = rdusim.load_mapping("r1_decode")
    m.move_op("attn_residual", to="FFN", layer="moe")  # no override: takes FFN's sharding
    assert m.kernel("FFN", "moe").overrides == {}
    m.split_op("kv_cache_write", into="Cache", layer="moe")
    cache = m.kernel("Cache", "moe")
    assert cache.overrides["kv_cache_write"].dp == 16 and cache.sharding.tp == 16
    assert "kv_cache_write" not in m.kernel("MLA", "moe").overrides
    assert names(m, "moe") == ["MLA", "Cache", "FFN"]


def test_split_op_inserts_after_its_kernel_with_its_settings(paper: rdusim.Mapping) -> None:
    paper.split_op("kv_b_proj", into="KV Decompress", layer="moe")
    assert names(paper, "moe")[:3] == ["QKV", "KV Decompress", "Streaming Ring Buffer"]
    assert paper.kernel("KV Decompress", "moe").sharding.tp == 16
    assert "kv_b_proj" not in paper.kernel("QKV", "moe").ops
    with pytest.raises(SpecError, match="already have a kernel 'MHA'"):
        paper.split_op("o_proj", into="MHA", layer="moe")
    report = rdusim.run(paper)
    assert [k.name for k in report.layers["moe"].kernels][1] == "KV Decompress"


def test_sharding_override_and_tiling(paper: rdusim.Mapping) -> None:
    paper.set_sharding("Router", layer="moe", tp=8)
    paper.set_override("MoE FFN", "experts_*", layer="moe", ep=16)
    paper.set_tiling("MHA", layer="moe", kv_block=16384)
    assert paper.kernel("Router", "moe").sharding.tp == 8
    assert paper.kernel("MoE FFN", "moe").overrides["experts_*"].ep == 16
    assert paper.kernel("MHA", "moe").tiling.kv_block == 16384
    report = rdusim.run(paper)
    kernels = {k.name: k for k in report.layers["moe"].kernels}
    assert kernels["Router"].sharding == "tp8"
    assert kernels["MoE FFN"].op_sharding["experts_down_proj"] == "ep16"
    paper.set_tiling("MHA", layer="moe", kv_block=None)
    assert paper.kernel("MHA", "moe").tiling.kv_block is None


def test_set_takes_fields_dotted_paths_and_kernel_fields(paper: rdusim.Mapping) -> None:
    paper.set(batch=1, **{"snapstream.enabled": False, "kernels.moe.MHA.tiling.kv_block": 4096})
    assert paper.spec.snapstream.enabled is False
    assert paper.kernel("MHA", "moe").tiling.kv_block == 4096
    with pytest.raises(SpecError, match=r"did you mean 'snapstream\.enabled'\?"):
        paper.set(**{"snapstream.enabld": True})
    with pytest.raises(SpecError, match=r"did you mean 'Router'\?"):
        paper.set(**{"kernels.moe.Routr.sharding.tp": 8})
    with pytest.raises(SpecError, match="max_position_embeddings"):
        paper.set(seq_len=1 << 24)  # checked against the model as well


def test_auto_kernels_cannot_be_edited(paper: rdusim.Mapping) -> None:
    auto = paper.copy().set(kernels="auto")
    assert auto.layers == []
    with pytest.raises(SpecError, match="auto-mapper"):
        auto.move_op("o_proj", to="MHA", layer="moe")
    assert rdusim.run(auto).layers["moe"].kernels


def test_copy_is_independent(paper: rdusim.Mapping) -> None:
    other = paper.copy().move_op("attn_residual", to="Output Proj", layer="moe")
    assert "attn_residual" in paper.kernel("Router", "moe").ops
    assert "attn_residual" not in other.kernel("Router", "moe").ops
    assert rdusim.load_mapping(other).to_dict() == other.to_dict()


# --- files and paths ------------------------------------------------------------------------


def test_to_yaml_writes_a_plain_mapping_file(tmp_path: Path, paper: rdusim.Mapping) -> None:
    paper.move_op("attn_residual", to="Output Proj", layer="moe")
    path = paper.to_yaml(tmp_path / "out.yaml")
    text = path.read_text(encoding="utf-8")
    assert YAML(typ="safe").load(text) == paper.to_dict()
    assert all(line == line.rstrip() for line in text.splitlines())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.yaml"]  # no temporary left


def test_relative_paths_stay_relative_to_the_mapping_file(
    tmp_path: Path, repo_root: Path, monkeypatch: pytest.MonkeyPatch, run_cli: RunCli
) -> None:
    specs = tmp_path / "specs"
    (specs / "models").mkdir(parents=True)
    shutil.copy(repo_root / "models" / "deepseek-r1.yaml", specs / "models" / "r1.yaml")
    data = rdusim.load_mapping("r1_prefill").to_dict() | {"model": "models/r1.yaml"}
    with (specs / "mine.yaml").open("w", encoding="utf-8") as f:
        YAML(typ="safe").dump(data | {"seq_len": SEQ}, f)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    m = rdusim.load_mapping(specs / "mine.yaml")
    m.move_op("attn_residual", to="Output Proj", layer="moe")
    report = rdusim.run(m)  # finds models/r1.yaml beside the mapping, not in the cwd
    assert m.to_dict()["model"] == str((specs / "models" / "r1.yaml").resolve())
    beside = m.to_yaml(specs / "beside.yaml")
    assert YAML(typ="safe").load(beside.read_text())["model"] == "models/r1.yaml"
    away = m.to_yaml(elsewhere / "away.yaml")
    assert Path(YAML(typ="safe").load(away.read_text())["model"]).is_absolute()
    assert cli_report(run_cli, beside) == cli_report(run_cli, away) == report.to_json()


def test_a_relative_draft_model_stays_relative_to_the_mapping_file(
    tmp_path: Path, repo_root: Path
) -> None:
    specs = tmp_path / "specs"
    (specs / "models").mkdir(parents=True)
    shutil.copy(repo_root / "models" / "llama-3.2-1b.yaml", specs / "models" / "draft.yaml")
    speculative = {"draft": "models/draft.yaml", "draft_tokens": 2, "acceptance": 0.7}
    data = rdusim.load_mapping("llama31_70b_decode").to_dict() | {"speculative": speculative}
    with (specs / "mine.yaml").open("w", encoding="utf-8") as f:
        YAML(typ="safe").dump(data, f)
    m = rdusim.load_mapping(specs / "mine.yaml")
    beside = YAML(typ="safe").load(m.to_yaml(specs / "beside.yaml").read_text())
    assert beside["speculative"]["draft"] == "models/draft.yaml"
    away = YAML(typ="safe").load(m.to_yaml(tmp_path / "away.yaml").read_text())
    assert Path(away["speculative"]["draft"]).is_absolute()
    shipped = rdusim.load_mapping("llama31_70b_decode_spec").to_yaml(tmp_path / "s.yaml")
    assert YAML(typ="safe").load(shipped.read_text())["speculative"]["draft"] == "llama-3.2-1b"


def test_a_shipped_model_is_written_by_name(tmp_path: Path, paper: rdusim.Mapping) -> None:
    path = paper.to_yaml(tmp_path / "p.yaml")  # r1_prefill names it so
    assert YAML(typ="safe").load(path.read_text())["model"] == "deepseek-r1"


# --- the report -----------------------------------------------------------------------------


ROUND_TRIPS = [  # (mapping, --set items): prefill and decode, with and without SnapStream, MTP
    ("r1_prefill", [f"seq_len={SEQ}"]),
    ("r1_prefill", [f"seq_len={SEQ}", "snapstream.enabled=false"]),
    ("r1_decode", []),
    ("r1_decode", ["mtp.draft_tokens=0", "mtp.mode=scaled", "mtp.tokens_per_step=2.4"]),
    ("llama31_8b_prefill", []),
    ("llama31_8b_decode", []),
    ("llama31_70b_decode_spec", ["batch=1", "seq_len=8192", "snapstream.enabled=false"]),
]


@pytest.mark.parametrize(("mapping", "sets"), ROUND_TRIPS, ids=lambda v: str(v))
def test_report_round_trips_key_for_key(mapping: str, sets: list[str], run_cli: RunCli) -> None:
    out = cli_report(run_cli, mapping, *sets)
    data = json.loads(out)
    report = rdusim.Report.model_validate(data)
    assert report.to_dict() == data
    assert report.to_json() == out


def test_report_refuses_a_key_it_does_not_know() -> None:
    data = run_mapping("llama31_8b_prefill").report
    with pytest.raises(ValidationError, match="surprise"):
        rdusim.Report.model_validate({**data, "surprise": 1})
    kernel = data["layers"]["dense"]["kernels"][0]
    kernel["surprise"] = 1
    with pytest.raises(ValidationError, match="surprise"):
        rdusim.Report.model_validate(data)


def test_report_attributes_are_typed(paper: rdusim.Mapping) -> None:
    report = rdusim.run(paper)
    moe = report.layers["moe"]
    assert isinstance(report.total_latency_s, float) and report.total_latency_s > 0
    assert isinstance(moe.kernels[0].latency_s, float) and moe.kernels[0].name == "QKV"
    assert moe.kernels[0].op_timing and moe.kernels[0].op_timing[0].op == "attn_norm"
    assert report.traffic_bytes is not None and report.traffic_bytes.hbm > 0
    assert report.kernel_calls > 0 and report.tpot_s is None and report.phase == "prefill"
    decode = rdusim.run("r1_decode")
    assert decode.tpot_s and decode.max_batch_size and decode.mtp and decode.mtp.draft_tokens == 2
    assert decode.snapstream.decode_update_sram_bytes is not None


def test_kernel_rows(paper: rdusim.Mapping) -> None:
    rows = rdusim.run(paper).kernel_rows()
    assert [r["kernel"] for r in rows if r["layer"] == "moe"] == names(paper, "moe")
    assert set(rows[0]) == {
        "layer",
        "kernel",
        "latency_s",
        "share",
        "call_s",
        "pipeline_s",
        "sram_bytes",
        "bottleneck",
        "sharding",
    }


def test_to_pandas(paper: rdusim.Mapping) -> None:
    pytest.importorskip("pandas")
    frame = rdusim.run(paper).to_pandas()
    assert list(frame.columns)[:3] == ["layer", "kernel", "latency_s"]
    assert list(frame[frame.layer == "moe"].kernel) == names(paper, "moe")


def test_to_pandas_without_pandas_says_how_to_get_it(
    paper: rdusim.Mapping, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = rdusim.run(paper)
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now fails
    with pytest.raises(ImportError, match="pip install pandas"):
        report.to_pandas()


# --- the reference page -----------------------------------------------------------------------


def test_the_reference_page_covers_every_public_name(repo_root: Path) -> None:
    page = (repo_root / "docs" / "api.md").read_text(encoding="utf-8")
    public: list[Any] = [name for name in dir(rdusim.Mapping) if not name.startswith("_")] + [
        "load_mapping",
        "run",
        "run_mapping",
        "to_dict",
        "to_json",
        "to_pandas",
        "kernel_rows",
    ]
    missing = [name for name in public if f"`{name}" not in page and f".{name}(" not in page]
    assert not missing, f"docs/api.md does not describe {missing}"


# --- the max batch's interval ------------------------------------------------------------------


def test_max_batch_interval_is_each_members_largest_batch_by_brute_force() -> None:
    """Llama-3.1-405B decode at 32K on 16 sockets sits near a power of two (batch 32 needs
    59.2 GB of the 59.4 usable): under each ensemble member, compile every power of two until
    one does not fit that member's HBM; the report's interval is the 5th, 50th and 95th
    smallest of those batches by rank (each a member's batch)."""
    import math
    from dataclasses import replace

    from rdusim.compiler.compile import compile_mapping
    from rdusim.spec.mapping import load_mapping
    from rdusim.uncertainty.ensemble import shipped_ensemble

    sets = ["seq_len=32768"]
    report = run_mapping("llama31_405b_decode", sets).report
    rm = load_mapping("llama31_405b_decode", sets)
    ensemble = shipped_ensemble()
    assert ensemble is not None
    batches = []
    for member in ensemble.applied(rm.hardware):
        at = replace(rm, hardware=member)
        b = 8  # from a batch every member holds (checked), to keep the brute force short
        assert compile_mapping(at, batch=b).hbm.fits
        while compile_mapping(at, batch=2 * b).hbm.fits:
            b *= 2
        batches.append(b)
    xs = sorted(batches)

    def rank(q: float) -> int:
        return xs[math.ceil(q / 100 * len(xs)) - 1]

    assert report["intervals"]["max_batch_size"] == {
        "p05": rank(5),
        "p50": rank(50),
        "p95": rank(95),
    }
    assert len(set(batches)) > 1  # the calibration leaves this one open: 16 or 32
    assert report["max_batch_size"] in batches


def test_a_prefill_report_has_no_max_batch_interval() -> None:
    report = run_mapping("r1_prefill", ["seq_len=4096"]).report
    assert report["max_batch_size"] is None and "max_batch_size" not in report["intervals"]


def test_the_max_batch_interval_shows_in_the_text(run_cli: RunCli) -> None:
    code, out, err = run_cli(["map", "llama31_405b_decode", "--set", "seq_len=32768", "--json"])
    assert code == 0, err
    q = json.loads(out)["intervals"]["max_batch_size"]
    assert q["p05"] < q["p95"]
    code, text, err = run_cli(["map", "llama31_405b_decode", "--set", "seq_len=32768"])
    assert code == 0, err
    line = next(x for x in text.splitlines() if x.startswith("max batch size"))
    assert line.endswith(f"({q['p05']}–{q['p95']})")


def test_run_reports_an_interval_on_every_headline_number() -> None:
    """`rdusim.run` carries what `rdusim map --json` does: each headline number of a decode
    step (step, TPOT, throughput, call time, max batch, each layer's and kernel's latency and
    share) with {p05, p50, p95}, the 5th percentile no larger than the 95th."""
    report = rdusim.run("r1_decode_paper", seq_len=32768)
    assert report.intervals is not None
    names = {
        "total_latency_s",
        "tpot_s",
        "throughput_tokens_per_s",
        "kernel_call_time_s",
        "max_batch_size",
    }
    for kind, layer in report.layers.items():
        names.add(f"layers.{kind}.latency_s")
        for k in layer.kernels:
            names |= {f"layers.{kind}.{k.name}.latency_s", f"layers.{kind}.{k.name}.share"}
    assert set(report.intervals) == names
    for name, q in report.intervals.items():
        assert q.p05 <= q.p50 <= q.p95, name
    assert report.drivers is not None and report.uncertainty is not None
