"""SnapStream's ops in the IR: the prefill ring-buffer construction and SnapKV compression.

These are the ops of the paper's two extra prefill kernels (§4.1, Fig. 5), built for any pair
of per-token caches (`names` suffixes the op and tensor names):

- MLA (DeepSeek): the "key" and "value" of the paper's listings are the shared latent and the
  rope key (`_latent`, `_rope`); all heads share the latent, so a layer makes one selection
  (scores summed over all heads).
- MHA/GQA (Llama): the key and value caches (`_k`, `_v`); each KV head makes its own selection
  (scores summed over the query heads of its group).

Shapes use `E`, the eviction candidates between the sink and the recent window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rdusim.ir.graph import TPMode
from rdusim.snapstream.config import VoteNormalisation

if TYPE_CHECKING:
    from rdusim.ir.builders.common import Builder
    from rdusim.snapstream.config import SnapStreamConfig


def add_prefill_compression(
    b: Builder,
    ss: SnapStreamConfig,
    *,
    heads: int,
    qk_dim: int,
    cache: tuple[str, str],
    widths: tuple[int, int],
    query: str,
    keys: str,
    cache_bytes: float,
    selections: int = 1,
    names: tuple[str, str] = ("latent", "rope"),
) -> tuple[str, str]:
    """Add ring-buffer and SnapKV ops reading `cache`; returns the compressed cache tensors.

    `selections` is how many independent top-K selections a layer makes: 1 for MLA's shared
    latent, the number of KV heads for MHA/GQA (query heads of a group vote together).
    """
    # --- Streaming Ring Buffer: sink slice + Range 1 / Range 2 gathers, pre-rotated ring -------
    b.act("ring_sink", "B", ss.sink, sum(widths), dtype_bytes=cache_bytes)
    b.op(
        "ring_sink_gather",
        "gather",
        list(cache),
        ["ring_sink"],
        tp=TPMode.LOCAL,
        doc="index the sink tokens",
        read_shape=("B", ss.sink, sum(widths)),
        read_dtype_bytes=cache_bytes,
    )
    ranges: list[str] = []
    for rng in (1, 2):
        for name, width, src in zip(names, widths, cache, strict=True):
            out = b.act(f"ring_range{rng}_{name}", "B", ss.recent, width, dtype_bytes=cache_bytes)
            b.op(
                f"ring_range{rng}_gather_{name}",
                "gather",
                [src],
                [out],
                tp=TPMode.LOCAL,
                doc=f"gather Range {rng} of the {name} cache (paper Fig. 4)",
                read_shape=("B", ss.recent, width),
                read_dtype_bytes=cache_bytes,
            )
            ranges.append(out)
    b.act("ring", "B", ss.recent, sum(widths), dtype_bytes=cache_bytes)
    b.op(
        "ring_select",
        "elementwise",
        ranges,
        ["ring"],
        tp=TPMode.LOCAL,
        doc="choose Range 2 below the prefill offset, Range 1 above: the pre-rotated ring",
    )
    # --- SnapKV Compression -------------------------------------------------------------------
    # The original SnapKV weighs each window query's votes by its causal attention over every key
    # it sees (`T`: the prompt); the candidates-only rule needs just the candidates (`E`).
    seen = "T" if ss.normalisation == VoteNormalisation.CAUSAL else "E"
    over = "every key it sees (causal)" if seen == "T" else "the eviction candidates"
    b.act("snapkv_scores", "B", heads, ss.obs_window, seen, dtype_bytes=4)
    b.op(
        "snapkv_qk",
        "gemm",
        [query, keys],
        ["snapkv_scores"],
        tp=TPMode.HEADS,
        doc=f"recompute Q_obs K^T for the observation window over {over}",
        m=("B", ss.obs_window),
        k=qk_dim,
        n=1,
        count=heads,
        n_dims=(seen,),
        read_shape=("B", seen, heads, qk_dim),
    )
    b.act("snapkv_probs", "B", heads, ss.obs_window, seen, dtype_bytes=4)
    b.op(
        "snapkv_softmax",
        "softmax",
        ["snapkv_scores"],
        ["snapkv_probs"],
        tp=TPMode.LOCAL,
        blocking=True,
        doc=f"softmax of each window query over {over} (needs whole rows)",
    )
    b.act("snapkv_votes", "B", selections, "E", dtype_bytes=4)
    b.op(
        "snapkv_reduce",
        "reduce",
        ["snapkv_probs"],
        ["snapkv_votes"],
        tp=TPMode.ROW,
        doc="sum the weights on the candidates over the window (eq. 1) and over the heads that "
        "share a selection",
    )
    b.act("snapkv_pooled", "B", selections, "E", dtype_bytes=4)
    b.op(
        "snapkv_pool",
        "pool",
        ["snapkv_votes"],
        ["snapkv_pooled"],
        tp=TPMode.TOKEN,
        kernel=ss.pool_kernel,
        doc="1-D average pooling (eq. 2)",
    )
    b.act("snapkv_index", "B", selections, ss.topk, dtype_bytes=4)
    b.op(
        "snapkv_topk",
        "topk",
        ["snapkv_pooled"],
        ["snapkv_index"],
        tp=TPMode.TOKEN,
        n="E",
        blocking=True,
        doc=f"top-{ss.topk} positions among the candidates",
    )
    compressed = []
    for name, width, src in zip(names, widths, cache, strict=True):
        picked = b.act(f"snapkv_{name}", "B", ss.topk, width, dtype_bytes=cache_bytes)
        b.op(
            f"snapkv_gather_{name}",
            "gather",
            [src, "snapkv_index"],
            [picked],
            tp=TPMode.LOCAL,
            doc=f"gather the selected {name} rows",
            read_shape=("B", ss.topk, width),
            read_dtype_bytes=cache_bytes,
        )
        out = b.cache(f"compressed_{name}", "B", ss.slots, width, dtype_bytes=cache_bytes)
        b.op(
            f"snapkv_concat_{name}",
            "concat",
            ["ring_sink", "ring", picked],
            [out],
            tp=TPMode.LOCAL,
            doc=f"[sink | ring | top-K] {name} cache for decode",
        )
        compressed.append(out)
    return compressed[0], compressed[1]
