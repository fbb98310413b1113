"""A colocated node's turns: which models `next` can choose, and when one is the only one (its
decode steps then follow each other and run as one event)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from rdusim.serving.arrivals import Request
from rdusim.serving.engine import EngineConfig, ModelGraphs, simulate_models
from rdusim.serving.records import RequestRecord
from rdusim.serving.shape import GraphShape
from rdusim.serving.step_times import LinearStepTimes
from rdusim.serving.turns import ModelTurns


@dataclass
class Held:
    hbm_bytes: float


@dataclass
class Batch:
    active: int = 0


def turns(hbm: list[float], budget: float, active: list[int], waiting: list[int]) -> ModelTurns:
    queues = [
        deque(RequestRecord(i, 0.0, 10, 2, m) for i in range(n)) for m, n in enumerate(waiting)
    ]
    return ModelTurns([Held(h) for h in hbm], budget, (), [Batch(a) for a in active], queues)  # type: ignore[arg-type]


def test_a_model_is_sole_when_no_other_has_work() -> None:
    t = turns([1, 1], 10, active=[2, 0], waiting=[0, 0])
    assert t.next() == 0 and t.sole(0)


def test_two_resident_models_with_work_take_turns() -> None:
    t = turns([1, 1], 10, active=[2, 0], waiting=[0, 1])
    assert not t.sole(0)
    assert [t.next(), t.next(), t.next()] == [0, 1, 0]


def test_a_model_that_cannot_be_switched_in_yet_leaves_the_other_sole() -> None:
    # model 1 waits but does not fit beside model 0, which is in flight: 0 drains alone
    t = turns([6, 6], 10, active=[2, 0], waiting=[0, 1])
    assert t.next() == 0 and t.sole(0)
    assert t.draining == frozenset({0})


def test_the_claim_ends_when_another_node_takes_the_prompts() -> None:
    # model 1 waited on this node while 0 was in flight, so 0 drained for it; then another
    # node took model 1's prompt: model 0 admits again instead of draining for nobody
    t = turns([6, 6], 10, active=[2, 0], waiting=[1, 1])
    assert t.next() == 0 and t.claim == 1 and t.draining == frozenset({0})
    t.batches[0].active = 0  # type: ignore[attr-defined]
    t.queues[1].clear()
    assert t.next() == 0 and t.claim == -1 and t.draining == frozenset()


def test_two_nodes_drain_for_a_model_one_of_them_serves() -> None:
    # Four models, one in HBM at a time on each of two nodes, prompts arriving together; a
    # node drained its model for one the other node then served. Every request completes.
    def graphs(name: str, slots: int, batch: int, prefill_s: float) -> ModelGraphs:
        shape = GraphShape(
            decode_slots=slots,
            cache_len=16,
            max_sequence=1024,
            prefill_lengths=(8,),
            prefill_batch=batch,
        )
        return ModelGraphs(name, shape, LinearStepTimes(prefill_s, 0.0, 0.125), 1.0, 0.0)

    models = [graphs("m0", 1, 1, 0.25), graphs("m1", 2, 2, 0.75)]
    models += [graphs("m2", 1, 1, 1.0), graphs("m3", 1, 1, 0.5)]
    rows = [(0.0, 1, 0), (1.0, 1, 0), (1.0, 1, 1), (1.0, 1, 1), (1.0, 3, 0)]
    rows += [(1.5, 1, 3), (1.5, 2, 0), (1.5, 1, 0), (2.5, 1, 1)]
    reqs = [Request(i, t, 1, out, m) for i, (t, out, m) in enumerate(rows)]
    result = simulate_models(reqs, models, EngineConfig(nodes=2, hbm_budget=1.0))
    assert all(r.completions == 1 for r in result.records)
