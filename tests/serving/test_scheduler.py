"""The colocated policies as functions of what a node sees."""

from __future__ import annotations

import pytest

from rdusim.serving.scheduler import POLICIES, Action, NodeView
from rdusim.spec.workload import SchedulingPolicy


def view(waiting=1, free=1, active=1, since=0, last=Action.DECODE, k=4) -> NodeView:
    return NodeView(waiting, free, active, since, last, k)


def test_every_policy_is_registered() -> None:
    assert set(POLICIES) == set(SchedulingPolicy)


@pytest.mark.parametrize("policy", list(SchedulingPolicy))
def test_no_prefill_without_a_prompt_or_a_slot(policy: SchedulingPolicy) -> None:
    choose = POLICIES[policy]
    assert choose(view(waiting=0)) == Action.DECODE
    assert choose(view(free=0, since=99)) == Action.DECODE
    assert choose(view(waiting=0, active=0)) == Action.WAIT
    assert (
        choose(view(active=0, since=0, last=Action.WAIT)) == Action.PREFILL
    )  # an idle node admits


def test_prefill_first_interrupts_decoding() -> None:
    assert POLICIES[SchedulingPolicy.PREFILL_FIRST](view()) == Action.PREFILL


def test_decode_first_admits_only_from_an_empty_batch() -> None:
    choose = POLICIES[SchedulingPolicy.DECODE_FIRST]
    assert choose(view(last=Action.DECODE)) == Action.DECODE
    assert choose(view(last=Action.PREFILL)) == Action.PREFILL  # still admitting
    assert choose(view(active=0, last=Action.DECODE)) == Action.PREFILL


@pytest.mark.parametrize(
    ("since", "action"), [(0, Action.DECODE), (3, Action.DECODE), (4, Action.PREFILL)]
)
def test_mixed_waits_its_steps(since: int, action: Action) -> None:
    assert POLICIES[SchedulingPolicy.MIXED](view(since=since, k=4)) == action
