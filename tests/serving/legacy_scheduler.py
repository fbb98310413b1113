"""A frozen copy of the colocated policies before they chose requests (count-based rules).

Copied verbatim from `rdusim.serving.scheduler` at ff96ac7, where a policy saw only counts
(`NodeView`) and returned prefill, decode or wait, and the engine then took the
min(prefill batch, free slots) longest-waiting prompts. `Legacy` runs such a rule through the
current `Policy` interface, so `test_engine_properties.py` can hold each shipped policy to its
old schedule on random workloads. Do not edit: it is the reference.
"""

# ruff: noqa
# mypy: ignore-errors

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from rdusim.serving import scheduler as current
from rdusim.spec.workload import SchedulingPolicy


class Action(Enum):
    PREFILL = "prefill"
    DECODE = "decode"
    WAIT = "wait"


@dataclass(frozen=True)
class NodeView:
    """What a colocated node's scheduler sees before choosing."""

    waiting: int  # prompts queued for prefill
    free_slots: int  # decode slots holding no request
    active: int  # requests decoding
    steps_since_prefill: int  # decode steps since this node's last prefill
    last: Action  # what the node ran last
    steps_per_prefill: int  # `mixed`: decode steps between two prefills


Policy = Callable[[NodeView], Action]


def _can_prefill(v: NodeView) -> bool:
    return v.waiting > 0 and v.free_slots > 0


def _or_decode(v: NodeView) -> Action:
    return Action.DECODE if v.active else Action.WAIT


def prefill_first(v: NodeView) -> Action:
    return Action.PREFILL if _can_prefill(v) else _or_decode(v)


def decode_first(v: NodeView) -> Action:
    admitting = v.active == 0 or v.last == Action.PREFILL
    return Action.PREFILL if _can_prefill(v) and admitting else _or_decode(v)


def mixed(v: NodeView) -> Action:
    due = v.active == 0 or v.steps_since_prefill >= v.steps_per_prefill
    return Action.PREFILL if _can_prefill(v) and due else _or_decode(v)


POLICIES: dict[SchedulingPolicy, Policy] = {
    SchedulingPolicy.PREFILL_FIRST: prefill_first,
    SchedulingPolicy.DECODE_FIRST: decode_first,
    SchedulingPolicy.MIXED: mixed,
}


@dataclass(frozen=True)
class Legacy:
    """An old rule as a `Policy`: it decides from the counts; a prefill takes the
    min(prefill batch, free slots) longest-waiting prompts, as the engine did."""

    rule: Policy
    steps_per_prefill: int

    def choose(self, state: current.SchedulerState) -> current.Decision:
        view = NodeView(
            waiting=len(state.waiting),
            free_slots=state.free_slots,
            active=len(state.running),
            steps_since_prefill=state.steps_since_prefill,
            last=Action(state.last.value),
            steps_per_prefill=self.steps_per_prefill,
        )
        action = self.rule(view)
        if action == Action.PREFILL:
            most = min(state.prefill_batch, view.free_slots)
            return current.Prefill(tuple(list(state.waiting)[:most]))
        return current.DECODE if action == Action.DECODE else current.WAIT
