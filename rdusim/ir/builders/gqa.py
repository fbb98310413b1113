"""Llama-style decoder layers, embedding and LM head as IR graphs.

One builder serves every family registered with `builders="gqa"` (Llama, Mistral, Qwen2, Qwen3,
Mixtral, Qwen2-MoE, Qwen3-MoE): GQA attention with RoPE, then a SwiGLU FFN, dense or routed
experts. A family's traits come from its config: projection biases (`cfg.biased`), an RMSNorm on
each query and key head (`cfg.qk_norm`), a sliding window (`cfg.attention_window`) and the MoE
layers' experts. The plain Llama layer is:

    attn_norm q_proj k_proj v_proj rope_q rope_k kv_cache_write attention o_proj attn_residual
    ffn_norm ffn_up_proj ffn_silu_mul ffn_down_proj ffn_residual

QK norm adds `q_norm` and `k_norm` before the rotary ops; a MoE layer's FFN is the shared MoE
vocabulary of `common.moe_ffn` (`router_gate` ... `experts_combine`), as in DeepSeek-R1's.

A sliding window of W keys is the attention op's `window` attribute: each query scores at most
the last W keys (prefill) and a decode step reads at most W cached positions, from a cache of W
slots written as a ring.
"""

from __future__ import annotations

from rdusim.ir.attrs import (
    Access,
    AttentionAttrs,
    CacheIndex,
    ElementwiseAttrs,
    OpKind,
    ScatterAttrs,
)
from rdusim.ir.builders.common import (
    TOKENS,
    Builder,
    MoE,
    build_embedding,
    build_head,
    builder_for,
    moe_ffn,
)
from rdusim.ir.builders.snapstream import CacheSource, add_prefill_compression
from rdusim.ir.graph import CacheRole, Graph, Phase, TPMode, as_phase
from rdusim.snapstream.config import SnapStreamConfig
from rdusim.spec.model import GQAConfig, MoEConfig

# the family interface (`rdusim.ir.families`); embedding and head are the same in every family
__all__ = ["build_embedding", "build_head", "build_layer"]


def _head_norm(b: Builder, name: str, x: str, out: str, heads: int, hd: int) -> None:
    """RMSNorm of each head (weights shared by the heads); per head, so it runs on whatever
    head split its input has."""
    b.act(out, *TOKENS, heads, hd)
    w = b.weight(f"{name}.weight", hd, dense=True)
    b.op(name, OpKind.NORM, [x], [out], weights=(w,), tp=TPMode.LOCAL, doc="RMSNorm of each head")


def _projections(b: Builder, cfg: GQAConfig) -> tuple[str, str]:
    """attn_norm, the q/k/v projections (with their biases), QK norm and RoPE; returns the
    rotated query and key."""
    h, nh, kvh, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.kv_heads, cfg.attention_head_dim
    b.act("x", *TOKENS, h)
    b.act("h_norm", *TOKENS, h)
    b.norm("attn_norm", "x", "h_norm", h)
    b.act("q", *TOKENS, nh, hd)
    b.linear("q_proj", "h_norm", "q", h, nh * hd, tp=TPMode.COLUMN, bias="q_proj" in cfg.biased)
    b.act("k", *TOKENS, kvh, hd)
    b.linear("k_proj", "h_norm", "k", h, kvh * hd, tp=TPMode.COLUMN, bias="k_proj" in cfg.biased)
    b.act("v", *TOKENS, kvh, hd)
    b.linear("v_proj", "h_norm", "v", h, kvh * hd, tp=TPMode.COLUMN, bias="v_proj" in cfg.biased)
    q, k = "q", "k"
    if cfg.qk_norm:
        _head_norm(b, "q_norm", "q", "q_normed", nh, hd)
        _head_norm(b, "k_norm", "k", "k_normed", kvh, hd)
        q, k = "q_normed", "k_normed"
    b.act("q_rot", *TOKENS, nh, hd)
    b.op("rope_q", OpKind.ROPE, [q], ["q_rot"], tp=TPMode.LOCAL)
    b.act("k_rot", *TOKENS, kvh, hd)
    b.op("rope_k", OpKind.ROPE, [k], ["k_rot"], tp=TPMode.LOCAL)
    return "q_rot", "k_rot"


def _attention(b: Builder, cfg: GQAConfig, phase: Phase, ss: SnapStreamConfig | None) -> None:
    """The KV cache write and attention of one phase, into `attn_out`.

    A sliding window is the attention's `window` (None for full attention, so a full-attention
    graph is exactly Llama's)."""
    nh, kvh, hd = cfg.num_attention_heads, cfg.kv_heads, cfg.attention_head_dim
    kvb = cfg.bytes_of("kv_cache")
    window = cfg.attention_window or None
    b.cache("k_cache", "B", "T", kvh * hd, dtype_bytes=kvb, role=CacheRole.KEY)
    b.cache("v_cache", "B", "T", kvh * hd, dtype_bytes=kvb, role=CacheRole.VALUE)
    b.act("attn_out", *TOKENS, nh, hd)
    new_rows = Access(("B", "S", 2 * kvh * hd), kvb)
    if phase == Phase.PREFILL:
        b.op(
            "kv_cache_write",
            OpKind.SCATTER,
            ["k_rot", "v"],
            ["k_cache", "v_cache"],
            ScatterAttrs(write=new_rows),
            tp=TPMode.LOCAL,
        )
        if ss is not None:
            add_prefill_compression(
                b,
                ss,
                heads=nh,
                qk_dim=hd,
                caches=(
                    CacheSource("k", "k_cache", kvh * hd),
                    CacheSource("v", "v_cache", kvh * hd),
                ),
                query="q_rot",
                keys="k_rot",
                cache_bytes=kvb,
                selections=kvh,
            )
        b.op(
            "attention",
            OpKind.ATTENTION,
            ["q_rot", "k_rot", "v"],
            ["attn_out"],
            AttentionAttrs(nh, hd, hd, kv_heads=kvh, causal=True, window=window),
            tp=TPMode.HEADS,
        )
        return
    b.act("cache_ready", "B", 1)
    index = CacheIndex.RING if ss or window else CacheIndex.POSITION
    b.op(
        "kv_cache_write",
        OpKind.SCATTER,
        ["k_rot", "v", "k_cache", "v_cache"],
        ["cache_ready"],
        ScatterAttrs(read=new_rows, write=new_rows, index=index),
        tp=TPMode.LOCAL,
    )
    b.op(
        "attention",
        OpKind.ATTENTION,
        ["q_rot", "k_cache", "v_cache", "cache_ready"],
        ["attn_out"],
        AttentionAttrs(
            nh,
            hd,
            hd,
            kv_heads=kvh,
            causal=False,
            window=window,
            read=Access(("B", "T", 2 * kvh * hd), kvb),
        ),
        tp=TPMode.HEADS,
    )


def _dense_ffn(b: Builder, cfg: GQAConfig, x: str) -> None:
    h, w = cfg.hidden_size, cfg.intermediate_size
    b.act("ffn_in", *TOKENS, h)
    b.norm("ffn_norm", x, "ffn_in", h)
    b.act("ffn_gate_up", *TOKENS, 2 * w)
    bias = "ffn_up_proj" in cfg.biased
    b.linear("ffn_up_proj", "ffn_in", "ffn_gate_up", h, 2 * w, tp=TPMode.COLUMN, bias=bias)
    b.act("ffn_act", *TOKENS, w)
    b.op(
        "ffn_silu_mul",
        OpKind.ELEMENTWISE,
        ["ffn_gate_up"],
        ["ffn_act"],
        ElementwiseAttrs(ops_scale=5.0),
        tp=TPMode.LOCAL,
    )
    b.act("ffn_out", *TOKENS, h)
    bias = "ffn_down_proj" in cfg.biased
    b.linear("ffn_down_proj", "ffn_act", "ffn_out", w, h, tp=TPMode.ROW, bias=bias)
    b.act("h_out", *TOKENS, h)
    b.op("ffn_residual", OpKind.ELEMENTWISE, [x, "ffn_out"], ["h_out"], tp=TPMode.TOKEN)


def _moe(cfg: MoEConfig) -> MoE:
    e, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    return MoE(
        hidden=cfg.hidden_size,
        experts=e,
        top_k=k,
        width=cfg.expert_width,
        shared_width=cfg.shared_expert_width,
        shared_gate=cfg.shared_expert_gate,
        router_doc=f"softmax scores, top-{k} of {e} experts",
    )


def _layer_kinds(cfg: GQAConfig) -> set[str]:
    """The kinds the family places in this model (a Qwen-MoE model may have both)."""
    return {cfg.layer_kind(i) for i in range(cfg.num_hidden_layers)}


def build_layer(
    cfg: GQAConfig, kind: str, phase: Phase | str, snapstream: SnapStreamConfig | None = None
) -> Graph:
    """One decoder layer of `kind` ('dense' | 'moe', as the family places them) for `phase`."""
    kinds = _layer_kinds(cfg)
    if kind not in kinds:
        raise ValueError(f"{cfg.model_type} layers are {' and '.join(sorted(kinds))}, not {kind!r}")
    phase = as_phase(phase)
    h, nh, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.attention_head_dim
    b = builder_for(cfg, f"{cfg.name}.{kind}.{phase}")
    _projections(b, cfg)
    _attention(b, cfg, phase, snapstream)
    b.act("attn_proj", *TOKENS, h)
    b.linear(
        "o_proj", "attn_out", "attn_proj", nh * hd, h, tp=TPMode.ROW, bias="o_proj" in cfg.biased
    )
    b.act("h_attn", *TOKENS, h)
    b.op("attn_residual", OpKind.ELEMENTWISE, ["x", "attn_proj"], ["h_attn"], tp=TPMode.TOKEN)
    if isinstance(cfg, MoEConfig) and kind == "moe":
        moe_ffn(b, "h_attn", _moe(cfg))
    else:
        _dense_ffn(b, cfg, "h_attn")
    return b.g
