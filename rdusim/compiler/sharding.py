"""Sharding pass: split each op over sockets, track tensor layouts, insert collectives.

A tensor's layout on the sockets is one of
  R  replicated: every socket holds it whole;
  T  split by tokens (sequence or batch);
  F  split by features (heads, or an FFN's/experts' intermediate features);
  P  partial sums: every socket holds a full-size addend (after a row-split GEMM).
A consumer that needs another layout than its producer made gets a collective. Caches live in
HBM and are read in place, never moved by collectives.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass

from rdusim.compiler.fusion import FusedKernel
from rdusim.compiler.program import Collective, OpPlan
from rdusim.errors import SpecError
from rdusim.ir import ops as costs
from rdusim.ir.graph import Graph, Op, TensorKind, TPMode, Workload
from rdusim.spec.mapping import Sharding
from rdusim.spec.yamlio import dotted

_CONVERSIONS = {
    ("T", "R"): "all-gather",
    ("F", "R"): "all-gather",
    ("T", "F"): "all-to-all",
    ("F", "T"): "all-to-all",
    ("P", "R"): "all-reduce",
    ("P", "T"): "reduce-scatter",
    ("P", "F"): "reduce-scatter",
}


# the layout a collective leaves its tensor in: whole (R) or one socket's slice
_TARGET = {
    "all-reduce": "R",
    "all-gather": "R",
    "reduce-scatter": "S",
    "all-to-all": "S",
}


def collective_cost(
    kind: str, nbytes: float, d: int, topology: str = "all-to-all"
) -> tuple[float, int]:
    """Bytes each socket sends, and sequential steps (hops), over d sockets.

    Volumes are the bandwidth-optimal ones. On a ring each phase takes d-1 hops; where every
    socket reaches every other ("all-to-all" links), recursive halving/doubling needs log2(d)
    hops a phase for the same volume. All-to-all itself is a pairwise exchange (d-1 hops).
    """
    if d <= 1:
        return 0.0, 0
    hops = d - 1 if topology == "ring" else math.ceil(math.log2(d))
    if kind == "all-reduce":
        return 2 * nbytes * (d - 1) / d, 2 * hops
    if kind in ("all-gather", "reduce-scatter"):
        return nbytes * (d - 1) / d, hops
    if kind == "all-to-all":
        return nbytes * (d - 1) / (d * d), d - 1
    raise ValueError(kind)


@dataclass(frozen=True)
class OpSharding:
    strategy: str
    degree: int
    path: tuple[str | int, ...]  # where in the mapping this sharding was set


def resolve_sharding(fk: FusedKernel, op: str, kind: str) -> OpSharding:
    """The kernel's sharding, or the first per-op override whose pattern matches."""
    for pattern, sh in fk.spec.overrides.items():
        if fnmatch.fnmatchcase(op, pattern):
            return _op_sharding(sh, ("kernels", kind, fk.index, "overrides", pattern))
    return _op_sharding(fk.spec.sharding, ("kernels", kind, fk.index, "sharding"))


def _op_sharding(sh: Sharding, path: tuple[str | int, ...]) -> OpSharding:
    strategy = sh.strategy
    return OpSharding(strategy, sh.degree if strategy != "replicate" else 1, (*path, strategy))


def _error(msg: str, sh: OpSharding, fix: str) -> SpecError:
    return SpecError(msg, key=dotted(sh.path), path=sh.path, fix=fix)


def _check_divisible(op: Op, sh: OpSharding, wl: Workload, sockets: int) -> None:
    """The op's own dimension (heads, split width, experts) is checked before the node's socket
    count, so a degree that fits neither names what the op needs."""
    d = sh.degree
    nodes = "" if sockets % d == 0 else f" (nor the node's {sockets} sockets)"
    if sh.strategy == "tp":
        if op.tp_mode == TPMode.HEADS:
            heads = op.attrs.get("heads") or op.attrs.get("count", 1)
            if heads % d:
                raise _error(
                    f"tp: {d} does not divide the {heads} heads of {op.name}{nodes}",
                    sh,
                    "use a degree that divides the head count (e.g. 8 or 16)",
                )
        if op.tp_mode in (TPMode.COLUMN, TPMode.ROW) and op.kind == "gemm":
            width = op.attrs["n"] if op.tp_mode == TPMode.COLUMN else op.attrs["k"]
            if width % d:
                raise _error(
                    f"tp: {d} does not divide dimension {width} of {op.name}{nodes}",
                    sh,
                    "use a degree that divides the split dimension",
                )
    if sh.strategy == "ep":
        experts = op.attrs.get("experts")
        if not experts:
            raise _error(
                f"ep applies to routed-expert ops, not {op.name}",
                sh,
                "use tp or dp for this op (override it per op)",
            )
        if experts % d:
            raise _error(
                f"ep: {d} does not divide the {experts} experts{nodes}",
                sh,
                "use a degree that divides the expert count",
            )
    if d > sockets:
        raise _error(
            f"degree {d} exceeds the node's {sockets} sockets",
            sh,
            f"use a degree that divides {sockets}",
        )
    if sockets % d:
        raise _error(
            f"degree {d} does not divide the node's {sockets} sockets",
            sh,
            f"use a divisor of {sockets}",
        )


def _required(
    op: Op, sh: OpSharding, seq_parallel: bool, graph: Graph, in_layouts: list[str]
) -> tuple[list[str], str]:
    """Input layouts an op needs and the layout it produces, under its sharding."""
    n = len(op.inputs)
    acts = [graph.tensors[t].kind != TensorKind.CACHE for t in op.inputs]
    if sh.strategy == "replicate":
        return ["R"] * n, "R"
    if sh.strategy == "dp":
        return ["T"] * n, "T"
    mode = op.tp_mode
    if mode == TPMode.COLUMN:
        return ["R"] * n, "F"
    if mode == TPMode.ROW:
        return ["F"] * n, "P"
    if mode == TPMode.HEADS:
        # tensors with a heads axis arrive split by heads; shared ones (rope key) whole
        req = ["F" if len(graph.tensors[t].shape) >= 4 else "R" for t in op.inputs]
        return req, "F"
    if mode == TPMode.TOKEN:
        lay = "T" if seq_parallel else "R"
        return [lay] * n, lay
    # LOCAL: follow the first activation input; linear ops may keep partial sums
    first = next((lay for lay, a in zip(in_layouts, acts, strict=True) if a), "R")
    if first == "P" and not op.attrs.get("linear"):
        first = "T" if seq_parallel else "R"
    if first == "R":
        first = "T"
    return [first] * n, first


def cache_share(op: Op, strategy: str, degree: int, batch: int) -> float:
    """Fraction of an attention op's KV cache one socket holds and reads.

    DP keeps each socket's own sequences (ceil(B/d) of B). A head split over a cache that all
    heads share (MLA's latent) needs all of it; over GQA/MHA heads, a socket holds whole KV heads,
    so the cache splits at most `kv_heads` ways.
    """
    if strategy == "dp":
        return math.ceil(batch / degree) / batch
    if strategy == "tp":
        if op.attrs.get("shared_kv"):
            return 1.0
        kv_heads = op.attrs.get("kv_heads") or op.attrs.get("heads") or degree
        return 1.0 / min(degree, kv_heads)
    return 1.0


def _share(layout: str, d: int, units: int) -> float:
    """Fraction of a tensor one socket holds in `layout`: whole for R and P, 1/d of the features
    for F, and ceil(units/d) of `units` tokens (or sequences) for T, since a split rounds up."""
    if layout in ("R", "P") or d <= 1:
        return 1.0
    if layout == "F":
        return 1.0 / d
    return math.ceil(units / d) / units if units >= 1 else 1.0 / d


@dataclass
class ShardedLayer:
    ops: dict[str, OpPlan]
    collectives: list[Collective]
    host: dict[int, str]  # collective index -> op whose kernel hosts it
    layouts: dict[str, str]


def shard(
    graph: Graph,
    fused: list[FusedKernel],
    kind: str,
    wl: Workload,
    sockets: int,
    tiling_kv_block: dict[str, int | None],
    topology: str = "all-to-all",
) -> ShardedLayer:
    """Split every op of a fused layer over the sockets and insert the collectives it needs."""
    kernel_of = {n: fk for fk in fused for n in fk.ops}
    seq_parallel = wl.seq > 1
    env = wl.env()
    layouts: dict[str, str] = {}
    degrees: dict[str, int] = {}  # sockets a tensor's split (or partial sums) spans
    # the layer input arrives in the layout the previous layer leaves its output in
    layer_in = graph.graph_inputs()
    for t in layer_in:
        layouts[t] = "R"
    plans: dict[str, OpPlan] = {}
    colls: list[Collective] = []
    host: dict[int, str] = {}
    converted: dict[tuple[str, str], int] = {}
    for _pass in range(2):  # second pass: layer input = what the layer outputs
        layouts = {t: layouts.get(t, "R") for t in layer_in}
        plans.clear()
        colls.clear()
        host.clear()
        converted.clear()
        for op in graph:
            fk = kernel_of[op.name]
            sh = resolve_sharding(fk, op.name, kind)
            _check_divisible(op, sh, wl, sockets)
            d = sh.degree
            have = [layouts.get(t, "R") for t in op.inputs]
            need, out = _required(op, sh, seq_parallel, graph, have)
            units_tok = wl.batch if op.kind == "attention" and sh.strategy == "dp" else wl.tokens
            hbm_read = 0.0
            stream_in = 0.0
            for t, h, r in zip(op.inputs, have, need, strict=True):
                tensor = graph.tensors[t]
                if tensor.kind == TensorKind.CACHE:
                    continue
                # a split or partial tensor spans its producer's sockets: converting it for a
                # consumer with another (or no) split involves all of them
                dc = max(d, degrees.get(t, 1) if h != "R" else 1)
                if h != r and (h, r) in _CONVERSIONS and dc > 1:
                    key = (t, r)
                    if key not in converted:
                        ck = _CONVERSIONS[(h, r)]
                        nbytes, steps = collective_cost(ck, tensor.nbytes(env), dc, topology)
                        converted[key] = len(colls)
                        src = graph.producer.get(t)
                        colls.append(Collective(ck, t, nbytes, steps, src, op.name))
                        host[len(colls) - 1] = src if src is not None else op.name
                size = tensor.nbytes(env) * _share(r, d, wl.tokens)
                src = graph.producer.get(t)
                if src is not None and kernel_of[src] is fk:
                    stream_in += size
                else:
                    hbm_read += size
            frac = 1.0 / d if sh.strategy != "dp" else _share("T", d, units_tok)
            if sh.strategy == "tp" and op.tp_mode == TPMode.TOKEN and not seq_parallel:
                frac = 1.0  # replicated token-wise work in decode
            flops = costs.flops(op, graph, wl)
            # caches and explicit read shapes (gathers, cache reads) come straight from HBM
            cache_read = 0.0
            if "read_shape" in op.attrs:
                share = (
                    cache_share(op, sh.strategy, d, wl.batch) if op.kind == "attention" else frac
                )
                cache_read = costs.bytes_read(op, graph, wl) * share
                if op.kind in ("gather", "gemm"):
                    hbm_read = 0.0  # the read shape replaces the whole-tensor reads
            kvb = tiling_kv_block.get(fk.spec.name)
            if op.kind == "attention" and op.attrs.get("causal") and wl.seq > 1:
                # flash-style: K/V blocks are re-read for each query block (causal: about half)
                block = kvb or wl.seq
                nb = math.ceil(wl.seq / block)
                kv_in = sum(graph.tensors[t].nbytes(env) for t in op.inputs[1:]) * frac
                hbm_read += kv_in * ((nb + 1) / 2 - 1) if nb > 1 else 0.0
            out_bytes = sum(graph.tensors[t].nbytes(env) for t in op.outputs)
            if "write_shape" in op.attrs:
                out_bytes = costs.bytes_written(op, graph, wl)
            out_share = _share(out, d, wl.tokens) if out != "P" else 1.0
            if sh.strategy == "tp" and op.tp_mode == TPMode.TOKEN and not seq_parallel:
                out_share = 1.0
            consumers_outside = (
                any(kernel_of[c] is not fk for t in op.outputs for c in graph.consumers(t))
                or any(not graph.consumers(t) for t in op.outputs)
                or any(graph.tensors[t].kind == TensorKind.CACHE for t in op.outputs)
            )
            hbm_write = out_bytes * out_share if consumers_outside else 0.0
            stream_out = out_bytes * out_share
            w = op.weight_bytes()
            weight_share = 1.0
            if sh.strategy in ("tp", "ep") and op.weights and op.tp_mode != TPMode.TOKEN:
                weight_share = 1.0 / d
            plans[op.name] = OpPlan(
                name=op.name,
                kind=op.kind,
                cost_class=op.cost_class.value,
                strategy=sh.strategy,
                degree=d,
                flops=flops * frac,
                hbm_read=hbm_read + cache_read,
                hbm_write=hbm_write,
                weight_bytes=w * weight_share,
                stream_in=stream_in,
                stream_out=stream_out,
                in_layouts=tuple(need),
                out_layout=out,
                full_flops=flops,
                blocking=bool(op.attrs.get("blocking")),
            )
            for t in op.outputs:
                layouts[t] = out
                degrees[t] = d
        # a collective hosted by its producer's kernel converts the tensor before it leaves the
        # chip, so what the producer writes to HBM is the converted layout's share
        for c in colls:
            if c.src is None or c.src not in plans or kernel_of[c.src] is kernel_of[c.dst]:
                continue
            prod = plans[c.src]
            if prod.hbm_write <= 0:
                continue
            nbytes = graph.tensors[c.tensor].nbytes(env)
            target = _TARGET[c.kind]
            was = 1.0 if prod.out_layout == "P" else _share(prod.out_layout, prod.degree, wl.tokens)
            now = 1.0 if target == "R" else _share("T", prod.degree, wl.tokens)
            prod.hbm_write = max(0.0, prod.hbm_write + nbytes * (now - was))
        outs = [t for t in graph.graph_outputs() if graph.tensors[t].kind != TensorKind.CACHE]
        final = layouts.get(outs[0], "R") if outs else "R"
        for t in layer_in:
            if graph.tensors[t].kind != TensorKind.CACHE:
                layouts[t] = final
                degrees[t] = degrees.get(outs[0], 1) if outs else 1
    return ShardedLayer(plans, colls, host, layouts)
