"""Builders shared by the serving tests: synthetic graphs, requests and deployments, so the
engine's tests run in milliseconds and every expected time can be worked out by hand."""

from __future__ import annotations

import math
from collections.abc import Sequence

from hypothesis import strategies as st

from rdusim.serving.arrivals import Request
from rdusim.serving.engine import EngineConfig, EngineResult, ModelGraphs, simulate_serving
from rdusim.serving.shape import GraphShape
from rdusim.serving.step_times import LinearStepTimes
from rdusim.spec.speculation import expected_accepted_tokens
from rdusim.spec.workload import DecodeStepCost, DeploymentMode, SchedulingPolicy


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


# --- random deployments (Hypothesis) ---------------------------------------------------------

# times that add up exactly (binary fractions) make events coincide; the others rarely do
seconds = st.one_of(st.sampled_from([0.0625, 0.125, 0.25, 0.5, 1.0]), st.floats(1e-3, 1.0))


@st.composite
def graphs(draw: st.DrawFn, index: int) -> ModelGraphs:
    lengths = sorted(draw(st.sets(st.integers(8, 128), min_size=1, max_size=3)))
    k, a = draw(st.sampled_from([(0, 1.0), (2, 0.8), (3, 0.5), (1, 1.0)]))
    rate = draw(st.sampled_from([1.0, 1.5, 2.44])) if k == 0 else expected_accepted_tokens(k, a)
    graph = GraphShape(
        decode_slots=draw(st.integers(1, 4)),
        cache_len=draw(st.integers(16, 256)),
        max_sequence=512,
        tokens_per_step=rate,
        draft_tokens=k,
        acceptance=a,
        prefill_lengths=tuple(lengths),
        prefill_batch=draw(st.integers(1, 3)),
        kv_bytes_per_token=draw(st.sampled_from([0.0, 100.0])),
        prefill_hold=draw(st.integers(0, 3)),
    )
    times = LinearStepTimes(
        draw(seconds),
        draw(st.sampled_from([0.0, 1 / 1024, 1e-3])),
        draw(seconds),
        draw(st.sampled_from([0.0, 1 / 64, 0.01])),
        draw(st.sampled_from([0.0, 1 / 4096, 1e-4])),
    )
    hbm = draw(st.floats(1.0, 10.0))
    return ModelGraphs(f"m{index}", graph, times, hbm, draw(st.sampled_from([0.0, 0.25, 0.3])))


@st.composite
def deployments(draw: st.DrawFn) -> tuple[list[Request], list[ModelGraphs], EngineConfig]:
    count = draw(st.integers(1, 3))
    models = [draw(graphs(m)) for m in range(count)]
    cost = draw(st.sampled_from(list(DecodeStepCost)))
    seed = draw(st.integers(0, 2**16))
    if count == 1 and draw(st.booleans()):
        config = EngineConfig(
            mode=DeploymentMode.DISAGGREGATED,
            prefill_nodes=draw(st.integers(1, 3)),
            decode_nodes=draw(st.integers(1, 3)),
            link_bandwidth=draw(st.sampled_from([math.inf, 400.0, 1e4])),
            link_latency_s=draw(st.sampled_from([0.0, 0.125, 1e-3])),
            step_cost=cost,
            seed=seed,
        )
    else:
        pinned = tuple(m for m in range(count - 1) if draw(st.booleans()))
        held = sum(models[p].hbm_bytes for p in pinned)
        most = max((g.hbm_bytes for i, g in enumerate(models) if i not in pinned), default=0.0)
        config = EngineConfig(
            mode=DeploymentMode.COLOCATED,
            nodes=draw(st.integers(1, 3)),
            policy=draw(st.sampled_from(list(SchedulingPolicy))),
            steps_per_prefill=draw(st.integers(1, 5)),
            step_cost=cost,
            seed=seed,
            hbm_budget=held + most + draw(st.sampled_from([0.0, 5.0, 100.0])),
            pinned=pinned,
            prefill_chunk=draw(st.one_of(st.none(), st.sampled_from([4, 16, 40]))),
        )
    t, reqs = 0.0, []
    for i in range(draw(st.integers(1, 30))):
        t += draw(st.one_of(st.just(0.0), seconds, st.floats(0.0, 3.0)))
        m = draw(st.integers(0, count - 1))
        prompt = draw(st.integers(1, models[m].shape.longest_prompt))
        reqs.append(Request(i, t, prompt, draw(st.integers(1, 60)), m))
    return reqs, models, config
