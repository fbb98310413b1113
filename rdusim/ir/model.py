"""A whole model as IR: one graph per layer kind, plus embedding, head and the MTP module.

The family's builders come from the registry (`rdusim.ir.families`), keyed by `model_type`.

Layers of one kind are identical, so the model is a list of (kind, count) and one graph each;
parameter counts and the KV bytes per token are read off these graphs, so they always agree with
what the compiler and simulator see.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from types import ModuleType

from rdusim.ir.attrs import GemmAttrs, window_of
from rdusim.ir.families import family_of
from rdusim.ir.graph import Graph, Op, Phase, TensorKind, Workload, as_phase
from rdusim.snapstream.config import SnapStreamConfig
from rdusim.spec.model import LlamaConfig, ModelSpec


@dataclass(frozen=True)
class MtpModule:
    """One multi-token-prediction module: its own input projection, then one MoE decoder layer
    (it shares the model's embedding and head)."""

    projection: Graph
    layer: Graph

    def graphs(self) -> tuple[Graph, Graph]:
        return self.projection, self.layer


@dataclass
class ModelGraphs:
    model: ModelSpec
    phase: Phase
    layers: dict[str, Graph]
    layer_counts: dict[str, int]
    embedding: Graph
    head: Graph
    mtp: list[MtpModule] = field(default_factory=list)  # in chain order


def _builders(cfg: ModelSpec) -> ModuleType:
    return family_of(cfg).builders


def layer_counts(cfg: ModelSpec) -> dict[str, int]:
    counts = Counter(cfg.layer_kind(i) for i in range(cfg.num_hidden_layers))
    return {k: counts[k] for k in ("dense", "moe") if counts[k]}


def build_model(
    cfg: ModelSpec, phase: Phase | str, snapstream: SnapStreamConfig | None = None
) -> ModelGraphs:
    """Every graph of `cfg` for `phase` (a phase's name is accepted as well)."""
    phase = as_phase(phase)
    mod = _builders(cfg)
    counts = layer_counts(cfg)
    layers = {kind: mod.build_layer(cfg, kind, phase, snapstream) for kind in counts}
    mtp = [
        MtpModule(mod.build_mtp_projection(cfg), mod.build_layer(cfg, "moe", phase))
        for _ in range(getattr(cfg, "num_nextn_predict_layers", 0))
    ]
    return ModelGraphs(
        cfg, phase, layers, counts, mod.build_embedding(cfg), mod.build_head(cfg), mtp
    )


def active_params(graph: Graph) -> float:
    """Parameters one token touches: routed experts count only the `count` of them it uses.

    The embedding table counts whole, by the usual convention for "activated parameters".
    """
    total = 0.0
    for op in graph.ops.values():
        used = _experts_used(op)
        for w in op.weights:
            n = w.numel()
            if used is not None:
                n *= used / float(w.shape[0])
            total += n
    return total


def _experts_used(op: Op) -> int | None:
    """Expert matrices one token uses, for a routed-expert GEMM (None: all its weights count)."""
    a = op.attrs
    return a.count if isinstance(a, GemmAttrs) and a.routed is not None else None


def attention_window(graph: Graph) -> int | None:
    """The sliding window of a layer's attention (None: full attention)."""
    windows = [w for op in graph.ops.values() if (w := window_of(op.attrs)) is not None]
    return min(windows) if windows else None


def cache_bytes(graph: Graph, wl: Workload) -> float:
    """Bytes of a layer's KV cache for `wl` (the compressed copies SnapStream's prefill writes are
    the same cache, smaller, and are not counted again). A sliding window of W keys keeps at most
    W positions."""
    env = wl.env()
    window = attention_window(graph)
    if window is not None:
        env["T"] = min(env["T"], window)
    return sum(
        t.nbytes(env)
        for t in graph.tensors.values()
        if t.kind == TensorKind.CACHE and not t.compressed
    )


def kv_bytes_per_token_layer(graph: Graph) -> float:
    return cache_bytes(graph, Workload(1, 1, 1))


@dataclass(frozen=True)
class ModelSummary:
    name: str
    family: str
    params_total: float
    params_active: float
    params_mtp: float
    params_embedding: float
    kv_bytes_per_token: float
    num_layers: dict[str, int]
    weight_bytes: float
    weight_bytes_mtp: float


def summarize(cfg: ModelSpec) -> ModelSummary:
    """Parameter counts (main model; MTP separately), KV bytes per token, layers by kind."""
    g = build_model(cfg, Phase.DECODE)
    per_kind = {k: g.layers[k].weight_params() for k in g.layers}
    emb = g.embedding.weight_params()
    head = g.head.weight_params()
    total = emb + head + sum(per_kind[k] * g.layer_counts[k] for k in per_kind)
    active = (
        active_params(g.embedding)
        + active_params(g.head)
        + sum(active_params(g.layers[k]) * g.layer_counts[k] for k in per_kind)
    )
    kv = sum(kv_bytes_per_token_layer(g.layers[k]) * g.layer_counts[k] for k in per_kind)
    wbytes = (
        g.embedding.weight_bytes()
        + g.head.weight_bytes()
        + sum(g.layers[k].weight_bytes() * g.layer_counts[k] for k in per_kind)
    )
    return ModelSummary(
        name=cfg.name,
        family=cfg.model_type,
        params_total=total,
        params_active=active,
        params_mtp=sum(part.weight_params() for m in g.mtp for part in m.graphs()),
        params_embedding=emb,
        kv_bytes_per_token=kv,
        num_layers=dict(g.layer_counts),
        weight_bytes=wbytes,
        weight_bytes_mtp=sum(part.weight_bytes() for m in g.mtp for part in m.graphs()),
    )


__all__ = ["LlamaConfig", "ModelGraphs", "ModelSummary", "build_model", "summarize"]
