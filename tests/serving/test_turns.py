"""A colocated node's turns: which models `next` can choose, and when one is the only one (its
decode steps then follow each other and run as one event)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from rdusim.serving.records import RequestRecord
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
