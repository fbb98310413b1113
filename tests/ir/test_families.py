"""The model-family registry and the Llama-style families, from published `config.json` files.

The fixtures under `tests/fixtures/configs/` are the Hugging Face `config.json` files as
published; each family's parameter counts are checked against the model cards, its layer graphs
against hand-written closed forms, and its prefill and decode graphs are compiled by the
auto-mapper on an SN40L-16 node and simulated.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rdusim.api import run_mapping
from rdusim.ir import families
from rdusim.ir.attrs import AttentionAttrs, CacheIndex, GemmAttrs, RoutedExperts, ScatterAttrs
from rdusim.ir.builders import deepseek, gqa
from rdusim.ir.graph import Workload
from rdusim.ir.model import build_model, cache_bytes, layer_counts, summarize
from rdusim.ir.ops import attrs_as, bytes_read, flops
from rdusim.spec import model as spec
from rdusim.spec.model import (
    GQAConfig,
    MistralConfig,
    MixtralConfig,
    Qwen2Config,
    Qwen2MoeConfig,
    Qwen3Config,
    Qwen3MoeConfig,
    load_model_config,
)

CONFIGS = Path(__file__).resolve().parent.parent / "fixtures" / "configs"

# Published totals (model cards, Hugging Face safetensors metadata) and activated parameters per
# token (model cards: Mixtral ~12.9 B, Qwen3-30B-A3B 3.3 B, Qwen1.5-MoE-A2.7B 2.7 B).
PARAMS = {
    "mistral-7b-v0.1": (7.24e9, None),
    "qwen2-7b": (7.62e9, None),
    "qwen2-72b": (72.71e9, None),
    "qwen3-8b": (8.19e9, None),
    "mixtral-8x7b-v0.1": (46.70e9, 12.9e9),
    "qwen3-30b-a3b": (30.53e9, 3.3e9),
    "qwen1.5-moe-a2.7b": (14.32e9, 2.7e9),
}
FAMILY_OF = {
    "mistral-7b-v0.1": MistralConfig,
    "qwen2-7b": Qwen2Config,
    "qwen2-72b": Qwen2Config,
    "qwen3-8b": Qwen3Config,
    "mixtral-8x7b-v0.1": MixtralConfig,
    "qwen3-30b-a3b": Qwen3MoeConfig,
    "qwen1.5-moe-a2.7b": Qwen2MoeConfig,
}
LLAMA_OPS = [
    "attn_norm",
    "q_proj",
    "k_proj",
    "v_proj",
    "rope_q",
    "rope_k",
    "kv_cache_write",
    "attention",
    "o_proj",
    "attn_residual",
]
DENSE_FFN = ["ffn_norm", "ffn_up_proj", "ffn_silu_mul", "ffn_down_proj", "ffn_residual"]
ROUTED_FFN = ["ffn_norm", "router_gate", "router_topk", "token_group"]
EXPERT_OPS = ["experts_up_proj", "experts_silu_mul", "experts_down_proj", "experts_combine"]
SHARED_OPS = ["shared_up_proj", "shared_silu_mul", "shared_down_proj"]


def load(name: str) -> GQAConfig:
    cfg = load_model_config(CONFIGS / f"{name}.json")
    assert isinstance(cfg, GQAConfig)
    return cfg


@pytest.fixture(scope="module")
def configs() -> dict[str, GQAConfig]:
    return {name: load(name) for name in PARAMS}


def with_keys(tmp_path: Path, name: str, **keys: object) -> Path:
    """A copy of a fixture with some keys changed (None deletes a key)."""
    data = json.loads((CONFIGS / f"{name}.json").read_text(encoding="utf-8"))
    for key, value in keys.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------
# the registry


def test_registered_families():
    assert set(families.FAMILIES) == {
        "deepseek_v3",
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "mixtral",
        "qwen2_moe",
        "qwen3_moe",
    }
    assert set(families.FAMILIES) == set(spec.FAMILIES)


@pytest.mark.parametrize("model_type", sorted(spec.FAMILIES))
def test_every_family_resolves_to_a_config_class_and_builders(model_type):
    fam = families.FAMILIES[model_type]
    assert fam.config is spec.FAMILIES[model_type].config
    assert fam.config.model_fields["model_type"].annotation.__args__ == (model_type,)
    for fn in ("build_layer", "build_embedding", "build_head"):
        assert callable(getattr(fam.builders, fn)), fn


def test_builders_of_the_families():
    assert families.FAMILIES["deepseek_v3"].builders is deepseek
    assert all(f.builders is gqa for t, f in families.FAMILIES.items() if t != "deepseek_v3")


def test_a_config_of_no_registered_family_is_refused(configs):
    class Custom(Qwen3Config):
        pass

    cfg = Custom.model_validate(configs["qwen3-8b"].model_dump())
    with pytest.raises(ValueError, match="not a registered"):
        families.family_of(cfg)


def test_registering_a_family_twice_is_refused():
    with pytest.raises(ValueError, match="twice"):
        spec.family(builders="gqa")(MistralConfig)


# --------------------------------------------------------------------------------------------
# parameters from the published config.json files


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_fixture_loads_as_its_family(configs, name):
    assert type(configs[name]) is FAMILY_OF[name]
    assert configs[name].name == name


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_total_params_match_the_model_card(configs, name):
    total, _ = PARAMS[name]
    assert summarize(configs[name]).params_total == pytest.approx(total, rel=0.005)


@pytest.mark.parametrize("name", sorted(n for n, (_, a) in PARAMS.items() if a))
def test_active_params_match_the_model_card(configs, name):
    _, active = PARAMS[name]
    s = summarize(configs[name])
    assert s.params_active == pytest.approx(active, rel=0.02)
    assert s.params_active < s.params_total


@pytest.mark.parametrize("name", sorted(n for n, (_, a) in PARAMS.items() if not a))
def test_dense_models_activate_every_parameter(configs, name):
    s = summarize(configs[name])
    assert s.params_active == s.params_total
    assert s.params_mtp == 0
    assert s.weight_bytes == 2 * s.params_total  # BF16


def test_qwen2_7b_params_by_hand(configs):
    """Qwen2: biases on q, k and v (not o), untied head."""
    h, w, nh, kvh, hd, vocab, layers = 3584, 18944, 28, 4, 128, 152064, 28
    attn = h * nh * hd + nh * hd + 2 * (h * kvh * hd + kvh * hd) + nh * hd * h
    layer = 2 * h + attn + 3 * h * w
    assert summarize(configs["qwen2-7b"]).params_total == 2 * vocab * h + h + layers * layer


def test_qwen3_30b_a3b_params_by_hand(configs):
    """Qwen3-MoE: QK norm of width head_dim, 128 experts of 768, top-8, no shared expert."""
    h, nh, kvh, hd, vocab, layers, e, k, w = 2048, 32, 4, 128, 151936, 48, 128, 8, 768
    attn = h * nh * hd + 2 * h * kvh * hd + nh * hd * h + 2 * hd
    moe = h * e + e * 3 * h * w
    s = summarize(configs["qwen3-30b-a3b"])
    assert s.params_total == 2 * vocab * h + h + layers * (2 * h + attn + moe)
    active = 2 * vocab * h + h + layers * (2 * h + attn + h * e + k * 3 * h * w)
    assert s.params_active == active


def test_mixtral_params_by_hand(configs):
    h, w, vocab, layers, e, k = 4096, 14336, 32000, 32, 8, 2
    attn = 2 * h * h + 2 * h * 1024
    s = summarize(configs["mixtral-8x7b-v0.1"])
    assert s.params_total == 2 * vocab * h + h + layers * (2 * h + attn + h * e + e * 3 * h * w)
    assert s.params_active == 2 * vocab * h + h + layers * (2 * h + attn + h * e + k * 3 * h * w)


def test_qwen2_moe_params_by_hand(configs):
    """Shared expert of 5632 with its sigmoid gate (hidden -> 1), 60 experts of 1408, top-4."""
    h, vocab, layers, e, k, w, sw = 2048, 151936, 24, 60, 4, 1408, 5632
    attn = 3 * (h * h + h) + h * h
    shared = 3 * h * sw + h
    s = summarize(configs["qwen1.5-moe-a2.7b"])
    assert s.params_total == 2 * vocab * h + h + layers * (
        2 * h + attn + h * e + shared + e * 3 * h * w
    )
    assert s.params_active == 2 * vocab * h + h + layers * (
        2 * h + attn + h * e + shared + k * 3 * h * w
    )


@pytest.mark.parametrize(
    ("name", "kv_heads", "head_dim", "layers"),
    [
        ("mistral-7b-v0.1", 8, 128, 32),
        ("qwen2-7b", 4, 128, 28),
        ("qwen3-8b", 8, 128, 36),
        ("mixtral-8x7b-v0.1", 8, 128, 32),
        ("qwen3-30b-a3b", 4, 128, 48),
        ("qwen1.5-moe-a2.7b", 16, 128, 24),
    ],
)
def test_kv_bytes_per_token(configs, name, kv_heads, head_dim, layers):
    assert summarize(configs[name]).kv_bytes_per_token == 2 * kv_heads * head_dim * 2 * layers


def test_rope_scaling_leaves_every_figure_unchanged(tmp_path, configs):
    """RoPE scaling changes the rotation angles, not the rotary op or any shape."""
    path = with_keys(
        tmp_path,
        "qwen3-8b",
        rope_scaling={
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 32768,
        },
    )
    scaled = load_model_config(path)
    assert summarize(scaled) == summarize(
        configs["qwen3-8b"].model_copy(update={"name": "qwen3-8b"})
    )
    wl = Workload(1, 4096, 4096)
    a, b = build_model(scaled, "prefill"), build_model(configs["qwen3-8b"], "prefill")
    assert [flops(op, a.layers["dense"], wl) for op in a.layers["dense"]] == [
        flops(op, b.layers["dense"], wl) for op in b.layers["dense"]
    ]


def test_tied_embeddings_drop_the_head_weights(tmp_path, configs):
    tied = load_model_config(with_keys(tmp_path, "qwen3-8b", tie_word_embeddings=True))
    untied = configs["qwen3-8b"]
    assert summarize(untied).params_total - summarize(tied).params_total == 151936 * 4096


# --------------------------------------------------------------------------------------------
# layer graphs


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_mistral_and_qwen2_layers_are_llama_layers(configs, phase):
    for name in ("mistral-7b-v0.1", "qwen2-7b"):
        assert gqa.build_layer(configs[name], "dense", phase).order() == LLAMA_OPS + DENSE_FFN


def test_qwen2_biases_q_k_v_and_not_o(configs):
    g = gqa.build_layer(configs["qwen2-7b"], "dense", "decode")
    biases = {op.name: [w.name for w in op.weights[1:]] for op in g.ops.values() if op.weights}
    assert biases["q_proj"] == ["q_proj.bias"]
    assert g.ops["k_proj"].weights[1].shape == (4 * 128,)
    assert biases["v_proj"] == ["v_proj.bias"]
    assert biases["o_proj"] == []
    assert all(not biases[n] for n in ("ffn_up_proj", "ffn_down_proj"))
    # a bias is kept like a norm weight (BF16, with the dense weights)
    assert g.ops["q_proj"].weights[1].dtype_bytes == 2


def test_llama_attention_and_mlp_bias_add_bias_vectors(tmp_path, llama8b):
    data = llama8b.model_dump() | {"attention_bias": True, "mlp_bias": True}
    biased = type(llama8b).model_validate(data)
    g = gqa.build_layer(biased, "dense", "prefill")
    plain = gqa.build_layer(llama8b, "dense", "prefill")
    h, w, q, kv = 4096, 14336, 32 * 128, 8 * 128
    assert g.weight_params() - plain.weight_params() == q + 2 * kv + h + 2 * w + h
    assert g.order() == plain.order()


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_qwen3_normalises_each_query_and_key_head_before_rope(configs, phase):
    g = gqa.build_layer(configs["qwen3-8b"], "dense", phase)
    order = g.order()
    assert order[:8] == [
        "attn_norm",
        "q_proj",
        "k_proj",
        "v_proj",
        "q_norm",
        "k_norm",
        "rope_q",
        "rope_k",
    ]
    for name, heads in (("q_norm", 32), ("k_norm", 8)):
        op = g.ops[name]
        assert op.kind == "norm"
        assert op.weights[0].shape == (128,)  # one weight per head dimension, shared by heads
        assert g.tensors[op.inputs[0]].shape == ("B", "S", heads, 128)
        assert op.tp_mode.value == "local"  # per head: runs on the heads' split
    assert g.ops["rope_q"].inputs == ("q_normed",)
    wl = Workload(2, 16, 16)
    assert flops(g.ops["q_norm"], g, wl) == 4 * 2 * 16 * 32 * 128


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_mixtral_layer_routes_to_two_of_eight_experts(configs, phase):
    g = gqa.build_layer(configs["mixtral-8x7b-v0.1"], "moe", phase)
    assert g.order() == LLAMA_OPS + ROUTED_FFN + EXPERT_OPS + ["ffn_residual"]
    up = g.ops["experts_up_proj"]
    assert up.routed == RoutedExperts(experts=8, slots=2)
    assert attrs_as(up, GemmAttrs).count == 2
    assert up.weights[0].shape == (8, 4096, 2 * 14336)
    assert g.ops["experts_combine"].inputs == ("expert_out",)
    assert "softmax" in g.ops["router_topk"].doc


def test_qwen2_moe_adds_a_gated_shared_expert(configs):
    g = gqa.build_layer(configs["qwen1.5-moe-a2.7b"], "moe", "decode")
    assert g.order() == (
        LLAMA_OPS + ROUTED_FFN + [*SHARED_OPS, "shared_gate", *EXPERT_OPS, "ffn_residual"]
    )
    assert g.ops["shared_up_proj"].weights[0].shape == (1, 2048, 2 * 5632)
    assert g.ops["shared_gate"].weights[0].shape == (1, 2048, 1)
    assert g.ops["experts_combine"].inputs == ("expert_out", "shared_out", "shared_scale")
    assert g.ops["experts_down_proj"].routed == RoutedExperts(experts=60, slots=4)


def test_expert_ops_speak_r1s_vocabulary(r1, configs):
    """The routed-expert ops carry the attrs the compiler's expert routing reads, as R1's do."""
    r1_moe = deepseek.build_layer(r1, "moe", "decode")
    for name in ("mixtral-8x7b-v0.1", "qwen3-30b-a3b", "qwen1.5-moe-a2.7b"):
        g = gqa.build_layer(configs[name], "moe", "decode")
        for op in [*ROUTED_FFN[1:], *EXPERT_OPS]:
            mine, theirs = g.ops[op], r1_moe.ops[op]
            assert (mine.kind, mine.tp_mode, type(mine.attrs), mine.routed is None) == (
                theirs.kind,
                theirs.tp_mode,
                type(theirs.attrs),
                theirs.routed is None,
            ), (name, op)


def test_qwen_moe_layer_placement(tmp_path):
    """Layer i is MoE unless listed in mlp_only_layers or (i + 1) % decoder_sparse_step != 0."""
    path = with_keys(tmp_path, "qwen3-30b-a3b", decoder_sparse_step=2, mlp_only_layers=[1, 4])
    cfg = load_model_config(path)
    kinds = [cfg.layer_kind(i) for i in range(6)]
    assert kinds == ["dense", "dense", "dense", "moe", "dense", "moe"]
    assert layer_counts(cfg) == {"dense": 25, "moe": 23}
    dense = build_model(cfg, "decode").layers["dense"]
    assert dense.order() == ["attn_norm", "q_proj", "k_proj", "v_proj", "q_norm", "k_norm"] + (
        LLAMA_OPS[4:] + DENSE_FFN
    )
    assert dense.ops["ffn_up_proj"].weights[0].shape == (1, 2048, 2 * 6144)  # intermediate_size


def test_a_dense_family_has_no_moe_layers(configs):
    with pytest.raises(ValueError, match="dense"):
        gqa.build_layer(configs["mistral-7b-v0.1"], "moe", "decode")
    with pytest.raises(ValueError, match="moe"):
        gqa.build_layer(configs["mixtral-8x7b-v0.1"], "dense", "decode")
    with pytest.raises(ValueError, match="phase"):
        gqa.build_layer(configs["qwen3-8b"], "dense", "train")


# --------------------------------------------------------------------------------------------
# the sliding window

KV_ROW = 2 * 8 * 128 * 2  # Mistral-7B: K and V, 8 KV heads of 128, BF16


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_mistral_attention_carries_its_window(configs, phase):
    g = gqa.build_layer(configs["mistral-7b-v0.1"], "dense", phase)
    assert attrs_as(g.ops["attention"], AttentionAttrs).window == 4096
    plain = gqa.build_layer(configs["mixtral-8x7b-v0.1"], "moe", phase)
    assert attrs_as(plain.ops["attention"], AttentionAttrs).window is None  # sliding_window: null


def test_a_windowed_decode_cache_is_a_ring(configs):
    g = gqa.build_layer(configs["mistral-7b-v0.1"], "dense", "decode")
    assert attrs_as(g.ops["kv_cache_write"], ScatterAttrs).index == CacheIndex.RING


def test_mistral_cache_holds_the_window(configs):
    """At 32K positions a layer keeps the last 4096 (what the HBM plan allocates)."""
    for phase in ("prefill", "decode"):
        g = gqa.build_layer(configs["mistral-7b-v0.1"], "dense", phase)
        assert cache_bytes(g, Workload(3, 1, 32768)) == 3 * 4096 * KV_ROW
        assert cache_bytes(g, Workload(3, 1, 1000)) == 3 * 1000 * KV_ROW


def test_mistral_decode_reads_the_window_not_the_whole_cache(configs):
    g = gqa.build_layer(configs["mistral-7b-v0.1"], "dense", "decode")
    att = g.ops["attention"]
    wl = Workload(4, 1, 32768)
    assert bytes_read(att, g, wl) == 4 * 4096 * KV_ROW
    assert flops(att, g, wl) == 2 * 4 * 32 * 4096 * 256
    short = Workload(4, 1, 1000)  # shorter than the window: the whole cache
    assert bytes_read(att, g, short) == 4 * 1000 * KV_ROW


def test_mistral_prefill_scores_at_most_the_window(configs):
    g = gqa.build_layer(configs["mistral-7b-v0.1"], "dense", "prefill")
    att, w, s = g.ops["attention"], 4096, 32768
    pairs = w * (w + 1) / 2 + (s - w) * w  # the triangle's first W rows, then W keys a row
    assert flops(att, g, Workload(1, s, s)) == 2 * 32 * pairs * 256
    assert flops(att, g, Workload(1, w, w)) == 2 * 32 * (w * (w + 1) / 2) * 256


# --------------------------------------------------------------------------------------------
# compiled with `kernels: auto` on SN40L-16 and simulated

COMPILED = {
    "mistral": "mistral-7b-v0.1",
    "qwen2": "qwen2-72b",  # Qwen2-7B's 28 heads do not split over the auto-mapper's tp 16
    "qwen3": "qwen3-8b",
    "mixtral": "mixtral-8x7b-v0.1",
    "qwen2_moe": "qwen1.5-moe-a2.7b",
    "qwen3_moe": "qwen3-30b-a3b",
}


def auto_mapping(tmp_path: Path, name: str, phase: str) -> Path:
    path = tmp_path / f"{name}_{phase}.yaml"
    batch = 1 if phase == "prefill" else 8
    path.write_text(
        f"name: {name}_{phase}\n"
        f"model: {CONFIGS / f'{name}.json'}\n"
        "hardware: sn40l-16\n"
        f"phase: {phase}\n"
        f"batch: {batch}\n"
        "seq_len: 8192\n"
        "kernels: auto\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("model_type", sorted(COMPILED))
def test_family_compiles_with_auto_kernels_and_simulates(tmp_path, model_type, phase):
    name = COMPILED[model_type]
    run = run_mapping(auto_mapping(tmp_path, name, phase))
    assert run.result is not None
    latency = run.report["total_latency_s"]
    assert math.isfinite(latency) and latency > 0
    cfg = run.mapping.model
    assert cfg.model_type == model_type
    assert set(run.program.layers) == set(layer_counts(cfg))
    assert run.program.hbm.fits
    moe = run.program.layers.get("moe")
    if moe is not None:
        # the compiler's expert routing found the routed-expert ops and streamed touched experts
        touched = moe.experts_touched
        assert touched is not None and 0 < touched <= cfg.n_routed_experts  # type: ignore[attr-defined]


def test_mistral_decode_allocates_the_windowed_cache(tmp_path):
    """Decode at 32K allocates 4096 positions a layer: the same HBM as at 4096."""
    path = auto_mapping(tmp_path, "mistral-7b-v0.1", "decode")
    long = run_mapping(path, ["seq_len=32768"]).program.hbm.kv_cache
    window = run_mapping(path, ["seq_len=4096"]).program.hbm.kv_cache
    assert long == pytest.approx(window)


# --------------------------------------------------------------------------------------------
# `rdusim model`


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_rdusim_model_reports_a_published_config(run_cli, name):
    code, out, err = run_cli(["model", CONFIGS / f"{name}.json", "--json"])
    assert code == 0, err
    report = json.loads(out)
    assert report["family"] == FAMILY_OF[name].model_fields["model_type"].annotation.__args__[0]
    assert report["params_total"] == pytest.approx(PARAMS[name][0], rel=0.005)


def test_rdusim_model_refuses_an_unregistered_family(run_cli, tmp_path):
    path = tmp_path / "config.json"
    data = json.loads((CONFIGS / "qwen3-8b.json").read_text(encoding="utf-8"))
    path.write_text(json.dumps(data | {"model_type": "gemma2"}, indent=2), encoding="utf-8")
    code, _, err = run_cli(["model", path])
    assert code == 2, err
    assert "Traceback" not in err
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "model_type" in t)
    assert f"{path}:{line}: model_type: unknown model family 'gemma2'" in err
    for family in spec.FAMILIES:
        assert family in err


def test_rdusim_model_refuses_an_unmodelled_key_with_its_line(run_cli, tmp_path):
    path = with_keys(tmp_path, "qwen2-7b", use_sliding_window=True)
    code, _, err = run_cli(["model", path])
    assert code == 2, err
    line = next(
        i for i, t in enumerate(path.read_text().splitlines(), 1) if "use_sliding_window" in t
    )
    assert f"{path}:{line}: use_sliding_window:" in err
    assert "fix: set use_sliding_window: false" in err
