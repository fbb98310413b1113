"""Small vocabulary shared by the model builders, so every builder names and costs ops alike."""

from __future__ import annotations

from rdusim.ir.graph import Dim, Graph, Op, Tensor, TensorKind, TPMode

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

    def cache(self, name: str, *shape: Dim, dtype_bytes: float) -> str:
        self.g.tensor(Tensor(name, tuple(shape), dtype_bytes, TensorKind.CACHE))
        return name

    def weight(self, name: str, *shape: int, dense: bool = False) -> Tensor:
        return Tensor(
            name, tuple(shape), self.dense_bytes if dense else self.weight_bytes, TensorKind.WEIGHT
        )

    def op(
        self,
        name: str,
        kind: str,
        inputs: tuple[str, ...] | list[str],
        outputs: tuple[str, ...] | list[str],
        *,
        weights: tuple[Tensor, ...] = (),
        tp: TPMode = TPMode.LOCAL,
        doc: str = "",
        **attrs: object,
    ) -> Op:
        return self.g.add(
            Op(name, kind, tuple(inputs), tuple(outputs), weights, dict(attrs), tp, doc)
        )

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
        experts: int = 0,
        slots: int = 0,
        doc: str = "",
    ) -> Op:
        """y = x W: `count` matmuls of k x n per token (heads or routed experts).

        `weight_count` is how many k x n matrices are stored (e.g. all routed experts); a token
        uses `count` of them.
        """
        w = self.weight(f"{name}.weight", weight_count, k, n, dense=dense)
        return self.op(
            name,
            "gemm",
            [x, *extra_inputs],
            [out],
            weights=(w,),
            tp=tp,
            doc=doc,
            m=TOKENS,
            k=k,
            n=n,
            count=count,
            **({"experts": experts, "slots": slots} if experts else {}),
        )

    def norm(self, name: str, x: str, out: str, width: int, doc: str = "") -> Op:
        w = self.weight(f"{name}.weight", width, dense=True)
        return self.op(name, "norm", [x], [out], weights=(w,), tp=TPMode.TOKEN, doc=doc)


def embedding_graph(b: Builder, hidden: int, vocab: int) -> Graph:
    """Token embedding lookup, vocab-parallel: each socket holds a slice of the table."""
    b.act("ids", *TOKENS, dtype_bytes=4)
    b.act("x", *TOKENS, hidden)
    w = b.weight("embed.weight", vocab, hidden, dense=True)
    b.op(
        "embed",
        "embed",
        ["ids"],
        ["x"],
        weights=(w,),
        tp=TPMode.ROW,
        read_shape=("B", "S", hidden),
        read_dtype_bytes=b.dense_bytes,
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
            "gemm",
            ["x_n"],
            ["logits"],
            tp=TPMode.COLUMN,
            m=TOKENS,
            k=hidden,
            n=vocab,
            doc="tied to the embedding: no weights of its own",
        )
    else:
        b.linear("lm_head", "x_n", "logits", hidden, vocab, tp=TPMode.COLUMN, dense=True)
    b.act("next_token", "B", "S", dtype_bytes=4)
    b.op(
        "sample",
        "topk",
        ["logits"],
        ["next_token"],
        tp=TPMode.LOCAL,
        n=vocab,
        doc="greedy / top-k sampling",
    )
    return b.g
