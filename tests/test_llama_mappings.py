"""The shipped Llama-3.1-70B and 405B mappings run on sn40l-16 and, where the weights fit, on
sn40l-8 with `--set hardware=sn40l-8` alone (every degree is `all`, the node's sockets); 405B in
BF16 on sn40l-8 says clearly that it does not fit. A mapping's sharding mistakes are reported
together, keyed as `--set` takes them, and the report's header names the model that ran and
says when SnapStream compresses nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from rdusim.errors import SpecError
from rdusim.spec.mapping import Sharding, load_mapping
from tests.conftest import CliResult

NEW = ["llama31_70b_decode", "llama31_70b_prefill", "llama31_405b_decode", "llama31_405b_prefill"]
Run = Callable[[list[str]], CliResult]


@pytest.mark.parametrize("name", NEW)
def test_each_new_llama_mapping_runs_on_sn40l_16(run_cli: Run, name: str) -> None:
    code, out, err = run_cli(["map", name, "--json"])
    assert code == 0, err
    report = json.loads(out)
    assert report["model"] == "llama-3.1-" + name.split("_")[1]
    assert report["sockets"] == 16 and report["total_latency_s"] > 0


@pytest.mark.parametrize("name", ["llama31_70b_decode", "llama31_70b_prefill"])
def test_70b_runs_on_sn40l_8_with_the_hardware_alone(run_cli: Run, name: str) -> None:
    code, out, err = run_cli(["map", name, "--set", "hardware=sn40l-8", "--json"])
    assert code == 0, err
    report = json.loads(out)
    assert report["sockets"] == 8 and report["total_latency_s"] > 0
    kernels = [k for layer in report["layers"].values() for k in layer["kernels"]]
    assert all("16" not in label for k in kernels for label in k["op_sharding"].values())


@pytest.mark.parametrize("name", ["llama31_405b_decode", "llama31_405b_prefill"])
def test_405b_in_bf16_on_sn40l_8_says_it_does_not_fit(run_cli: Run, name: str) -> None:
    code, out, err = run_cli(["map", name, "--set", "hardware=sn40l-8"])
    assert code == 2 and out == ""
    assert "Traceback" not in err
    assert "llama-3.1-405b's weights (812 GB in bf16) do not fit sn40l-8's 8 sockets" in err
    assert "hardware:" in err and "at least 14 sockets" in err


@pytest.mark.parametrize("name", ["llama31_8b_decode", "llama31_8b_prefill"])
def test_the_8b_mappings_give_the_same_report_with_all_as_with_16(run_cli: Run, name: str) -> None:
    text = load_mapping(name).source.file
    written = Path(text).read_text(encoding="utf-8")
    assert "tp: all" in written
    sixteen = [
        f"kernels.dense.{k.name}.sharding.tp=16"
        for k in load_mapping(name).spec.kernels["dense"]  # type: ignore[index]
    ]
    _, all_out, _ = run_cli(["map", name, "--json"])
    _, numbered, _ = run_cli(["map", name, "--json", *(a for s in sixteen for a in ("--set", s))])
    assert all_out == numbered


def test_all_is_every_socket_of_the_node() -> None:
    assert Sharding(tp="all").on(8) == Sharding(tp=8)
    assert Sharding(dp="all", sp=2).on(16) == Sharding(dp=16, sp=2)
    assert Sharding(tp=4).on(16) == Sharding(tp=4)


def test_a_degree_that_is_neither_a_number_nor_all_is_one_error(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    text = load_mapping("llama31_8b_prefill").source.file
    path.write_text(
        Path(text).read_text(encoding="utf-8").replace("{tp: all}", "{tp: al}", 1),
        encoding="utf-8",
    )
    with pytest.raises(SpecError) as info:
        load_mapping(path)
    assert info.value.key == "kernels.dense.QKV.sharding.tp"
    assert "'all'" in info.value.problem and info.value.line is not None


def test_sharding_mistakes_are_reported_together_by_their_set_keys(
    run_cli: Run, tmp_path: Path
) -> None:
    path = tmp_path / "eight.yaml"
    text = Path(load_mapping("llama31_8b_decode").source.file).read_text(encoding="utf-8")
    path.write_text(text.replace(": all}", ": 16}"), encoding="utf-8")
    code, _, err = run_cli(["map", path, "--set", "hardware=sn40l-8"])
    assert code == 2 and "Traceback" not in err
    for key in (
        "kernels.dense.Decoder.sharding.tp",
        "kernels.dense.Decoder.overrides.attention.dp",
        "kernels.dense.Decoder.overrides.kv_cache_write.dp",
    ):
        assert f": {key}: degree 16 exceeds the node's 8 sockets" in err, (key, err)
    assert "[0]" not in err
    assert "or `all`" in err


def test_the_header_names_the_model_that_ran(run_cli: Run) -> None:
    code, out, err = run_cli(
        ["map", "llama31_8b_decode", "--set", "model=llama-3.1-70b", "--set", "batch=1"]
    )
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("llama-3.1-70b on sn40l-16 (16 sockets), decode"), first


def test_snapstream_on_is_said_only_where_the_cache_is_compressed(run_cli: Run) -> None:
    _, out, _ = run_cli(["map", "llama31_8b_prefill", "--set", "seq_len=8192"])
    head = " ".join(out.split("\n\n")[0].split())
    assert "SnapStream on" not in head
    assert "cache not compressed (kv_len 8192 >= seq_len 8192)" in head
    _, out, _ = run_cli(["map", "llama31_8b_prefill", "--set", "seq_len=32768"])
    assert "SnapStream on (kv_len 8192, 4x compressed)" in " ".join(out.split())
