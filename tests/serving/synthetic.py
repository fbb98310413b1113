"""Builders shared by the serving tests: synthetic graphs, requests and deployments, so the
engine's tests run in milliseconds and every expected time can be worked out by hand."""

from __future__ import annotations

from collections.abc import Sequence

from rdusim.serving.arrivals import Request
from rdusim.serving.engine import EngineConfig, EngineResult, simulate_serving
from rdusim.serving.shape import GraphShape
from rdusim.serving.step_times import LinearStepTimes
from rdusim.spec.workload import DeploymentMode, SchedulingPolicy


def requests(*rows: tuple[float, int, int]) -> list[Request]:
    """`(arrival_s, prompt_tokens, output_tokens)` rows as requests 0, 1, ..."""
    return [Request(i, t, p, o) for i, (t, p, o) in enumerate(rows)]


def shape(
    slots: int = 2,
    *,
    cache_len: int = 1000,
    max_sequence: int = 10_000,
    tokens_per_step: float = 1.0,
    prefill_lengths: Sequence[int] = (1000,),
    prefill_batch: int = 1,
    kv_bytes_per_token: float = 0.0,
    snapstream: bool = False,
    prefill_hold: int = 1 << 40,
    draft_tokens: int = 0,
    acceptance: float = 1.0,
) -> GraphShape:
    return GraphShape(
        decode_slots=slots,
        cache_len=cache_len,
        max_sequence=max_sequence,
        tokens_per_step=tokens_per_step,
        prefill_lengths=tuple(prefill_lengths),
        prefill_batch=prefill_batch,
        kv_bytes_per_token=kv_bytes_per_token,
        snapstream=snapstream,
        prefill_hold=prefill_hold,
        draft_tokens=draft_tokens,
        acceptance=acceptance,
    )


def constant_times(prefill_s: float = 1.0, step_s: float = 0.1) -> LinearStepTimes:
    """Every prefill takes `prefill_s`, every decode step `step_s`."""
    return LinearStepTimes(prefill_s, 0.0, step_s)


def colocated(
    policy: SchedulingPolicy = SchedulingPolicy.PREFILL_FIRST, nodes: int = 1, **kw: object
) -> EngineConfig:
    return EngineConfig(mode=DeploymentMode.COLOCATED, nodes=nodes, policy=policy, **kw)  # type: ignore[arg-type]


def disaggregated(prefill_nodes: int = 1, decode_nodes: int = 1, **kw: object) -> EngineConfig:
    return EngineConfig(
        mode=DeploymentMode.DISAGGREGATED,
        prefill_nodes=prefill_nodes,
        decode_nodes=decode_nodes,
        **kw,  # type: ignore[arg-type]
    )


def run(
    reqs: Sequence[Request],
    graph: GraphShape,
    config: EngineConfig,
    times: LinearStepTimes | None = None,
) -> EngineResult:
    return simulate_serving(reqs, graph, times or constant_times(), config)


def times_of(result: EngineResult) -> list[tuple[float, float]]:
    """(first token, last token) of each request, rounded for exact comparison."""
    return [(round(r.first_token_s, 9), round(r.last_token_s, 9)) for r in result.records]
