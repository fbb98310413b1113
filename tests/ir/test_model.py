"""Whole-model figures: parameter counts, activated parameters, KV bytes per token, layers."""

from __future__ import annotations

import pytest

from rdusim.ir.graph import Phase
from rdusim.ir.model import build_model, layer_counts, summarize
from rdusim.spec.model import load_model_config

# Published totals (model cards): DeepSeek-V3/R1 671B main model, 37B activated;
# Llama-3.1 8.03B / 70.55B / 405.85B (Hugging Face safetensors metadata).
LLAMA_PARAMS = {
    "llama-3.1-8b": 8.03e9,
    "llama-3.1-70b": 70.55e9,
    "llama-3.1-405b": 405.85e9,
}
# 2 (K and V) x 8 KV heads x 128 dims x 2 bytes x layers
LLAMA_KV = {"llama-3.1-8b": 131072, "llama-3.1-70b": 327680, "llama-3.1-405b": 516096}
LLAMA_LAYERS = {"llama-3.1-8b": 32, "llama-3.1-70b": 80, "llama-3.1-405b": 126}


@pytest.fixture(scope="module")
def r1_summary(r1):
    return summarize(r1)


def test_r1_total_params(r1_summary):
    assert r1_summary.params_total == pytest.approx(671.0e9, rel=0.005)


def test_r1_active_params(r1_summary):
    assert 36.5e9 <= r1_summary.params_active <= 38.5e9


def test_r1_mtp_is_reported_separately(r1_summary):
    assert r1_summary.params_mtp == pytest.approx(11.6e9, rel=0.02)
    # one MoE layer plus the eh projection and its two norms
    h = 7168
    assert r1_summary.params_mtp > 2 * h * h


def test_r1_kv_bytes_per_token(r1_summary):
    assert r1_summary.kv_bytes_per_token == 70272  # (512 + 64) x 2 bytes x 61 layers


def test_r1_layers(r1, r1_summary):
    assert r1_summary.num_layers == {"dense": 3, "moe": 58}
    assert layer_counts(r1) == {"dense": 3, "moe": 58}
    assert r1_summary.family == "deepseek_v3"
    assert r1_summary.name == "deepseek-r1"


def test_r1_total_from_hand_formula(r1_summary):
    h, vocab, ql, nh, r, rope, nope, vd = 7168, 129280, 1536, 128, 512, 64, 128, 128
    attn = h + h * ql + ql + ql * nh * (nope + rope) + h * (r + rope) + r
    attn += r * nh * (nope + vd) + nh * vd * h
    moe = h + h * 256 + 3 * h * 2048 + 256 * 3 * h * 2048
    dense = h + 3 * h * 18432
    total = vocab * h + (h + h * vocab) + 3 * (attn + dense) + 58 * (attn + moe)
    assert r1_summary.params_total == total
    assert r1_summary.params_embedding == vocab * h
    active = vocab * h + (h + h * vocab) + 3 * (attn + dense)
    active += 58 * (attn + h + h * 256 + 3 * h * 2048 + 8 * 3 * h * 2048)
    assert r1_summary.params_active == active


def test_r1_fp8_weights_fit_the_node(r1_summary):
    # mostly FP8 (1 byte per parameter); embedding, head, norms and router gate in BF16
    assert r1_summary.params_total < r1_summary.weight_bytes < 1.01 * r1_summary.params_total
    assert r1_summary.weight_bytes < 16 * 64e9


def test_r1_in_bf16_doubles_weight_bytes(edit_spec, r1_path):
    spec = edit_spec(r1_path, {"dtypes": "{weights: bf16}"})
    s = summarize(load_model_config(spec.path))
    assert s.weight_bytes == pytest.approx(2 * s.params_total)
    assert s.weight_bytes > 16 * 64e9  # would not fit in HBM: why the paper deploys FP8


def test_fp8_kv_cache_halves_kv_bytes(edit_spec, r1_path):
    spec = edit_spec(r1_path, {"dtypes": "{kv_cache: fp8}"})
    assert summarize(load_model_config(spec.path)).kv_bytes_per_token == 70272 / 2


@pytest.mark.parametrize("name", sorted(LLAMA_PARAMS))
def test_llama_summary(llama_configs, name):
    s = summarize(llama_configs[name])
    assert s.params_total == pytest.approx(LLAMA_PARAMS[name], rel=0.005)
    assert s.params_active == s.params_total  # dense
    assert s.params_mtp == 0
    assert s.kv_bytes_per_token == LLAMA_KV[name]
    assert s.num_layers == {"dense": LLAMA_LAYERS[name]}
    assert s.weight_bytes == 2 * s.params_total  # BF16


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_build_model(r1, llama8b, phase):
    g = build_model(r1, phase)
    assert g.phase == phase and g.phase is Phase(phase)
    assert set(g.layers) == {"dense", "moe"}
    assert g.layer_counts == {"dense": 3, "moe": 58}
    (module,) = g.mtp  # a projection and one MoE layer
    assert module.layer.order() == g.layers["moe"].order()
    assert module.projection.order() == ["mtp_hnorm", "mtp_enorm", "mtp_concat", "mtp_eh_proj"]
    gl = build_model(llama8b, phase)
    assert set(gl.layers) == {"dense"}
    assert gl.mtp == []


def test_summary_agrees_across_phases(r1):
    """Prefill (naive MLA) and decode (absorbed MLA) store the same weights."""
    pre, dec = build_model(r1, "prefill"), build_model(r1, "decode")
    for kind in ("dense", "moe"):
        assert pre.layers[kind].weight_params() == dec.layers[kind].weight_params()


def test_mtp_modules_follow_num_nextn_predict_layers(tmp_path, r1, models_dir):
    """Each MTP module adds a projection and one MoE layer; the count comes from the config."""
    text = (models_dir / "deepseek-r1.yaml").read_text()
    two = tmp_path / "r1-two-mtp.yaml"
    two.write_text(text.replace("num_nextn_predict_layers: 1", "num_nextn_predict_layers: 2"))
    cfg2 = load_model_config(two)
    one, both = summarize(r1), summarize(cfg2)
    assert both.params_mtp == pytest.approx(2 * one.params_mtp, rel=1e-12)
    assert both.params_total == one.params_total
    assert len(build_model(cfg2, "decode").mtp) == 2
