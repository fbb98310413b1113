"""Model specs: the shipped files, Hugging Face config.json compatibility, dtypes, and errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rdusim.errors import SpecError, SpecErrors
from rdusim.spec.model import (
    DTYPE_BYTES,
    FAMILIES,
    IGNORED_KEYS,
    LIMITS,
    DeepSeekV3Config,
    Dtypes,
    GQAConfig,
    LlamaConfig,
    MistralConfig,
    MixtralConfig,
    MoEConfig,
    Qwen2Config,
    Qwen2MoeConfig,
    Qwen3Config,
    Qwen3MoeConfig,
    accepted_keys,
    load_model_config,
)
from rdusim.spec.yamlio import validate

MODEL_NAMES = ("deepseek-r1", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b")

# The config.json files as published on the Hugging Face Hub (values copied field by field).
HF_LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}

HF_DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"},
    "aux_loss_alpha": 0.001,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "ep_size": 1,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "initializer_range": 0.02,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "v_head_dim": 128,
    "vocab_size": 129280,
}


# --------------------------------------------------------------------------------------------
# the shipped model files


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_shipped_models_load(model_file, name):
    cfg = load_model_config(model_file(name))
    assert cfg.name == name
    expected = DeepSeekV3Config if name.startswith("deepseek") else LlamaConfig
    assert isinstance(cfg, expected)


def test_r1_fields(r1):
    assert (r1.hidden_size, r1.num_hidden_layers, r1.num_attention_heads) == (7168, 61, 128)
    assert (r1.q_lora_rank, r1.kv_lora_rank) == (1536, 512)
    assert (r1.qk_nope_head_dim, r1.qk_rope_head_dim, r1.v_head_dim) == (128, 64, 128)
    assert r1.qk_head_dim == 192
    assert (r1.n_routed_experts, r1.n_shared_experts, r1.num_experts_per_tok) == (256, 1, 8)
    assert (r1.n_group, r1.topk_group, r1.scoring_func) == (8, 4, "sigmoid")
    assert r1.vocab_size == 129280
    assert r1.num_nextn_predict_layers == 1


def test_r1_layer_kinds(r1):
    kinds = [r1.layer_kind(i) for i in range(r1.num_hidden_layers)]
    assert kinds[:3] == ["dense"] * 3
    assert kinds[3:] == ["moe"] * 58


def test_moe_layer_freq_interleaves(r1):
    cfg = r1.model_copy(update={"moe_layer_freq": 2, "first_k_dense_replace": 1})
    kinds = [cfg.layer_kind(i) for i in range(6)]
    assert kinds == ["dense", "dense", "moe", "dense", "moe", "dense"]


@pytest.mark.parametrize(
    ("name", "hidden", "layers", "heads", "kv_heads"),
    [
        ("llama-3.1-8b", 4096, 32, 32, 8),
        ("llama-3.1-70b", 8192, 80, 64, 8),
        ("llama-3.1-405b", 16384, 126, 128, 8),
    ],
)
def test_llama_fields(llama_configs, name, hidden, layers, heads, kv_heads):
    cfg = llama_configs[name]
    assert (cfg.hidden_size, cfg.num_hidden_layers) == (hidden, layers)
    assert (cfg.num_attention_heads, cfg.kv_heads) == (heads, kv_heads)
    assert cfg.attention_head_dim == 128
    assert all(cfg.layer_kind(i) == "dense" for i in range(layers))


def test_llama_head_dim_defaults_to_hidden_over_heads(llama8b):
    cfg = llama8b.model_copy(update={"head_dim": None})
    assert cfg.attention_head_dim == 4096 // 32


def test_llama_kv_heads_default_to_heads(llama8b):
    cfg = llama8b.model_copy(update={"num_key_value_heads": None})
    assert cfg.kv_heads == cfg.num_attention_heads


def test_specs_are_frozen(r1):
    with pytest.raises(Exception, match="frozen"):
        r1.hidden_size = 1  # type: ignore[misc]


# --------------------------------------------------------------------------------------------
# dtypes


def test_dtypes_defaults():
    d = Dtypes()
    assert d.weights is None
    assert (d.dense_weights, d.activations, d.kv_cache) == ("bf16", "bf16", "bf16")


def test_dtype_bytes_table():
    assert DTYPE_BYTES == {
        "fp32": 4.0,
        "bf16": 2.0,
        "fp16": 2.0,
        "fp8": 1.0,
        "int8": 1.0,
        "int4": 0.5,
    }


def test_default_weight_dtype_depends_on_family(tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(HF_DEEPSEEK_V3), encoding="utf-8")
    ll = tmp_path / "ll.json"
    ll.write_text(json.dumps(HF_LLAMA_31_8B), encoding="utf-8")
    cds, cll = load_model_config(ds), load_model_config(ll)
    assert cds.dtypes.weights is None and cds.bytes_of("weights") == 1.0  # FP8 checkpoint
    assert cll.dtypes.weights is None and cll.bytes_of("weights") == 2.0  # BF16 checkpoint
    for cfg in (cds, cll):
        assert cfg.bytes_of("dense_weights") == 2.0
        assert cfg.bytes_of("activations") == 2.0
        assert cfg.bytes_of("kv_cache") == 2.0


def test_dtypes_override(edit_spec, model_file):
    spec = edit_spec(model_file("llama-3.1-8b"), {"dtypes": "{weights: int4, kv_cache: fp8}"})
    cfg = load_model_config(spec.path)
    assert cfg.bytes_of("weights") == 0.5
    assert cfg.bytes_of("kv_cache") == 1.0
    assert cfg.bytes_of("activations") == 2.0


def test_unknown_dtype_names_the_key(edit_spec, model_file):
    spec = edit_spec(model_file("llama-3.1-8b"), {"dtypes": "{weights: fp7}"})
    with pytest.raises(SpecError) as exc:
        load_model_config(spec.path)
    assert exc.value.key == "dtypes.weights"
    assert exc.value.line == spec.line("dtypes")
    assert "fp7" in str(exc.value)


def test_misspelt_dtype_key_is_refused(tmp_path, model_file):
    text = model_file("deepseek-r1").read_text(encoding="utf-8")
    assert "  kv_cache: bf16" in text
    path = tmp_path / "r1.yaml"
    path.write_text(text.replace("  kv_cache: bf16", "  kv_cahce: bf16"), encoding="utf-8")
    with pytest.raises(SpecError) as exc:
        load_model_config(path)
    assert exc.value.key == "dtypes.kv_cahce"
    assert "remove the key or check its spelling" in str(exc.value)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert "kv_cahce" in lines[exc.value.line - 1]


# --------------------------------------------------------------------------------------------
# Hugging Face config.json


def test_hf_llama_config_json_loads(tmp_path, llama8b):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(HF_LLAMA_31_8B, indent=2), encoding="utf-8")
    cfg = load_model_config(path)
    assert isinstance(cfg, LlamaConfig)
    assert cfg.name == "config"  # the file's stem when there is no `name`
    # same architecture as the shipped YAML (which only adds `name`, `head_dim` and `dtypes`)
    for field in ("hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size"):
        assert getattr(cfg, field) == getattr(llama8b, field)
    assert cfg.kv_heads == llama8b.kv_heads
    assert cfg.attention_head_dim == llama8b.attention_head_dim


def test_hf_config_json_on_one_line_loads(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(HF_LLAMA_31_8B), encoding="utf-8")
    assert load_model_config(path).hidden_size == 4096


def test_hf_deepseek_config_json_matches_shipped_r1(tmp_path, r1):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(HF_DEEPSEEK_V3, indent=2), encoding="utf-8")
    cfg = load_model_config(path)
    assert isinstance(cfg, DeepSeekV3Config)
    skip = {"name", "dtypes", "max_position_embeddings", "quantization_config"}
    for field in DeepSeekV3Config.model_fields:
        if field not in skip:
            assert getattr(cfg, field) == getattr(r1, field), field


def test_malformed_json_names_the_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{\n  "model_type": "llama",\n  "hidden_size": 4096,,\n}\n', encoding="utf-8")
    with pytest.raises(SpecError) as exc:
        load_model_config(path)
    assert exc.value.line == 3
    assert exc.value.fix


# --------------------------------------------------------------------------------------------
# errors


def test_missing_field(edit_spec, model_file):
    spec = edit_spec(model_file("llama-3.1-8b"), {"hidden_size": None})
    with pytest.raises(SpecError) as exc:
        load_model_config(spec.path)
    err = exc.value
    assert err.key == "hidden_size"
    assert err.file == str(spec.path)
    assert err.fix == "add the key"


def test_wrong_type_names_key_and_line(edit_spec, model_file):
    spec = edit_spec(model_file("llama-3.1-8b"), {"hidden_size": "seven-thousand"})
    with pytest.raises(SpecError) as exc:
        load_model_config(spec.path)
    err = exc.value
    assert (err.key, err.line) == ("hidden_size", spec.line("hidden_size"))
    assert "seven-thousand" in err.problem
    assert err.fix == "write a whole number"
    assert str(err).startswith(f"{spec.path}:{spec.line('hidden_size')}: hidden_size: ")


def test_fractional_size_is_refused(edit_spec, model_file):
    spec = edit_spec(model_file("llama-3.1-8b"), {"hidden_size": "4096.5"})
    with pytest.raises(SpecError) as exc:
        load_model_config(spec.path)
    assert exc.value.key == "hidden_size"
    assert exc.value.fix == "write a whole number"


@pytest.mark.parametrize("value", ["true", "false"])
def test_boolean_size_is_refused(edit_spec, model_file, value):
    spec = edit_spec(model_file("deepseek-r1"), {"num_hidden_layers": value})
    with pytest.raises(SpecError) as exc:
        load_model_config(spec.path)
    assert (exc.value.key, exc.value.line) == ("num_hidden_layers", spec.line("num_hidden_layers"))


def test_boolean_field_still_takes_booleans(edit_spec, model_file):
    spec = edit_spec(model_file("llama-3.1-8b"), {"tie_word_embeddings": "true"})
    assert load_model_config(spec.path).tie_word_embeddings is True


def test_unknown_family(edit_spec, model_file):
    spec = edit_spec(model_file("llama-3.1-8b"), {"model_type": "gpt2"})
    with pytest.raises(SpecError) as exc:
        load_model_config(spec.path)
    err = exc.value
    assert (err.key, err.line) == ("model_type", spec.line("model_type"))
    assert "gpt2" in err.problem
    assert "deepseek_v3" in err.fix and "llama" in err.fix


def test_missing_family(edit_spec, model_file):
    spec = edit_spec(model_file("llama-3.1-8b"), {"model_type": None})
    with pytest.raises(SpecError) as exc:
        load_model_config(spec.path)
    assert exc.value.key == "model_type"
    assert "missing" in exc.value.problem


def test_negative_size(edit_spec, model_file):
    spec = edit_spec(model_file("deepseek-r1"), {"num_hidden_layers": "-2"})
    with pytest.raises(SpecError) as exc:
        load_model_config(spec.path)
    err = exc.value
    assert (err.key, err.line) == ("num_hidden_layers", spec.line("num_hidden_layers"))
    assert "-2" in err.problem


def test_several_problems_are_reported_together(edit_spec, model_file):
    spec = edit_spec(model_file("llama-3.1-8b"), {"hidden_size": "x", "vocab_size": "0"})
    with pytest.raises(SpecErrors) as exc:
        load_model_config(spec.path)
    keys = {e.key for e in exc.value.errors}
    assert keys == {"hidden_size", "vocab_size"}
    assert all(e.file == str(spec.path) and e.fix for e in exc.value.errors)


@pytest.mark.parametrize(
    ("replace", "key"),
    [
        ({"num_experts_per_tok": "300"}, "num_experts_per_tok"),
        ({"n_group": "7"}, "n_group"),
        ({"topk_group": "9"}, "topk_group"),
        ({"first_k_dense_replace": "62"}, "first_k_dense_replace"),
    ],
)
def test_deepseek_inconsistent_keys_are_located(edit_spec, model_file, replace, key):
    spec = edit_spec(model_file("deepseek-r1"), replace)
    with pytest.raises(SpecError) as exc:
        load_model_config(spec.path)
    assert (exc.value.key, exc.value.line) == (key, spec.line(key))
    assert exc.value.fix


def test_llama_heads_must_divide_into_kv_groups(edit_spec, model_file):
    spec = edit_spec(model_file("llama-3.1-8b"), {"num_key_value_heads": "7"})
    with pytest.raises(SpecError) as exc:
        load_model_config(spec.path)
    assert exc.value.key == "num_key_value_heads"
    assert exc.value.line == spec.line("num_key_value_heads")


@pytest.mark.parametrize("suffix", ["yaml", "json"])
def test_misspelt_key_is_refused_with_did_you_mean(tmp_path, model_file, suffix):
    # `num_key_value_head` used to be ignored, silently making Llama-3.1-8B full MHA
    if suffix == "yaml":
        text = model_file("llama-3.1-8b").read_text(encoding="utf-8")
        text = text.replace("num_key_value_heads:", "num_key_value_head:")
    else:
        data = dict(HF_LLAMA_31_8B)
        data["num_key_value_head"] = data.pop("num_key_value_heads")
        text = json.dumps(data, indent=2)
    path = tmp_path / f"model.{suffix}"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as exc:
        load_model_config(path)
    err = exc.value
    assert (err.file, err.key) == (str(path), "num_key_value_head")
    assert "num_key_value_head" in path.read_text(encoding="utf-8").splitlines()[err.line - 1]
    assert "did you mean 'num_key_value_heads'?" in (err.fix or "")


def test_unknown_key_without_a_near_one_lists_the_family_keys(tmp_path):
    data = dict(HF_LLAMA_31_8B, some_future_field={"a": 1})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(SpecError) as exc:
        load_model_config(path)
    assert exc.value.key == "some_future_field"
    assert "a llama model reads:" in (exc.value.fix or "")
    assert "num_key_value_heads" in (exc.value.fix or "")


def test_several_unknown_keys_are_reported_together(tmp_path):
    data = dict(HF_LLAMA_31_8B, hiden_size=1, vocab=2)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    with pytest.raises(SpecErrors) as exc:
        load_model_config(path)
    assert {e.key for e in exc.value.errors} == {"hiden_size", "vocab"}


def test_unknown_key_of_another_family_is_refused(tmp_path):
    # sliding_window is Mistral's; transformers' Llama does not read it
    data = dict(HF_LLAMA_31_8B, sliding_window=4096)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    with pytest.raises(SpecError) as exc:
        load_model_config(path)
    assert exc.value.key == "sliding_window"


def test_every_ignored_key_loads_in_every_family():
    for name, cls in FIXTURE_FAMILIES.items():
        data = fixture_data(name) | {key: None for key in IGNORED_KEYS}
        assert validate(cls, data, file="f.json").model_type == fixture_data(name)["model_type"]


def _readme_ignored_keys() -> set[str]:
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    block = text[text.index("keys accepted and ignored") :].split("\n\n")[1]
    keys: set[str] = set()
    for item in block.split("\n- "):
        keys.update(re.findall(r"`([^`]+)`", item.split(": ")[0]))
    return keys


def test_readme_lists_exactly_the_ignored_keys():
    family_keys = {k for fam in FAMILIES.values() for k in fam.config.ignored_keys}
    assert _readme_ignored_keys() == set(IGNORED_KEYS) | family_keys
    assert family_keys == {"sliding_window", "max_window_layers"}


def test_ignored_keys_are_read_by_no_family():
    for fam in FAMILIES.values():
        assert not IGNORED_KEYS & set(fam.config.model_fields)
        assert not set(fam.config.ignored_keys) & set(fam.config.model_fields)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_shipped_models_hold_only_accepted_keys(model_file, name):
    cfg = load_model_config(model_file(name))
    data = yaml_keys(model_file(name))
    assert data <= accepted_keys(type(cfg))


def yaml_keys(path: Path) -> set[str]:
    return {ln.split(":")[0] for ln in path.read_text().splitlines() if re.match(r"^\w+:", ln)}


def test_quantization_config_needs_the_precision_in_dtypes(tmp_path):
    awq = {"quant_method": "awq", "bits": 4}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(HF_LLAMA_31_8B, quantization_config=awq), indent=2))
    with pytest.raises(SpecError) as exc:
        load_model_config(path)
    assert exc.value.key == "quantization_config"
    assert "dtypes.weights" in (exc.value.fix or "")
    data = dict(HF_LLAMA_31_8B, quantization_config=awq, dtypes={"weights": "int4"})
    path.write_text(json.dumps(data, indent=2))
    assert load_model_config(path).bytes_of("weights") == 0.5


@pytest.mark.parametrize(("key", "value"), [("attention_bias", True), ("topk_method", "greedy")])
def test_deepseek_keys_it_cannot_model_are_refused(tmp_path, key, value):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(HF_DEEPSEEK_V3, **{key: value}), indent=2))
    with pytest.raises(SpecError) as exc:
        load_model_config(path)
    assert exc.value.key == key


@pytest.mark.parametrize(
    ("name", "heads", "hidden"), [("llama", 48, 4096), ("mixtral-8x7b-v0.1", 96, 4096)]
)
def test_heads_that_do_not_divide_hidden_need_head_dim(tmp_path, name, heads, hidden):
    base = HF_LLAMA_31_8B if name == "llama" else fixture_data(name)
    data = dict(base, num_attention_heads=heads, num_key_value_heads=8)
    data.pop("head_dim", None)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    with pytest.raises(SpecError) as exc:
        load_model_config(path)
    err = exc.value
    assert (err.key, err.line) == ("num_attention_heads", line_of_key(path, "num_attention_heads"))
    assert f"{hidden} / {heads} = {hidden / heads:.4g}" in err.problem
    assert (err.fix or "").startswith("set head_dim")
    path.write_text(json.dumps(dict(data, head_dim=128), indent=2), encoding="utf-8")
    assert load_model_config(path).attention_head_dim == 128


def test_spec_must_be_a_mapping(write_file):
    path = write_file("list.yaml", "- a\n- b\n")
    with pytest.raises(SpecError) as exc:
        load_model_config(path)
    assert "mapping" in exc.value.problem


def test_validate_reports_dtype_errors_inside_nested_sections(tmp_path):
    data = dict(HF_LLAMA_31_8B, dtypes={"activations": "fp64"})
    with pytest.raises(SpecError) as exc:
        validate(LlamaConfig, data, file="f.yaml")
    assert exc.value.key == "dtypes.activations"


POSITIVE_LLAMA_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "vocab_size",
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(key=st.sampled_from(POSITIVE_LLAMA_KEYS), value=st.integers(-(10**6), 0))
def test_non_positive_sizes_are_refused_with_their_line(tmp_path, model_file, key, value):
    source = model_file("llama-3.1-8b")
    lines = source.read_text(encoding="utf-8").splitlines()
    out = [f"{key}: {value}" if ln.startswith(f"{key}:") else ln for ln in lines]
    path = Path(tmp_path) / "neg.yaml"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    with pytest.raises(SpecError) as exc:
        load_model_config(path)
    assert exc.value.key == key
    assert out[exc.value.line - 1].startswith(f"{key}:")


# --------------------------------------------------------------------------------------------
# upper limits: every size is bounded, so no model file can make a run take unbounded time


def _with(base: dict, **values: object) -> dict:
    return {**base, **values}


LLAMA_KEYS = [k for k in LIMITS if k in HF_LLAMA_31_8B or k == "head_dim"]
DEEPSEEK_ONLY_KEYS = [
    k for k in DeepSeekV3Config.model_fields if k in LIMITS and k not in LLAMA_KEYS
]


@pytest.mark.parametrize("key", LLAMA_KEYS)
def test_llama_sizes_above_their_limit_name_key_and_limit(key):
    with pytest.raises(SpecError) as exc:
        validate(LlamaConfig, _with(HF_LLAMA_31_8B, **{key: LIMITS[key] + 1}), file="f.yaml")
    assert exc.value.key == key
    assert f"less than or equal to {LIMITS[key]}" in str(exc.value)
    assert "limit" in (exc.value.fix or "")


@pytest.mark.parametrize("key", DEEPSEEK_ONLY_KEYS)
def test_deepseek_sizes_above_their_limit_name_key_and_limit(key):
    with pytest.raises((SpecError, SpecErrors)) as exc:
        validate(DeepSeekV3Config, _with(HF_DEEPSEEK_V3, **{key: LIMITS[key] + 1}), file="f.yaml")
    text = str(exc.value)
    assert f"{key}: Input should be less than or equal to {LIMITS[key]}" in text


@pytest.mark.parametrize(
    "value", ["1e29", "100000000000000000000000000000", "1e300", "1" + "0" * 400]
)
def test_huge_layer_count_is_refused_quickly(edit_spec, model_file, value):
    spec = edit_spec(model_file("llama-3.1-8b"), {"num_hidden_layers": value})
    with pytest.raises(SpecError) as exc:
        load_model_config(spec.path)
    assert exc.value.key == "num_hidden_layers"
    assert exc.value.line == spec.line("num_hidden_layers")
    assert "less than or equal to 1024" in str(exc.value)


@pytest.mark.parametrize("value", [".inf", ".nan", "-.inf"])
def test_non_finite_sizes_are_refused(edit_spec, model_file, value):
    spec = edit_spec(model_file("llama-3.1-8b"), {"hidden_size": value})
    with pytest.raises(SpecError) as exc:
        load_model_config(spec.path)
    assert exc.value.key == "hidden_size"


def test_sizes_at_their_limit_load():
    cfg = validate(
        LlamaConfig,
        _with(HF_LLAMA_31_8B, num_hidden_layers=LIMITS["num_hidden_layers"]),
        file="f.yaml",
    )
    assert cfg.num_hidden_layers == LIMITS["num_hidden_layers"]


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_shipped_models_are_well_inside_the_limits(model_file, name):
    cfg = load_model_config(model_file(name))
    for key, limit in LIMITS.items():
        value = getattr(cfg, key, None)
        assert value is None or value <= limit // 4, key


# --------------------------------------------------------------------------------------------
# the Llama-style families, from their published config.json files

CONFIGS = Path(__file__).resolve().parent.parent / "fixtures" / "configs"
FIXTURE_FAMILIES = {
    "mistral-7b-v0.1": MistralConfig,
    "qwen2-7b": Qwen2Config,
    "qwen3-8b": Qwen3Config,
    "mixtral-8x7b-v0.1": MixtralConfig,
    "qwen1.5-moe-a2.7b": Qwen2MoeConfig,
    "qwen3-30b-a3b": Qwen3MoeConfig,
}


def fixture_data(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text(encoding="utf-8"))


def write_config(tmp_path: Path, name: str, **keys: object) -> Path:
    """A fixture with keys changed (a value of None deletes the key)."""
    data = fixture_data(name)
    for key, value in keys.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def line_of_key(path: Path, key: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if f'"{key}"' in t)


def refused(path: Path, key: str) -> SpecError:
    with pytest.raises(SpecError) as exc:
        load_model_config(path)
    err = exc.value
    assert (err.file, err.key, err.line) == (str(path), key, line_of_key(path, key)), str(err)
    assert err.fix
    return err


@pytest.mark.parametrize("name", sorted(FIXTURE_FAMILIES))
def test_published_configs_load_as_they_are(name):
    cfg = load_model_config(CONFIGS / f"{name}.json")
    assert type(cfg) is FIXTURE_FAMILIES[name]
    assert cfg.name == name
    assert cfg.bytes_of("weights") == 2.0  # BF16 checkpoints


def test_unknown_family_fix_lists_every_registered_family(tmp_path):
    path = write_config(tmp_path, "qwen3-8b", model_type="phi3")
    err = refused(path, "model_type")
    assert "phi3" in err.problem
    for family in FAMILIES:
        assert family in (err.fix or "")


def test_family_traits():
    mistral = load_model_config(CONFIGS / "mistral-7b-v0.1.json")
    qwen2 = load_model_config(CONFIGS / "qwen2-7b.json")
    qwen3 = load_model_config(CONFIGS / "qwen3-30b-a3b.json")
    mixtral = load_model_config(CONFIGS / "mixtral-8x7b-v0.1.json")
    qmoe = load_model_config(CONFIGS / "qwen1.5-moe-a2.7b.json")
    assert isinstance(mistral, GQAConfig) and mistral.attention_window == 4096
    assert isinstance(qwen2, GQAConfig)
    assert qwen2.attention_window is None  # sliding_window is ignored: use_sliding_window false
    assert qwen2.biased == {"q_proj", "k_proj", "v_proj"}
    assert isinstance(qwen3, MoEConfig) and qwen3.qk_norm and not qwen3.biased
    assert (qwen3.n_routed_experts, qwen3.num_experts_per_tok, qwen3.expert_width) == (128, 8, 768)
    assert qwen3.shared_expert_width == 0
    assert isinstance(mixtral, MoEConfig) and mixtral.attention_window is None
    assert (mixtral.n_routed_experts, mixtral.expert_width) == (8, 14336)
    assert isinstance(qmoe, MoEConfig) and qmoe.shared_expert_gate
    assert (qmoe.n_routed_experts, qmoe.shared_expert_width) == (60, 5632)


@pytest.mark.parametrize(
    ("name", "key", "attribute", "value"),
    [
        ("mistral-7b-v0.1", "sliding_window", "attention_window", 4096),
        ("mistral-7b-v0.1", "num_key_value_heads", "kv_heads", 8),
        ("mixtral-8x7b-v0.1", "sliding_window", "attention_window", None),
        ("qwen3-8b", "head_dim", "attention_head_dim", 128),
        ("qwen3-30b-a3b", "decoder_sparse_step", "decoder_sparse_step", 1),
        ("qwen3-30b-a3b", "mlp_only_layers", "mlp_only_layers", []),
    ],
)
def test_absent_keys_take_transformers_defaults(tmp_path, name, key, attribute, value):
    cfg = load_model_config(write_config(tmp_path, name, **{key: None}))
    assert getattr(cfg, attribute) == value


def test_a_null_sliding_window_is_full_attention(tmp_path):
    path = tmp_path / "config.json"
    data = fixture_data("mistral-7b-v0.1") | {"sliding_window": None}
    path.write_text(json.dumps(data), encoding="utf-8")
    cfg = load_model_config(path)
    assert isinstance(cfg, GQAConfig) and cfg.attention_window is None


@pytest.mark.parametrize("name", ["mistral-7b-v0.1", "mixtral-8x7b-v0.1"])
def test_attention_bias_is_refused_where_it_would_add_biases(tmp_path, name):
    assert load_model_config(write_config(tmp_path, name, attention_bias=False))
    err = refused(write_config(tmp_path, name, attention_bias=True), "attention_bias")
    assert "no projection biases" in err.problem


@pytest.mark.parametrize("value", [True, False])
def test_qwen2_refuses_attention_bias_either_way(tmp_path, value):
    """Qwen2 biases q, k and v and not o: neither value of attention_bias describes that."""
    err = refused(write_config(tmp_path, "qwen2-7b", attention_bias=value), "attention_bias")
    assert "q, k and v" in err.problem


def test_qwen3_attention_bias_biases_all_four_projections(tmp_path):
    cfg = load_model_config(write_config(tmp_path, "qwen3-8b", attention_bias=True))
    assert isinstance(cfg, GQAConfig)
    assert cfg.biased == {"q_proj", "k_proj", "v_proj", "o_proj"}


@pytest.mark.parametrize("name", ["qwen3-8b", "mistral-7b-v0.1", "qwen3-30b-a3b"])
def test_mlp_bias_is_refused_outside_llama(tmp_path, name):
    assert load_model_config(write_config(tmp_path, name, mlp_bias=False))
    refused(write_config(tmp_path, name, mlp_bias=True), "mlp_bias")


def test_llama_reads_attention_and_mlp_bias(tmp_path):
    path = tmp_path / "config.json"
    data = dict(HF_LLAMA_31_8B, attention_bias=True, mlp_bias=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    cfg = load_model_config(path)
    assert isinstance(cfg, LlamaConfig)
    assert cfg.biased == {"q_proj", "k_proj", "v_proj", "o_proj", "ffn_up_proj", "ffn_down_proj"}


@pytest.mark.parametrize("name", ["qwen2-7b", "qwen3-8b", "qwen1.5-moe-a2.7b", "qwen3-30b-a3b"])
def test_use_sliding_window_is_refused(tmp_path, name):
    err = refused(write_config(tmp_path, name, use_sliding_window=True), "use_sliding_window")
    assert "max_window_layers" in err.problem
    assert "use_sliding_window: false" in (err.fix or "")


@pytest.mark.parametrize(
    ("name", "types", "needle"),
    [
        ("qwen3-8b", ["full_attention"] * 35 + ["sliding_attention"], "mixes"),
        ("qwen3-8b", ["full_attention"] * 35, "lists 35 layers"),
        ("qwen3-8b", ["sliding_attention"] * 36, "no sliding window"),
        ("mistral-7b-v0.1", ["full_attention"] * 32, "sliding window of 4096"),
    ],
)
def test_layer_types_must_give_every_layer_the_modelled_attention(tmp_path, name, types, needle):
    err = refused(write_config(tmp_path, name, layer_types=types), "layer_types")
    assert needle in err.problem


@pytest.mark.parametrize(
    ("name", "types"),
    [("qwen3-8b", ["full_attention"] * 36), ("mistral-7b-v0.1", ["sliding_attention"] * 32)],
)
def test_uniform_layer_types_that_agree_are_accepted(tmp_path, name, types):
    assert load_model_config(write_config(tmp_path, name, layer_types=types))


def test_unknown_layer_type_is_refused(tmp_path):
    path = write_config(tmp_path, "qwen3-8b", layer_types=["chunked_attention"] * 36)
    with pytest.raises((SpecError, SpecErrors)) as exc:
        load_model_config(path)
    assert "layer_types" in str(exc.value)


def test_other_activations_are_refused(tmp_path):
    err = refused(write_config(tmp_path, "qwen3-8b", hidden_act="gelu"), "hidden_act")
    assert "SwiGLU" in err.problem


@pytest.mark.parametrize(
    ("name", "keys", "key"),
    [
        ("mixtral-8x7b-v0.1", {"num_experts_per_tok": 9}, "num_experts_per_tok"),
        ("qwen3-30b-a3b", {"num_experts_per_tok": 129}, "num_experts_per_tok"),
        ("qwen3-30b-a3b", {"mlp_only_layers": [3, 48]}, "mlp_only_layers"),
        ("qwen2-7b", {"num_key_value_heads": 5}, "num_key_value_heads"),
        ("qwen3-30b-a3b", {"num_experts": True}, "num_experts"),
        (
            "qwen1.5-moe-a2.7b",
            {"shared_expert_intermediate_size": 0},
            "shared_expert_intermediate_size",
        ),
        ("qwen3-30b-a3b", {"moe_intermediate_size": None}, "moe_intermediate_size"),
    ],
)
def test_inconsistent_or_missing_family_keys_are_located(tmp_path, name, keys, key):
    path = write_config(tmp_path, name, **keys)
    with pytest.raises(SpecError) as exc:
        load_model_config(path)
    err = exc.value
    assert (err.file, err.key) == (str(path), key)
    if key in path.read_text():
        assert err.line == line_of_key(path, key)
    assert err.fix


def test_several_refusals_are_reported_together(tmp_path):
    path = write_config(tmp_path, "qwen2-7b", use_sliding_window=True, hidden_act="relu")
    with pytest.raises(SpecErrors) as exc:
        load_model_config(path)
    located = {(e.key, e.line) for e in exc.value.errors}
    assert located == {
        ("hidden_act", line_of_key(path, "hidden_act")),
        ("use_sliding_window", line_of_key(path, "use_sliding_window")),
    }


def test_refusals_also_guard_configs_built_in_python():
    with pytest.raises(SpecError) as exc:
        Qwen2Config.model_validate(fixture_data("qwen2-7b") | {"use_sliding_window": True})
    assert exc.value.key == "use_sliding_window"


def test_every_limit_is_a_key_of_some_family():
    keys = {k for fam in FAMILIES.values() for k in fam.config.model_fields}
    assert set(LIMITS) <= keys


FAMILY_KEYS = [
    (name, key)
    for name, cls in FIXTURE_FAMILIES.items()
    for key in LIMITS
    if key in cls.model_fields and key not in LLAMA_KEYS
]


@pytest.mark.parametrize(("name", "key"), FAMILY_KEYS)
def test_family_sizes_above_their_limit_name_key_and_limit(name, key):
    data = _with(fixture_data(name), **{key: LIMITS[key] + 1})
    with pytest.raises((SpecError, SpecErrors)) as exc:
        validate(FIXTURE_FAMILIES[name], data, file="f.json")
    assert f"{key}: Input should be less than or equal to {LIMITS[key]}" in str(exc.value)
