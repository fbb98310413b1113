"""`rdusim map`: the paper's kernels in the JSON report, `--set`, `--out`, and user errors (exit
code 2, the file, the key path and a fix; never a traceback)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.conftest import line_with

SRAM_BYTES = 520e6
MOE_KERNELS = [
    "QKV",
    "Streaming Ring Buffer",
    "SnapKV Compression",
    "MHA",
    "Output Proj",
    "Router",
    "MoE FFN",
]


def map_json(run_cli, mapping, *sets: str) -> dict:
    args = ["map", mapping, "--json"]
    for s in sets:
        args += ["--set", s]
    code, out, err = run_cli(args)
    assert code == 0, err
    return json.loads(out)


def kernel_names(report: dict, kind: str) -> list[str]:
    return [k["name"] for k in report["layers"][kind]["kernels"]]


def assert_user_error(result, path: Path | str, *needles: str) -> str:
    code, out, err = result
    assert code == 2, (out, err)
    assert "Traceback" not in err
    assert str(Path(path).name) in err
    assert "fix:" in err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


# --------------------------------------------------------------------------------------------
# the paper's mappings


def test_r1_prefill_kernels(run_cli, mappings_dir):
    report = map_json(run_cli, mappings_dir / "r1_prefill.yaml")
    assert report["sockets"] == 16
    assert (report["phase"], report["batch"], report["seq_len"]) == ("prefill", 1, 131072)
    assert kernel_names(report, "moe") == MOE_KERNELS
    assert kernel_names(report, "dense")[-1] == "Output Proj + FFN"
    assert "Output Proj" not in kernel_names(report, "dense")
    for layer in report["layers"].values():
        for k in layer["kernels"]:
            assert k["sram_bytes"] <= SRAM_BYTES, k["name"]
            assert k["pcus"] <= 1040 and k["pmus"] <= 1040
    assert report["layers"]["moe"]["count"] == 58 and report["layers"]["dense"]["count"] == 3
    shares = [k["share"] for k in report["layers"]["moe"]["kernels"]]
    assert sum(shares) == pytest.approx(1.0)
    assert report["snapstream"] == {"enabled": True, "kv_len": 32768}
    assert report["total_latency_s"] > 0


def test_r1_decode_kernels_and_sharding(run_cli, mappings_dir):
    report = map_json(run_cli, mappings_dir / "r1_decode.yaml")
    assert report["sockets"] == 16
    for kind in ("moe", "dense"):
        assert kernel_names(report, kind) == ["MLA", "FFN"]
        mla, ffn = report["layers"][kind]["kernels"]
        assert mla["op_sharding"]["attention"] == "dp16"
        for op in ("q_a_proj", "q_b_proj", "kv_a_proj", "o_proj"):
            assert mla["op_sharding"][op] == "tp16", op
        for op, sh in ffn["op_sharding"].items():
            if op.endswith("_proj"):
                assert sh == "tp16", op
    assert "router_gate" in report["layers"]["moe"]["kernels"][0]["ops"]
    assert report["batch"] == report["max_batch_size"] == 64
    assert report["throughput_tokens_per_s"] > 0


@pytest.mark.parametrize("name", ["llama31_8b_prefill.yaml", "llama31_8b_decode.yaml"])
def test_llama_mappings_compile(run_cli, mappings_dir, name):
    report = map_json(run_cli, mappings_dir / name)
    assert report["model"] == "llama-3.1-8b" and report["sockets"] == 16
    assert report["total_latency_s"] > 0
    assert all(k["sram_bytes"] <= SRAM_BYTES for k in report["layers"]["dense"]["kernels"])


def test_disabling_snapstream_drops_its_kernels(run_cli, mappings_dir):
    report = map_json(
        run_cli, mappings_dir / "r1_prefill.yaml", "snapstream.enabled=false", "seq_len=16384"
    )
    assert kernel_names(report, "moe") == [
        k for k in MOE_KERNELS if k not in ("Streaming Ring Buffer", "SnapKV Compression")
    ]
    assert kernel_names(report, "dense") == ["QKV", "MHA", "Output Proj + FFN"]
    assert report["snapstream"]["enabled"] is False
    assert report["snapstream"]["kv_len"] == 16384


def test_text_report(run_cli, mappings_dir):
    code, out, err = run_cli(["map", mappings_dir / "r1_prefill.yaml", "--set", "seq_len=16384"])
    assert code == 0, err
    for name in MOE_KERNELS:
        assert name in out


# --------------------------------------------------------------------------------------------
# --set and --out


def test_set_overrides_show_in_the_report(run_cli, mappings_dir):
    report = map_json(
        run_cli,
        mappings_dir / "r1_prefill.yaml",
        "seq_len=65536",
        "snapstream.enabled=false",
        "batch=1",
    )
    assert report["seq_len"] == 65536
    assert report["snapstream"]["enabled"] is False
    assert report["batch"] == 1


def test_set_batch_and_seq_len_in_decode(run_cli, mappings_dir):
    path = mappings_dir / "r1_decode.yaml"
    mtp = YAML(typ="safe").load(path.read_text(encoding="utf-8"))["mtp"]
    assert mtp == {"draft_tokens": 2, "acceptance": 0.8}
    # each draft is accepted only if every earlier one was: 1 + a + a^2 tokens per step
    tokens_per_step = 1 + 0.8 + 0.8**2
    report = map_json(run_cli, path, "batch=8", "seq_len=8192")
    assert report["batch"] == 8 and report["seq_len"] == 8192
    at_max = map_json(run_cli, path, "batch=max", "seq_len=8192")
    assert report["max_batch_size"] == at_max["max_batch_size"] == at_max["batch"]  # capacity
    assert report["snapstream"]["kv_len"] == 2048
    assert report["mtp"] == {"mode": "verify", "draft_tokens": 2, "verified_tokens": 3}
    assert report["tokens_per_step"] == pytest.approx(tokens_per_step)
    step = report["total_latency_s"]
    assert step is not None and step > 0
    assert report["throughput_tokens_per_s"] == pytest.approx(8 * tokens_per_step / step)
    assert report["tpot_s"] == pytest.approx(step / tokens_per_step)


def test_out_writes_the_json_report(run_cli, mappings_dir, tmp_path):
    out_dir = tmp_path / "run"
    code, out, err = run_cli(
        [
            "map",
            mappings_dir / "r1_prefill.yaml",
            "--set",
            "seq_len=16384",
            "--json",
            "--out",
            out_dir,
        ]
    )
    assert code == 0, err
    written = (out_dir / "report.json").read_text(encoding="utf-8")
    assert written == out
    assert json.loads(written)["seq_len"] == 16384


def test_out_must_be_a_directory(run_cli, mappings_dir, tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("x", encoding="utf-8")
    result = run_cli(
        ["map", mappings_dir / "r1_prefill.yaml", "--set", "seq_len=16384", "--out", blocker]
    )
    assert_user_error(result, blocker, "--out")


def _leftover_temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".tmp")]


def test_trace_into_an_existing_directory_is_a_user_error(run_cli, mappings_dir, tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    result = run_cli(
        ["map", mappings_dir / "r1_prefill.yaml", "--set", "seq_len=16384", "--trace", traces]
    )
    err = assert_user_error(result, traces, "--trace", "is a directory", "trace.json")
    assert "IsADirectoryError" not in err
    assert traces.is_dir() and not any(traces.iterdir())
    assert _leftover_temporaries(tmp_path) == []


def test_trace_that_cannot_be_written_is_a_user_error(run_cli, mappings_dir, tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("x", encoding="utf-8")
    trace = blocker / "trace.json"  # its parent is a file: the directory cannot be created
    result = run_cli(
        ["map", mappings_dir / "r1_prefill.yaml", "--set", "seq_len=16384", "--trace", trace]
    )
    assert_user_error(result, trace, "--trace", "cannot write")
    assert blocker.read_text(encoding="utf-8") == "x"
    assert _leftover_temporaries(tmp_path) == []


def test_report_json_that_is_a_directory_is_a_user_error(run_cli, mappings_dir, tmp_path):
    out_dir = tmp_path / "run"
    (out_dir / "report.json").mkdir(parents=True)
    result = run_cli(
        ["map", mappings_dir / "r1_prefill.yaml", "--set", "seq_len=16384", "--out", out_dir]
    )
    assert_user_error(result, out_dir / "report.json", "--out", "is a directory")
    assert _leftover_temporaries(tmp_path) == []


def test_trace_writes_a_chrome_trace(run_cli, mappings_dir, tmp_path):
    trace = tmp_path / "deep" / "trace.json"  # missing parents are created
    code, _, err = run_cli(
        ["map", mappings_dir / "r1_prefill.yaml", "--set", "seq_len=16384", "--trace", trace]
    )
    assert code == 0, err
    assert json.loads(trace.read_text(encoding="utf-8"))
    assert _leftover_temporaries(tmp_path) == []


# --------------------------------------------------------------------------------------------
# user errors


def test_unknown_op_in_a_kernel(run_cli, r1_mapping):
    path, text = r1_mapping(("ops: [attn_norm, q_a_proj,", "ops: [attn_norm, q_bogus,"))
    err = assert_user_error(run_cli(["map", path]), path, "kernels.moe.QKV.ops[1]", "q_bogus")
    assert f"{path.name}:{line_with(text, 'q_bogus')}:" in err


def test_op_in_two_kernels(run_cli, r1_mapping):
    path, text = r1_mapping(("ops: [o_proj]", "ops: [o_proj, attention]"))
    err = assert_user_error(
        run_cli(["map", path]), path, "kernels.moe.Output Proj.ops[1]", "attention", "MHA"
    )
    assert f":{line_with(text, 'ops: [o_proj, attention]')}:" in err


def test_op_in_no_kernel(run_cli, r1_mapping):
    path, _ = r1_mapping(("router_topk, token_group]", "router_topk]"))
    assert_user_error(run_cli(["map", path]), path, "kernels.moe", "token_group", "no kernel")


def test_tp_that_does_not_divide_the_heads(run_cli, r1_mapping):
    path, text = r1_mapping(
        (
            "      ops: [attention]\n      sharding: {tp: 16}",
            "      ops: [attention]\n      sharding: {tp: 7}",
        )
    )
    err = assert_user_error(
        run_cli(["map", path]), path, "kernels.moe.MHA.sharding.tp", "7", "heads"
    )
    assert f":{line_with(text, 'tp: 7')}:" in err


def test_kv_block_too_large_for_sram(run_cli, r1_mapping):
    path, text = r1_mapping(("tiling: {kv_block: 8192}", "tiling: {kv_block: 1000000}"))
    err = assert_user_error(
        run_cli(["map", path]), path, "kernels.moe.MHA.tiling", "SRAM", "MHA", "kv_block"
    )
    assert f":{line_with(text, 'kv_block: 1000000')}:" in err


def test_tile_tokens_too_large_for_sram(run_cli, r1_mapping):
    path, _ = r1_mapping(
        ("tiling: {kv_block: 8192}", "tiling: {kv_block: 8192, tile_tokens: 131072}")
    )
    assert_user_error(run_cli(["map", path]), path, "kernels.moe.MHA.tiling", "SRAM")


def test_malformed_yaml(run_cli, r1_mapping):
    path, text = r1_mapping(("batch: 1", "batch: 1: 2"))
    assert_user_error(
        run_cli(["map", path]), path, f":{line_with(text, 'batch: 1: 2')}:", "malformed YAML"
    )


def test_unknown_set_path(run_cli, mappings_dir):
    path = mappings_dir / "r1_prefill.yaml"
    assert_user_error(run_cli(["map", path, "--set", "foo.bar=1"]), path, "foo.bar", "unknown")


def test_set_without_a_value(run_cli, mappings_dir):
    path = mappings_dir / "r1_prefill.yaml"
    assert_user_error(run_cli(["map", path, "--set", "seq_len"]), path, "--set", "key=value")


def test_missing_file(run_cli, tmp_path):
    path = tmp_path / "nowhere.yaml"
    assert_user_error(run_cli(["map", path]), path, "not found")


def test_wrongly_typed_field(run_cli, r1_mapping):
    path, text = r1_mapping(("seq_len: 131072", "seq_len: lots"))
    assert_user_error(
        run_cli(["map", path]), path, "seq_len", "lots", f":{line_with(text, 'seq_len: lots')}:"
    )


def test_batch_zero(run_cli, r1_mapping):
    path, text = r1_mapping(("batch: 1", "batch: 0"))
    err = assert_user_error(run_cli(["map", path]), path, f":{line_with(text, 'batch: 0')}: batch:")
    assert err.count("fix:") == 1  # one error for one mistake


def test_bad_snapstream_sizes(run_cli, mappings_dir):
    path = mappings_dir / "r1_prefill.yaml"
    assert_user_error(
        run_cli(["map", path, "--set", "snapstream.sink=-1"]), path, "snapstream.sink"
    )
    assert_user_error(
        run_cli(["map", path, "--set", "snapstream.kv_len=200000"]),
        path,
        "snapstream.kv_len",
        "200000",
    )
    assert_user_error(
        run_cli(["map", path, "--set", "snapstream.pool_kernel=4"]),
        path,
        "snapstream.pool_kernel",
        "odd",
    )


def test_kernels_out_of_dependency_order(run_cli, r1_mapping):
    _, text = r1_mapping()
    router = text.index("    - name: Router")
    ffn = text.index("    - name: MoE FFN")
    dense = text.index("  dense:")
    swapped = text[:router] + text[ffn:dense] + text[router:ffn] + text[dense:]
    path, _ = r1_mapping(text=swapped, name="swapped.yaml")
    assert_user_error(
        run_cli(["map", path]), path, "kernels.moe.MoE FFN", "MoE FFN", "Router", "later"
    )


def test_unknown_hardware(run_cli, r1_mapping):
    path, text = r1_mapping(("hardware: sn40l-16", "hardware: sn99"))
    assert_user_error(
        run_cli(["map", path]), path, "hardware", "sn99", f":{line_with(text, 'hardware: sn99')}:"
    )


# --------------------------------------------------------------------------------------------
# outputs: checked before the run, written atomically, announced


def _map_args(mappings_dir: Path, *extra: object) -> list[object]:
    return ["map", mappings_dir / "r1_prefill.yaml", "--set", "seq_len=16384", *extra]


def test_trace_is_not_written_when_out_is_a_file(run_cli, mappings_dir, tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("x", encoding="utf-8")
    trace = tmp_path / "trace.json"
    result = run_cli(_map_args(mappings_dir, "--trace", trace, "--out", blocker))
    assert_user_error(result, blocker, "--out", "not a directory")
    assert not trace.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]


def test_empty_trace_name_is_a_user_error(run_cli, mappings_dir):
    code, out, err = run_cli(_map_args(mappings_dir, "--trace", ""))
    assert code == 2 and out == ""
    assert "--trace: is empty" in err and "fix:" in err


def test_trace_and_report_cannot_be_the_same_file(run_cli, mappings_dir, tmp_path):
    result = run_cli(
        _map_args(mappings_dir, "--trace", tmp_path / "report.json", "--out", tmp_path)
    )
    assert_user_error(result, "report.json", "--trace")
    assert not (tmp_path / "report.json").exists()


def test_trace_path_is_printed_on_stdout(run_cli, mappings_dir, tmp_path):
    trace = tmp_path / "t.json"
    code, out, err = run_cli(_map_args(mappings_dir, "--trace", trace))
    assert code == 0, err
    assert f"wrote trace {trace}" in out.splitlines()[-1]


def test_trace_path_goes_to_stderr_with_json(run_cli, mappings_dir, tmp_path):
    trace = tmp_path / "t.json"
    code, out, err = run_cli(_map_args(mappings_dir, "--trace", trace, "--json", "--out", tmp_path))
    assert code == 0, err
    assert json.loads(out)["seq_len"] == 16384  # stdout is only the JSON report
    assert f"wrote trace {trace}" in err and f"wrote report {tmp_path / 'report.json'}" in err


def test_trace_through_a_symlink_keeps_the_link(run_cli, mappings_dir, tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old", encoding="utf-8")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    code, _, err = run_cli(_map_args(mappings_dir, "--trace", link))
    assert code == 0, err
    assert link.is_symlink() and json.loads(real.read_text(encoding="utf-8"))
    assert _leftover_temporaries(tmp_path) == []


def test_a_failing_run_writes_nothing(run_cli, mappings_dir, tmp_path):
    """Outputs are checked first and written last: a mapping error leaves the disk untouched."""
    trace, out_dir = tmp_path / "t.json", tmp_path / "run"
    result = run_cli(
        _map_args(mappings_dir, "--set", "batch=0", "--trace", trace, "--out", out_dir)
    )
    assert result[0] == 2
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------------
# --trace-full, and the text report's per-kernel and per-op sharding


def test_trace_full_covers_the_run(run_cli, mappings_dir, tmp_path):
    full, rep = tmp_path / "full.json", tmp_path / "rep.json"
    code, out, err = run_cli(_map_args(mappings_dir, "--trace-full", full, "--trace", rep))
    assert code == 0, err
    assert f"wrote trace {full}" in out and f"wrote trace {rep}" in out
    report = map_json(run_cli, mappings_dir / "r1_prefill.yaml", "seq_len=16384")
    trace = json.loads(full.read_text(encoding="utf-8"))
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    end_s = max(e["ts"] + e["dur"] for e in events) / 1e6
    assert end_s == pytest.approx(report["total_latency_s"], rel=1e-6)
    layers = [e for e in events if e["cat"] == "layer"]
    for kind, layer in report["layers"].items():
        assert sum(e["args"]["layer"] == kind for e in layers) == layer["count"]
    # --trace keeps its meaning: one representative layer per kind
    representative = json.loads(rep.read_text(encoding="utf-8"))
    kinds = [e["args"]["layer"] for e in representative["traceEvents"] if e.get("cat") == "layer"]
    assert sorted(kinds) == sorted({*report["layers"], *report["extras"]})


def test_trace_and_trace_full_cannot_be_the_same_file(run_cli, mappings_dir, tmp_path):
    same = tmp_path / "t.json"
    result = run_cli(_map_args(mappings_dir, "--trace", same, "--trace-full", same))
    assert_user_error(result, same, "--trace-full", "is also the file --trace writes")
    result = run_cli(
        _map_args(mappings_dir, "--trace-full", tmp_path / "report.json", "--out", tmp_path)
    )
    assert_user_error(result, "report.json", "--trace-full", "--out")
    assert list(tmp_path.iterdir()) == []


def test_help_tells_the_two_traces_apart(run_cli):
    code, out, _ = run_cli(["map", "--help"])
    assert code == 0
    text = " ".join(out.split())
    assert "--trace-full FILE" in text and "every layer in execution order" in text
    assert "one representative layer per kind" in text and "total latency" in text


def test_text_report_shows_attention_sharding(run_cli, mappings_dir, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    code, out, err = run_cli(["map", mappings_dir / "r1_decode.yaml", "--set", "batch=1", "--ops"])
    assert code == 0, err
    mla = [line for line in out.splitlines() if line.startswith("MLA ")]
    assert len(mla) == 2 and all("tp16 (attention sp16)" in line for line in mla)
    assert "attention [sp16]" in out  # marked in the kernel's op list
    assert any(line.split()[:2] == ["op", "sharding"] for line in out.splitlines())


# --------------------------------------------------------------------------------------------
# auto-mapper options: refused before any search when they cannot apply


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--objective", "ttft"], ["--objective", "nothing to search", "kernels=auto"]),
        (["--alternatives", "2"], ["--alternatives", "kernels=auto"]),
        (["--timings"], ["--timings", "kernels=auto"]),
        (
            ["--set", "kernels=auto", "--objective", "ttft"],
            ["--objective", "for prefill", "step-time"],
        ),
        (
            ["--set", "kernels=auto", "--objective", "throughput-under-latency"],
            ["--latency-bound", "needs a bound"],
        ),
        (
            ["--set", "kernels=auto", "--latency-bound", "0.1"],
            ["--latency-bound", "throughput-under-latency"],
        ),
        (["--set", "kernels=auto", "--latency-bound", "-1"], ["--latency-bound", "positive"]),
        (["--set", "kernels=auto", "--latency-bound", "inf"], ["--latency-bound", "finite"]),
        (
            ["--set", "kernels=auto", "--set", "hardware=sn40l-8"],
            ["hardware", "weights alone need", "GB over", "at least 12 sockets"],
        ),
        (["--set", "kernels=auto", "--alternatives", "-1"], ["--alternatives", "0 or more"]),
    ],
)
def test_auto_mapper_options_that_cannot_apply_are_user_errors(run_cli, args, needles):
    code, out, err = run_cli(["map", "r1_decode", *args])
    assert code == 2, (out, err)
    assert "Traceback" not in err and "fix:" in err
    for needle in needles:
        assert needle in err, (needle, err)


def test_emit_mapping_writes_the_hand_mapping_with_its_overrides(run_cli, tmp_path):
    out = tmp_path / "mine.yaml"
    code, text, err = run_cli(
        ["map", "llama31_8b_decode", "--set", "batch=2", "--emit-mapping", out, "--json"]
    )
    assert code == 0, err
    first = json.loads(text)
    data = YAML(typ="safe").load(out.read_text())
    assert data["batch"] == 2 and data["kernels"]["dense"][0]["name"] == "Decoder"
    code, text, err = run_cli(["map", out, "--json"])
    assert code == 0, err
    assert json.loads(text)["total_latency_s"] == first["total_latency_s"]


def test_emit_mapping_refuses_a_directory(run_cli, tmp_path):
    assert_user_error(
        run_cli(["map", "llama31_8b_decode", "--emit-mapping", tmp_path]),
        tmp_path,
        "--emit-mapping",
        "is a directory",
    )


def test_a_prefill_latency_bound_is_refused_without_suggesting_a_decode_objective(run_cli):
    code, _, err = run_cli(["map", "r1_prefill", "--set", "kernels=auto", "--latency-bound", "1"])
    assert code == 2
    assert "drop --latency-bound" in err and "add --objective" not in err


AUTO_8B = ["map", "llama31_8b_decode", "--set", "batch=1", "--set", "kernels=auto"]


def test_auto_mapped_json_is_the_same_bytes_every_run(run_cli, tmp_path):
    code, first, err = run_cli([*AUTO_8B, "--json", "--out", tmp_path / "a"])
    assert code == 0, err
    assert "search_seconds" not in first  # wall time would make every run differ
    _, second, _ = run_cli([*AUTO_8B, "--json", "--out", tmp_path / "b"])
    assert first == second
    assert (tmp_path / "a" / "report.json").read_bytes() == (
        tmp_path / "b" / "report.json"
    ).read_bytes()


def test_timings_add_the_search_time(run_cli):
    code, out, err = run_cli([*AUTO_8B, "--json", "--timings"])
    assert code == 0, err
    assert json.loads(out)["auto_mapping"]["search_seconds"] >= 0
    _, text, _ = run_cli(AUTO_8B)
    assert re.search(r"mappings simulated, \d+\.\d s", " ".join(text.split()))


def test_a_decode_report_with_a_fixed_batch_has_its_max_batch(run_cli):
    code, out, err = run_cli(["map", "llama31_8b_decode", "--json"])
    assert code == 0, err
    report = json.loads(out)
    assert report["batch"] == 64 and report["max_batch_size"] == 512
    _, text, _ = run_cli(["map", "llama31_8b_decode"])
    assert "max batch size (power of two that fits HBM): 512" in text
    _, prefill, _ = run_cli(["map", "llama31_8b_prefill", "--json"])
    assert json.loads(prefill)["max_batch_size"] is None  # a prefill graph has no decode batch


@pytest.mark.parametrize(
    "name", ["r1_prefill", "r1_decode", "llama31_8b_prefill", "llama31_8b_decode"]
)
def test_a_copied_shipped_mapping_runs(run_cli, mappings_dir, tmp_path, monkeypatch, name):
    """`cp rdusim/mappings/X.yaml mine.yaml && rdusim map mine.yaml` runs: a shipped mapping
    names its model by its shipped name, not by a path relative to rdusim's folder."""
    text = (mappings_dir / f"{name}.yaml").read_text(encoding="utf-8")
    assert "../" not in text
    (tmp_path / "mine.yaml").write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code, copied, err = run_cli(["map", "mine.yaml", "--json"])
    assert code == 0, err
    _, shipped, _ = run_cli(["map", name, "--json"])
    assert json.loads(copied)["total_latency_s"] == json.loads(shipped)["total_latency_s"]


def _shipped_mappings() -> list[str]:
    from rdusim.spec.catalog import shipped_mappings

    return sorted(shipped_mappings())


@pytest.mark.parametrize("name", _shipped_mappings())
def test_every_shipped_mapping_copied_elsewhere_resolves_as_shipped(tmp_path, monkeypatch, name):
    """Every shipped mapping, copied into an empty folder, names the same model and hardware
    as the shipped one (the four above also run to the same report)."""
    from rdusim.spec.catalog import shipped_mappings
    from rdusim.spec.mapping import load_mapping

    text = shipped_mappings()[name].read_text(encoding="utf-8")
    assert "../" not in text
    (tmp_path / "mine.yaml").write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    copied, shipped = load_mapping(tmp_path / "mine.yaml"), load_mapping(name)
    assert copied.model == shipped.model and copied.hardware == shipped.hardware
    assert copied.spec.model_dump() == shipped.spec.model_dump()


TINY_SRAM = ["--set", "hardware.socket.pmu_bytes=2e3", "--set", "hardware.socket.sram_bytes=2.08e6"]


def test_no_legal_mapping_names_the_op_and_offers_only_fixes_that_are_off(run_cli):
    # the prefill mapping has SnapStream on: enabling it is no fix
    code, out, err = run_cli(["map", "llama31_8b_prefill", "--set", "kernels=auto", *TINY_SRAM])
    assert code == 2, (out, err)
    assert "kernels: op q_proj of the dense layers fits no kernel" in err
    assert "2.12 MB of SRAM" in err and "Traceback" not in err
    fix = err.split("fix:", 1)[1]
    assert "snapstream" not in fix and "more SRAM" in fix


# --------------------------------------------------------------------------------------------
# speculative decoding with a draft model

SPEC_POINT = ("batch=1", "seq_len=8192", "snapstream.enabled=false")
SPEC_DRAFT = (
    "speculative.draft=llama-3.2-1b",
    "speculative.draft_tokens=4",
    "speculative.acceptance=0.8",
)


def test_speculative_decoding_on_llama_70b(run_cli):
    plain = map_json(run_cli, "llama31_70b_decode", *SPEC_POINT)
    report = map_json(run_cli, "llama31_70b_decode", *SPEC_POINT, *SPEC_DRAFT)
    # (1 - 0.8^5) / (1 - 0.8) tokens accepted per step
    assert report["tokens_per_step"] == pytest.approx(3.3616, abs=1e-12)
    assert report["throughput_tokens_per_s"] > 2 * plain["throughput_tokens_per_s"]
    sp = report["speculation"]
    assert (sp["drafter"], sp["draft"], sp["draft_tokens"], sp["verified_tokens"]) == (
        "model",
        "llama-3.2-1b",
        4,
        5,
    )
    assert sp["draft_time_s"] + sp["verify_s"] == pytest.approx(report["total_latency_s"])
    assert sp["draft_time_s"] == pytest.approx(4 * sp["draft_step_s"])
    assert 0 < sp["draft_share"] < 1 and sp["draft_weights_bytes"] > 0
    assert report["mtp"] is None  # the model has no MTP module drafting
    assert plain["speculation"]["drafter"] == "none"


def test_speculative_text_report(run_cli):
    args = ["map", "llama31_70b_decode"]
    for s in (*SPEC_POINT, *SPEC_DRAFT):
        args += ["--set", s]
    code, out, err = run_cli(args)
    assert code == 0, err
    text = " ".join(out.split())
    assert "speculative decoding: draft llama-3.2-1b, 4 drafts at acceptance 0.8" in text
    assert "3.362 tokens/step" in text


@pytest.mark.parametrize(
    ("mapping", "change", "needles"),
    [
        ("llama31_70b_decode", "speculative.draft=llama-9b", ("speculative.draft", "not found")),
        ("llama31_70b_decode", "speculative.acceptance=1.5", ("speculative.acceptance",)),
        ("llama31_70b_decode", "speculative.draft_tokens=0", ("speculative.draft_tokens",)),
        ("llama31_70b_prefill", "speculative.draft_tokens=4", ("applies to decode",)),
        ("r1_decode", "speculative.draft_tokens=4", ("both mtp",)),
    ],
)
def test_speculative_mistakes_are_user_errors(run_cli, mappings_dir, mapping, change, needles):
    sets = [s for s in SPEC_DRAFT if s.split("=")[0] != change.split("=")[0]] + [change]
    args = ["map", mapping]
    for s in sets:
        args += ["--set", s]
    assert_user_error(run_cli(args), mappings_dir / f"{mapping}.yaml", *needles)


def test_a_draft_with_another_vocabulary_is_a_user_error(run_cli, mappings_dir, tmp_path):
    text = (mappings_dir.parent / "models" / "llama-3.2-1b.yaml").read_text(encoding="utf-8")
    draft = tmp_path / "other-tokenizer.yaml"
    draft.write_text(text.replace("vocab_size: 128256", "vocab_size: 32000"), encoding="utf-8")
    args = ["map", "llama31_70b_decode", "--set", f"speculative.draft={draft}"]
    for s in SPEC_DRAFT[1:]:
        args += ["--set", s]
    assert_user_error(
        run_cli(args), mappings_dir / "llama31_70b_decode.yaml", "same tokenizer", "32000"
    )
