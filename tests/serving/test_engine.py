"""The serving engine against hand-worked schedules and closed forms.

Every modelling term has a test whose expected numbers are computed here, independently of the
engine: the three colocated policies on the same three requests, static and occupied decode
costs, padded and bucketed prefill graphs, MTP's steps per request, cache transfers over a
serialising link, prefill-node backpressure, the choice of decode node, an M/D/1 queue and the
saturated decode throughput.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from rdusim.serving.arrivals import Request
from rdusim.serving.engine import simulate_serving
from rdusim.serving.scheduler import DECODE, WAIT, Decision, Prefill, SchedulerState
from rdusim.serving.step_times import LinearStepTimes
from rdusim.spec.workload import DecodeStepCost, SchedulingPolicy
from tests.serving.synthetic import (
    colocated,
    constant_times,
    disaggregated,
    requests,
    run,
    shape,
    times_of,
)

# Three requests on a two-slot colocated node; prefill 1 s, decode step 0.1 s, one token a step.
THREE = requests((0.0, 100, 3), (0.5, 100, 2), (0.6, 100, 4))


def test_prefill_first_hand_schedule() -> None:
    # t=0 prefill r0 (slot 0) -> 1; r1, r2 queue. t=1 prefill r1 (slot 1) -> 2. No slot for r2:
    # step 1 at 2 -> 2.1 ends r1 (1 step). t=2.1 prefill r2 -> 3.1. Steps at 3.2 (ends r0, its
    # 2nd), 3.3, 3.4 (ends r2, its 3rd).
    result = run(THREE, shape(2), colocated(SchedulingPolicy.PREFILL_FIRST))
    assert times_of(result) == [(1.0, 3.2), (2.0, 2.1), (3.1, 3.4)]
    assert [r.slot for r in result.records] == [0, 1, 1]
    r0 = result.records[0]
    assert r0.ttft_s == pytest.approx(1.0) and r0.tpot_s == pytest.approx(1.1)


def test_decode_first_hand_schedule() -> None:
    # Admission from an empty batch: r0 (0 -> 1) then r1 (1 -> 2) back to back; slots full.
    # Decode without interruption: 2.1 ends r1, 2.2 ends r0; the batch is empty, so r2 is
    # prefilled 2.2 -> 3.2 and decodes 3 steps to 3.5.
    result = run(THREE, shape(2), colocated(SchedulingPolicy.DECODE_FIRST))
    assert times_of(result) == [(1.0, 2.2), (2.0, 2.1), (3.2, 3.5)]


def test_mixed_hand_schedule() -> None:
    # Two steps between prefills. r0 0 -> 1; steps 1.1, 1.2 (ends r0); empty batch: r1 1.2 ->
    # 2.2; step 2.3 ends r1; empty: r2 2.3 -> 3.3, then 3 steps to 3.6.
    config = colocated(SchedulingPolicy.MIXED, steps_per_prefill=2)
    result = run(THREE, shape(2), config)
    assert times_of(result) == [(1.0, 1.2), (2.2, 2.3), (3.3, 3.6)]


def test_mixed_with_one_step_interleaves() -> None:
    # One step between prefills: r0 0 -> 1; step 1.1; r1 1.1 -> 2.1 (slot 1); step 2.2 ends r0
    # (2 steps) and r1 (1 step); r2 2.2 -> 3.2; 3 steps to 3.5.
    config = colocated(SchedulingPolicy.MIXED, steps_per_prefill=1)
    result = run(THREE, shape(2), config)
    assert times_of(result) == [(1.0, 2.2), (2.1, 2.2), (3.2, 3.5)]


@dataclass(frozen=True)
class ShortestFirst:
    """Prefill-first, but the shortest waiting prompts first (a policy of the caller's own)."""

    def choose(self, state: SchedulerState) -> Decision:
        if state.waiting and state.free_slots:
            most = min(state.prefill_batch, state.free_slots)
            return Prefill(tuple(sorted(state.waiting, key=lambda r: r.prompt_tokens)[:most]))
        return DECODE if state.running else WAIT


def test_a_policy_of_ones_own_chooses_the_request() -> None:
    # One slot. r0 0 -> 1; r1 (300 tokens) and r2 (50) wait; step 1.1 ends r0. The shortest
    # prompt goes first: r2 1.1 -> 2.1, step 2.2; then r1 2.2 -> 3.2, step 3.3. (First come,
    # first served would have prefilled r1 at 1.1.)
    reqs = requests((0.0, 100, 2), (0.1, 300, 2), (0.2, 50, 2))
    result = run(reqs, shape(1), colocated(scheduler=ShortestFirst()))
    assert times_of(result) == [(1.0, 1.1), (3.2, 3.3), (2.1, 2.2)]
    fcfs = run(reqs, shape(1), colocated())
    assert times_of(fcfs) == [(1.0, 1.1), (2.1, 2.2), (3.2, 3.3)]


def test_a_prefill_runs_its_requests_in_the_chosen_order() -> None:
    # prefill batch 2: r2 (shortest) then r1 in one run, taken from the middle of the queue
    reqs = requests((0.0, 100, 2), (0.0, 300, 2), (0.0, 50, 2), (0.0, 200, 2))
    graph = shape(3, prefill_batch=2)
    result = run(reqs, graph, colocated(scheduler=ShortestFirst()))
    assert [p.requests for p in result.prefills] == [(2, 0), (3,), (1,)]
    assert [r.slot for r in result.records] == [1, 0, 0, 2]


def test_the_engine_refuses_a_choice_it_cannot_run() -> None:
    @dataclass(frozen=True)
    class Chunked:
        def choose(self, state: SchedulerState) -> Decision:
            return Prefill(tuple(state.waiting)[:1], chunk_tokens=10) if state.waiting else WAIT

    with pytest.raises(ValueError, match="no chunk graph"):
        run(requests((0.0, 100, 2)), shape(1), colocated(scheduler=Chunked()))


def test_a_prefill_needs_a_free_slot() -> None:
    # One slot: r1 waits for r0's last step before it can be prefilled.
    reqs = requests((0.0, 10, 3), (0.0, 10, 1))
    result = run(reqs, shape(1), colocated())
    assert times_of(result) == [(1.0, 1.2), (2.2, 2.2)]


def test_one_token_requests_never_decode() -> None:
    result = run(requests((0.0, 10, 1), (0.0, 10, 1)), shape(1), colocated())
    assert times_of(result) == [(1.0, 1.0), (2.0, 2.0)]
    assert result.decode_steps == 0
    assert all(r.tpot_s is None for r in result.records)


def test_static_graph_charges_every_slot_at_full_length() -> None:
    # A decode step of the static graph costs its 4 slots x 1000 positions whatever it holds.
    times = LinearStepTimes(1.0, 0.0, 0.01, decode_per_slot_s=0.02, decode_per_token_s=1e-3)
    step = 0.01 + 4 * (0.02 + 1e-3 * 1000)
    result = run(requests((0.0, 100, 4)), shape(4, cache_len=1000), colocated(), times)
    assert result.records[0].last_token_s == pytest.approx(1.0 + 3 * step)


def test_occupied_cost_uses_occupied_slots_and_growing_cache() -> None:
    # One request, prompt 100: its three steps see caches of 101, 102 and 103 positions.
    times = LinearStepTimes(1.0, 0.0, 0.01, decode_per_slot_s=0.02, decode_per_token_s=1e-3)
    config = colocated(step_cost=DecodeStepCost.OCCUPIED)
    result = run(requests((0.0, 100, 4)), shape(4, cache_len=1000), config, times)
    expected = 1.0 + sum(0.01 + 0.02 + 1e-3 * c for c in (101, 102, 103))
    assert result.records[0].last_token_s == pytest.approx(expected)


def test_occupied_cost_caps_a_snapstream_cache_at_its_budget() -> None:
    times = LinearStepTimes(1.0, 0.0, 0.0, decode_per_token_s=1e-3)
    config = colocated(step_cost=DecodeStepCost.OCCUPIED)
    graph = shape(4, cache_len=101, snapstream=True)
    result = run(requests((0.0, 500, 4)), graph, config, times)
    assert result.records[0].last_token_s == pytest.approx(1.0 + 3 * 0.101)


def test_occupied_cost_follows_the_longest_cache_in_the_batch() -> None:
    # Two requests prefilled back to back (prefill-first): prompts 100 and 300, both join at
    # step 0, so each step sees 2 slots and the longer cache (301, then 302).
    times = LinearStepTimes(1.0, 0.0, 0.0, decode_per_token_s=1e-3)
    config = colocated(step_cost=DecodeStepCost.OCCUPIED)
    reqs = requests((0.0, 100, 3), (0.0, 300, 3))
    result = run(reqs, shape(2), config, times)
    expected = 2.0 + 2 * 1e-3 * 301 + 2 * 1e-3 * 302
    assert [r.last_token_s for r in result.records] == pytest.approx([expected, expected])


@pytest.mark.parametrize(
    ("prompt", "graph"), [(1, 64), (64, 64), (100, 128), (128, 128), (129, 256), (256, 256)]
)
def test_a_prompt_runs_on_the_shortest_graph_that_holds_it(prompt: int, graph: int) -> None:
    times = LinearStepTimes(0.0, 0.01, 0.1)
    lengths = (64, 128, 256)
    result = run(requests((0.0, prompt, 1)), shape(1, prefill_lengths=lengths), colocated(), times)
    rec = result.records[0]
    assert rec.graph_len == graph
    assert rec.first_token_s == pytest.approx(0.01 * graph)


def test_without_buckets_a_short_prompt_pays_the_padded_graph() -> None:
    times = LinearStepTimes(0.0, 0.01, 0.1)
    result = run(requests((0.0, 10, 1)), shape(1, prefill_lengths=(256,)), colocated(), times)
    assert result.records[0].first_token_s == pytest.approx(2.56)


@pytest.mark.parametrize(
    ("output", "tokens_per_step", "steps"),
    [(11, 1.0, 10), (11, 2.5, 4), (11, 2.44, 5), (2, 2.44, 1), (1025, 2.44, 420), (1, 2.44, 0)],
)
def test_mtp_steps_per_request(output: int, tokens_per_step: float, steps: int) -> None:
    # ceil((output - 1) / tokens_per_step): the first token comes from the prefill.
    graph = shape(1, tokens_per_step=tokens_per_step)
    result = run(requests((0.0, 10, output)), graph, colocated())
    rec = result.records[0]
    assert rec.steps == steps
    assert rec.last_token_s == pytest.approx(1.0 + 0.1 * steps)


def test_transfer_charges_the_compressed_cache_over_the_link() -> None:
    # SnapStream keeps 50 of the 80 prompt positions: 50 x 1000 B at 1e5 B/s = 0.5 s, + 0.01 s.
    graph = shape(1, cache_len=50, snapstream=True, kv_bytes_per_token=1000.0)
    config = disaggregated(link_bandwidth=1e5, link_latency_s=0.01)
    result = run(requests((0.0, 80, 3)), graph, config)
    rec = result.records[0]
    assert (rec.transfer_start_s, rec.transfer_end_s) == pytest.approx((1.0, 1.51))
    assert rec.last_token_s == pytest.approx(1.71)


def test_transfer_of_the_full_cache_without_snapstream() -> None:
    graph = shape(1, cache_len=1000, kv_bytes_per_token=1000.0)
    config = disaggregated(link_bandwidth=1e5, link_latency_s=0.0)
    result = run(requests((0.0, 80, 2)), graph, config)
    assert result.records[0].transfer_end_s == pytest.approx(1.0 + 0.8)


def test_a_decode_node_receives_one_cache_at_a_time() -> None:
    # Two prefill nodes finish together at 1 s; the decode node's link takes 0.5 s a cache.
    graph = shape(2, kv_bytes_per_token=1000.0)
    config = disaggregated(prefill_nodes=2, link_bandwidth=1e5)
    result = run(requests((0.0, 50, 2), (0.0, 50, 2)), graph, config)
    starts = [(r.transfer_start_s, r.transfer_end_s) for r in result.records]
    assert starts == [pytest.approx((1.0, 1.5)), pytest.approx((1.5, 2.0))]


def test_caches_go_to_the_decode_node_with_most_free_slots() -> None:
    # Ties go to the lowest index: node 0, then node 1 (2 free vs 1), then node 0 again.
    reqs = requests((0.0, 10, 50), (1.5, 10, 50), (3.0, 10, 50))
    result = run(reqs, shape(2), disaggregated(decode_nodes=2))
    assert [r.decode_node for r in result.records] == [0, 1, 0]


def test_a_full_prefill_node_stops_prefilling() -> None:
    # One decode slot; each request decodes 15 steps (1.5 s). With no room beside its working
    # cache (hold 0), the prefill node starts r2 only when r1's cache leaves at 2.5 s; with
    # room it prefills r2 right after r1.
    reqs = requests((0.0, 10, 16), (0.0, 10, 16), (0.0, 10, 16))
    held = run(reqs, shape(1, prefill_hold=0), disaggregated())
    assert times_of(held) == [(1.0, 2.5), (2.0, 4.0), (3.5, 5.5)]
    roomy = run(reqs, shape(1), disaggregated())
    assert times_of(roomy) == [(1.0, 2.5), (2.0, 4.0), (3.0, 5.5)]


def test_prefill_batch_runs_the_longest_prompts_graph() -> None:
    times = LinearStepTimes(0.0, 0.01, 0.1)
    graph = shape(4, prefill_lengths=(64, 128), prefill_batch=2)
    result = run(requests((0.0, 50, 1), (0.0, 100, 1)), graph, colocated(), times)
    assert [r.first_token_s for r in result.records] == pytest.approx([1.28, 1.28])
    assert len(result.prefills) == 1 and result.prefills[0].requests == (0, 1)


def test_md1_queue_of_prefills() -> None:
    """One prefill node, Poisson arrivals, a fixed prefill time D: TTFT is an M/D/1 sojourn,
    D + rho D / (2 (1 - rho)) on average (Pollaczek-Khinchine)."""
    rate, d, n = 0.5, 1.0, 40_000
    rng = np.random.default_rng(3)
    arrivals = np.cumsum(rng.exponential(1 / rate, n))
    reqs = [Request(i, float(t), 10, 1) for i, t in enumerate(arrivals)]
    result = run(reqs, shape(1), disaggregated(), constant_times(prefill_s=d))
    rho = rate * d
    expected = d + rho * d / (2 * (1 - rho))
    mean_ttft = float(np.mean([r.ttft_s for r in result.records]))
    assert mean_ttft == pytest.approx(expected, rel=0.03)


def test_saturated_decode_throughput() -> None:
    """80 requests at once, 8 slots, 50 steps each: ten back-to-back waves of 50 steps."""
    slots, steps, step_s, prefill_s = 8, 50, 0.1, 0.001
    reqs = [Request(i, 0.0, 10, steps + 1) for i in range(80)]
    config = disaggregated(prefill_nodes=80)
    result = run(reqs, shape(slots), config, constant_times(prefill_s, step_s))
    end = max(r.last_token_s for r in result.records)
    assert end == pytest.approx(prefill_s + 10 * steps * step_s)
    assert result.slot_steps == 80 * steps
    assert result.decode_steps == 10 * steps


def test_colocated_nodes_share_the_queue() -> None:
    reqs = requests((0.0, 10, 1), (0.0, 10, 1), (0.0, 10, 1))
    result = run(reqs, shape(1), colocated(nodes=2))
    assert [r.prefill_node for r in result.records] == [0, 1, 0]
    assert times_of(result) == [(1.0, 1.0), (1.0, 1.0), (2.0, 2.0)]


def test_record_without_decode_has_nan_transfer() -> None:
    result = run(requests((0.0, 10, 1)), shape(1), disaggregated())
    rec = result.records[0]
    assert math.isnan(rec.transfer_start_s) and rec.slot == -1


def test_a_cache_arriving_mid_step_joins_at_the_next_boundary() -> None:
    # r0: prefill 0 -> 1, link 1 -> 1.02, steps of 0.3 s end at 1.32, 1.62, 1.92, 2.22, ...
    # r1: prefill 1 -> 2, link 2 -> 2.02, inside the step 1.92 -> 2.22: it joins at 2.22, after
    # 4 steps, and its one step ends at 2.52.
    reqs = requests((0.0, 10, 10), (0.5, 10, 2))
    config = disaggregated(link_latency_s=0.02)
    result = run(reqs, shape(2), config, constant_times(1.0, 0.3))
    r0, r1 = result.records
    assert r1.transfer_end_s == pytest.approx(2.02)
    assert r1.join_step == 4
    assert r1.last_token_s == pytest.approx(2.52)
    assert r0.last_token_s == pytest.approx(1.02 + 9 * 0.3)


def test_progress_hears_of_every_completion() -> None:
    told: list[int] = []
    reqs = [Request(i, 0.01 * i, 10, 2) for i in range(2500)]
    simulate_serving(reqs, shape(8), constant_times(0.001, 0.001), disaggregated(4), told.append)
    assert told == [1000, 1000, 500]
