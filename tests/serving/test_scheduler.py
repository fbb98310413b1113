"""The colocated policies as functions of what a node sees, and the engine's check of a choice."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rdusim.serving.scheduler import (
    ALWAYS,
    DECODE,
    POLICIES,
    WAIT,
    Action,
    DecodeFirst,
    Lookahead,
    Mixed,
    Policy,
    Prefill,
    PrefillFirst,
    SchedulerState,
    check_prefill,
    first_come,
    policy_for,
)
from rdusim.spec.workload import SchedulingPolicy


@dataclass
class Req:
    id: int
    arrival_s: float = 0.0
    prompt_tokens: int = 100
    output_tokens: int = 10
    slot: int = 0
    first_token_s: float = 1.0


def state(
    waiting: int = 1,
    free: int = 1,
    active: int = 1,
    since: int = 0,
    last: Action = Action.DECODE,
    prefill_batch: int = 1,
) -> SchedulerState:
    return SchedulerState(
        now=10.0,
        node=0,
        waiting=[Req(i, arrival_s=float(i)) for i in range(waiting)],
        free_slots=free,
        running=[Req(100 + i, slot=i) for i in range(active)],
        prefill_batch=prefill_batch,
        steps_since_prefill=since,
        last=last,
    )


def action(policy: Policy, s: SchedulerState) -> Action:
    return policy.choose(s).action


def test_every_policy_is_registered() -> None:
    assert set(POLICIES) == set(SchedulingPolicy)
    assert policy_for(SchedulingPolicy.PREFILL_FIRST) == PrefillFirst()
    assert policy_for(SchedulingPolicy.DECODE_FIRST) == DecodeFirst()
    assert policy_for(SchedulingPolicy.MIXED, 7) == Mixed(7)


@pytest.mark.parametrize("name", list(SchedulingPolicy))
def test_no_prefill_without_a_prompt_or_a_slot(name: SchedulingPolicy) -> None:
    policy = policy_for(name, 4)
    assert policy.choose(state(waiting=0)) == DECODE
    assert policy.choose(state(free=0, since=99)) == DECODE
    assert policy.choose(state(waiting=0, active=0)) == WAIT
    # an idle node admits
    assert action(policy, state(active=0, since=0, last=Action.WAIT)) == Action.PREFILL


def test_prefill_first_interrupts_decoding() -> None:
    assert action(PrefillFirst(), state()) == Action.PREFILL


def test_decode_first_admits_only_from_an_empty_batch() -> None:
    assert action(DecodeFirst(), state(last=Action.DECODE)) == Action.DECODE
    assert action(DecodeFirst(), state(last=Action.PREFILL)) == Action.PREFILL  # still admitting
    assert action(DecodeFirst(), state(active=0, last=Action.DECODE)) == Action.PREFILL


@pytest.mark.parametrize(
    ("since", "expected"), [(0, Action.DECODE), (3, Action.DECODE), (4, Action.PREFILL)]
)
def test_mixed_waits_its_steps(since: int, expected: Action) -> None:
    assert action(Mixed(4), state(since=since)) == expected


@pytest.mark.parametrize(
    ("waiting", "free", "prefill_batch", "taken"),
    [(5, 3, 2, [0, 1]), (5, 1, 4, [0]), (2, 4, 4, [0, 1]), (1, 1, 1, [0])],
)
def test_the_longest_waiting_prompts_are_taken(
    waiting: int, free: int, prefill_batch: int, taken: list[int]
) -> None:
    # as many as one prefill run and the free slots allow, in arrival order, whole prompts
    s = state(waiting=waiting, free=free, prefill_batch=prefill_batch)
    for policy in (PrefillFirst(), Mixed(0)):
        choice = policy.choose(s)
        assert isinstance(choice, Prefill)
        assert [r.id for r in choice.requests] == taken
        assert choice.chunk_tokens is None
        assert all(a is b for a, b in zip(choice.requests, s.waiting, strict=False))
    assert first_come(s) == PrefillFirst().choose(s)


def test_a_policy_may_choose_any_waiting_request() -> None:
    @dataclass(frozen=True)
    class ShortestFirst:
        def choose(self, s: SchedulerState) -> Prefill:
            return Prefill((min(s.waiting, key=lambda r: r.prompt_tokens),))

    s = replace(state(), waiting=[Req(0, 0.0, 900), Req(1, 1.0, 5), Req(2, 2.0, 50)])
    choice = ShortestFirst().choose(s)
    check_prefill(choice, s)
    assert [r.id for r in choice.requests] == [1]


def _refused(choice: Prefill, s: SchedulerState, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        check_prefill(choice, s)


def test_the_engine_refuses_a_prefill_it_cannot_run() -> None:
    s = state(waiting=3, free=2, prefill_batch=2)
    w = s.waiting
    check_prefill(Prefill((w[2], w[0])), s)  # any order, any waiting requests
    check_prefill(Prefill((w[0],), chunk_tokens=100), s)  # a chunk as long as the prompt
    _refused(Prefill(()), s, "1 to 2 waiting requests")
    _refused(Prefill((w[0], w[1], w[2])), s, "1 to 2 waiting requests")
    _refused(Prefill((w[1], w[1])), s, "twice")
    _refused(Prefill((Req(7),)), s, r"not waiting: \[7\]")
    _refused(Prefill((w[0],), chunk_tokens=99), s, "no chunk graph")
    check_prefill(Prefill((w[0],), chunk_tokens=32), s, 32)  # the deployment's chunk graph
    with pytest.raises(ValueError, match="chunk graph is 32 tokens"):
        check_prefill(Prefill((w[0],), chunk_tokens=16), s, 32)
    _refused(Prefill((w[0],)), state(waiting=3, free=0, prefill_batch=2), "0 free slots")


# --- how long a policy keeps decoding (the engine runs those steps as one event) -------------


def _decisions_in_a_row(policy: Policy, s: SchedulerState, most: int) -> int:
    """Brute force: ask the policy step after step, each decode adding a step since the last
    prefill and making the last action DECODE, until it chooses something else (or `most`)."""
    for n in range(most):
        if action(policy, s) != Action.DECODE:
            return n
        s = replace(s, steps_since_prefill=s.steps_since_prefill + 1, last=Action.DECODE)
    return most


@given(
    st.sampled_from(list(SchedulingPolicy)),
    st.integers(1, 6),
    st.integers(0, 3),
    st.integers(0, 3),
    st.integers(0, 3),
    st.integers(0, 8),
    st.sampled_from(list(Action)),
)
def test_decodes_ahead_is_the_number_of_decodes_in_a_row(
    name: SchedulingPolicy, n: int, waiting: int, free: int, active: int, since: int, last: Action
) -> None:
    policy = policy_for(name, n)
    assert isinstance(policy, Lookahead)
    s = state(waiting, free, active, since, last)
    ahead = policy.decodes_ahead(s)
    horizon = 3 * n + 10  # longer than any count a shipped policy stops at
    brute = _decisions_in_a_row(policy, s, horizon)
    assert ahead == (brute if brute < horizon else ALWAYS)


def test_mixed_decodes_until_its_steps_are_done_when_a_prompt_waits() -> None:
    # 8 steps between prefills, 3 done: 5 more decodes, then the waiting prompt is prefilled
    assert Mixed(8).decodes_ahead(state(waiting=1, free=1, since=3)) == 5
    assert Mixed(8).decodes_ahead(state(waiting=0, free=1, since=3)) == ALWAYS
    assert PrefillFirst().decodes_ahead(state(waiting=1, free=0)) == ALWAYS
    assert PrefillFirst().decodes_ahead(state(waiting=1, free=1)) == 0
    assert DecodeFirst().decodes_ahead(state(waiting=1, free=1, last=Action.PREFILL)) == 0
    assert DecodeFirst().decodes_ahead(state(waiting=1, free=1, last=Action.DECODE)) == ALWAYS
