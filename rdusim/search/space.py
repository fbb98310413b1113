"""The search space of one layer: how its ops are sharded over the node, and its tilings.

Sharding is chosen per op from a few *plans* that each make one placement decision for the ops
where placements differ in kind, every other op being tensor-parallel over the whole node:

- where a decode step's attention runs (`AttentionPlacement`): head-split like the rest (tp),
  data-parallel over sequences for the ops that touch the KV cache (each socket keeps its own
  sequences' cache: the paper's decode mapping, Fig. 6), the same widened to the GEMMs that feed
  and drain the cached attention (MLA's absorbed projections), or each sequence's cached
  positions split over the sockets (split-KV, flash-decoding);
- where routed experts run (`ExpertPlacement`): split by features (tp) or whole experts per
  socket (ep).

A plan fixes every op's sharding independently of where kernel boundaries fall, so the fusion
search over one plan is a search over boundaries alone, and the compiler's sharding pass gives
every candidate kernel exactly the costs it will have in the final program.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from rdusim.ir.graph import Graph, Op, Phase, TensorKind
from rdusim.spec.mapping import Sharding


class AttentionPlacement(StrEnum):
    """Where the ops around a decode step's cached attention run."""

    TP = "tp"  # split by heads, like every other op
    CACHE_DP = "cache-dp"  # the ops that read or write the cache: dp over sequences
    BLOCK_DP = "block-dp"  # those and the GEMMs feeding and draining the cached attention: dp
    SEQ_SPLIT = "sp"  # the cached attention: each sequence's positions over the sockets


class ExpertPlacement(StrEnum):
    """Where routed experts run."""

    TP = "tp"  # every expert's features split over the sockets
    EP = "ep"  # whole experts per socket (expert parallelism)


def touches_cache(op: Op, graph: Graph) -> bool:
    """Reads or writes a KV-cache tensor (a cached attention, a cache write)."""
    return any(graph.tensors[t].kind == TensorKind.CACHE for t in (*op.inputs, *op.outputs))


def cached_attention(op: Op, graph: Graph) -> bool:
    return op.traits.is_attention and touches_cache(op, graph)


def attention_block(graph: Graph) -> set[str]:
    """The cache ops with the GEMMs that feed a cached attention its queries or take its output
    directly (MLA's q_absorb and v_absorb): the ops a sequence-parallel attention drags along."""
    block = {op.name for op in graph.ops.values() if touches_cache(op, graph)}
    for op in graph.ops.values():
        if not cached_attention(op, graph):
            continue
        for t in op.inputs:
            src = graph.producer.get(t)
            if src is not None and graph.ops[src].traits.joins_attention_block:
                block.add(src)
        for t in op.outputs:
            for c in graph.consumers(t):
                if graph.ops[c].traits.joins_attention_block:
                    block.add(c)
    return block


@dataclass(frozen=True)
class ShardingPlan:
    """One placement per kind of decision; every other op is tp over the node."""

    attention: AttentionPlacement = AttentionPlacement.TP
    experts: ExpertPlacement = ExpertPlacement.TP

    @property
    def label(self) -> str:
        return f"attention {self.attention.value}, experts {self.experts.value}"

    def sharding_of(self, op: Op, graph: Graph, sockets: int) -> Sharding:
        """The sharding this plan gives `op` on a node of `sockets`."""
        if op.routed is not None and self.experts == ExpertPlacement.EP:
            return Sharding(ep=sockets)
        if self.attention == AttentionPlacement.SEQ_SPLIT and cached_attention(op, graph):
            return Sharding(sp=sockets)
        if self.attention == AttentionPlacement.CACHE_DP and touches_cache(op, graph):
            return Sharding(dp=sockets)
        if self.attention == AttentionPlacement.BLOCK_DP and op.name in attention_block(graph):
            return Sharding(dp=sockets)
        return Sharding(tp=sockets)

    def shardings(self, graph: Graph, sockets: int) -> dict[str, Sharding]:
        return {name: self.sharding_of(op, graph, sockets) for name, op in graph.ops.items()}


def plans_for(graph: Graph, phase: Phase, sockets: int) -> list[ShardingPlan]:
    """The plans worth searching for a layer graph: attention placements only where a decode
    step reads a cache, expert placements only where there are routed experts; plans that give
    every op the same sharding as an earlier one are dropped."""
    attention = [AttentionPlacement.TP]
    if phase == Phase.DECODE and any(cached_attention(op, graph) for op in graph.ops.values()):
        attention = list(AttentionPlacement)
    experts = [ExpertPlacement.TP]
    if any(op.routed is not None for op in graph.ops.values()) and sockets > 1:
        experts = list(ExpertPlacement)
    seen: set[tuple[tuple[str, Sharding], ...]] = set()
    plans: list[ShardingPlan] = []
    for plan in _product(attention, experts):
        key = tuple(sorted(plan.shardings(graph, sockets).items(), key=lambda kv: kv[0]))
        if key not in seen:
            seen.add(key)
            plans.append(plan)
    return plans


def _product(
    attention: list[AttentionPlacement], experts: list[ExpertPlacement]
) -> Iterator[ShardingPlan]:
    for a in attention:
        for e in experts:
            yield ShardingPlan(a, e)


# K/V block sizes a prefill attention kernel may stream, largest first (None: the whole cache at
# once); larger blocks re-read less K/V, smaller ones need less SRAM.
KV_BLOCKS: tuple[int | None, ...] = (None, 32768, 16384, 8192, 4096)


def kv_block_options(ops: list[Op], phase: Phase) -> tuple[int | None, ...]:
    """Tilings a kernel of `ops` can choose: K/V blocks for a causal prefill attention."""
    if phase == Phase.PREFILL and any(op.traits.is_attention for op in ops):
        return KV_BLOCKS
    return (None,)
