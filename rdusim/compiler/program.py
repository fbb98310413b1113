"""The compiler's output: kernels per layer kind, with per-socket costs, collectives and buffers.

Everything here is per socket unless a name says otherwise. The simulator consumes a `Program`
and nothing else; it never looks at specs or the IR's formulas.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rdusim.ir.graph import Graph, Workload


@dataclass
class OpPlan:
    name: str
    kind: str
    cost_class: str
    strategy: str  # tp | dp | ep | replicate
    degree: int
    flops: float  # arithmetic on one socket (element ops for SIMD)
    hbm_read: float  # activation/cache bytes read from HBM
    hbm_write: float
    weight_bytes: float  # this socket's shard of the op's weights (resident in HBM)
    stream_in: float  # bytes arriving on chip from producers inside the kernel
    stream_out: float
    in_layouts: tuple[str, ...] = ()
    out_layout: str = "R"
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

    @property
    def streamed_weight_bytes(self) -> float:
        """Weight bytes this op reads from HBM each time it runs (lookup tables: none)."""
        if self.cost_class == "memory":
            return 0.0
        return self.weight_bytes if self.weight_read_bytes is None else self.weight_read_bytes

    @property
    def hbm_in_bytes(self) -> float:
        """Bytes its loader brings from HBM per execution: activations and cache, streamed
        weights, and a spilled input read back."""
        return self.hbm_read + self.streamed_weight_bytes + self.spill_bytes

    @property
    def hbm_bytes(self) -> float:
        """Every byte the op moves over HBM per execution, reads and writes."""
        return self.hbm_in_bytes + self.hbm_write

    @property
    def sharding_label(self) -> str:
        if self.strategy == "replicate" or self.degree <= 1:
            return "replicate" if self.seq_split <= 1 else f"sp{self.seq_split}"
        if self.seq_split > 1:
            return f"{self.strategy}{self.degree}xsp{self.seq_split}"
        return f"{self.strategy}{self.degree}"


@dataclass
class Collective:
    kind: str  # all-reduce | all-gather | reduce-scatter | all-to-all
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
    kind runs its `count` layers as one kernel call with a pipelined outer loop.
    """

    kind: str
    count: int
    graph: Graph
    kernels: list[Kernel]
    workload: Workload
    runs: int = 1
    looped: bool = False

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

    @property
    def used(self) -> float:
        return self.weights + self.kv_cache + self.workspace

    @property
    def fits(self) -> bool:
        return self.used <= self.capacity


@dataclass
class Program:
    mapping: str
    model: str
    hardware: str
    phase: str
    seq_len: int  # the prompt length (prefill) / the static maximum sequence (decode)
    workload: Workload
    sockets: int
    layers: dict[str, LayerProgram]
    extras: dict[str, LayerProgram]  # embedding, head, mtp: run once per step/prompt
    hbm: HBMPlan
    kv_len: int  # cache positions per sequence (compressed length with SnapStream)
    snapstream: bool
    tokens_per_step: float  # tokens accepted per sequence and step (decode)
    orchestration: str = "hardware"  # who issues kernel calls: software | hardware
    mtp_mode: str = "verify"  # verify: drafts verified as work | scaled: a reported multiplier
    draft_tokens: int = 0
    expert_loading: str = "touched"  # which routed experts a step streams: touched | all

    def all_layers(self) -> list[LayerProgram]:
        return [*self.layers.values(), *self.extras.values()]

    @property
    def sram_peak_bytes(self) -> float:
        return max(k.sram_bytes for lp in self.all_layers() for k in lp.kernels)
