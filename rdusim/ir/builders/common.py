"""Small vocabulary shared by the model builders, so every builder names and costs ops alike."""

from __future__ import annotations

from dataclasses import dataclass

from rdusim.ir.attrs import (
    Access,
    ElementwiseAttrs,
    GatherAttrs,
    GemmAttrs,
    OpAttrs,
    OpKind,
    RoutedExperts,
    RowAttrs,
    SortAttrs,
    TopkAttrs,
    default_attrs,
)
from rdusim.ir.graph import CacheRole, Dim, Graph, Op, Tensor, TensorKind, TPMode
from rdusim.spec.model import ModelConfig

TOKENS: tuple[Dim, ...] = ("B", "S")


class Builder:
    """Adds tensors and ops to a graph with the model's dtypes."""

    def __init__(self, name: str, act_bytes: float, weight_bytes: float, dense_bytes: float):
        self.g = Graph(name)
        self.act_bytes = act_bytes
        self.weight_bytes = weight_bytes
        self.dense_bytes = dense_bytes

    def act(self, name: str, *shape: Dim, dtype_bytes: float | None = None) -> str:
        self.g.tensor(Tensor(name, tuple(shape), dtype_bytes or self.act_bytes))
        return name

    def cache(
        self, name: str, *shape: Dim, dtype_bytes: float, role: CacheRole, compressed: bool = False
    ) -> str:
        self.g.tensor(Tensor(name, tuple(shape), dtype_bytes, TensorKind.CACHE, role, compressed))
        return name

    def weight(self, name: str, *shape: int, dense: bool = False) -> Tensor:
        return Tensor(
            name, tuple(shape), self.dense_bytes if dense else self.weight_bytes, TensorKind.WEIGHT
        )

    def op(
        self,
        name: str,
        kind: OpKind,
        inputs: tuple[str, ...] | list[str],
        outputs: tuple[str, ...] | list[str],
        attrs: OpAttrs | None = None,
        *,
        weights: tuple[Tensor, ...] = (),
        tp: TPMode = TPMode.LOCAL,
        doc: str = "",
    ) -> Op:
        """Add an op; `attrs` may be left out for a kind whose attributes all have defaults."""
        a = attrs if attrs is not None else default_attrs(kind)
        return self.g.add(Op(name, kind, tuple(inputs), tuple(outputs), a, weights, tp, doc))

    def linear(
        self,
        name: str,
        x: str,
        out: str,
        k: int,
        n: int,
        *,
        tp: TPMode,
        count: int = 1,
        weight_count: int = 1,
        dense: bool = False,
        extra_inputs: tuple[str, ...] = (),
        routed: RoutedExperts | None = None,
        bias: bool = False,
        doc: str = "",
    ) -> Op:
        """y = x W (+ b): `count` matmuls of k x n per token (heads or routed experts).

        `weight_count` is how many k x n matrices are stored (e.g. all routed experts); a token
        uses `count` of them. A bias is a vector of n parameters kept with the dense weights (its
        add is folded into the GEMM's output stream).
        """
        w = self.weight(f"{name}.weight", weight_count, k, n, dense=dense)
        b = (self.weight(f"{name}.bias", n, dense=True),) if bias else ()
        return self.op(
            name,
            OpKind.GEMM,
            [x, *extra_inputs],
            [out],
            GemmAttrs(TOKENS, k, n, count, routed=routed),
            weights=(w, *b),
            tp=tp,
            doc=doc,
        )

    def norm(self, name: str, x: str, out: str, width: int, doc: str = "") -> Op:
        w = self.weight(f"{name}.weight", width, dense=True)
        return self.op(name, OpKind.NORM, [x], [out], weights=(w,), tp=TPMode.TOKEN, doc=doc)


def embedding_graph(b: Builder, hidden: int, vocab: int) -> Graph:
    """Token embedding lookup, vocab-parallel: each socket holds a slice of the table."""
    b.act("ids", *TOKENS, dtype_bytes=4)
    b.act("x", *TOKENS, hidden)
    w = b.weight("embed.weight", vocab, hidden, dense=True)
    b.op(
        "embed",
        OpKind.EMBED,
        ["ids"],
        ["x"],
        GatherAttrs(Access(("B", "S", hidden), b.dense_bytes)),
        weights=(w,),
        tp=TPMode.ROW,
        doc="token embedding lookup (vocab-parallel: each socket holds a slice of the table)",
    )
    return b.g


def head_graph(b: Builder, hidden: int, vocab: int, tied: bool) -> Graph:
    """Final norm, LM head (tied to the embedding or not) and sampling."""
    b.act("x", *TOKENS, hidden)
    b.act("x_n", *TOKENS, hidden)
    b.norm("final_norm", "x", "x_n", hidden)
    b.act("logits", *TOKENS, vocab, dtype_bytes=4)
    if tied:
        b.op(
            "lm_head",
            OpKind.GEMM,
            ["x_n"],
            ["logits"],
            GemmAttrs(TOKENS, hidden, vocab),
            tp=TPMode.COLUMN,
            doc="tied to the embedding: no weights of its own",
        )
    else:
        b.linear("lm_head", "x_n", "logits", hidden, vocab, tp=TPMode.COLUMN, dense=True)
    b.act("next_token", "B", "S", dtype_bytes=4)
    b.op(
        "sample",
        OpKind.TOPK,
        ["logits"],
        ["next_token"],
        TopkAttrs(vocab),
        tp=TPMode.LOCAL,
        doc="greedy / top-k sampling",
    )
    return b.g


@dataclass(frozen=True)
class MoE:
    """A MoE FFN's sizes: `experts` routed SwiGLU experts of `width`, `top_k` per token, and an
    optional shared expert of `shared_width` (0: none), scaled by a sigmoid gate if
    `shared_gate`. `router_doc` says how the router scores and picks."""

    hidden: int
    experts: int
    top_k: int
    width: int
    shared_width: int
    router_doc: str
    shared_gate: bool = False


def _shared_expert(b: Builder, moe: MoE) -> list[str]:
    """The shared expert (and its gate): the tensors `experts_combine` adds."""
    h, sw = moe.hidden, moe.shared_width
    b.act("shared_gate_up", *TOKENS, 2 * sw)
    b.linear("shared_up_proj", "ffn_in", "shared_gate_up", h, 2 * sw, tp=TPMode.COLUMN)
    b.act("shared_act", *TOKENS, sw)
    b.op(
        "shared_silu_mul",
        OpKind.ELEMENTWISE,
        ["shared_gate_up"],
        ["shared_act"],
        ElementwiseAttrs(ops_scale=5.0),
        tp=TPMode.LOCAL,
    )
    b.act("shared_out", *TOKENS, h)
    b.linear("shared_down_proj", "shared_act", "shared_out", sw, h, tp=TPMode.ROW)
    if not moe.shared_gate:
        return ["shared_out"]
    b.act("shared_scale", *TOKENS, 1)
    b.linear(
        "shared_gate",
        "ffn_in",
        "shared_scale",
        h,
        1,
        tp=TPMode.TOKEN,
        dense=True,
        doc="sigmoid gate of the shared expert: one value per token",
    )
    return ["shared_out", "shared_scale"]


def moe_ffn(b: Builder, x: str, moe: MoE) -> str:
    """RMSNorm, router, token grouping, shared and routed experts, combine and residual.

    Op names and the routed experts' attrs (`RoutedExperts`) are what the compiler's expert routing and mappings'
    patterns key on, whatever the family.
    """
    h = moe.hidden
    b.act("ffn_in", *TOKENS, h)
    b.norm("ffn_norm", x, "ffn_in", h)
    _route(b, moe)
    shared = _shared_expert(b, moe) if moe.shared_width else []
    _routed_experts(b, moe, shared)
    b.act("h_out", *TOKENS, h)
    b.op("ffn_residual", OpKind.ELEMENTWISE, [x, "moe_out"], ["h_out"], tp=TPMode.TOKEN)
    return "h_out"


def _route(b: Builder, moe: MoE) -> None:
    """The router's gate GEMM and top-k, then the token slots grouped by expert."""
    h, e, k = moe.hidden, moe.experts, moe.top_k
    b.act("router_logits", *TOKENS, e, dtype_bytes=4)
    b.linear(
        "router_gate",
        "ffn_in",
        "router_logits",
        h,
        e,
        tp=TPMode.TOKEN,
        dense=True,
        doc="router gate GEMM",
    )
    b.act("expert_ids", *TOKENS, k, dtype_bytes=4)
    b.op(
        "router_topk",
        OpKind.ROUTER,
        ["router_logits"],
        ["expert_ids"],
        RowAttrs(),
        tp=TPMode.TOKEN,
        doc=moe.router_doc,
    )
    b.act("token_order", *TOKENS, k, dtype_bytes=4)
    b.op(
        "token_group",
        OpKind.SORT,
        ["expert_ids"],
        ["token_order"],
        SortAttrs(e, blocking=True),
        tp=TPMode.TOKEN,
        doc="group token slots by expert so each expert's weights are read once",
    )


def _routed_experts(b: Builder, moe: MoE, shared: list[str]) -> None:
    """The routed experts' gate+up, activation and down GEMMs, and their weighted sum (with the
    shared expert's output, `shared`, when there is one) into `moe_out`."""
    h, e, k, w = moe.hidden, moe.experts, moe.top_k, moe.width
    routed = RoutedExperts(experts=e, slots=k)
    b.act("expert_gate_up", *TOKENS, k, 2 * w)
    b.linear(
        "experts_up_proj",
        "ffn_in",
        "expert_gate_up",
        h,
        2 * w,
        count=k,
        weight_count=e,
        tp=TPMode.COLUMN,
        extra_inputs=("token_order",),
        routed=routed,
        doc=f"gate+up GEMMs of the {k} routed experts of each token",
    )
    b.act("expert_act", *TOKENS, k, w)
    b.op(
        "experts_silu_mul",
        OpKind.ELEMENTWISE,
        ["expert_gate_up"],
        ["expert_act"],
        ElementwiseAttrs(ops_scale=5.0, routed=routed),
        tp=TPMode.LOCAL,
    )
    b.act("expert_out", *TOKENS, k, h)
    b.linear(
        "experts_down_proj",
        "expert_act",
        "expert_out",
        w,
        h,
        count=k,
        weight_count=e,
        tp=TPMode.ROW,
        routed=routed,
    )
    b.act("moe_out", *TOKENS, h)
    b.op(
        "experts_combine",
        OpKind.ELEMENTWISE,
        ["expert_out", *shared],
        ["moe_out"],
        ElementwiseAttrs(ops_scale=2.0, linear=True, routed=routed),
        tp=TPMode.LOCAL,
        doc="weighted sum of the routed experts" + (" plus the shared expert" if shared else ""),
    )


def builder_for(cfg: ModelConfig, name: str) -> Builder:
    """A builder with the model's activation, weight and dense-weight dtypes."""
    return Builder(
        name, cfg.bytes_of("activations"), cfg.bytes_of("weights"), cfg.bytes_of("dense_weights")
    )


def build_embedding(cfg: ModelConfig) -> Graph:
    """The token embedding, the same in every family."""
    return embedding_graph(
        builder_for(cfg, f"{cfg.name}.embedding"), cfg.hidden_size, cfg.vocab_size
    )


def build_head(cfg: ModelConfig) -> Graph:
    """Final norm and LM head for the last token of each sequence (what the next token needs)."""
    b = builder_for(cfg, f"{cfg.name}.head")
    return head_graph(b, cfg.hidden_size, cfg.vocab_size, cfg.tie_word_embeddings)
