"""Candidate kernels: a contiguous run of a layer's ops, compiled as the final program would be.

A candidate is the ops `order[i:j]` of a layer graph (in execution order, so every producer
comes first) fused into one kernel, every other op in a kernel of its own. Under a fixed sharding
plan the compiler's sharding pass gives the candidate exactly the per-op costs, collectives and
HBM traffic at its edges it will have in any program where it is one kernel: what crosses a
kernel edge depends only on which ops share the kernel. A candidate is legal when it fits a
socket: SRAM, PCUs and PMUs (the compiler's own checks, `rdusim.compiler.allocate`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from rdusim.compiler.compile import (
    CompileContext,
    KernelPlace,
    assemble_kernel,
    compile_context,
    layer_workload,
    shard_context,
)
from rdusim.compiler.fusion import FusedKernel
from rdusim.compiler.program import Kernel
from rdusim.compiler.sharding import LayerWalk, fused_shardings, walk
from rdusim.compiler.tiers import place
from rdusim.errors import InfeasibleError, SpecError
from rdusim.ir.graph import Graph, Phase, Workload
from rdusim.ir.model import build_model
from rdusim.search.space import ShardingPlan, kv_block_options, plans_for
from rdusim.spec.mapping import KernelSpec, ResolvedMapping, Sharding, Tiling, snapstream_sizes

CANDIDATE = "candidate"


class Limit(StrEnum):
    """What makes a candidate kernel illegal."""

    SRAM = "SRAM"
    PCUS = "PCUs"
    PMUS = "PMUs"
    SHARDING = "sharding"  # the plan's sharding does not divide one of the ops


LIMIT_OF = {limit.value: limit for limit in (Limit.SRAM, Limit.PCUS, Limit.PMUS)}

# a candidate's content: (start, end, K/V block, its ops' interned plans, their collectives')
CandidateKey = tuple[int, int, int | None, tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True)
class Refusal:
    limit: Limit
    detail: str


@dataclass(frozen=True)
class Candidate:
    """One legal kernel: ops `order[start:end]` with a K/V block."""

    start: int
    end: int
    kv_block: int | None
    kernel: Kernel
    key: CandidateKey  # its content in its layer's `KernelPool`


def kernel_spec(
    name: str, ops: list[str], shardings: dict[str, Sharding], tiling: Tiling | None = None
) -> KernelSpec:
    """A kernel spec for `ops` with per-op shardings: the most common one is the kernel's, the
    others are overrides (ties go to the first op's)."""
    counts: dict[Sharding, int] = {}
    for n in ops:
        counts[shardings[n]] = counts.get(shardings[n], 0) + 1
    base = max(counts, key=lambda s: counts[s])
    overrides = {n: shardings[n] for n in ops if shardings[n] != base}
    return KernelSpec(
        name=name, ops=ops, sharding=base, overrides=overrides, tiling=tiling or Tiling()
    )


class KernelPool:
    """The candidate kernels of one layer graph and workload, shared by the builders of its
    sharding plans: a run of ops whose sharded plans (`OpBase.key`) and hosted collectives are
    the same under two plans is the same kernel, compiled once. Content is interned as small
    ints, so a candidate's key is (start, end, K/V block, its ops' ids, their collectives' ids)."""

    def __init__(self, graph: Graph, workload: Workload, ctx: CompileContext) -> None:
        self.graph = graph
        self.workload = workload
        self.ctx = ctx
        self.compiled = 0  # kernels actually compiled (the rest were shared)
        self._ids: dict[str, int] = {}
        self._results: dict[CandidateKey, Candidate | Refusal] = {}

    def intern(self, content: str) -> int:
        return self._ids.setdefault(content, len(self._ids))

    def get(self, key: CandidateKey) -> Candidate | Refusal | None:
        return self._results.get(key)

    def put(self, key: CandidateKey, result: Candidate | Refusal) -> None:
        self.compiled += 1
        self._results[key] = result


class CandidateBuilder:
    """Compiles candidate kernels of one layer under one sharding plan, each once.

    The sharding pass walks the layer once per plan (`rdusim.compiler.sharding.walk`: layouts
    and collectives do not depend on fusion); a candidate then only finishes its own ops' plans
    and is assembled as the compiler assembles any kernel."""

    def __init__(
        self,
        graph: Graph,
        kind: str,
        plan: ShardingPlan,
        workload: Workload,
        ctx: CompileContext,
        pool: KernelPool | None = None,
    ) -> None:
        self.graph = graph
        self.kind = kind
        self.plan = plan
        self.workload = workload
        self.ctx = ctx
        self.order = graph.order()
        self.shardings = plan.shardings(graph, ctx.hw.sockets)
        self.built = 0  # candidates compiled (or shared with another plan's), for the report
        self._cache: dict[tuple[int, int, int | None], Candidate | Refusal] = {}
        self._places: dict[int | None, KernelPlace] = {}
        singles = [kernel_spec(name, [name], self.shardings) for name in self.order]
        fused = [FusedKernel(spec, 0, (spec.name,)) for spec in singles]
        sctx = shard_context(fused, workload, ctx)
        self._walk: LayerWalk | SpecError
        try:
            self._walk = walk(graph, fused_shardings(fused, kind, sctx), sctx)
        except SpecError as exc:
            self._walk = exc  # the plan does not divide some op: every candidate says which
        self._pool = pool or KernelPool(graph, workload, ctx)
        if (self._pool.graph, self._pool.workload, self._pool.ctx) != (graph, workload, ctx):
            raise ValueError("a kernel pool serves the builders of one layer graph and workload")
        self._op_ids: list[int] = []
        self._coll_ids: list[int] = []
        if isinstance(self._walk, LayerWalk):
            w = self._walk
            self._op_ids = [self._pool.intern(w.ops[n].key()) for n in self.order]
            hosted = {n: repr(w.kernel_collectives({n})) for n in self.order}
            self._coll_ids = [self._pool.intern(hosted[n]) for n in self.order]

    def kv_blocks(self, start: int, end: int) -> tuple[int | None, ...]:
        """K/V blocks to try for ops[start:end], largest first (None: the whole cache)."""
        ops = [self.graph.ops[n] for n in self.order[start:end]]
        return kv_block_options(ops, self.ctx.phase)

    def build(self, start: int, end: int, kv_block: int | None = None) -> Candidate | Refusal:
        key = (start, end, kv_block)
        if key not in self._cache:
            self._cache[key] = self._build(start, end, kv_block)
        return self._cache[key]

    def _build(self, start: int, end: int, kv_block: int | None) -> Candidate | Refusal:
        self.built += 1
        if isinstance(self._walk, SpecError):
            return Refusal(Limit.SHARDING, self._walk.problem)
        key = (
            start,
            end,
            kv_block,
            tuple(self._op_ids[start:end]),
            tuple(self._coll_ids[start:end]),
        )
        found = self._pool.get(key)
        if found is None:
            found = self._compile(self._walk, key)
            self._pool.put(key, found)
        return found

    def _compile(self, w: LayerWalk, key: CandidateKey) -> Candidate | Refusal:
        start, end, kv_block = key[:3]
        ops = self.order[start:end]
        plans = w.kernel_plans(ops, kv_block)
        placement = self.ctx.placement  # the layer kind's weights' tier, the cache's
        place(plans.values(), placement.weights_of(self.kind), placement.kv_cache)
        where = self._places.get(kv_block)
        if where is None:
            where = self._places[kv_block] = KernelPlace(
                CANDIDATE, 0, self.kind, Tiling(kv_block=kv_block)
            )
        try:
            kernel = assemble_kernel(
                self.graph,
                where,
                list(plans.values()),
                w.kernel_collectives(plans),
                self.workload,
                self.ctx,
            )
        except InfeasibleError as exc:
            # the compiler's checks: SRAM, and the minimum placement's PCUs and PMUs (its
            # `unit_overflow`), which grow as the kernel takes in more ops as SRAM does
            return Refusal(LIMIT_OF.get(exc.limit or "", Limit.SRAM), exc.problem)
        except SpecError as exc:
            return Refusal(Limit.SHARDING, exc.problem)
        return Candidate(start, end, kv_block, kernel, key)


def every_candidate(rm: ResolvedMapping, kind: str, batch: int) -> Iterator[Kernel]:
    """Every legal contiguous fusion of one layer kind's ops under every sharding plan the
    search tries: the population the closed-form cost is checked and benchmarked on."""
    phase = Phase(rm.spec.phase)
    graph = build_model(rm.model, phase, snapstream_sizes(rm.spec, rm.source.file)).layers[kind]
    for plan in plans_for(graph, phase, rm.hardware.sockets):
        b = CandidateBuilder(graph, kind, plan, layer_workload(rm, batch), compile_context(rm))
        for i, j in itertools.combinations(range(len(b.order) + 1), 2):
            c = b.build(i, j)
            if isinstance(c, Candidate):
                yield c.kernel
