"""SnapStream's ops in the IR: the prefill ring-buffer construction and SnapKV compression.

These are the ops of the paper's two extra prefill kernels (§4.1, Fig. 5), built for any pair
of per-token caches (each `CacheSource.suffix` names its ops and tensors):

- MLA (DeepSeek): the "key" and "value" of the paper's listings are the shared latent and the
  rope key (`_latent`, `_rope`); all heads share the latent, so a layer makes one selection
  (scores summed over all heads).
- MHA/GQA (Llama): the key and value caches (`_k`, `_v`); each KV head makes its own selection
  (scores summed over the query heads of its group).

Shapes use `E`, the eviction candidates between the sink and the recent window. The compressed
copies are caches marked `compressed`, so the cache is never counted twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdusim.ir.attrs import (
    Access,
    GatherAttrs,
    GemmAttrs,
    OpKind,
    PoolAttrs,
    RowAttrs,
    TopkAttrs,
)
from rdusim.ir.builders.common import Builder
from rdusim.ir.graph import TPMode
from rdusim.snapstream.config import SnapStreamConfig, VoteNormalisation


@dataclass(frozen=True)
class CacheSource:
    """One per-token cache the compression reads: `tensor`, `width` values per position, and
    the `suffix` of the ops and tensors made for it."""

    suffix: str
    tensor: str
    width: int


def add_prefill_compression(
    b: Builder,
    ss: SnapStreamConfig,
    *,
    heads: int,
    qk_dim: int,
    caches: tuple[CacheSource, CacheSource],
    query: str,
    keys: str,
    cache_bytes: float,
    selections: int = 1,
) -> tuple[str, str]:
    """Add ring-buffer and SnapKV ops reading `caches`; returns the compressed cache tensors.

    `selections` is how many independent top-K selections a layer makes: 1 for MLA's shared
    latent, the number of KV heads for MHA/GQA (query heads of a group vote together).
    """
    _ring_buffer(b, ss, caches, cache_bytes)
    _snapkv_index(b, ss, heads, qk_dim, query, keys, selections)
    first, second = caches
    return _compressed_copy(b, ss, first, cache_bytes), _compressed_copy(b, ss, second, cache_bytes)


def _ring_buffer(
    b: Builder, ss: SnapStreamConfig, caches: tuple[CacheSource, ...], cache_bytes: float
) -> None:
    """Streaming Ring Buffer: sink slice + Range 1 / Range 2 gathers, pre-rotated ring."""
    width = sum(c.width for c in caches)
    b.act("ring_sink", "B", ss.sink, width, dtype_bytes=cache_bytes)
    b.op(
        "ring_sink_gather",
        OpKind.GATHER,
        [c.tensor for c in caches],
        ["ring_sink"],
        GatherAttrs(Access(("B", ss.sink, width), cache_bytes)),
        tp=TPMode.LOCAL,
        doc="index the sink tokens",
    )
    ranges: list[str] = []
    for rng in (1, 2):
        for c in caches:
            out = b.act(
                f"ring_range{rng}_{c.suffix}", "B", ss.recent, c.width, dtype_bytes=cache_bytes
            )
            b.op(
                f"ring_range{rng}_gather_{c.suffix}",
                OpKind.GATHER,
                [c.tensor],
                [out],
                GatherAttrs(Access(("B", ss.recent, c.width), cache_bytes)),
                tp=TPMode.LOCAL,
                doc=f"gather Range {rng} of the {c.suffix} cache (paper Fig. 4)",
            )
            ranges.append(out)
    b.act("ring", "B", ss.recent, width, dtype_bytes=cache_bytes)
    b.op(
        "ring_select",
        OpKind.ELEMENTWISE,
        ranges,
        ["ring"],
        tp=TPMode.LOCAL,
        doc="choose Range 2 below the prefill offset, Range 1 above: the pre-rotated ring",
    )


def _snapkv_index(
    b: Builder,
    ss: SnapStreamConfig,
    heads: int,
    qk_dim: int,
    query: str,
    keys: str,
    selections: int,
) -> None:
    """SnapKV's scores, votes, pooling and top-K: the positions kept, in `snapkv_index`.

    The original SnapKV weighs each window query's votes by its causal attention over every key
    it sees (`T`: the prompt); the candidates-only rule needs just the candidates (`E`).
    """
    seen = "T" if ss.normalisation == VoteNormalisation.CAUSAL else "E"
    over = "every key it sees (causal)" if seen == "T" else "the eviction candidates"
    b.act("snapkv_scores", "B", heads, ss.obs_window, seen, dtype_bytes=4)
    b.op(
        "snapkv_qk",
        OpKind.GEMM,
        [query, keys],
        ["snapkv_scores"],
        GemmAttrs(
            ("B", ss.obs_window),
            qk_dim,
            1,
            count=heads,
            n_dims=(seen,),
            read=Access(("B", seen, heads, qk_dim)),
        ),
        tp=TPMode.HEADS,
        doc=f"recompute Q_obs K^T for the observation window over {over}",
    )
    b.act("snapkv_probs", "B", heads, ss.obs_window, seen, dtype_bytes=4)
    b.op(
        "snapkv_softmax",
        OpKind.SOFTMAX,
        ["snapkv_scores"],
        ["snapkv_probs"],
        RowAttrs(blocking=True),
        tp=TPMode.LOCAL,
        doc=f"softmax of each window query over {over} (needs whole rows)",
    )
    b.act("snapkv_votes", "B", selections, "E", dtype_bytes=4)
    b.op(
        "snapkv_reduce",
        OpKind.REDUCE,
        ["snapkv_probs"],
        ["snapkv_votes"],
        tp=TPMode.ROW,
        doc="sum the weights on the candidates over the window (eq. 1) and over the heads that "
        "share a selection",
    )
    b.act("snapkv_pooled", "B", selections, "E", dtype_bytes=4)
    b.op(
        "snapkv_pool",
        OpKind.POOL,
        ["snapkv_votes"],
        ["snapkv_pooled"],
        PoolAttrs(ss.pool_kernel),
        tp=TPMode.TOKEN,
        doc="1-D average pooling (eq. 2)",
    )
    b.act("snapkv_index", "B", selections, ss.topk, dtype_bytes=4)
    b.op(
        "snapkv_topk",
        OpKind.TOPK,
        ["snapkv_pooled"],
        ["snapkv_index"],
        TopkAttrs("E", blocking=True),
        tp=TPMode.TOKEN,
        doc=f"top-{ss.topk} positions among the candidates",
    )


def _compressed_copy(b: Builder, ss: SnapStreamConfig, c: CacheSource, cache_bytes: float) -> str:
    """Gather the selected rows of one cache and lay out [sink | ring | top-K] for decode."""
    picked = b.act(f"snapkv_{c.suffix}", "B", ss.topk, c.width, dtype_bytes=cache_bytes)
    b.op(
        f"snapkv_gather_{c.suffix}",
        OpKind.GATHER,
        [c.tensor, "snapkv_index"],
        [picked],
        GatherAttrs(Access(("B", ss.topk, c.width), cache_bytes)),
        tp=TPMode.LOCAL,
        doc=f"gather the selected {c.suffix} rows",
    )
    role = b.g.tensors[c.tensor].role
    if role is None:
        raise ValueError(f"SnapStream compresses caches; {c.tensor} is not one")
    out = b.cache(
        f"compressed_{c.suffix}",
        "B",
        ss.slots,
        c.width,
        dtype_bytes=cache_bytes,
        role=role,
        compressed=True,
    )
    b.op(
        f"snapkv_concat_{c.suffix}",
        OpKind.CONCAT,
        ["ring_sink", "ring", picked],
        [out],
        tp=TPMode.LOCAL,
        doc=f"[sink | ring | top-K] {c.suffix} cache for decode",
    )
    return out
