"""Many models on colocated nodes, and chunked prefill: hand-worked schedules and Hypothesis
invariants with random models, buckets, budgets, pinned sets and switches."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.serving.arrivals import Request
from rdusim.serving.engine import (
    EngineConfig,
    ModelGraphs,
    simulate_models,
)
from rdusim.serving.metrics import generated_tokens, summary
from rdusim.serving.shape import GraphShape
from rdusim.serving.step_times import LinearStepTimes
from rdusim.spec.workload import DeploymentMode, SchedulingPolicy
from tests.serving.synthetic import constant_times, shape

EPS = 1e-9


def model(name: str, hbm: float, load_s: float, **kw: object) -> ModelGraphs:
    times = kw.pop("times", constant_times())
    return ModelGraphs(name, shape(**kw), times, hbm_bytes=hbm, load_s=load_s)  # type: ignore[arg-type]


def config(budget: float = math.inf, pinned: tuple[int, ...] = (), **kw: object) -> EngineConfig:
    return EngineConfig(hbm_budget=budget, pinned=pinned, **kw)  # type: ignore[arg-type]


def test_two_models_that_cannot_share_hbm_switch_at_the_closed_form_cost() -> None:
    # A (resident at the start) and B each take 6 of 10 bytes: one at a time. A prefill takes
    # 1 s, a step 0.1 s, a switch to B 0.5 s. r0 (A) at 0 and r1 (B) at 0, both 3 tokens:
    # r0 prefills [0, 1], its batch is A's only work; B is blocked until A has drained, so A
    # decodes its two steps [1, 1.2] alone (draining), then B is switched in [1.2, 1.7],
    # prefilled [1.7, 2.7] and decoded [2.7, 2.9].
    a, b = model("a", 6, 0.25, slots=2), model("b", 6, 0.5, slots=2)
    reqs = [Request(0, 0.0, 10, 3, 0), Request(1, 0.0, 10, 3, 1)]
    result = simulate_models(reqs, [a, b], config(10.0))
    first = [round(r.first_token_s, 9) for r in result.records]
    last = [round(r.last_token_s, 9) for r in result.records]
    assert (first, last) == ([1.0, 2.7], [1.2, 2.9])
    [switch] = result.switches
    assert (switch.model, switch.evicted) == (1, (0,))
    assert (round(switch.start_s, 9), round(switch.end_s, 9)) == (1.2, 1.7)
    metrics = summary(result, None)
    assert metrics["model_switches"] == 1 and metrics["switch_time_s"] == 0.5
    assert metrics["per_model"]["b"]["model_switches"] == 1
    assert metrics["per_model"]["a"]["model_switches"] == 0


def test_models_that_all_fit_take_turns_and_never_switch() -> None:
    # Both resident: after the two prefills [0, 1] and [1, 2], the node alternates one step of
    # each batch (round robin): a's steps end at 2.1, 2.3; b's at 2.2, 2.4.
    a, b = model("a", 4, 1.0, slots=2), model("b", 4, 1.0, slots=2)
    reqs = [Request(0, 0.0, 10, 3, 0), Request(1, 0.0, 10, 3, 1)]
    result = simulate_models(reqs, [a, b], config(10.0))
    assert result.switches == []
    assert [round(r.last_token_s, 9) for r in result.records] == [2.3, 2.4]
    metrics = summary(result, None)
    assert metrics["model_switches"] == 0 and metrics["switch_time_s"] == 0.0
    assert sum(m["completed"] for m in metrics["per_model"].values()) == metrics["completed"]


def test_a_pinned_model_is_never_evicted() -> None:
    # The router (pinned, 4 bytes) stays; experts e1 and e2 (5 bytes each) share the other 6.
    router, e1, e2 = model("r", 4, 0.1), model("e1", 5, 0.3), model("e2", 5, 0.3)
    reqs = [Request(i, 0.5 * i, 10, 2, i % 3) for i in range(9)]
    result = simulate_models(reqs, [router, e1, e2], config(10.0, pinned=(0,)))
    assert result.switches, "the two experts cannot be resident together"
    assert all(0 not in s.evicted and s.model != 0 for s in result.switches)
    # each switch loads an expert at its load time exactly
    assert all(abs(s.end_s - s.start_s - 0.3) < EPS for s in result.switches)


def test_chunked_prefill_costs_its_chunks_and_interleaves_decode_steps() -> None:
    # LinearStepTimes: a chunk k of N tokens costs base + per_token x N whatever k (W is linear).
    # r0 (10 tokens, 4 out) is decoding when r1 (25 tokens) arrives; chunks of 10: 3 chunks of
    # 0.5 + 0.01 x 10 = 0.6 s, one step of r0's batch (0.1 s) after each chunk but the last.
    times = LinearStepTimes(0.5, 0.01, 0.1)
    g = ModelGraphs("m", shape(2, prefill_lengths=(10, 30)), times)
    reqs = [Request(0, 0.0, 10, 4, 0), Request(1, 0.65, 25, 2, 0)]
    cfg = EngineConfig(prefill_chunk=10)
    result = simulate_models(reqs, [g], cfg)
    r0, r1 = result.records
    # r0: whole-prompt prefill (10 tokens: one chunk's length) [0, 0.6], step [0.6, 0.7]
    assert round(r0.first_token_s, 9) == 0.6
    # r1 arrives during r0's step; chunk 0 [0.7, 1.3], step [1.3, 1.4], chunk 1 [1.4, 2.0],
    # step [2.0, 2.1] (r0's last), chunk 2 [2.1, 2.7]: first token at 2.7
    assert round(r0.last_token_s, 9) == 2.1
    assert round(r1.prefill_start_s, 9) == 0.7 and round(r1.first_token_s, 9) == 2.7
    chunks = [p for p in result.prefills if p.chunk >= 0]
    assert [p.chunk for p in chunks] == [0, 1, 2]
    assert all(abs(p.end_s - p.start_s - 0.6) < EPS for p in chunks)
    graphs = summary(result, None)["prefill_graphs"]
    assert [(g["chunk"], g["tokens"], g["uses"]) for g in graphs] == [
        (None, 10, 1),
        (0, 10, 1),
        (1, 10, 1),
        (2, 10, 1),
    ]


# --- invariants on random many-model deployments ----------------------------------------------


@st.composite
def deployments(draw: st.DrawFn) -> tuple[list[Request], list[ModelGraphs], EngineConfig]:
    count = draw(st.integers(1, 4))
    graphs = []
    for m in range(count):
        lengths = sorted(draw(st.sets(st.integers(8, 256), min_size=1, max_size=3)))
        graph = GraphShape(
            decode_slots=draw(st.integers(1, 4)),
            cache_len=draw(st.integers(16, 512)),
            max_sequence=1024,
            tokens_per_step=draw(st.sampled_from([1.0, 1.5, 2.44])),
            prefill_lengths=tuple(lengths),
            prefill_batch=draw(st.integers(1, 3)),
        )
        times = LinearStepTimes(
            draw(st.floats(1e-3, 1.0)), draw(st.floats(0.0, 1e-3)), draw(st.floats(1e-3, 0.2))
        )
        hbm = draw(st.floats(1.0, 10.0))
        graphs.append(ModelGraphs(f"m{m}", graph, times, hbm, draw(st.floats(0.0, 0.5))))
    pinned = tuple(m for m in range(count) if draw(st.booleans()) and m < count - 1)
    held = sum(graphs[p].hbm_bytes for p in pinned)
    most = (
        max(g.hbm_bytes for i, g in enumerate(graphs) if i not in pinned)
        if count > len(pinned)
        else 0.0
    )
    budget = held + most + draw(st.floats(0.0, 20.0))
    chunk = draw(st.one_of(st.none(), st.integers(4, 64)))
    cfg = EngineConfig(
        mode=DeploymentMode.COLOCATED,
        nodes=draw(st.integers(1, 2)),
        policy=draw(st.sampled_from(list(SchedulingPolicy))),
        hbm_budget=budget,
        pinned=pinned,
        prefill_chunk=chunk,
    )
    t, reqs = 0.0, []
    for i in range(draw(st.integers(1, 25))):
        t += draw(st.floats(0.0, 2.0))
        m = draw(st.integers(0, count - 1))
        prompt = draw(st.integers(1, graphs[m].shape.longest_prompt))
        reqs.append(Request(i, t, prompt, draw(st.integers(1, 30)), m))
    return reqs, graphs, cfg


@settings(max_examples=150, deadline=None)
@given(deployments())
def test_every_request_completes_once_with_its_tokens(case) -> None:
    reqs, graphs, cfg = case
    result = simulate_models(reqs, graphs, cfg)
    assert all(r.completions == 1 for r in result.records)
    produced = sum(
        generated_tokens(r, graphs[r.model].shape.tokens_per_step) for r in result.records
    )
    assert produced == sum(r.output_tokens for r in reqs)
    assert all(
        r.steps == graphs[r.model].shape.decode_steps(r.output_tokens) for r in result.records
    )
    metrics = summary(result, None)
    per = metrics["per_model"].values()
    assert sum(m["completed"] for m in per) == metrics["completed"] == len(reqs)
    assert sum(m["output_tokens"] for m in per) == metrics["output_tokens"]
    assert sum(m["model_switches"] for m in per) == metrics["model_switches"]


@settings(max_examples=150, deadline=None)
@given(deployments())
def test_a_node_runs_one_thing_at_a_time_and_slots_hold_one_request(case) -> None:
    reqs, graphs, cfg = case
    result = simulate_models(reqs, graphs, cfg)
    busy: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for p in result.prefills:
        busy[p.node].append((p.start_s, p.end_s))
    for d in result.decode_runs:
        busy[d.node].append((d.start_s, d.end_s))
    for s in result.switches:
        busy[s.node].append((s.start_s, s.end_s))
    for spans in busy.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end - EPS
    held: dict[tuple[int, int, int], list[tuple[float, float]]] = defaultdict(list)
    for r in result.records:
        held[(r.decode_node, r.model, r.slot)].append((r.slot_from_s, r.last_token_s))
        assert r.arrival_s <= r.prefill_start_s + EPS < r.first_token_s + EPS
        assert r.first_token_s <= r.last_token_s
    for spans in held.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end - EPS


@settings(max_examples=150, deadline=None)
@given(deployments())
def test_residency_stays_within_the_budget_and_never_evicts_a_model_in_flight(case) -> None:
    reqs, graphs, cfg = case
    result = simulate_models(reqs, graphs, cfg)
    for node in range(cfg.nodes):
        resident = _initial(graphs, cfg)
        for s in sorted((s for s in result.switches if s.node == node), key=lambda s: s.start_s):
            assert s.model not in resident and not set(s.evicted) & set(cfg.pinned)
            assert abs(s.end_s - s.start_s - graphs[s.model].load_s) < EPS
            for e in s.evicted:  # no request of an evicted model was in flight there
                assert not any(
                    r.model == e
                    and r.decode_node == node
                    and r.slot_from_s < s.start_s
                    and r.last_token_s > s.start_s + EPS
                    for r in result.records
                )
            resident = (resident - set(s.evicted)) | {s.model}
            assert sum(graphs[m].hbm_bytes for m in resident) <= cfg.hbm_budget + 1e-9
    if len(graphs) == 1 or sum(g.hbm_bytes for g in graphs) <= cfg.hbm_budget:
        assert result.switches == []


def _initial(graphs: list[ModelGraphs], cfg: EngineConfig) -> set[int]:
    """Pinned, then the others in order while they fit (stopping at the first that does not)."""
    resident, used = set(), 0.0
    order = [*cfg.pinned, *(m for m in range(len(graphs)) if m not in cfg.pinned)]
    for m in order:
        if used + graphs[m].hbm_bytes > cfg.hbm_budget:
            break
        resident.add(m)
        used += graphs[m].hbm_bytes
    return resident


def test_littles_law_holds_on_a_stationary_many_model_run() -> None:
    # Three resident models, Poisson arrivals well below capacity: the time-averaged number in
    # the system equals the arrival rate x the mean time in the system (Little's law).
    import numpy as np

    rng = np.random.default_rng(7)
    rate, n = 2.0, 10_000
    times = np.cumsum(rng.exponential(1 / rate, n))
    models = rng.integers(0, 3, n)
    reqs = [
        Request(i, float(t), 50, 8, int(m))
        for i, (t, m) in enumerate(zip(times, models, strict=True))
    ]
    graphs = [
        ModelGraphs(f"m{m}", shape(8), LinearStepTimes(0.02, 0.0, 0.01), 1.0, 0.1) for m in range(3)
    ]
    result = simulate_models(reqs, graphs, EngineConfig(hbm_budget=3.0))
    metrics = summary(result, None)
    assert result.switches == []
    measured = metrics["arrival_rate"] * metrics["e2e_s"]["mean"]
    assert metrics["mean_requests_in_system"] == pytest.approx(measured, rel=0.01)


def test_a_policy_that_chooses_something_else_is_an_error() -> None:
    class Odd:
        def choose(self, state: object) -> object:
            return "prefill"

    g = ModelGraphs("m", shape(1), constant_times())
    with pytest.raises(TypeError, match="not a Prefill, Decode or Wait"):
        simulate_models([Request(0, 0.0, 10, 2)], [g], EngineConfig(scheduler=Odd()))  # type: ignore[arg-type]
