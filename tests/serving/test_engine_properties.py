"""Invariants of the serving engine on random workloads and deployments (Hypothesis).

Whatever the requests, graphs, policy (a shipped one, or one choosing requests at random) and
deployment: every request completes exactly once; the
tokens generated add up to the requested outputs; no decode slot ever holds two requests at once;
each request's timestamps are ordered (arrival <= prefill start <= first token <= last token);
and the engine's step accounting agrees with the per-request steps.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import defaultdict
from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.serving.acceptance import drawn_steps
from rdusim.serving.arrivals import Request
from rdusim.serving.engine import EngineConfig, EngineResult, simulate_serving
from rdusim.serving.metrics import generated_tokens
from rdusim.serving.scheduler import DECODE, WAIT, Decision, Prefill, SchedulerState
from rdusim.serving.shape import GraphShape
from rdusim.serving.step_times import LinearStepTimes
from rdusim.spec.speculation import expected_accepted_tokens
from rdusim.spec.workload import DecodeStepCost, DeploymentMode, SchedulingPolicy
from tests.serving.legacy_scheduler import POLICIES as LEGACY
from tests.serving.legacy_scheduler import Legacy

EPS = 1e-9

positive_s = st.floats(min_value=1e-3, max_value=2.0, allow_nan=False)


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[Request], GraphShape]:
    lengths = sorted(draw(st.sets(st.integers(8, 256), min_size=1, max_size=3)))
    snapstream = draw(st.booleans())
    # accepted tokens at a fixed rate, or drawn per step from k drafts at acceptance a
    k, a = draw(st.sampled_from([(0, 1.0), (2, 0.8), (4, 0.8), (3, 0.0), (1, 1.0), (5, 0.5)]))
    rate = (
        draw(st.sampled_from([1.0, 1.5, 2.44, 3.0])) if k == 0 else expected_accepted_tokens(k, a)
    )
    graph = GraphShape(
        decode_slots=draw(st.integers(1, 4)),
        cache_len=draw(st.integers(16, 512)),
        max_sequence=1024,
        tokens_per_step=rate,
        draft_tokens=k,
        acceptance=a,
        prefill_lengths=tuple(lengths),
        prefill_batch=draw(st.integers(1, 3)),
        kv_bytes_per_token=draw(st.sampled_from([0.0, 100.0, 70272.0])),
        snapstream=snapstream,
        prefill_hold=draw(st.integers(0, 3)),
    )
    gaps = draw(
        st.lists(
            st.one_of(st.just(0.0), st.floats(0.0, 5.0, allow_nan=False)), min_size=1, max_size=25
        )
    )
    reqs = []
    t = 0.0
    for i, gap in enumerate(gaps):
        t += gap
        prompt = draw(st.integers(1, lengths[-1]))
        output = draw(st.integers(1, 40))
        reqs.append(Request(i, t, prompt, output))
    return reqs, graph


@dataclass(frozen=True)
class RandomPolicy:
    """Prefill or decode at random when both can run; a random choice of waiting requests, in a
    random order (a policy of the caller's own, through `EngineConfig.scheduler`)."""

    rng: random.Random

    def choose(self, state: SchedulerState) -> Decision:
        can_prefill = len(state.waiting) > 0 and state.free_slots > 0
        if can_prefill and (not state.running or self.rng.random() < 0.5):
            most = min(state.prefill_batch, state.free_slots, len(state.waiting))
            chosen = self.rng.sample(list(state.waiting), self.rng.randint(1, most))
            return Prefill(tuple(chosen))
        return DECODE if state.running else WAIT


@st.composite
def configs(draw: st.DrawFn) -> EngineConfig:
    cost = draw(st.sampled_from(list(DecodeStepCost)))
    seed = draw(st.integers(0, 2**32))
    if draw(st.booleans()):
        own = draw(st.booleans())
        return EngineConfig(
            mode=DeploymentMode.COLOCATED,
            nodes=draw(st.integers(1, 3)),
            policy=draw(st.sampled_from(list(SchedulingPolicy))),
            steps_per_prefill=draw(st.integers(1, 5)),
            step_cost=cost,
            scheduler=RandomPolicy(random.Random(draw(st.integers(0, 2**32)))) if own else None,
            seed=seed,
        )
    return EngineConfig(
        mode=DeploymentMode.DISAGGREGATED,
        prefill_nodes=draw(st.integers(1, 3)),
        decode_nodes=draw(st.integers(1, 3)),
        link_bandwidth=draw(st.sampled_from([math.inf, 1e6, 1e9])),
        link_latency_s=draw(st.sampled_from([0.0, 1e-3, 0.05])),
        step_cost=cost,
        seed=seed,
    )


times_strategy = st.builds(
    LinearStepTimes,
    prefill_base_s=positive_s,
    prefill_per_token_s=st.floats(0.0, 0.01),
    decode_base_s=positive_s,
    decode_per_slot_s=st.floats(0.0, 0.05),
    decode_per_token_s=st.floats(0.0, 1e-4),
)


def _run(case: tuple[list[Request], GraphShape], config: EngineConfig, times: LinearStepTimes):
    reqs, graph = case
    return reqs, graph, simulate_serving(reqs, graph, times, config)


def _slot_intervals(result: EngineResult) -> dict[tuple[int, int], list[tuple[float, float]]]:
    held: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for r in result.records:
        if r.slot >= 0:
            held[(r.decode_node, r.slot)].append((r.slot_from_s, r.last_token_s))
    return held


@settings(max_examples=150, deadline=None)
@given(workloads(), configs(), times_strategy)
def test_every_request_completes_exactly_once(case, config, times) -> None:
    reqs, _, result = _run(case, config, times)
    assert sorted(r.id for r in result.records) == [r.id for r in reqs]
    assert all(r.completions == 1 for r in result.records)


@settings(max_examples=150, deadline=None)
@given(workloads(), configs(), times_strategy)
def test_generated_tokens_equal_the_outputs(case, config, times) -> None:
    reqs, graph, result = _run(case, config, times)
    produced = sum(generated_tokens(r, graph.tokens_per_step) for r in result.records)
    assert produced == sum(r.output_tokens for r in reqs)
    # the engine's own tally of slot-steps agrees with the steps each request took
    assert result.slot_steps == sum(r.steps for r in result.records)
    # each request took the steps its draws need (the mean rate when nothing is drawn)
    k, a = graph.draft_tokens, graph.acceptance
    by_id = sorted(result.records, key=lambda r: r.id)
    drawn = drawn_steps([r.output_tokens - 1 for r in by_id], k, a, config.seed) if k else None
    for i, r in enumerate(by_id):
        assert r.steps == (drawn[i] if drawn is not None else graph.decode_steps(r.output_tokens))
        if r.output_tokens > 1:
            top = (graph.draft_tokens + 1) if graph.draft_tokens else graph.tokens_per_step
            assert math.ceil((r.output_tokens - 1) / top - EPS) <= r.steps <= r.output_tokens - 1


@settings(max_examples=150, deadline=None)
@given(workloads(), configs(), times_strategy)
def test_no_slot_ever_holds_two_requests(case, config, times) -> None:
    _, graph, result = _run(case, config, times)
    for (node, slot), spans in _slot_intervals(result).items():
        assert 0 <= slot < graph.decode_slots
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end - EPS, f"node {node} slot {slot}: {spans}"
    assert all(0 <= occupied <= graph.decode_slots for _, _, occupied in result.occupancy)


@settings(max_examples=150, deadline=None)
@given(workloads(), configs(), times_strategy)
def test_timestamps_are_ordered(case, config, times) -> None:
    _, _, result = _run(case, config, times)
    for r in result.records:
        assert r.arrival_s <= r.prefill_start_s + EPS
        assert r.prefill_start_s < r.first_token_s
        assert r.first_token_s <= r.last_token_s
        if not math.isnan(r.transfer_start_s):
            assert r.first_token_s <= r.transfer_start_s <= r.transfer_end_s <= r.last_token_s
        if r.output_tokens > 1:
            assert r.last_token_s > r.first_token_s


@settings(max_examples=100, deadline=None)
@given(workloads(), configs(), times_strategy)
def test_prefills_never_overlap_on_a_node(case, config, times) -> None:
    _, _, result = _run(case, config, times)
    by_node: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for p in result.prefills:
        by_node[p.node].append((p.start_s, p.end_s))
    if config.mode == DeploymentMode.COLOCATED:  # one graph at a time: prefills and steps
        for d in result.decode_runs:
            by_node[d.node].append((d.start_s, d.end_s))
    for spans in by_node.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end - EPS


def _schedule(result: EngineResult) -> tuple[object, ...]:
    """Everything a run produced, comparable exactly (NaN timestamps included)."""
    return (
        [repr(r) for r in result.records],
        result.prefills,
        result.decode_runs,
        result.occupancy,
        result.slot_steps,
        result.decode_steps,
    )


@settings(max_examples=100, deadline=None)
@given(
    workloads(),
    st.sampled_from(list(SchedulingPolicy)),
    st.integers(1, 3),
    st.integers(1, 5),
    st.sampled_from(list(DecodeStepCost)),
    times_strategy,
)
def test_each_shipped_policy_keeps_its_count_based_schedule(
    case, policy, nodes, steps, cost, times
) -> None:
    # the shipped policies on the request-choosing interface give the schedule of the rules
    # they replaced (tests/serving/legacy_scheduler.py), event for event
    reqs, graph = case
    config = EngineConfig(
        mode=DeploymentMode.COLOCATED,
        nodes=nodes,
        policy=policy,
        steps_per_prefill=steps,
        step_cost=cost,
    )
    legacy = replace(config, scheduler=Legacy(LEGACY[policy], steps))
    now = simulate_serving(reqs, graph, times, config)
    before = simulate_serving(reqs, graph, times, legacy)
    assert _schedule(now) == _schedule(before)
