"""Runs of decode steps taken as one event give exactly the run an event per step gives.

The reference is the same engine with `coalesce_steps=False`: every decode step its own event,
the node's policy asked before each. On random deployments (one or several models, switches
from DDR, chunked prefill, accepted tokens drawn per step, static and occupied step costs,
colocated and disaggregated nodes, step and arrival times that are exact binary fractions so
that events coincide), everything the run records must be equal, bit for bit: every request's
timestamps and steps, the prefills, the merged decode runs (in order), the occupancy changes,
the switches, the step counts, and the metrics.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings

from rdusim.serving.arrivals import Request
from rdusim.serving.batch import DecodeBatch, Stretch
from rdusim.serving.engine import (
    Engine,
    EngineConfig,
    EngineResult,
    ModelGraphs,
    simulate_models,
)
from rdusim.serving.metrics import summary
from rdusim.serving.shape import GraphShape
from rdusim.serving.step_times import LinearStepTimes
from rdusim.spec.workload import DecodeStepCost
from tests.serving.synthetic import constant_times, deployments, disaggregated, shape


def recorded(result: EngineResult) -> tuple[object, ...]:
    """Everything a run records, comparable exactly (NaN timestamps by their repr)."""
    return (
        [repr(r) for r in result.records],
        result.prefills,
        result.decode_runs,
        result.occupancy,
        result.switches,
        result.slot_steps,
        result.decode_steps,
        result.model_prefill_s,
        result.model_chunk_s,
    )


@settings(max_examples=300, deadline=None)
@given(deployments())
def test_coalesced_steps_record_what_an_event_per_step_records(case) -> None:
    reqs, models, config = case
    coalesced = simulate_models(reqs, models, config)
    stepwise = simulate_models(reqs, models, replace(config, coalesce_steps=False))
    assert recorded(coalesced) == recorded(stepwise)
    assert summary(coalesced, None) == summary(stepwise, None)


def _engine(config: EngineConfig, reqs: list[Request], graph: GraphShape) -> Engine:
    return Engine(reqs, [ModelGraphs("", graph, constant_times(1.0, 0.1))], config)


def test_a_run_of_steps_takes_one_event() -> None:
    # one request decoding 999 steps: its arrival, its prefill, one stretch (and the processes
    # starting), not a thousand events; the per-step run takes an event per step
    reqs = [Request(0, 0.0, 10, 1000)]
    fast = _engine(disaggregated(), reqs, shape(1))
    slow = _engine(disaggregated(coalesce_steps=False), reqs, shape(1))
    a, b = fast.run(), slow.run()
    assert a.records[0].last_token_s == b.records[0].last_token_s
    assert fast.env.processed < 10 < 999 < slow.env.processed


def test_a_stretch_is_timed_by_adding_each_step_to_the_last_boundary() -> None:
    # 0.1 s steps from 1.0: the boundaries are the running sum, not 1.0 + i * 0.1
    graph = [ModelGraphs("", shape(1), constant_times(1.0, 0.1))]
    result = simulate_models([Request(0, 0.0, 10, 31)], graph, EngineConfig())
    end = _boundaries(1.0, 0.1, 30)[-1]
    assert result.records[0].last_token_s == end != 1.0 + 30 * 0.1


def _boundaries(start: float, step: float, n: int) -> list[float]:
    """start, then each step's end: the running sum an event per step makes."""
    out = [start]
    for _ in range(n):
        out.append(out[-1] + step)
    return out


def test_a_cache_arriving_mid_stretch_joins_at_the_next_boundary() -> None:
    # r0's cache is on the decode node at 1.1 (prefill 0 -> 1, link 0.1 s); it decodes 19
    # steps of 0.25 s. r1 arrives at 1.2, its cache at 2.3, inside r0's 5th step (2.1 ->
    # 2.35): it joins at the 5th boundary and its 2 steps end at the 7th, where r0's
    # stretch is cut, and nowhere else
    reqs = [Request(0, 0.0, 10, 20), Request(1, 1.2, 10, 3)]
    config = disaggregated(link_latency_s=0.1)
    result = simulate_models(reqs, [ModelGraphs("", shape(2), constant_times(1.0, 0.25))], config)
    r0, r1 = result.records
    b = _boundaries(1.1, 0.25, 19)
    assert b[4] < r1.transfer_end_s < b[5]
    assert (r1.join_step, r1.last_token_s, r0.last_token_s) == (5, b[7], b[19])
    assert result.occupancy == [(1.1, 0, 1), (b[5], 0, 2), (b[7], 0, 1), (b[19], 0, 0)]
    assert [(d.start_s, d.end_s, d.steps) for d in result.decode_runs] == [(1.1, b[19], 19)]


def test_a_cache_arriving_at_a_boundary_joins_there() -> None:
    # link 0.125 s: r0 decodes from 1.125 in 0.25 s steps; r1's cache arrives at 2.125,
    # exactly when r0's 4th step ends. A node acts after everything else at an instant, so
    # r1 joins at that boundary, not the next
    reqs = [Request(0, 0.0, 10, 20), Request(1, 1.0, 10, 3)]
    config = disaggregated(link_latency_s=0.125)
    result = simulate_models(reqs, [ModelGraphs("", shape(2), constant_times(1.0, 0.25))], config)
    r1 = result.records[1]
    assert r1.transfer_end_s == 2.125
    assert (r1.join_step, r1.last_token_s) == (4, 2.625)


def test_poking_a_batch_without_a_stretch_does_nothing() -> None:
    engine = _engine(disaggregated(), [Request(0, 0.0, 10, 2)], shape(1))
    batch: DecodeBatch = engine.batches[0][0]
    assert batch.stretch is None
    batch.poke()
    assert batch.stretch is None


def test_stretch_bounds_start_at_its_start() -> None:
    st_ = Stretch([3.0], 0, 5, lambda i: i)
    assert st_.bounds == [3.0] and st_.until == 5


@pytest.mark.parametrize("cost", list(DecodeStepCost))
def test_occupied_and_static_stretches_time_the_same_steps(cost: DecodeStepCost) -> None:
    # one request alone: occupied steps grow with its cache; the coalesced run adds the same
    # step times in the same order as the per-step run
    times = LinearStepTimes(0.5, 0.0, 0.01, 0.001, 1e-4)
    graph = shape(4, cache_len=300)
    reqs = [Request(0, 0.0, 100, 150), Request(1, 3.0, 50, 40)]
    config = EngineConfig(step_cost=cost)
    a = simulate_models(reqs, [ModelGraphs("", graph, times)], config)
    b = simulate_models(
        reqs, [ModelGraphs("", graph, times)], replace(config, coalesce_steps=False)
    )
    assert recorded(a) == recorded(b)
