"""Routed-expert traffic and work per socket: which expert weights a step streams, and how much
of the token-slots the busiest socket computes.

A MoE layer keeps every expert's weights in HBM, but a step only needs the experts some token was
routed to. Under tensor parallelism every socket holds a slice of every expert, so each streams
its slice of the touched experts and computes an equal share of every slot; under expert
parallelism each socket holds whole experts, and the busiest socket (most touched experts, most
token-slots) sets the pace. Expectations come from `rdusim.compiler.routing`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache

from rdusim.compiler.routing import (
    RoutingModel,
    expected_experts_touched,
    expected_max_experts_touched,
    expected_max_token_slots,
    routing_from_loads,
    uniform_routing,
    zipf_routing,
)
from rdusim.spec.mapping import ExpertLoading

__all__ = ["ExpertLoading", "ExpertShare", "Routing", "expert_share"]


@dataclass(frozen=True)
class Routing:
    """How tokens spread over experts (a mapping's `moe.routing`), for any expert count."""

    distribution: str = "uniform"  # uniform | zipf | histogram
    exponent: float = 0.0
    loads: tuple[float, ...] = ()
    loading: ExpertLoading = ExpertLoading.TOUCHED

    def model(self, experts: int, top_k: int) -> RoutingModel:
        return _model(self.distribution, self.exponent, self.loads, experts, top_k)


@cache
def _model(
    distribution: str, exponent: float, loads: tuple[float, ...], experts: int, top_k: int
) -> RoutingModel:
    if distribution == "zipf":
        return zipf_routing(experts, top_k, exponent)
    if distribution == "histogram":
        return routing_from_loads(loads, top_k)
    return uniform_routing(experts, top_k)


@dataclass(frozen=True)
class ExpertShare:
    """One socket's part of a routed-expert op in one execution."""

    weight_read_fraction: float  # of the socket's resident weight shard, streamed from HBM
    work_fraction: float  # of the op's total arithmetic, on the busiest socket
    experts_touched: float  # expected distinct experts the whole step touches


@lru_cache(maxsize=4096)  # a pure function of its (hashable) arguments, asked once per compile
def expert_share(
    routing: Routing, experts: int, top_k: int, tokens: float, strategy: str, degree: int
) -> ExpertShare:
    """Streamed weights and busiest-socket work of a routed-expert op.

    `tokens` are the tokens of the step on the sockets that share the op's weights (all of them
    under tp/ep; one socket's share under dp). `strategy` is the op's sharding: tp or replicate
    (every socket holds a slice of every expert), ep (whole experts per socket) or dp (every
    socket holds every expert and its own tokens).
    """
    model = routing.model(experts, top_k)
    touched = expected_experts_touched(model, tokens)
    if strategy == "ep" and degree > 1:
        per_socket = experts / degree
        busiest = expected_max_experts_touched(model, tokens, degree)
        read = busiest / per_socket
        slots = tokens * top_k
        work = expected_max_token_slots(model, tokens, degree) / slots if slots > 0 else 0.0
    else:
        read = touched / experts
        work = 1.0 / degree if strategy == "tp" and degree > 1 else 1.0
    if routing.loading == ExpertLoading.ALL:
        read = 1.0
    return ExpertShare(min(1.0, read), work, touched)
