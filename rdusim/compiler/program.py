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


@dataclass
class Collective:
    kind: str  # all-reduce | all-gather | reduce-scatter | all-to-all
    tensor: str
    bytes: float  # bytes each socket sends
    steps: int  # sequential hops of the algorithm (latency term)
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

    @property
    def pcus(self) -> int:
        return sum(o.pcus for o in self.ops)

    @property
    def pmus(self) -> int:
        return sum(o.pmus for o in self.ops)

    @property
    def sharding(self) -> str:
        parts = sorted(
            {f"{o.strategy}{o.degree}" if o.degree > 1 else "replicate" for o in self.ops}
        )
        return "+".join(parts)

    def op(self, name: str) -> OpPlan:
        return next(o for o in self.ops if o.name == name)


@dataclass
class LayerProgram:
    kind: str
    count: int
    graph: Graph
    kernels: list[Kernel]


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
    tokens_per_step: float

    def all_layers(self) -> list[LayerProgram]:
        return [*self.layers.values(), *self.extras.values()]

    @property
    def sram_peak_bytes(self) -> float:
        return max(k.sram_bytes for lp in self.all_layers() for k in lp.kernels)
