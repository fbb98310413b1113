"""DeepSeek-V3/R1 decoder layers, embedding, LM head and MTP module as IR graphs.

Op names are stable: mappings refer to them (see `docs` in README, "Op names").

Prefill uses MLA in its decompressed ("naive") form: the latent is expanded through `kv_b_proj`
into per-head K (nope 128 + rope 64) and V (128), and attention is ordinary causal MHA.
Decode uses the absorbed form: W_UK is folded into the query (`q_absorb`) and W_UV into the
output (`v_absorb`), so attention runs directly against the cached latent (512) + rope key (64).
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
from rdusim.spec.model import DeepSeekV3Config

# the family interface (`rdusim.ir.families`); embedding and head are the same in every family
__all__ = ["build_embedding", "build_head", "build_layer", "build_mtp_projection"]


def _query(b: Builder, cfg: DeepSeekV3Config, x: str, down_tp: TPMode) -> None:
    """attn_norm, the query's low-rank down-projection, its norm, and the per-head up-projection.

    `down_tp`: prefill runs the small down-projection sequence-parallel (TOKEN, weights
    replicated); decode splits it by columns.
    """
    h, nh, ql = cfg.hidden_size, cfg.num_attention_heads, cfg.q_lora_rank
    b.act("h_norm", *TOKENS, h)
    b.norm("attn_norm", x, "h_norm", h, doc="RMSNorm before attention")
    b.act("q_a", *TOKENS, ql)
    b.linear("q_a_proj", "h_norm", "q_a", h, ql, tp=down_tp, doc="query down-projection")
    b.act("q_a_n", *TOKENS, ql)
    b.norm("q_a_norm", "q_a", "q_a_n", ql)
    b.act("q", *TOKENS, nh, cfg.qk_head_dim)
    b.linear(
        "q_b_proj",
        "q_a_n",
        "q",
        ql,
        nh * cfg.qk_head_dim,
        tp=TPMode.COLUMN,
        doc="query up-projection, all heads",
    )


def _latent(b: Builder, cfg: DeepSeekV3Config, down_tp: TPMode) -> None:
    """The shared KV latent (+ rope key) projection and the latent's norm."""
    r, rope = cfg.kv_lora_rank, cfg.qk_rope_head_dim
    b.act("kv_a", *TOKENS, r + rope)
    b.linear(
        "kv_a_proj",
        "h_norm",
        "kv_a",
        cfg.hidden_size,
        r + rope,
        tp=down_tp,
        doc="latent + rope key projection",
    )
    b.act("c_kv", *TOKENS, r)
    b.norm("kv_a_norm", "kv_a", "c_kv", r)


def _caches(b: Builder, r: int, rope: int, kvb: float) -> None:
    """MLA's cache: the latent (read as keys and as values) and the rope key."""
    b.cache("latent_cache", "B", "T", r, dtype_bytes=kvb, role=CacheRole.LATENT)
    b.cache("rope_cache", "B", "T", rope, dtype_bytes=kvb, role=CacheRole.KEY)


def _attention_prefill(
    b: Builder, cfg: DeepSeekV3Config, x: str, ss: SnapStreamConfig | None
) -> str:
    """Decompressed MLA over the prompt: query and latent, their rotary parts, the cache write,
    the latent's expansion (and SnapStream's compression), causal attention and the output."""
    _query(b, cfg, x, TPMode.TOKEN)
    _latent(b, cfg, TPMode.TOKEN)
    _rope_prefill(b, cfg)
    _write_prompt_cache(b, cfg)
    _decompress(b, cfg, ss)
    return _prefill_attention(b, cfg, x)


def _rope_prefill(b: Builder, cfg: DeepSeekV3Config) -> None:
    """Rotary embedding of the query's rope part and of the shared rope key."""
    nh, qk, rope, r = (
        cfg.num_attention_heads,
        cfg.qk_head_dim,
        cfg.qk_rope_head_dim,
        cfg.kv_lora_rank,
    )
    b.act("q_rot", *TOKENS, nh, qk)
    b.op(
        "rope_q",
        OpKind.ROPE,
        ["q"],
        ["q_rot"],
        # only the 64 rope dims of each 192-wide head rotate
        ElementwiseAttrs(ops_scale=rope / qk),
        tp=TPMode.LOCAL,
        doc="rotary embedding of the query's rope part",
    )
    b.act("k_pe", *TOKENS, rope)
    b.op(
        "rope_k",
        OpKind.ROPE,
        ["kv_a"],
        ["k_pe"],
        # kv_a carries the latent too; only the rope key rotates
        ElementwiseAttrs(ops_scale=rope / (r + rope)),
        tp=TPMode.TOKEN,
        doc="rotary embedding of the shared rope key",
    )


def _write_prompt_cache(b: Builder, cfg: DeepSeekV3Config) -> None:
    """The cache decode will read: latent and rope key of every prompt token, written to HBM."""
    r, rope, kvb = cfg.kv_lora_rank, cfg.qk_rope_head_dim, cfg.bytes_of("kv_cache")
    _caches(b, r, rope, kvb)
    b.op(
        "kv_cache_write",
        OpKind.SCATTER,
        ["c_kv", "k_pe"],
        ["latent_cache", "rope_cache"],
        ScatterAttrs(write=Access(("B", "S", r + rope), kvb)),
        tp=TPMode.TOKEN,
        doc="write the layer's latent KV cache",
    )


def _decompress(b: Builder, cfg: DeepSeekV3Config, ss: SnapStreamConfig | None) -> None:
    """`kv_b_proj` expands the latent into per-head K (nope) and V; with SnapStream, the
    prompt's cache is then compressed."""
    nh, nope, vd, r = (
        cfg.num_attention_heads,
        cfg.qk_nope_head_dim,
        cfg.v_head_dim,
        cfg.kv_lora_rank,
    )
    b.act("kv", *TOKENS, nh, nope + vd)
    b.linear(
        "kv_b_proj",
        "c_kv",
        "kv",
        r,
        nh * (nope + vd),
        tp=TPMode.COLUMN,
        doc="decompress latent into per-head K (nope) and V",
    )
    if ss is not None:
        add_prefill_compression(
            b,
            ss,
            heads=nh,
            qk_dim=cfg.qk_head_dim,
            caches=(
                CacheSource("latent", "latent_cache", r),
                CacheSource("rope", "rope_cache", cfg.qk_rope_head_dim),
            ),
            query="q_rot",
            keys="kv",
            cache_bytes=cfg.bytes_of("kv_cache"),
        )


def _prefill_attention(b: Builder, cfg: DeepSeekV3Config, x: str) -> str:
    """Causal MHA over the prompt, the output projection and the skip add."""
    h, nh, vd = cfg.hidden_size, cfg.num_attention_heads, cfg.v_head_dim
    b.act("attn_out", *TOKENS, nh, vd)
    b.op(
        "attention",
        OpKind.ATTENTION,
        ["q_rot", "kv", "k_pe"],
        ["attn_out"],
        AttentionAttrs(nh, cfg.qk_head_dim, vd, causal=True),
        tp=TPMode.HEADS,
        doc="causal MHA over all prompt tokens (flash-style)",
    )
    b.act("attn_proj", *TOKENS, h)
    b.linear("o_proj", "attn_out", "attn_proj", nh * vd, h, tp=TPMode.ROW, doc="output projection")
    b.act("h_attn", *TOKENS, h)
    b.op(
        "attn_residual",
        OpKind.ELEMENTWISE,
        [x, "attn_proj"],
        ["h_attn"],
        tp=TPMode.TOKEN,
        doc="skip add",
    )
    return "h_attn"


def _attention_decode(
    b: Builder, cfg: DeepSeekV3Config, x: str, ss: SnapStreamConfig | None
) -> str:
    h, nh = cfg.hidden_size, cfg.num_attention_heads
    rope, nope, vd, r = (
        cfg.qk_rope_head_dim,
        cfg.qk_nope_head_dim,
        cfg.v_head_dim,
        cfg.kv_lora_rank,
    )
    kvb = cfg.bytes_of("kv_cache")
    _query(b, cfg, x, TPMode.COLUMN)
    b.act("q_lat", *TOKENS, nh, r)
    b.linear(
        "q_absorb",
        "q",
        "q_lat",
        nope,
        r,
        count=nh,
        weight_count=nh,
        tp=TPMode.HEADS,
        doc="fold W_UK into the query: per head 128 -> 512",
    )
    b.act("q_rot", *TOKENS, nh, rope)
    rope_q = ElementwiseAttrs(ops_scale=rope / cfg.qk_head_dim)
    b.op("rope_q", OpKind.ROPE, ["q"], ["q_rot"], rope_q, tp=TPMode.LOCAL)
    _latent(b, cfg, TPMode.COLUMN)
    b.act("k_pe", *TOKENS, rope)
    rope_k = ElementwiseAttrs(ops_scale=rope / (r + rope))
    b.op("rope_k", OpKind.ROPE, ["kv_a"], ["k_pe"], rope_k, tp=TPMode.TOKEN)
    _caches(b, r, rope, kvb)
    b.act("cache_ready", "B", 1)
    new_rows = Access(("B", "S", r + rope), kvb)
    b.op(
        "kv_cache_write",
        OpKind.SCATTER,
        ["c_kv", "k_pe", "latent_cache", "rope_cache"],
        ["cache_ready"],
        ScatterAttrs(
            read=new_rows,
            write=new_rows,
            index=CacheIndex.RING if ss else CacheIndex.POSITION,
        ),
        tp=TPMode.TOKEN,
        doc="scatter this step's latent into the cache"
        + (" at the ring-buffer index (SnapStream eq. 4)" if ss else " at the sequence position"),
    )
    b.act("attn_lat", *TOKENS, nh, r)
    b.op(
        "attention",
        OpKind.ATTENTION,
        ["q_lat", "q_rot", "latent_cache", "rope_cache", "cache_ready"],
        ["attn_lat"],
        AttentionAttrs(
            nh, r + rope, r, causal=False, shared_kv=True, read=Access(("B", "T", r + rope), kvb)
        ),
        tp=TPMode.HEADS,
        doc="absorbed MLA over the cached latent",
    )
    b.act("attn_out", *TOKENS, nh, vd)
    b.linear(
        "v_absorb",
        "attn_lat",
        "attn_out",
        r,
        vd,
        count=nh,
        weight_count=nh,
        tp=TPMode.HEADS,
        doc="fold W_UV into the output: per head 512 -> 128",
    )
    b.act("attn_proj", *TOKENS, h)
    b.linear("o_proj", "attn_out", "attn_proj", nh * vd, h, tp=TPMode.ROW)
    b.act("h_attn", *TOKENS, h)
    b.op("attn_residual", OpKind.ELEMENTWISE, [x, "attn_proj"], ["h_attn"], tp=TPMode.TOKEN)
    return "h_attn"


def _dense_ffn(b: Builder, cfg: DeepSeekV3Config, x: str, width: int) -> str:
    h = cfg.hidden_size
    b.act("ffn_in", *TOKENS, h)
    b.norm("ffn_norm", x, "ffn_in", h)
    b.act("ffn_gate_up", *TOKENS, 2 * width)
    b.linear(
        "ffn_up_proj",
        "ffn_in",
        "ffn_gate_up",
        h,
        2 * width,
        tp=TPMode.COLUMN,
        doc="gate and up GEMMs",
    )
    b.act("ffn_act", *TOKENS, width)
    b.op(
        "ffn_silu_mul",
        OpKind.ELEMENTWISE,
        ["ffn_gate_up"],
        ["ffn_act"],
        ElementwiseAttrs(ops_scale=5.0),
        tp=TPMode.LOCAL,
        doc="SiLU(gate) * up",
    )
    b.act("ffn_out", *TOKENS, h)
    b.linear("ffn_down_proj", "ffn_act", "ffn_out", width, h, tp=TPMode.ROW)
    b.act("h_out", *TOKENS, h)
    b.op("ffn_residual", OpKind.ELEMENTWISE, [x, "ffn_out"], ["h_out"], tp=TPMode.TOKEN)
    return "h_out"


def _moe_ffn(b: Builder, cfg: DeepSeekV3Config, x: str) -> str:
    k = cfg.num_experts_per_tok
    return moe_ffn(
        b,
        x,
        MoE(
            hidden=cfg.hidden_size,
            experts=cfg.n_routed_experts,
            top_k=k,
            width=cfg.moe_intermediate_size,
            shared_width=cfg.moe_intermediate_size * cfg.n_shared_experts,
            router_doc=f"{cfg.scoring_func} scores, bias-corrected group-limited top-{k} "
            f"({cfg.n_group} groups, best {cfg.topk_group})",
        ),
    )


def build_layer(
    cfg: DeepSeekV3Config,
    kind: str,
    phase: Phase | str,
    snapstream: SnapStreamConfig | None = None,
) -> Graph:
    """One decoder layer of `kind` ('dense' | 'moe') for `phase` ('prefill' | 'decode')."""
    if kind not in ("dense", "moe"):
        raise ValueError(f"unknown layer kind {kind!r}")
    phase = as_phase(phase)
    b = builder_for(cfg, f"{cfg.name}.{kind}.{phase}")
    x = b.act("x", *TOKENS, cfg.hidden_size)
    if phase == Phase.PREFILL:
        h = _attention_prefill(b, cfg, x, snapstream)
    else:
        h = _attention_decode(b, cfg, x, snapstream)
    if kind == "moe":
        _moe_ffn(b, cfg, h)
    else:
        _dense_ffn(b, cfg, h, cfg.intermediate_size)
    return b.g


def build_mtp_projection(cfg: DeepSeekV3Config) -> Graph:
    """The MTP module's own input ops (it then runs one MoE layer and the shared head)."""
    b = builder_for(cfg, f"{cfg.name}.mtp_proj")
    h = cfg.hidden_size
    b.act("h_prev", *TOKENS, h)
    b.act("e_next", *TOKENS, h)
    b.act("h_n", *TOKENS, h)
    b.act("e_n", *TOKENS, h)
    b.norm("mtp_hnorm", "h_prev", "h_n", h)
    b.norm("mtp_enorm", "e_next", "e_n", h)
    b.act("he", *TOKENS, 2 * h)
    b.op("mtp_concat", OpKind.CONCAT, ["h_n", "e_n"], ["he"], tp=TPMode.TOKEN)
    b.act("x", *TOKENS, h)
    b.linear(
        "mtp_eh_proj", "he", "x", 2 * h, h, tp=TPMode.COLUMN, doc="projects [h; e] back to hidden"
    )
    return b.g
