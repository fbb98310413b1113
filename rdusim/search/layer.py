"""The search over one layer kind: every sharding plan, the best cuts of its ops into kernels,
why each boundary is where it is, and the latency-vs-SRAM front.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from enum import StrEnum

from rdusim.compiler.compile import CompileContext
from rdusim.compiler.program import Kernel
from rdusim.cost.analytic import latency_lower_bound_s
from rdusim.ir.graph import Graph, Workload
from rdusim.search.boundaries import Cut, best_cuts
from rdusim.search.costing import KernelCost, analytic_cost
from rdusim.search.segments import (
    Candidate,
    CandidateBuilder,
    CandidateKey,
    KernelPool,
    Limit,
    Refusal,
    kernel_spec,
)
from rdusim.search.space import ShardingPlan, plans_for
from rdusim.spec.mapping import KernelSpec, Orchestration, Tiling

# what grows as a kernel takes in more ops: once over one, every longer kernel is too
UNIT_LIMITS = frozenset({Limit.SRAM, Limit.PCUS, Limit.PMUS})

# SRAM caps, as fractions of a socket's, at which the front of latency vs peak kernel SRAM is
# sampled (the cut that is fastest with no kernel above the cap)
FRONT_GAIN = 1e-4
FRONT_CAPS = tuple(2.0**-e for e in range(8, -1, -1))  # 1/256 of a socket's SRAM up to all of it


class BoundaryReason(StrEnum):
    """Why two neighbouring kernels are not one."""

    SRAM_LIMIT = "SRAM limit"
    PCU_LIMIT = "PCU limit"
    PMU_LIMIT = "PMU limit"
    SHARDING = "sharding"
    BLOCKING_OP = "blocking op"
    LAYOUT_CHANGE = "layout change"
    COLLECTIVE = "collective"
    FASTER_APART = "faster apart"


_LIMIT_REASON = {
    Limit.SRAM: BoundaryReason.SRAM_LIMIT,
    Limit.PCUS: BoundaryReason.PCU_LIMIT,
    Limit.PMUS: BoundaryReason.PMU_LIMIT,
    Limit.SHARDING: BoundaryReason.SHARDING,
}


@dataclass(frozen=True)
class Boundary:
    after: str  # the last op of the kernel before
    before: str  # the first op of the kernel after
    reason: BoundaryReason
    detail: str


@dataclass(frozen=True)
class LayerOption:
    """One way to map a layer: a plan and a cut, with the K/V block each kernel chose."""

    plan: ShardingPlan
    cut: Cut
    kv_blocks: tuple[int | None, ...]
    kernels_s: tuple[float, ...]  # estimated seconds per execution of each kernel
    sram_bytes: tuple[float, ...]

    @property
    def layer_s(self) -> float:
        return self.cut.total_s


@dataclass(frozen=True)
class FrontPoint:
    sram_cap_bytes: float
    peak_sram_bytes: float
    layer_s: float
    kernels: int


@dataclass
class LayerSearch:
    """Searches one layer kind: plans × cuts, estimated by `cost`."""

    graph: Graph
    kind: str
    workload: Workload
    ctx: CompileContext
    cost: KernelCost
    orchestration: Orchestration
    builders: dict[ShardingPlan, CandidateBuilder] = field(default_factory=dict)
    _seconds: dict[CandidateKey, float] = field(default_factory=dict)
    _bounds: dict[CandidateKey, float] = field(default_factory=dict)  # `_bound`'s, by candidate
    _fits: dict[tuple[ShardingPlan, int, int], Candidate | Refusal] = field(default_factory=dict)

    def __post_init__(self) -> None:
        pool = KernelPool(self.graph, self.workload, self.ctx)
        for plan in plans_for(self.graph, self.ctx.phase, self.ctx.hw.sockets):
            self.builders[plan] = CandidateBuilder(
                self.graph, self.kind, plan, self.workload, self.ctx, pool
            )

    @property
    def order(self) -> list[str]:
        return self.graph.order()

    @property
    def candidates_built(self) -> int:
        return sum(b.built for b in self.builders.values())

    # --- costs ---------------------------------------------------------------------------

    def kernel_s(self, kernel: Kernel, looped: int = 1) -> float:
        return self.cost(kernel, self.ctx.hw, self.orchestration, looped)

    def candidate_s(self, c: Candidate) -> float:
        """`kernel_s` of a candidate, once per distinct candidate kernel."""
        if c.key not in self._seconds:
            self._seconds[c.key] = self.kernel_s(c.kernel)
        return self._seconds[c.key]

    def best_kernel(
        self, plan: ShardingPlan, start: int, end: int, sram_cap: float = math.inf
    ) -> tuple[Candidate | Refusal, float]:
        """The fastest legal tiling of ops[start:end] (within `sram_cap`), or why none is."""
        c = self._first_fit(plan, start, end, sram_cap)
        if isinstance(c, Refusal):
            return c, math.inf
        return c, self.candidate_s(c)

    def _first_fit(
        self, plan: ShardingPlan, start: int, end: int, sram_cap: float = math.inf
    ) -> Candidate | Refusal:
        """The tiling `best_kernel` picks, not yet costed. K/V blocks are tried largest first
        and the first that fits wins: a larger block only saves K/V re-reads (its cost is
        SRAM), so no smaller one is faster."""
        if sram_cap == math.inf:  # the search asks for each one twice (its bound, its cost)
            key = (plan, start, end)
            found = self._fits.get(key)
            if found is None:
                found = self._fits[key] = self._first_fit_within(plan, start, end, sram_cap)
            return found
        return self._first_fit_within(plan, start, end, sram_cap)

    def _first_fit_within(
        self, plan: ShardingPlan, start: int, end: int, sram_cap: float
    ) -> Candidate | Refusal:
        builder = self.builders[plan]
        first: Refusal | None = None
        for kv in builder.kv_blocks(start, end):
            c = builder.build(start, end, kv)
            if isinstance(c, Refusal):
                first = first or c
                continue
            if c.kernel.sram_bytes > sram_cap:
                first = first or Refusal(
                    Limit.SRAM,
                    f"needs {c.kernel.sram_bytes / 1e6:.0f} MB, over a cap of {sram_cap / 1e6:.0f}",
                )
                continue
            return c
        assert first is not None
        return first

    def _bound(self, plan: ShardingPlan, start: int, end: int) -> float:
        """No more than `_cost(plan, start, end, math.inf)`, for less: the candidate's cost
        when it is known, else the closed form's lower bound (math.inf: no legal kernel)."""
        c = self._first_fit(plan, start, end)
        if isinstance(c, Refusal):
            return math.inf
        if c.key in self._seconds:
            return self._seconds[c.key]
        if c.key not in self._bounds:
            self._bounds[c.key] = latency_lower_bound_s(
                c.kernel, self.ctx.hw, orchestration=self.orchestration
            )
        return self._bounds[c.key]

    def _cost(self, plan: ShardingPlan, start: int, end: int, sram_cap: float) -> float:
        """`best_kernel`'s time (its fit and its cost are kept, so asking again is cheap)."""
        return self.best_kernel(plan, start, end, sram_cap)[1]

    def _stop(self, plan: ShardingPlan, start: int, end: int, sram_cap: float = math.inf) -> bool:
        """No kernel reaching further left fits either: SRAM, and the minimum placement's PCUs
        and PMUs, only grow with more ops."""
        c, _ = self.best_kernel(plan, start, end, sram_cap)
        return isinstance(c, Refusal) and c.limit in UNIT_LIMITS

    # --- searches ------------------------------------------------------------------------

    def options(self, k: int, sram_cap: float = math.inf) -> list[LayerOption]:
        """The `k` fastest options, at most one per plan and kernel count, fastest first."""
        found: list[LayerOption] = []
        n = len(self.order)
        # the closed form's lower bound spares pricing candidates that cannot win (the cuts
        # found are the same); another ranking cost has no bound here
        bounded = self.cost is analytic_cost and sram_cap == math.inf
        for plan in self.builders:
            cost = functools.partial(self._cost, plan, sram_cap=sram_cap)
            stop = functools.partial(self._stop, plan, sram_cap=sram_cap)
            bound = functools.partial(self._bound, plan) if bounded else None
            cuts = best_cuts(n, cost, stop, bound)
            found.extend(self._option(plan, cut, sram_cap) for cut in cuts.values())
        found.sort(key=lambda o: (o.layer_s, len(o.cut.ends)))
        return found[:k]

    def leanest_kernel(
        self, plan: ShardingPlan, start: int, end: int, sram_cap: float = math.inf
    ) -> tuple[Candidate | Refusal, float]:
        """The fastest tiling of ops[start:end], or a smaller K/V block when that is as fast
        (within FRONT_GAIN) and needs less SRAM: SRAM that buys no time is left free. (A block
        longer than the cache holds more than the whole cache does, so it is never leaner.)"""
        best, best_s = self.best_kernel(plan, start, end, sram_cap)
        if not isinstance(best, Candidate):
            return best, best_s
        for kv in reversed(self.builders[plan].kv_blocks(start, end)):
            if kv == best.kv_block:
                break
            c = self.builders[plan].build(start, end, kv)
            if not isinstance(c, Candidate) or c.kernel.sram_bytes >= best.kernel.sram_bytes:
                continue
            s = self.candidate_s(c)
            if s <= best_s * (1 + FRONT_GAIN):
                return c, s
        return best, best_s

    def _option(self, plan: ShardingPlan, cut: Cut, sram_cap: float) -> LayerOption:
        kvs, secs, srams = [], [], []
        for i, j in cut.kernels():
            c, s = self.leanest_kernel(plan, i, j, sram_cap)
            assert isinstance(c, Candidate)
            kvs.append(c.kv_block)
            secs.append(s)
            srams.append(c.kernel.sram_bytes)
        return LayerOption(plan, cut, tuple(kvs), tuple(secs), tuple(srams))

    def misfits(self) -> list[tuple[ShardingPlan, str, Refusal]]:
        """Per sharding plan, the first op that fits no kernel even on its own, and why: what
        leaves the search no mapping of this layer kind."""
        out = []
        for plan in self.builders:
            for i, name in enumerate(self.order):
                c, _ = self.best_kernel(plan, i, i + 1)
                if isinstance(c, Refusal):
                    out.append((plan, name, c))
                    break
        return out

    def whole_layer(self, plan: ShardingPlan) -> Candidate | None:
        """The layer as one kernel under `plan` (what kernel looping needs), if it fits."""
        c, _ = self.leanest_kernel(plan, 0, len(self.order))
        return c if isinstance(c, Candidate) else None

    def front(self) -> list[FrontPoint]:
        """Latency against peak kernel SRAM: the fastest cut under each SRAM cap, dominated
        points dropped."""
        sram = self.ctx.hw.socket.sram_bytes
        points: list[FrontPoint] = []
        for frac in FRONT_CAPS:
            opts = self.options(1, sram_cap=frac * sram)
            if not opts or not math.isfinite(opts[0].layer_s):
                continue
            o = opts[0]
            points.append(FrontPoint(frac * sram, max(o.sram_bytes), o.layer_s, len(o.cut.ends)))
        front: list[FrontPoint] = []
        for p in sorted(points, key=lambda p: (p.peak_sram_bytes, p.layer_s)):
            # a point must buy a visible speed-up with its SRAM (0.01%), not rounding noise
            if not front or p.layer_s < front[-1].layer_s * (1 - FRONT_GAIN):
                front.append(p)
        return front

    # --- results -------------------------------------------------------------------------

    def kernel_specs(self, option: LayerOption) -> list[KernelSpec]:
        shardings = self.builders[option.plan].shardings
        specs = []
        for (i, j), kv in zip(option.cut.kernels(), option.kv_blocks, strict=True):
            ops = self.order[i:j]
            # '-' keeps the name a single --set path segment (op names have none) and lets a
            # narrow table wrap it
            name = ops[0] if len(ops) == 1 else f"{ops[0]}-{ops[-1]}"
            specs.append(kernel_spec(name, ops, shardings, Tiling(kv_block=kv)))
        return specs

    def boundaries(self, option: LayerOption) -> list[Boundary]:
        """Why each boundary of `option` is there: the merged kernel would not fit, or it
        would be slower (and what makes it so)."""
        out = []
        kernels = option.cut.kernels()
        for (a, m), (_, e), sa, sb in zip(
            kernels, kernels[1:], option.kernels_s, option.kernels_s[1:], strict=False
        ):
            out.append(self._boundary(option.plan, a, m, e, sa + sb))
        return out

    def _boundary(
        self, plan: ShardingPlan, start: int, mid: int, end: int, apart_s: float
    ) -> Boundary:
        """Why ops[start:mid] and ops[mid:end] are two kernels, in words that name the ops at
        the boundary."""
        order = self.order
        after, before = order[mid - 1], order[mid]
        merged, merged_s = self.best_kernel(plan, start, end)
        if isinstance(merged, Refusal):
            return Boundary(
                after,
                before,
                _LIMIT_REASON[merged.limit],
                f"{after} and {before} in one kernel ({order[start]} to {order[end - 1]}): "
                f"{merged.detail}",
            )
        slower = f"one kernel {duration(merged_s)} vs {duration(apart_s)} apart"
        # a blocking op before the boundary holds back the ops after it that need its output
        waits = self._blocked_by(start, mid, end)
        if waits is not None:
            waiting, blocking = waits
            return Boundary(
                after,
                before,
                BoundaryReason.BLOCKING_OP,
                f"{waiting} would wait for {blocking}, which takes in all its input before it "
                f"emits; {slower}",
            )
        shardings = self.builders[plan].shardings
        if shardings[after] != shardings[before]:
            return Boundary(
                after,
                before,
                BoundaryReason.LAYOUT_CHANGE,
                f"{after} is {_label(shardings[after])}, {before} {_label(shardings[before])}; "
                f"{slower}",
            )
        crossing = [
            c
            for c in merged.kernel.collectives
            if c.src in order[start:mid] and c.dst in order[mid:end]
        ]
        if crossing:
            # the collective between the two ops at the boundary, else the first that crosses
            c = next((c for c in crossing if c.src == after or c.dst == before), crossing[0])
            return Boundary(
                after,
                before,
                BoundaryReason.COLLECTIVE,
                f"{c.kind} of {c.tensor} from {c.src} to {c.dst} crosses it; {slower}",
            )
        return Boundary(
            after, before, BoundaryReason.FASTER_APART, f"{after} and {before} in {slower}"
        )

    def _blocked_by(self, start: int, mid: int, end: int) -> tuple[str, str] | None:
        """(the first op after the boundary that needs a blocking op before it, the nearest
        such blocking op), within ops[start:end]; None when nothing after waits on one."""
        order = self.order
        inside = set(order[start:end])
        blocking_ancestors: dict[str, list[str]] = {}  # op -> blocking ops it (transitively) needs
        for name in order[start:end]:
            found: list[str] = []
            for t in self.graph.ops[name].inputs:
                src = self.graph.producer.get(t)
                if src is None or src not in inside:
                    continue
                found += blocking_ancestors[src]
                if self.graph.ops[src].blocking:
                    found.append(src)
            blocking_ancestors[name] = found
        before = set(order[start:mid])
        for name in order[mid:end]:
            upstream = [b for b in blocking_ancestors[name] if b in before]
            if upstream:
                return name, max(upstream, key=order.index)
        return None


def duration(s: float) -> str:
    """Seconds in the unit that suits them: '1.234 s', '90.537 ms', '830.1 us'."""
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} us"


def _label(sharding: object) -> str:
    strategy = getattr(sharding, "strategy", "replicate")
    degree = getattr(sharding, "degree", 1)
    return f"{strategy}{degree}" if strategy != "replicate" else "replicated"
