"""`rdusim model`: the report, its JSON keys, and user errors (exit 2, located, no traceback)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rdusim.ir.model import summarize
from rdusim.spec.model import load_model_config

EXPECTED = {
    # name: (params_total, kv_bytes_per_token, num_layers)
    "deepseek-r1": (671.0e9, 70272, 61),
    "llama-3.1-8b": (8.03e9, 131072, 32),
    "llama-3.1-70b": (70.55e9, 327680, 80),
    "llama-3.1-405b": (405.85e9, 516096, 126),
}

HF_LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "max_position_embeddings": 131072,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "rope_type": "llama3"},
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}


def json_report(run_cli, *args):
    code, out, err = run_cli(["model", *args, "--json"])
    assert code == 0, err
    return json.loads(out)


def assert_user_error(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    assert "fix:" in err
    for needle in needles:
        assert needle in err, (needle, err)


# --------------------------------------------------------------------------------------------
# reports


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_json_keys_match_published_figures(run_cli, model_file, name):
    total, kv, layers = EXPECTED[name]
    r = json_report(run_cli, model_file(name))
    assert r["params_total"] == pytest.approx(total, rel=0.005)
    assert r["kv_bytes_per_token"] == kv
    assert r["num_layers"] == layers
    if name == "deepseek-r1":
        assert 36.5e9 <= r["params_active"] <= 38.5e9
        assert r["params_mtp"] == pytest.approx(11.6e9, rel=0.02)
    else:
        assert r["params_active"] == r["params_total"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_json_agrees_with_summarize(run_cli, model_file, name):
    path = model_file(name)
    s = summarize(load_model_config(path))
    r = json_report(run_cli, path)
    assert r["params_total"] == s.params_total
    assert r["params_active"] == s.params_active
    assert r["kv_bytes_per_token"] == s.kv_bytes_per_token
    assert r["num_layers"] == sum(s.num_layers.values())
    assert r["model"] == name


def test_r1_json_layer_table(run_cli, r1_path):
    r = json_report(run_cli, r1_path)
    assert r["family"] == "deepseek_v3"
    assert r["layers_by_kind"] == {"dense": 3, "moe": 58}
    assert r["dtypes"]["weights"] == "fp8"
    layer = r["layer"]
    assert (layer["kind"], layer["phase"], layer["batch"], layer["seq_len"]) == (
        "moe",
        "prefill",
        1,
        4096,
    )
    ops = {o["op"]: o for o in layer["ops"]}
    L = 4096
    assert ops["attention"]["flops"] == pytest.approx(2 * 128 * (L * (L + 1) / 2) * (192 + 128))
    for row in layer["ops"]:
        assert {"op", "kind", "flops", "bytes_read", "bytes_written", "weight_bytes"} <= set(row)


def test_decode_phase(run_cli, r1_path):
    r = json_report(run_cli, r1_path, "--phase", "decode", "--seq-len", "32768", "--batch", "16")
    layer = r["layer"]
    assert (layer["phase"], layer["batch"], layer["seq_len"]) == ("decode", 16, 32768)
    ops = {o["op"]: o for o in layer["ops"]}
    assert "q_absorb" in ops and "v_absorb" in ops and "kv_b_proj" not in ops
    assert ops["attention"]["flops"] == 2 * 16 * 128 * 32768 * (512 + 64 + 512)


def test_text_report(run_cli, r1_path):
    code, out, err = run_cli(["model", r1_path])
    assert code == 0, err
    assert "deepseek-r1" in out
    assert "70272 bytes per token" in out
    assert "3 dense, 58 moe" in out
    for op in ("q_b_proj", "attention", "experts_up_proj"):
        assert op in out
    assert err == ""


def test_hf_config_json_through_the_cli(run_cli, write_file):
    path = write_file("config.json", json.dumps(HF_LLAMA_CONFIG, indent=2))
    r = json_report(run_cli, path)
    assert r["family"] == "llama"
    assert r["num_layers"] == 16
    # 2 x 8 KV heads x 64 dims x 2 bytes x 16 layers
    assert r["kv_bytes_per_token"] == 2 * 8 * 64 * 2 * 16
    # tied embeddings: the LM head adds no parameters
    h, w, v = 2048, 8192, 128256
    per_layer = 2 * h + h * 32 * 64 + 2 * h * 8 * 64 + 32 * 64 * h + 3 * h * w
    assert r["params_total"] == v * h + h + 16 * per_layer


# --------------------------------------------------------------------------------------------
# user errors


def test_missing_field(run_cli, edit_spec, model_file):
    spec = edit_spec(model_file("llama-3.1-8b"), {"hidden_size": None}, name="nohidden.yaml")
    code, out, err = run_cli(["model", spec.path])
    assert_user_error(code, err, str(spec.path), "hidden_size", "add the key")
    assert out == ""


def test_wrongly_typed_field_names_the_line(run_cli, edit_spec, model_file):
    spec = edit_spec(model_file("llama-3.1-8b"), {"hidden_size": "seven-thousand"})
    code, _, err = run_cli(["model", spec.path])
    line = spec.line("hidden_size")
    assert_user_error(code, err, f"{spec.path}:{line}: hidden_size:", "seven-thousand")


def test_unknown_family(run_cli, edit_spec, model_file):
    spec = edit_spec(model_file("llama-3.1-8b"), {"model_type": "gpt2"})
    code, _, err = run_cli(["model", spec.path])
    line = spec.line("model_type")
    assert_user_error(code, err, f"{spec.path}:{line}: model_type:", "gpt2", "deepseek_v3")


def test_negative_size(run_cli, edit_spec, model_file):
    spec = edit_spec(model_file("deepseek-r1"), {"num_hidden_layers": "-2"})
    code, _, err = run_cli(["model", spec.path])
    line = spec.line("num_hidden_layers")
    assert_user_error(code, err, f"{spec.path}:{line}: num_hidden_layers:", "-2")


def test_missing_file(run_cli, tmp_path):
    path = tmp_path / "no-such-model.yaml"
    code, _, err = run_cli(["model", path])
    assert_user_error(code, err, str(path), "not found")


def test_malformed_yaml_names_the_line(run_cli, write_file):
    path = write_file("broken.yaml", "name: x\nmodel_type: llama\nhidden_size: [1, 2\nfoo: 3\n")
    code, _, err = run_cli(["model", path])
    assert_user_error(code, err, f"{path}:4:", "malformed YAML")


@pytest.mark.parametrize(("flag", "value"), [("--seq-len", "0"), ("--seq-len", "-5")])
def test_non_positive_seq_len(run_cli, r1_path, flag, value):
    code, out, err = run_cli(["model", r1_path, flag, value])
    assert_user_error(code, err, flag, value)
    assert out == ""


def test_zero_batch(run_cli, r1_path):
    code, _, err = run_cli(["model", r1_path, "--batch", "0"])
    assert_user_error(code, err, "--batch")


def test_argparse_errors_exit_2(run_cli, r1_path):
    code, _, err = run_cli(["model", r1_path, "--phase", "train"])
    assert code == 2
    assert "train" in err and "Traceback" not in err
    code, _, err = run_cli(["model"])
    assert code == 2
    code, _, err = run_cli(["model", r1_path, "--seq-len", "lots"])
    assert code == 2
    assert "Traceback" not in err


def test_real_process_exit_code(tmp_path, edit_spec, model_file):
    """The installed entry point's behaviour, in a fresh interpreter."""
    spec = edit_spec(model_file("llama-3.1-8b"), {"hidden_size": "seven-thousand"})
    script = "import sys; from rdusim.cli import main; sys.exit(main())"
    proc = subprocess.run(
        [sys.executable, "-c", script, "model", str(spec.path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"{spec.path}:{spec.line('hidden_size')}: hidden_size:" in proc.stderr
    assert "fix:" in proc.stderr
