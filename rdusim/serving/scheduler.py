"""What a colocated node runs next: a prefill, a decode step, or nothing.

A colocated node holds both static graphs and runs one at a time (a graph occupies every socket
of the node). Continuous batching (SnapStream paper §2.1, Fig. 1b) admits a prefilled request
into the running decode batch at the next step; the policy decides when a waiting prompt may
interrupt decoding. A prefill needs a free decode slot, because its cache is written straight
into that slot's region of the decode graph's cache.

Each policy is a pure function of what the node sees (`NodeView`), registered under its
`SchedulingPolicy` in `POLICIES`:

* `prefill-first` (vLLM's default, Kwon et al. 2023): any waiting prompt with a free slot is
  prefilled before the next step. Best time to first token; every running request stalls for the
  whole prefill, so long prompts raise everyone's time per output token.
* `decode-first`: a running batch is never interrupted. Prompts are admitted only when the batch
  has drained, and then back to back until the slots are full or the queue is empty (an
  admission phase). Decode steps never stall, at the cost of waiting prompts and of steps run
  with emptying slots.
* `mixed`: prefill-first, but a running batch takes at least `decode_steps_per_prefill` steps
  between two prefills (an empty batch admits at once). It bounds the share of time decoding
  stalls: at most one prefill per that many steps, so the knob trades TTFT for TPOT.

Disaggregated nodes need no policy: prefill nodes only prefill, decode nodes only decode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

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
