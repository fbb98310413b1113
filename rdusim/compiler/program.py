"""The compiler's output: kernels per layer kind, with per-socket costs, collectives and buffers.

Everything here is per socket unless a name says otherwise. The simulator consumes a `Program`
and nothing else; it never looks at specs or the IR's formulas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from rdusim.compiler.collectives import CollectiveKind
from rdusim.ir.attrs import KindTraits, traits_of
from rdusim.ir.graph import (
    CacheRole,
    CostClass,
    Graph,
    Op,
    OpKind,
    Phase,
    Tensor,
    TensorKind,
    Workload,
)
from rdusim.snapstream.onchip import CacheUpdate
from rdusim.spec.placement import Tier
from rdusim.spec.speculation import Speculation


class Layout(StrEnum):
    """How a tensor lies on the sockets (see `rdusim.compiler.sharding`)."""

    R = "R"  # replicated: every socket holds it whole
    T = "T"  # split by tokens (sequence or batch)
    F = "F"  # split by features (heads, or an FFN's/experts' intermediate features)
    P = "P"  # partial sums: every socket holds a full-size addend


class ExtraRole(StrEnum):
    """What an extra (a graph outside the decoder layers) is in the program."""

    EMBEDDING = "embedding"
    HEAD = "head"
    MTP_PROJECTION = "mtp_projection"  # an MTP module's own input ops
    MTP_LAYER = "mtp_layer"  # an MTP module's MoE decoder layer
    MTP_EMBEDDING = "mtp_embedding"  # the embedding again, once per draft token
    MTP_HEAD = "mtp_head"  # the head again, once per draft token
    DRAFT_EMBEDDING = "draft_embedding"  # a draft model's embedding, once per draft token
    DRAFT_LAYER = "draft_layer"  # a draft model's decoder layers of one kind, once per draft
    DRAFT_HEAD = "draft_head"  # a draft model's LM head, once per draft token


# What drafts a step's tokens (`rdusim.spec.speculation`): the MTP module or a draft model. Their
# time is the step's drafting; the rest verifies.
DRAFTING_ROLES = frozenset(
    {
        ExtraRole.MTP_PROJECTION,
        ExtraRole.MTP_LAYER,
        ExtraRole.MTP_EMBEDDING,
        ExtraRole.MTP_HEAD,
        ExtraRole.DRAFT_EMBEDDING,
        ExtraRole.DRAFT_LAYER,
        ExtraRole.DRAFT_HEAD,
    }
)
# The drafter's parts that hold weights (and cache) of their own in HBM (the MTP module shares
# the model's embedding and head; a draft model has its own).
DRAFTER_DEPLOYED_ROLES = frozenset(
    {
        ExtraRole.MTP_PROJECTION,
        ExtraRole.MTP_LAYER,
        ExtraRole.DRAFT_EMBEDDING,
        ExtraRole.DRAFT_LAYER,
        ExtraRole.DRAFT_HEAD,
    }
)


@dataclass
class OpPlan:
    name: str
    kind: OpKind
    cost_class: CostClass
    strategy: str  # tp | dp | ep | replicate
    degree: int
    flops: float  # arithmetic on one socket (element ops for SIMD)
    # activation and cache bytes read from memory, and written: from and to HBM, except the
    # cache's part (`cache_read`, `cache_write`) when the cache lives in DDR (`cache_tier`)
    hbm_read: float
    hbm_write: float
    weight_bytes: float  # this socket's shard of the op's weights (resident in `weight_tier`)
    stream_in: float  # bytes arriving on chip from producers inside the kernel
    stream_out: float
    in_layouts: tuple[Layout, ...] = ()
    out_layout: Layout = Layout.R
    pcus: int = 0
    pmus: int = 0
    sram_bytes: float = 0.0
    full_flops: float = 0.0  # before sharding, for conservation checks
    blocking: bool = False  # needs its whole input before it can emit (softmax over a row, sort)
    spill_bytes: float = 0.0  # input that did not fit on chip and went through HBM (write + read)
    # weight bytes streamed from HBM per execution: the resident shard, or for routed experts only
    # the experts some token was routed to (None: the whole shard)
    weight_read_bytes: float | None = None
    seq_split: int = 1  # sockets each sequence's cached positions are split over (split-KV)
    experts_touched: float | None = None  # expected distinct routed experts per execution
    cache_read: float = 0.0  # of hbm_read: bytes read from the KV cache
    lookup_read: float = 0.0  # of hbm_read: rows a lookup reads from its own weight table
    cache_write: float = 0.0  # of hbm_write: bytes written into the KV cache
    weight_tier: Tier = Tier.HBM  # where its weights live (`placement:`)
    cache_tier: Tier = Tier.HBM  # where the KV cache it reads or writes lives

    @property
    def traits(self) -> KindTraits:
        """What its kind implies (`rdusim.ir.attrs.TRAITS`)."""
        return traits_of(self.kind)

    @property
    def streamed_weight_bytes(self) -> float:
        """Weight bytes this op reads from HBM each time it runs (lookup tables: none)."""
        if self.cost_class == CostClass.MEMORY:
            return 0.0
        return self.weight_bytes if self.weight_read_bytes is None else self.weight_read_bytes

    @property
    def memory_in_bytes(self) -> float:
        """Bytes its loader brings on chip per execution, from either tier: activations and
        cache, streamed weights, and a spilled input read back."""
        return self.hbm_read + self.streamed_weight_bytes + self.spill_bytes

    @property
    def hbm_in_bytes(self) -> float:
        """Of `memory_in_bytes`, those read from HBM (a spill always goes through HBM)."""
        weights = self.streamed_weight_bytes if self.weight_tier == Tier.HBM else 0.0
        return (self.hbm_read - self._ddr_read) + weights + self.spill_bytes

    @property
    def ddr_in_bytes(self) -> float:
        """Of `memory_in_bytes`, those read from DDR: weights (streamed, or a lookup's rows)
        and cache placed there."""
        weights = self.streamed_weight_bytes if self.weight_tier == Tier.DDR else 0.0
        return weights + self._ddr_read

    @property
    def _ddr_read(self) -> float:
        """Of `hbm_read`, the bytes that come from DDR: cache and lookup rows placed there."""
        cache = self.cache_read if self.cache_tier == Tier.DDR else 0.0
        rows = self.lookup_read if self.weight_tier == Tier.DDR else 0.0
        return cache + rows

    @property
    def ddr_write(self) -> float:
        """Of `hbm_write`, the bytes written into a KV cache placed in DDR."""
        return min(self.cache_write, self.hbm_write) if self.cache_tier == Tier.DDR else 0.0

    @property
    def hbm_bytes(self) -> float:
        """Every byte the op moves over HBM per execution, reads and writes."""
        return self.hbm_in_bytes + (self.hbm_write - self.ddr_write)

    @property
    def ddr_bytes(self) -> float:
        """Every byte the op moves over DDR per execution, reads and writes."""
        return self.ddr_in_bytes + self.ddr_write

    def flows(self) -> tuple[float, float, float]:
        """(`hbm_in_bytes`, `ddr_in_bytes`, `ddr_write`) in one pass, the same sums in the same
        order: the allocation and the closed form read them for every op they price."""
        weights = self.streamed_weight_bytes
        in_ddr = self.weight_tier == Tier.DDR
        cache_ddr = self.cache_tier == Tier.DDR
        ddr_read = (self.cache_read if cache_ddr else 0.0) + (self.lookup_read if in_ddr else 0.0)
        in_hbm = weights if self.weight_tier == Tier.HBM else 0.0
        return (
            (self.hbm_read - ddr_read) + in_hbm + self.spill_bytes,
            (weights if in_ddr else 0.0) + ddr_read,
            min(self.cache_write, self.hbm_write) if cache_ddr else 0.0,
        )

    def traffic(self) -> tuple[float, float]:
        """(`hbm_bytes`, `ddr_bytes`), from `flows`."""
        hbm_in, ddr_in, ddr_write = self.flows()
        return hbm_in + (self.hbm_write - ddr_write), ddr_in + ddr_write

    @property
    def sharding_label(self) -> str:
        if self.strategy == "replicate" or self.degree <= 1:
            return "replicate" if self.seq_split <= 1 else f"sp{self.seq_split}"
        if self.seq_split > 1:
            return f"{self.strategy}{self.degree}xsp{self.seq_split}"
        return f"{self.strategy}{self.degree}"


@dataclass
class Collective:
    kind: CollectiveKind
    tensor: str
    bytes: float  # bytes each socket sends, over all rounds
    rounds: int  # sequential rounds of the algorithm on the node's topology (latency term)
    src: str | None  # producing op (None: the layer input)
    dst: str  # first consuming op that needs the new layout


@dataclass
class Kernel:
    name: str
    ops: list[OpPlan]
    collectives: list[Collective] = field(default_factory=list)
    tiles: int = 1
    tile_tokens: int = 0
    kv_block: int | None = None
    sram_bytes: float = 0.0
    edges: list[tuple[str, str]] = field(default_factory=list)  # in-kernel producer -> consumer
    # a looped kernel whose next iteration's weights fit beside it streams them in ahead (the
    # pipelined outer loop); otherwise loaders run one double-buffered tile ahead
    prefetch_iteration: bool = False

    @property
    def streamed_weight_bytes(self) -> float:
        return sum(p.streamed_weight_bytes for p in self.ops)

    @property
    def ddr_bytes(self) -> float:
        """Bytes the kernel moves over DDR per execution."""
        return sum(p.ddr_bytes for p in self.ops)

    @property
    def pcus(self) -> int:
        return sum(o.pcus for o in self.ops)

    @property
    def pmus(self) -> int:
        return sum(o.pmus for o in self.ops)

    @property
    def sharding(self) -> str:
        return "+".join(sorted({o.sharding_label for o in self.ops}))

    def op(self, name: str) -> OpPlan:
        return next(o for o in self.ops if o.name == name)


@dataclass
class LayerProgram:
    """The kernels of one layer kind (or one extra graph) and how often they run.

    `count` layers of this kind exist in the model; `runs` is how many times one of them executes
    per prompt or step (a decoder layer once; the MTP module once per draft token). A `looped`
    kind runs its `count` layers as one kernel call with a pipelined outer loop. An extra has a
    `role` (a decoder layer: None), and an MTP module's parts the `module` they belong to.
    """

    kind: str
    count: int
    graph: Graph
    kernels: list[Kernel]
    workload: Workload
    runs: int = 1
    looped: bool = False
    role: ExtraRole | None = None
    module: int | None = None

    @property
    def executions(self) -> int:
        """Layer executions per prompt or step."""
        return self.count * self.runs

    @property
    def calls(self) -> int:
        """Kernel calls per prompt or step."""
        if self.looped:
            return self.runs * len(self.kernels)
        return self.executions * len(self.kernels)

    @property
    def experts_touched(self) -> float | None:
        touched = [p.experts_touched for k in self.kernels for p in k.ops]
        values = [t for t in touched if t is not None]
        return max(values) if values else None


@dataclass
class HBMPlan:
    capacity: float  # usable bytes per socket
    weights: float
    kv_cache: float
    workspace: float
    draft_weights: float = 0.0  # of `weights`: the drafter's own (MTP module or draft model)
    draft_kv_cache: float = 0.0  # of `kv_cache`: the drafter's

    @property
    def used(self) -> float:
        return self.weights + self.kv_cache + self.workspace

    @property
    def fits(self) -> bool:
        return self.used <= self.capacity


@dataclass
class DDRPlan:
    """DDR per socket: its capacity, and the weights and KV cache placed there (`placement:`).
    No workspace: kernels exchange activations through HBM."""

    capacity: float
    weights: float
    kv_cache: float

    @property
    def used(self) -> float:
        return self.weights + self.kv_cache

    @property
    def fits(self) -> bool:
        return self.used <= self.capacity


@dataclass
class Program:
    mapping: str
    model: str
    hardware: str
    phase: Phase
    seq_len: int  # the prompt length (prefill) / the static maximum sequence (decode)
    workload: Workload
    sockets: int
    layers: dict[str, LayerProgram]
    extras: dict[str, LayerProgram]  # embedding, head, the drafter's parts (MTP or draft model)
    hbm: HBMPlan
    ddr: DDRPlan
    kv_len: int  # cache positions per sequence (compressed length with SnapStream)
    snapstream: bool
    tokens_per_step: float  # tokens accepted per sequence and step (decode)
    orchestration: str = "hardware"  # who issues kernel calls: software | hardware
    mtp_mode: str = "verify"  # verify: drafts verified as work | scaled: a reported multiplier
    draft_tokens: int = 0  # MTP drafts per step (`mtp.draft_tokens`)
    speculation: Speculation = field(default_factory=Speculation)  # the step's drafter, k, a
    expert_loading: str = "touched"  # which routed experts a step streams: touched | all
    # the tier of each deployed part's weights (`placement:` parts) and of the KV cache
    weight_tiers: dict[str, Tier] = field(default_factory=dict)
    kv_tier: Tier = Tier.HBM

    @property
    def fits(self) -> bool:
        """Whether the plan fits every socket's HBM and DDR."""
        return self.hbm.fits and self.ddr.fits

    def all_layers(self) -> list[LayerProgram]:
        return [*self.layers.values(), *self.extras.values()]

    def extra(self, role: ExtraRole, module: int | None = None) -> LayerProgram | None:
        """The extra with `role` (and MTP `module`), if the program has it."""
        return next(
            (e for e in self.extras.values() if e.role == role and e.module == module), None
        )

    @property
    def sram_peak_bytes(self) -> float:
        return max(k.sram_bytes for lp in self.all_layers() for k in lp.kernels)

    @property
    def cache_update(self) -> CacheUpdate:
        """The decode step's cache update as compiled, in the most numerous layer kind: the
        kernel that writes the new rows, each socket's sequences, the cache rows."""
        layer = max(self.layers.values(), key=lambda lp: lp.count)
        attention = next(p for k in layer.kernels for p in k.ops if p.traits.is_attention)
        batch = self.workload.batch
        seqs = -(-batch // attention.degree) if attention.strategy == "dp" else batch
        graph = layer.graph
        kernel = next(
            k for k in layer.kernels if any(_writes_cache(graph.ops[p.name], graph) for p in k.ops)
        )
        caches = [t for t in graph.tensors.values() if t.kind == TensorKind.CACHE]
        kept = [t for t in caches if not t.compressed]
        return CacheUpdate(
            kernel=kernel.name,
            kernel_sram_bytes=kernel.sram_bytes,
            sequences_per_socket=seqs,
            slots=self.kv_len,
            key_row_bytes=_row_bytes(kept, (CacheRole.LATENT, CacheRole.KEY)),
            value_row_bytes=_row_bytes(kept, (CacheRole.LATENT, CacheRole.VALUE)),
        )


def _writes_cache(op: Op, graph: Graph) -> bool:
    """A scatter into a KV cache (decode reads the cache it updates in place)."""
    tensors = (graph.tensors[t] for t in (*op.inputs, *op.outputs))
    return op.traits.writes_cache and any(t.kind == TensorKind.CACHE for t in tensors)


def _row_bytes(caches: list[Tensor], roles: tuple[CacheRole, ...]) -> float:
    """Bytes per cached position (all heads) of the caches with one of `roles`, in role order."""
    env = Workload(1, 1, 1).env()
    return sum(t.nbytes(env) for role in roles for t in caches if t.role == role)
