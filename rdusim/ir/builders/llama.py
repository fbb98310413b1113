"""Llama-3.x decoder layers (GQA + RoPE + SwiGLU), embedding and LM head as IR graphs."""

from __future__ import annotations

from rdusim.ir.builders.common import TOKENS, Builder, embedding_graph, head_graph
from rdusim.ir.graph import Graph, TPMode
from rdusim.snapstream.config import SnapStreamConfig
from rdusim.spec.model import LlamaConfig


def _builder(cfg: LlamaConfig, name: str) -> Builder:
    return Builder(
        name, cfg.bytes_of("activations"), cfg.bytes_of("weights"), cfg.bytes_of("dense_weights")
    )


def build_layer(
    cfg: LlamaConfig, kind: str, phase: str, snapstream: SnapStreamConfig | None = None
) -> Graph:
    """One Llama decoder layer; `kind` is always 'dense'."""
    if kind != "dense":
        raise ValueError(f"llama layers are dense, not {kind!r}")
    if phase not in ("prefill", "decode"):
        raise ValueError(f"unknown phase {phase!r}")
    h, nh, kvh, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.kv_heads, cfg.attention_head_dim
    kvb = cfg.bytes_of("kv_cache")
    b = _builder(cfg, f"{cfg.name}.dense.{phase}")
    b.act("x", *TOKENS, h)
    b.act("h_norm", *TOKENS, h)
    b.norm("attn_norm", "x", "h_norm", h)
    b.act("q", *TOKENS, nh, hd)
    b.linear("q_proj", "h_norm", "q", h, nh * hd, tp=TPMode.COLUMN)
    b.act("k", *TOKENS, kvh, hd)
    b.linear("k_proj", "h_norm", "k", h, kvh * hd, tp=TPMode.COLUMN)
    b.act("v", *TOKENS, kvh, hd)
    b.linear("v_proj", "h_norm", "v", h, kvh * hd, tp=TPMode.COLUMN)
    b.act("q_rot", *TOKENS, nh, hd)
    b.op("rope_q", "rope", ["q"], ["q_rot"], tp=TPMode.LOCAL)
    b.act("k_rot", *TOKENS, kvh, hd)
    b.op("rope_k", "rope", ["k"], ["k_rot"], tp=TPMode.LOCAL)
    b.cache("k_cache", "B", "T", kvh * hd, dtype_bytes=kvb)
    b.cache("v_cache", "B", "T", kvh * hd, dtype_bytes=kvb)
    b.act("attn_out", *TOKENS, nh, hd)
    if phase == "prefill":
        b.op(
            "kv_cache_write",
            "scatter",
            ["k_rot", "v"],
            ["k_cache", "v_cache"],
            tp=TPMode.LOCAL,
            write_shape=("B", "S", 2 * kvh * hd),
            write_dtype_bytes=kvb,
        )
        if snapstream is not None:
            from rdusim.snapstream.kernels import add_prefill_compression

            add_prefill_compression(
                b,
                snapstream,
                heads=nh,
                qk_dim=hd,
                cache=("k_cache", "v_cache"),
                widths=(kvh * hd, kvh * hd),
                query="q_rot",
                keys="k_rot",
                cache_bytes=kvb,
                selections=kvh,
                names=("k", "v"),
            )
        b.op(
            "attention",
            "attention",
            ["q_rot", "k_rot", "v"],
            ["attn_out"],
            tp=TPMode.HEADS,
            heads=nh,
            kv_heads=kvh,
            qk_dim=hd,
            v_dim=hd,
            causal=True,
        )
    else:
        b.act("cache_ready", "B", 1)
        b.op(
            "kv_cache_write",
            "scatter",
            ["k_rot", "v", "k_cache", "v_cache"],
            ["cache_ready"],
            tp=TPMode.LOCAL,
            read_shape=("B", "S", 2 * kvh * hd),
            read_dtype_bytes=kvb,
            write_shape=("B", "S", 2 * kvh * hd),
            write_dtype_bytes=kvb,
            index="ring" if snapstream else "position",
        )
        b.op(
            "attention",
            "attention",
            ["q_rot", "k_cache", "v_cache", "cache_ready"],
            ["attn_out"],
            tp=TPMode.HEADS,
            heads=nh,
            kv_heads=kvh,
            qk_dim=hd,
            v_dim=hd,
            causal=False,
            read_shape=("B", "T", 2 * kvh * hd),
            read_dtype_bytes=kvb,
        )
    b.act("attn_proj", *TOKENS, h)
    b.linear("o_proj", "attn_out", "attn_proj", nh * hd, h, tp=TPMode.ROW)
    b.act("h_attn", *TOKENS, h)
    b.op("attn_residual", "elementwise", ["x", "attn_proj"], ["h_attn"], tp=TPMode.TOKEN)
    w = cfg.intermediate_size
    b.act("ffn_in", *TOKENS, h)
    b.norm("ffn_norm", "h_attn", "ffn_in", h)
    b.act("ffn_gate_up", *TOKENS, 2 * w)
    b.linear("ffn_up_proj", "ffn_in", "ffn_gate_up", h, 2 * w, tp=TPMode.COLUMN)
    b.act("ffn_act", *TOKENS, w)
    b.op(
        "ffn_silu_mul", "elementwise", ["ffn_gate_up"], ["ffn_act"], tp=TPMode.LOCAL, ops_scale=5.0
    )
    b.act("ffn_out", *TOKENS, h)
    b.linear("ffn_down_proj", "ffn_act", "ffn_out", w, h, tp=TPMode.ROW)
    b.act("h_out", *TOKENS, h)
    b.op("ffn_residual", "elementwise", ["h_attn", "ffn_out"], ["h_out"], tp=TPMode.TOKEN)
    return b.g


def build_embedding(cfg: LlamaConfig) -> Graph:
    return embedding_graph(_builder(cfg, f"{cfg.name}.embedding"), cfg.hidden_size, cfg.vocab_size)


def build_head(cfg: LlamaConfig) -> Graph:
    b = _builder(cfg, f"{cfg.name}.head")
    return head_graph(b, cfg.hidden_size, cfg.vocab_size, cfg.tie_word_embeddings)
