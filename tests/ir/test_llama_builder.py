"""Llama-3.1 layer graphs (GQA + RoPE + SwiGLU) against hand-written closed forms."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.ir.attrs import AttentionAttrs, CacheIndex, ScatterAttrs
from rdusim.ir.builders import llama
from rdusim.ir.graph import TensorKind, Workload
from rdusim.ir.ops import attrs_as, bytes_read, bytes_written, flops
from rdusim.snapstream.config import SnapStreamConfig, VoteNormalisation

LAYER_OPS = [
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
    "ffn_norm",
    "ffn_up_proj",
    "ffn_silu_mul",
    "ffn_down_proj",
    "ffn_residual",
]

# (hidden, heads, ffn width, vocab); 8 KV heads of dim 128 in all three
DIMS = {
    "llama-3.1-8b": (4096, 32, 14336, 128256),
    "llama-3.1-70b": (8192, 64, 28672, 128256),
    "llama-3.1-405b": (16384, 128, 53248, 128256),
}
KVH, HD = 8, 128

SS = SnapStreamConfig(sink=4, recent=1024, topk=3072, obs_window=32, pool_kernel=7)


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_op_names(llama8b, phase):
    assert llama.build_layer(llama8b, "dense", phase).order() == LAYER_OPS


def test_only_dense_layers(llama8b):
    with pytest.raises(ValueError, match="dense"):
        llama.build_layer(llama8b, "moe", "prefill")
    with pytest.raises(ValueError, match="phase"):
        llama.build_layer(llama8b, "dense", "train")


@pytest.mark.parametrize("name", sorted(DIMS))
def test_layer_weight_params(llama_configs, name):
    h, nh, w, _ = DIMS[name]
    g = llama.build_layer(llama_configs[name], "dense", "prefill")
    expected = (
        2 * h  # two RMSNorms
        + h * nh * HD  # q
        + 2 * h * KVH * HD  # k, v (GQA: 8 KV heads)
        + nh * HD * h  # o
        + 3 * h * w  # SwiGLU gate, up, down
    )
    assert g.weight_params() == expected
    assert g.weight_bytes() == 2 * expected  # BF16


@pytest.mark.parametrize("name", sorted(DIMS))
def test_gqa_projection_shapes(llama_configs, name):
    h, nh, _, _ = DIMS[name]
    g = llama.build_layer(llama_configs[name], "dense", "prefill")
    wl = Workload(1, 10, 10)
    assert flops(g.ops["q_proj"], g, wl) == 2 * 10 * h * nh * HD
    assert flops(g.ops["k_proj"], g, wl) == 2 * 10 * h * KVH * HD
    assert flops(g.ops["v_proj"], g, wl) == 2 * 10 * h * KVH * HD
    att = g.ops["attention"]
    a = attrs_as(att, AttentionAttrs)
    assert (a.heads, a.kv_heads) == (nh, KVH)


@pytest.mark.parametrize("name", sorted(DIMS))
def test_prefill_attention_flops(llama_configs, name):
    _, nh, _, _ = DIMS[name]
    g = llama.build_layer(llama_configs[name], "dense", "prefill")
    L = 131072
    # every query head scores its group's shared K: GQA saves cache, not FLOPs
    expected = 2 * nh * (L * (L + 1) / 2) * (HD + HD)
    assert flops(g.ops["attention"], g, Workload(1, L, L)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("name", sorted(DIMS))
def test_decode_attention_flops_and_cache_read(llama_configs, name):
    _, nh, _, _ = DIMS[name]
    g = llama.build_layer(llama_configs[name], "dense", "decode")
    b, t = 8, 32768
    wl = Workload(b, 1, t)
    assert flops(g.ops["attention"], g, wl) == 2 * b * nh * t * 2 * HD
    # the whole K and V cache of the 8 KV heads is read once per step
    assert bytes_read(g.ops["attention"], g, wl) == b * t * 2 * KVH * HD * 2


def test_kv_cache_per_token_and_layer(llama8b):
    for phase in ("prefill", "decode"):
        g = llama.build_layer(llama8b, "dense", phase)
        caches = [t for t in g.tensors.values() if t.kind == TensorKind.CACHE]
        assert sorted(t.name for t in caches) == ["k_cache", "v_cache"]
        assert sum(t.nbytes({"B": 1, "T": 1}) for t in caches) == 2 * KVH * HD * 2  # 4096


def test_cache_writes(llama8b):
    pre = llama.build_layer(llama8b, "dense", "prefill")
    dec = llama.build_layer(llama8b, "dense", "decode")
    assert bytes_written(pre.ops["kv_cache_write"], pre, Workload(1, 4096, 4096)) == (
        4096 * 2 * KVH * HD * 2
    )
    assert bytes_written(dec.ops["kv_cache_write"], dec, Workload(16, 1, 4096)) == (
        16 * 2 * KVH * HD * 2
    )
    assert attrs_as(dec.ops["kv_cache_write"], ScatterAttrs).index == CacheIndex.POSITION
    ring = llama.build_layer(llama8b, "dense", "decode", SS)
    assert attrs_as(ring.ops["kv_cache_write"], ScatterAttrs).index == CacheIndex.RING


def test_embedding_and_head(llama8b):
    h, _, _, vocab = DIMS["llama-3.1-8b"]
    assert llama.build_embedding(llama8b).weight_params() == vocab * h
    head = llama.build_head(llama8b)
    assert head.weight_params() == h + h * vocab
    assert head.order() == ["final_norm", "lm_head", "sample"]


def test_tied_embeddings_have_no_head_weights(llama8b):
    tied = llama8b.model_copy(update={"tie_word_embeddings": True})
    head = llama.build_head(tied)
    h, _, _, vocab = DIMS["llama-3.1-8b"]
    assert head.weight_params() == h  # only the final norm
    assert flops(head.ops["lm_head"], head, Workload(2, 1, 1)) == 2 * 2 * h * vocab


# --------------------------------------------------------------------------------------------
# SnapStream prefill with GQA


def test_snapstream_prefill_ops_present(llama8b):
    g = llama.build_layer(llama8b, "dense", "prefill", SS)
    names = g.order()
    for op in (
        "ring_sink_gather",
        "ring_select",
        "snapkv_qk",
        "snapkv_softmax",
        "snapkv_reduce",
        "snapkv_pool",
        "snapkv_topk",
    ):
        assert op in names, op
    # one gather and one concat per cache tensor (K and V)
    assert len([n for n in names if n.startswith("snapkv_gather_")]) == 2
    assert len([n for n in names if n.startswith("snapkv_concat_")]) == 2
    assert [n for n in names if n in LAYER_OPS] == LAYER_OPS
    assert g.weight_params() == llama.build_layer(llama8b, "dense", "prefill").weight_params()


def test_snapstream_selects_per_kv_head(llama8b):
    """GQA: the query heads of a group vote together, one selection per KV head."""
    g = llama.build_layer(llama8b, "dense", "prefill", SS)
    assert g.tensors["snapkv_votes"].shape == ("B", KVH, "E")
    assert g.tensors["snapkv_index"].shape == ("B", KVH, SS.topk)
    # the compressed K and V caches have the fixed number of slots
    for t in g.tensors.values():
        if t.kind == TensorKind.CACHE and t.compressed:
            assert t.shape == ("B", SS.slots, KVH * HD)


@settings(max_examples=30, deadline=None)
@given(
    L=st.integers(SS.sink + SS.recent + SS.obs_window, 1 << 17),
    norm=st.sampled_from(list(VoteNormalisation)),
)
def test_snapstream_prefill_flops_with_evict(llama8b, L, norm):
    ss = replace(SS, normalisation=norm)
    g = llama.build_layer(llama8b, "dense", "prefill", ss)
    evict = ss.candidates(L)
    wl = Workload(1, L, L, evict=evict)
    nh = DIMS["llama-3.1-8b"][1]
    # causal: every key a window query sees (the prompt); candidates: the eviction candidates
    keys = L if norm == VoteNormalisation.CAUSAL else evict
    assert flops(g.ops["snapkv_qk"], g, wl) == 2 * ss.obs_window * HD * keys * nh
    # pooling and top-K act on one vote row per KV head, over the candidates
    assert flops(g.ops["snapkv_pool"], g, wl) == KVH * evict * ss.pool_kernel
    # the probabilities have one row per (head, window query)
    assert g.tensors["snapkv_probs"].numel(wl.env()) == nh * ss.obs_window * keys
