"""Sharding pass: split each op over sockets, track tensor layouts, insert collectives.

A tensor's layout on the sockets (`Layout`) is one of
  R  replicated: every socket holds it whole;
  T  split by tokens (sequence or batch);
  F  split by features (heads, or an FFN's/experts' intermediate features);
  P  partial sums: every socket holds a full-size addend (after a row-split GEMM, or a split-KV
     attention whose partial softmax results still have to be combined).
A consumer that needs another layout than its producer made gets a collective. Caches live in
HBM and are read in place, never moved by collectives.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from rdusim.compiler.collectives import CollectiveKind, Topology, collective_cost
from rdusim.compiler.experts import Routing, expert_share
from rdusim.compiler.fusion import FusedKernel
from rdusim.compiler.program import Collective, Layout, OpPlan
from rdusim.errors import SpecError
from rdusim.ir import ops as costs
from rdusim.ir.attrs import AttentionAttrs, ElementwiseAttrs, GemmAttrs, head_count, window_of
from rdusim.ir.graph import CostClass, Graph, Op, TensorKind, TPMode, Workload
from rdusim.spec.mapping import Sharding
from rdusim.spec.yamlio import kernel_key

R, T, F, P = Layout.R, Layout.T, Layout.F, Layout.P

_CONVERSIONS = {
    (T, R): CollectiveKind.ALL_GATHER,
    (F, R): CollectiveKind.ALL_GATHER,
    (T, F): CollectiveKind.ALL_TO_ALL,
    (F, T): CollectiveKind.ALL_TO_ALL,
    (P, R): CollectiveKind.ALL_REDUCE,
    (P, T): CollectiveKind.REDUCE_SCATTER,
    (P, F): CollectiveKind.REDUCE_SCATTER,
}


# the layout a collective leaves its tensor in: whole (R), or one socket's slice, whose share
# is counted like a token split (T)
_TARGET = {
    CollectiveKind.ALL_REDUCE: R,
    CollectiveKind.ALL_GATHER: R,
    CollectiveKind.REDUCE_SCATTER: T,
    CollectiveKind.ALL_TO_ALL: T,
}


@dataclass(frozen=True)
class ShardContext:
    """What the sharding pass needs besides the graph: the workload, the node and the routing."""

    workload: Workload
    sockets: int
    prefill: bool  # prefill splits token-wise ops over the sequence; decode replicates them
    topology: Topology = Topology.FULLY_CONNECTED
    kv_blocks: Mapping[str, int | None] = field(default_factory=dict)  # kernel -> kv_block
    routing: Routing = field(default_factory=Routing)


@dataclass(frozen=True)
class OpSharding:
    strategy: str
    degree: int
    path: tuple[str | int, ...]  # where in the mapping this sharding was set
    seq_split: int = 1  # split-KV: sockets each sequence's cache is spread over
    kernel: str = ""  # the name of the kernel it was set in


def resolve_sharding(fk: FusedKernel, op: str, kind: str, sockets: int) -> OpSharding:
    """The kernel's sharding, or the first per-op override whose pattern matches, on a node of
    `sockets` (a degree of `all` is every socket)."""
    name = fk.spec.name
    for pattern, sh in fk.spec.overrides.items():
        if fnmatch.fnmatchcase(op, pattern):
            where = ("overrides", pattern)
            return _op_sharding(sh.on(sockets), kind, fk.index, name, where)
    return _op_sharding(fk.spec.sharding.on(sockets), kind, fk.index, name, ("sharding",))


def _op_sharding(
    sh: Sharding, kind: str, index: int, name: str, where: tuple[str, ...]
) -> OpSharding:
    strategy = sh.strategy
    degree = sh.degree if strategy != "replicate" else 1
    path: tuple[str | int, ...] = ("kernels", kind, index, *where, strategy)
    return OpSharding(strategy, degree, path, sh.seq_split, name)


def _error(
    msg: str, sh: OpSharding, fix: str, path: tuple[str | int, ...] | None = None
) -> SpecError:
    """An error at the sharding `sh` (or at `path`, a sibling key), keyed as `--set` writes it:
    by the kernel's name, not its position."""
    path = path or sh.path
    return SpecError(msg, key=kernel_key(path, sh.kernel), path=path, fix=fix)


def is_cached_attention(op: Op) -> bool:
    """Decode attention: queries of this step against a cache read from HBM."""
    return op.traits.is_attention and op.read is not None


def small_batch_split(op: Op, sh: OpSharding, batch: int) -> OpSharding:
    """The split a data-parallel op runs with when the batch cannot fill its degree.

    `dp` over fewer sequences than its degree would leave sockets idle. A decode attention keeps
    dp over the largest divisor of its degree that the batch fills and spreads each sequence's
    cached positions over the sockets left (split-KV, flash-decoding); a per-head op splits its
    heads instead (tp). An explicit `sp` is kept as written.
    """
    if sh.strategy != "dp" or sh.seq_split > 1 or batch >= sh.degree:
        return sh
    if is_cached_attention(op):
        dp = max(k for k in range(1, sh.degree + 1) if sh.degree % k == 0 and k <= batch)
        return OpSharding("dp", dp, sh.path, sh.degree // dp, sh.kernel)
    if op.tp_mode == TPMode.HEADS and head_count(op.attrs) % sh.degree == 0:
        return OpSharding("tp", sh.degree, sh.path, 1, sh.kernel)
    return sh


def _valid_degrees(size: int, sockets: int) -> list[int]:
    """Degrees above 1 that divide both `size` (heads, a split width, experts) and the node's
    `sockets`: the degrees that shard it."""
    return [d for d in range(2, sockets + 1) if sockets % d == 0 and size % d == 0]


def degree_fix(what: str, size: int, sockets: int) -> str:
    """How to shard `size` `what` over a node of `sockets`: the degrees that do, or none."""
    degrees = _valid_degrees(size, sockets)
    if degrees:
        listed = ", ".join(str(d) for d in degrees[:-1])
        listed = f"{listed} or {degrees[-1]}" if listed else str(degrees[0])
        return (
            f"use a degree that divides both the {size} {what} and the node's {sockets} "
            f"sockets: {listed}"
        )
    return (
        f"no degree above 1 divides both the {size} {what} and the node's {sockets} sockets: "
        "shard this op another way (an override, e.g. dp), or leave it unsharded"
    )


def _check_divisible(op: Op, sh: OpSharding, sockets: int) -> None:
    """The op's own dimension (heads, split width, experts) is checked before the node's socket
    count, so a degree that fits neither names what the op needs."""
    d = sh.degree
    span = d * sh.seq_split
    nodes = "" if sockets % span == 0 else f" (nor the node's {sockets} sockets)"
    if sh.strategy == "tp":
        if op.tp_mode == TPMode.HEADS:
            heads = head_count(op.attrs)
            if heads % d:
                raise _error(
                    f"tp: {d} does not divide the {heads} heads of {op.name}{nodes}",
                    sh,
                    degree_fix("heads", heads, sockets),
                )
        a = op.attrs
        if op.tp_mode in (TPMode.COLUMN, TPMode.ROW) and isinstance(a, GemmAttrs):
            width = a.n if op.tp_mode == TPMode.COLUMN else a.k
            if width % d:
                raise _error(
                    f"tp: {d} does not divide dimension {width} of {op.name}{nodes}",
                    sh,
                    degree_fix("columns of the split dimension", width, sockets),
                )
    if sh.strategy == "ep":
        routed = op.routed
        if routed is None:
            raise _error(
                f"ep applies to routed-expert ops, not {op.name}",
                sh,
                "use tp or dp for this op (override it per op)",
            )
        if routed.experts % d:
            raise _error(
                f"ep: {d} does not divide the {routed.experts} experts{nodes}",
                sh,
                degree_fix("experts", routed.experts, sockets),
            )
    if (sh.strategy == "sp" or sh.seq_split > 1) and not is_cached_attention(op):
        raise _error(
            f"sp (split-KV) applies to decode attention over a cache, not {op.name}",
            sh,
            "use tp or dp for this op (override it per op)",
            path=(*sh.path[:-1], "sp"),
        )
    if span > sockets:
        raise _error(
            f"degree {span} exceeds the node's {sockets} sockets",
            sh,
            f"use a degree that divides {sockets}, or `all` (every socket of whichever node "
            "runs the mapping)",
        )
    if sockets % span:
        raise _error(
            f"degree {span} does not divide the node's {sockets} sockets",
            sh,
            f"use a divisor of {sockets}",
        )


def _required(
    op: Op, sh: OpSharding, seq_parallel: bool, graph: Graph, in_layouts: list[Layout]
) -> tuple[list[Layout], Layout]:
    """Input layouts an op needs and the layout it produces, under its sharding."""
    n = len(op.inputs)
    if sh.strategy == "sp" or sh.seq_split > 1:
        # split-KV: every socket of a sequence group needs its queries and ends with a partial
        # result to combine
        need = T if sh.strategy == "dp" and sh.degree > 1 else R
        return [need] * n, P
    if sh.strategy == "replicate":
        return [R] * n, R
    if sh.strategy == "dp":
        return [T] * n, T
    mode = op.tp_mode
    if mode == TPMode.COLUMN:
        return [R] * n, F
    if mode == TPMode.ROW:
        return [F] * n, P
    if mode == TPMode.HEADS:
        # tensors with a heads axis arrive split by heads; shared ones (rope key) whole
        req = [F if len(graph.tensors[t].shape) >= 4 else R for t in op.inputs]
        return req, F
    if mode == TPMode.TOKEN:
        lay = T if seq_parallel else R
        return [lay] * n, lay
    first = _local_layout(op, graph, in_layouts, seq_parallel)
    return [first] * n, first


def _local_layout(op: Op, graph: Graph, in_layouts: list[Layout], seq_parallel: bool) -> Layout:
    """A LOCAL op follows its first activation input; only a linear op keeps partial sums."""
    acts = [graph.tensors[t].kind != TensorKind.CACHE for t in op.inputs]
    first = next((lay for lay, a in zip(in_layouts, acts, strict=True) if a), R)
    linear = isinstance(op.attrs, ElementwiseAttrs) and op.attrs.linear
    if first == P and not linear:
        first = T if seq_parallel else R
    return T if first == R else first


def cache_share(op: Op, strategy: str, degree: int, batch: int, seq_split: int = 1) -> float:
    """Fraction of an attention op's KV cache one socket holds and reads.

    DP keeps each socket's own sequences (ceil(B/d) of B); split-KV (sp) keeps 1/sp of each
    sequence's positions. A head split over a cache that all heads share (MLA's latent) needs all
    of it; over GQA/MHA heads, a socket holds whole KV heads, so the cache splits at most
    `kv_heads` ways.
    """
    split = 1.0 / seq_split
    if strategy == "sp":
        return 1.0 / degree
    if strategy == "dp":
        return math.ceil(batch / degree) / batch * split
    if strategy == "tp":
        a = costs.attrs_as(op, AttentionAttrs)
        if a.shared_kv:
            return split
        kv_heads = a.kv_heads or a.heads or degree
        return 1.0 / min(degree, kv_heads) * split
    return split


def _share(layout: Layout, d: int, units: int, heads: int | None = None) -> float:
    """Fraction of a tensor one socket holds in `layout`: whole for R and P; 1/d of the features
    for F (a tensor with only `heads` heads splits at most that many ways: a socket holds whole
    heads); and ceil(units/d) of `units` tokens or sequences for T, since a split rounds up."""
    if layout in (R, P) or d <= 1:
        return 1.0
    if layout == F:
        return 1.0 / min(d, heads) if heads else 1.0 / d
    return math.ceil(units / d) / units if units >= 1 else 1.0 / d


def split_units(wl: Workload, prefill: bool) -> int:
    """What a token split (layout T) divides: prefill splits the prompt's tokens, decode splits
    sequences (each keeps its verified tokens together)."""
    return wl.tokens if prefill else wl.batch


def heads_of(graph: Graph, tensor: str) -> int | None:
    """The heads axis of an activation laid out (batch, tokens, heads, dim), if it has one."""
    shape = graph.tensors[tensor].shape
    return shape[2] if len(shape) >= 4 and isinstance(shape[2], int) else None


def _work_share(op: Op, sh: OpSharding, wl: Workload, prefill: bool) -> float:
    """Fraction of the op's arithmetic on one (the busiest) socket."""
    if sh.strategy == "sp":
        return 1.0 / sh.degree
    if sh.strategy == "dp":
        units = wl.batch if op.traits.is_attention else split_units(wl, prefill)
        return _share(T, sh.degree, units) / sh.seq_split
    if sh.strategy == "tp" and op.tp_mode == TPMode.TOKEN and not prefill:
        return 1.0  # replicated token-wise work in decode
    return 1.0 / sh.degree


@dataclass
class ShardedLayer:
    ops: dict[str, OpPlan]
    collectives: list[Collective]
    host: dict[int, str]  # collective index -> op whose kernel hosts it
    layouts: dict[str, Layout]


@dataclass
class _State:
    """Layouts and collectives as the pass walks the graph."""

    layouts: dict[str, Layout] = field(default_factory=dict)
    degrees: dict[str, int] = field(default_factory=dict)  # sockets a split/partial tensor spans
    colls: list[Collective] = field(default_factory=list)
    host: dict[int, str] = field(default_factory=dict)
    converted: dict[tuple[str, Layout], int] = field(default_factory=dict)
    # split-KV partial results: (sockets one combine spans, fraction of the tensor a group holds)
    partial_groups: dict[str, tuple[int, float]] = field(default_factory=dict)


def _convert_inputs(
    graph: Graph,
    op: Op,
    sh: OpSharding,
    have: list[Layout],
    need: list[Layout],
    st: _State,
    ctx: ShardContext,
) -> None:
    """Insert the collectives that bring each input from the layout it has to the one needed."""
    env = ctx.workload.env()
    for t, h, r in zip(op.inputs, have, need, strict=True):
        tensor = graph.tensors[t]
        if tensor.kind == TensorKind.CACHE or h == r or (h, r) not in _CONVERSIONS:
            continue
        # a split or partial tensor spans its producer's sockets: converting it for a consumer
        # with another (or no) split involves all of them; split-KV partials combine within
        # their group of sockets, over the group's own sequences
        dc = max(sh.degree * sh.seq_split, st.degrees.get(t, 1) if h != R else 1)
        nbytes = tensor.nbytes(env)
        if t in st.partial_groups:
            dc, part = st.partial_groups[t]
            nbytes *= part
        key = (t, r)
        if dc <= 1 or key in st.converted:
            continue
        kind = _CONVERSIONS[(h, r)]
        cost = collective_cost(kind, nbytes, dc, ctx.topology)
        st.converted[key] = len(st.colls)
        src = graph.producer.get(t)
        st.colls.append(Collective(kind, t, cost.bytes_sent, cost.rounds, src, op.name))
        st.host[len(st.colls) - 1] = src if src is not None else op.name


def kv_input_share(graph: Graph, tensor: str, strategy: str, degree: int, frac: float) -> float:
    """Fraction of an attention K/V input one socket holds: a head split divides tensors with a
    heads axis (at most as many ways as they have heads: GQA's few KV heads are held whole),
    while a key shared by every head (MLA's rope key) stays whole."""
    if strategy != "tp":
        return frac
    heads = heads_of(graph, tensor)
    return 1.0 / min(degree, heads) if heads else 1.0


def _flash_reread(
    graph: Graph, op: Op, sh: OpSharding, kv_block: int | None, frac: float, wl: Workload
) -> float:
    """Flash-style prefill attention re-reads K/V blocks for each query block: query block i
    (of nb) reads the i blocks up to it (causal), or at most those within a sliding window."""
    causal = isinstance(op.attrs, AttentionAttrs) and op.attrs.causal
    if not (causal and wl.seq > 1):
        return 0.0
    block = kv_block or wl.seq
    nb = math.ceil(wl.seq / block)
    if nb <= 1:
        return 0.0
    window = window_of(op.attrs)
    reach = nb if window is None else math.ceil(window / block) + 1
    reads = sum(min(i, reach) for i in range(1, nb + 1))  # blocks read over all query blocks
    kv_in = sum(
        graph.tensors[t].nbytes(wl.env()) * kv_input_share(graph, t, sh.strategy, sh.degree, frac)
        for t in op.inputs[1:]
    )
    return kv_in * (reads / nb - 1)


@dataclass
class OpBase:
    """An op's plan before kernel boundaries are known: everything the sharding pass decides
    from the op's sharding and its inputs' layouts alone. Which kernel the op shares with its
    producers and consumers only moves bytes between HBM and on-chip streams, and the K/V block
    of its kernel only sets a prefill attention's re-reads (`finish`)."""

    template: OpPlan  # hbm_read, stream_in and hbm_write are the kernel's to fill in
    reads: tuple[tuple[float, str | None], ...]  # each activation input: bytes, producer
    cache_read: float
    read_replaces_inputs: bool  # an explicit read shape stands for the activation reads
    written: float  # bytes its outputs hold on one socket
    cache_write_share: float  # of what it writes to HBM, the part that goes into a KV cache
    consumers: frozenset[str]
    always_written: bool  # an output is the layer's, or a cache
    flash: _FlashReread

    def finish(self, inside: Collection[str], kv_block: int | None) -> OpPlan:
        """The op's plan in a kernel holding the ops `inside`, with K/V block `kv_block`."""
        hbm_read = stream_in = 0.0
        for size, src in self.reads:
            if src is not None and src in inside:
                stream_in += size
            else:
                hbm_read += size
        if self.read_replaces_inputs:
            hbm_read = 0.0
        hbm_read += self.flash.bytes(kv_block)
        leaves = self.always_written or any(c not in inside for c in self.consumers)
        plan = OpPlan.__new__(OpPlan)  # a shallow copy (every field is a value), made fast
        plan.__dict__.update(self.template.__dict__)
        plan.hbm_read = hbm_read + self.cache_read
        plan.stream_in = stream_in
        plan.hbm_write = self.written if leaves else 0.0
        plan.cache_write = plan.hbm_write * self.cache_write_share
        return plan

    def key(self) -> str:
        """Everything `finish` reads, as text: within one layer graph and workload, two ops
        with equal keys finish to equal plans in any kernel of the same members and K/V block
        (the auto-mapper compiles such a kernel once for all the sharding plans that share it)."""
        consumers = sorted(self.consumers)
        return repr(
            (
                self.template,
                self.reads,
                self.cache_read,
                self.read_replaces_inputs,
                self.written,
                self.cache_write_share,
                consumers,
                self.always_written,
                self.flash.key(),
            )
        )


@dataclass
class _FlashReread:
    """A prefill attention's K/V re-reads, per K/V block (computed once each)."""

    graph: Graph
    op: Op
    sh: OpSharding
    frac: float
    wl: Workload
    by_block: dict[int | None, float] = field(default_factory=dict)

    def key(self) -> tuple[object, ...]:
        """What the re-reads depend on besides the layer graph and workload."""
        sh = self.sh
        return (self.op.name, sh.strategy, sh.degree, sh.seq_split, self.frac)

    def bytes(self, kv_block: int | None) -> float:
        if kv_block not in self.by_block:
            self.by_block[kv_block] = _flash_reread(
                self.graph, self.op, self.sh, kv_block, self.frac, self.wl
            )
        return self.by_block[kv_block]


def _op_base(
    graph: Graph, op: Op, sh: OpSharding, need: list[Layout], out: Layout, ctx: ShardContext
) -> OpBase:
    wl = ctx.workload
    env = wl.env()
    reads = []
    for t, r in zip(op.inputs, need, strict=True):
        tensor = graph.tensors[t]
        if tensor.kind == TensorKind.CACHE:
            continue
        share = _share(r, sh.degree, split_units(wl, ctx.prefill), heads_of(graph, t))
        reads.append((tensor.nbytes(env) * share, graph.producer.get(t)))
    frac = _work_share(op, sh, wl, ctx.prefill)
    flops = costs.flops(op, graph, wl)
    # caches and explicit read shapes (gathers, cache reads) come straight from HBM
    cache_read = 0.0
    if op.read is not None:
        share = (
            cache_share(op, sh.strategy, sh.degree, wl.batch, sh.seq_split)
            if op.traits.is_attention
            else frac
        )
        cache_read = costs.bytes_read(op, graph, wl) * share
    out_bytes = sum(graph.tensors[t].nbytes(env) for t in op.outputs)
    if op.write is not None:
        out_bytes = costs.bytes_written(op, graph, wl)
    out_share = _share(out, sh.degree, split_units(wl, ctx.prefill)) if out != P else 1.0
    if sh.strategy == "tp" and op.tp_mode == TPMode.TOKEN and not ctx.prefill:
        out_share = 1.0
    weight_share = 1.0
    if sh.strategy in ("tp", "ep") and op.weights and op.tp_mode != TPMode.TOKEN:
        weight_share = 1.0 / sh.degree
    template = OpPlan(
        name=op.name,
        kind=op.kind,
        cost_class=costs.cost_class_of(op),
        strategy=sh.strategy,
        degree=sh.degree,
        flops=flops * frac,
        hbm_read=0.0,
        hbm_write=0.0,
        cache_read=cache_read if _reads_cache(graph, op) else 0.0,
        lookup_read=cache_read if _looks_up_weights(op) else 0.0,
        weight_bytes=op.weight_bytes() * weight_share,
        stream_in=0.0,
        stream_out=out_bytes * out_share,
        in_layouts=tuple(need),
        out_layout=out,
        full_flops=flops,
        blocking=op.blocking,
        seq_split=sh.seq_split,
    )
    _apply_expert_routing(template, op, sh, frac, ctx)
    return OpBase(
        template=template,
        reads=tuple(reads),
        cache_read=cache_read,
        read_replaces_inputs=op.read is not None and op.traits.read_replaces_inputs,
        written=out_bytes * out_share,
        cache_write_share=_cache_share_of_outputs(graph, op, wl),
        consumers=frozenset(c for t in op.outputs for c in graph.consumers(t)),
        always_written=any(not graph.consumers(t) for t in op.outputs)
        or any(graph.tensors[t].kind == TensorKind.CACHE for t in op.outputs),
        flash=_FlashReread(graph, op, sh, frac, wl),
    )


def _walk_op(
    graph: Graph, op: Op, sh: OpSharding, st: _State, ctx: ShardContext
) -> tuple[list[Layout], Layout]:
    """Check the op's sharding, bring its inputs to the layouts it needs (collectives) and
    record the layout of its outputs: (the layouts it needs, the one it makes)."""
    _check_divisible(op, sh, ctx.sockets)
    have = [st.layouts.get(t, R) for t in op.inputs]
    need, out = _required(op, sh, ctx.prefill, graph, have)
    _convert_inputs(graph, op, sh, have, need, st, ctx)
    for t in op.outputs:
        st.layouts[t] = out
        st.degrees[t] = sh.degree * sh.seq_split
        if sh.strategy == "sp":
            st.partial_groups[t] = (sh.degree, 1.0)
        elif sh.seq_split > 1:
            st.partial_groups[t] = (sh.seq_split, _share(T, sh.degree, ctx.workload.batch))
    return need, out


def _reads_cache(graph: Graph, op: Op) -> bool:
    """Whether the op's explicit read shape reads a KV cache (attention over it, a gather from
    it), rather than an activation."""
    return any(graph.tensors[t].kind == TensorKind.CACHE for t in op.inputs)


def _looks_up_weights(op: Op) -> bool:
    """Whether the op's explicit read shape is rows of its own weights (the embedding table)."""
    return costs.cost_class_of(op) == CostClass.MEMORY and bool(op.weights) and op.read is not None


def _cache_share_of_outputs(graph: Graph, op: Op, wl: Workload) -> float:
    """The fraction of the op's output bytes that go into a KV cache (its writes' tier follows
    the cache's)."""
    env = wl.env()
    sizes = [(graph.tensors[t].nbytes(env), graph.tensors[t].kind) for t in op.outputs]
    total = sum(size for size, _ in sizes)
    cache = sum(size for size, kind in sizes if kind == TensorKind.CACHE)
    return cache / total if total > 0 else 0.0


def _apply_expert_routing(
    plan: OpPlan, op: Op, sh: OpSharding, frac: float, ctx: ShardContext
) -> None:
    """Routed-expert ops stream only the touched experts' weights; under ep the busiest socket's
    token-slots set the work."""
    routed = op.routed
    if routed is None:
        return
    wl = ctx.workload
    tokens = wl.tokens * (frac if sh.strategy == "dp" else 1.0)
    share = expert_share(ctx.routing, routed.experts, routed.slots, tokens, sh.strategy, sh.degree)
    plan.experts_touched = share.experts_touched
    if plan.weight_bytes > 0:
        plan.weight_read_bytes = plan.weight_bytes * share.weight_read_fraction
    if sh.strategy == "ep" and sh.degree > 1:
        plan.flops = plan.full_flops * share.work_fraction


def _correct_converted_writes(
    graph: Graph,
    colls: list[Collective],
    plans: dict[str, OpPlan],
    inside: Collection[str],
    wl: Workload,
    prefill: bool,
) -> None:
    """A collective hosted by its producer's kernel converts the tensor before it leaves the
    chip, so what the producer writes to HBM is the converted layout's share. `plans` are the
    ops of one kernel, `inside` their names."""
    for c in colls:
        if c.src is None or c.src not in inside or c.dst in inside:
            continue
        prod = plans[c.src]
        if prod.hbm_write <= 0:
            continue
        nbytes = graph.tensors[c.tensor].nbytes(wl.env())
        units = split_units(wl, prefill)
        was = 1.0 if prod.out_layout == P else _share(prod.out_layout, prod.degree, units)
        now = _share(_TARGET[c.kind], prod.degree, units)
        prod.hbm_write = max(0.0, prod.hbm_write + nbytes * (now - was))


@dataclass
class LayerWalk:
    """One layer sharded op by op, before any kernel boundary is known: each op's `OpBase`, the
    collectives in the order they are inserted and the op hosting each, the tensors' layouts.
    Layouts and collectives depend on the ops' shardings alone, never on fusion, so one walk
    serves every fusion of the layer under the same shardings (`kernel_plans`)."""

    graph: Graph
    ops: dict[str, OpBase]
    collectives: list[Collective]
    host: dict[int, str]  # collective index -> op whose kernel hosts it
    layouts: dict[str, Layout]
    workload: Workload
    prefill: bool

    def kernel_plans(self, ops: Sequence[str], kv_block: int | None) -> dict[str, OpPlan]:
        """The plans of the ops of one kernel (fresh objects: later passes fill them in)."""
        inside = frozenset(ops)
        plans = {n: self.ops[n].finish(inside, kv_block) for n in ops}
        _correct_converted_writes(
            self.graph, self.collectives, plans, inside, self.workload, self.prefill
        )
        return plans

    def kernel_collectives(self, ops: Collection[str]) -> list[Collective]:
        """The collectives a kernel of `ops` hosts."""
        return [c for i, c in enumerate(self.collectives) if self.host[i] in ops]


# An op's `OpBase` as `_op_base` reads it from its graph: the op, its sharding, the layouts it
# needs and makes, the workload and routing, its inputs' producers and its outputs' consumers in
# the graph, and its tensors (the objects a subgraph shares with its graph).
BaseKey = tuple[object, ...]


def _base_key(
    graph: Graph, op: Op, sh: OpSharding, need: list[Layout], out: Layout, ctx: ShardContext
) -> BaseKey:
    return (
        id(op),
        sh,
        tuple(need),
        out,
        ctx.workload,
        ctx.prefill,
        ctx.routing,
        tuple(graph.producer.get(t) for t in op.inputs),
        tuple(frozenset(graph.consumers(t)) for t in op.outputs),
        tuple(id(graph.tensors[t]) for t in (*op.inputs, *op.outputs)),
    )


def walk(
    graph: Graph,
    sharding_of: Callable[[Op], OpSharding],
    ctx: ShardContext,
    bases: dict[BaseKey, OpBase] | None = None,
) -> LayerWalk:
    """Shard every op of a layer under `sharding_of` (see `shard`). `bases`, if given, keeps
    each op's `OpBase` by everything it is made from (`_base_key`) for walks of other subgraphs
    of one graph (the greedy auto-mapper's growing trial kernels); the caller keeps the ops,
    tensors and routing it names alive for as long as it keeps `bases`."""
    layer_in = graph.graph_inputs()
    st = _State(layouts=dict.fromkeys(layer_in, R))
    base: dict[str, OpBase] = {}
    for pass_ in (2, 1):  # the layer input's layout and split, from the pass before
        st = _State(
            layouts={t: st.layouts.get(t, R) for t in layer_in},
            degrees={t: st.degrees.get(t, 1) for t in layer_in},
        )
        for op in graph:
            sh = sharding_of(op)
            need, out = _walk_op(graph, op, sh, st, ctx)
            if pass_ == 1:  # the first of two passes only finds the layer input's layout
                base[op.name] = _kept_base(graph, op, sh, need, out, ctx, bases)
        outs = [t for t in graph.graph_outputs() if graph.tensors[t].kind != TensorKind.CACHE]
        final = st.layouts.get(outs[0], R) if outs else R
        for t in layer_in:
            if graph.tensors[t].kind != TensorKind.CACHE:
                st.layouts[t] = final
                st.degrees[t] = st.degrees.get(outs[0], 1) if outs else 1
    return LayerWalk(graph, base, st.colls, st.host, st.layouts, ctx.workload, ctx.prefill)


def _kept_base(
    graph: Graph,
    op: Op,
    sh: OpSharding,
    need: list[Layout],
    out: Layout,
    ctx: ShardContext,
    bases: dict[BaseKey, OpBase] | None,
) -> OpBase:
    if bases is None:
        return _op_base(graph, op, sh, need, out, ctx)
    key = _base_key(graph, op, sh, need, out, ctx)
    found = bases.get(key)
    if found is None:
        found = bases[key] = _op_base(graph, op, sh, need, out, ctx)
    return found


def sharding_errors(
    graph: Graph, fused: list[FusedKernel], kind: str, ctx: ShardContext
) -> list[SpecError]:
    """Every op's sharding checked against its dimensions and the node before anything is
    built: one error per key, so a mapping's sharding mistakes are reported together."""
    kernel_of = {n: fk for fk in fused for n in fk.ops}
    found: dict[str, SpecError] = {}
    for op in graph:
        fk = kernel_of.get(op.name)
        if fk is None:
            continue
        sh = resolve_sharding(fk, op.name, kind, ctx.sockets)
        try:
            _check_divisible(op, small_batch_split(op, sh, ctx.workload.batch), ctx.sockets)
        except SpecError as exc:
            found.setdefault(exc.key or "", exc)
    return list(found.values())


def fused_shardings(
    fused: list[FusedKernel], kind: str, ctx: ShardContext
) -> Callable[[Op], OpSharding]:
    """Each op's sharding as the fused kernels set it (overrides, `all`, a batch too small)."""
    kernel_of = {n: fk for fk in fused for n in fk.ops}
    known: dict[str, tuple[Op, OpSharding]] = {}  # a walk asks twice for each op

    def sharding_of(op: Op) -> OpSharding:
        seen = known.get(op.name)
        if seen is not None and seen[0] is op:
            return seen[1]
        sh = resolve_sharding(kernel_of[op.name], op.name, kind, ctx.sockets)
        sh = small_batch_split(op, sh, ctx.workload.batch)
        known[op.name] = (op, sh)
        return sh

    return sharding_of


def shard(
    graph: Graph,
    fused: list[FusedKernel],
    kind: str,
    ctx: ShardContext,
) -> ShardedLayer:
    """Split every op of a fused layer over the sockets and insert the collectives it needs.

    Two passes: the layer's input arrives in the layout the previous layer (the same graph)
    leaves its output in, which is known only after one pass. Layouts do not depend on where
    kernel boundaries fall, so a caller compiling many fusions of one layer under the same
    shardings keeps the `walk` itself and asks it for each kernel's plans.
    """
    w = walk(graph, fused_shardings(fused, kind, ctx), ctx)
    plans: dict[str, OpPlan] = {}
    for fk in fused:
        plans |= w.kernel_plans(fk.ops, ctx.kv_blocks.get(fk.spec.name))
    ordered = {op.name: plans[op.name] for op in graph}
    return ShardedLayer(ordered, w.collectives, w.host, w.layouts)
