"""What a colocated node runs next: which waiting prompts to prefill, a decode step, or nothing.

A colocated node holds both static graphs and runs one at a time (a graph occupies every socket
of the node). Continuous batching (SnapStream paper §2.1, Fig. 1b) admits a prefilled request
into the running decode batch at the next step; the policy decides when a waiting prompt may
interrupt decoding, and which. A prefill needs a free decode slot, because its cache is written
straight into that slot's region of the decode graph's cache.

A policy is any object with the `Policy` interface: its `choose` is given the node's
`SchedulerState` (the waiting requests with their arrival times and lengths, the free decode
slots, the running batch, the time, what the node ran last) and returns a `Decision`:
`Prefill` (which waiting requests, and how many prompt tokens of each: the whole prompt, or the
deployment's static chunk graph, `prefill_chunk`), `DECODE` (one step of the running batch) or
`WAIT` (until a prompt arrives). The engine checks a decision before it runs it (`check_prefill`).

The three shipped policies take the longest-waiting prompts (`first_come`) and differ in when:

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

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from enum import Enum
from itertools import islice
from typing import Protocol, runtime_checkable

from rdusim.spec.workload import DEFAULT_DECODE_STEPS_PER_PREFILL, SchedulingPolicy


class Action(Enum):
    PREFILL = "prefill"
    DECODE = "decode"
    WAIT = "wait"


class WaitingRequest(Protocol):
    """A request in the queue, as a policy sees it (read-only)."""

    @property
    def id(self) -> int: ...

    @property
    def arrival_s(self) -> float: ...

    @property
    def prompt_tokens(self) -> int: ...

    @property
    def output_tokens(self) -> int: ...


class RunningRequest(WaitingRequest, Protocol):
    """A request in the node's decode batch: its slot and when its first token left."""

    @property
    def slot(self) -> int: ...

    @property
    def first_token_s(self) -> float: ...


@dataclass(frozen=True)
class SchedulerState:
    """What a colocated node's policy sees before choosing.

    `waiting` and `running` are the engine's own collections, read-only and valid only during
    the call: a policy chooses from them and changes nothing.
    """

    now: float  # simulated time, s
    node: int
    waiting: Sequence[WaitingRequest]  # every node's queue, by arrival (first come, first)
    free_slots: int  # decode slots of this node holding no request
    running: Collection[RunningRequest]  # requests in this node's decode batch
    prefill_batch: int  # most prompts one prefill graph run takes
    steps_since_prefill: int  # decode steps since this node's last prefill
    last: Action  # what the node ran last


@dataclass(frozen=True)
class Prefill:
    """Run the prefill graph on `requests` (taken from `waiting`, in this order): at least one,
    at most `prefill_batch` and `free_slots`. `chunk_tokens`: prompt tokens per chunk; None, the
    deployment's way (in chunks of `prefill_chunk` if it sets one, else whole); at least the
    longest prompt, whole; the deployment's `prefill_chunk`, in chunks (any other chunk shorter
    than a prompt is refused: there is no graph for it)."""

    requests: tuple[WaitingRequest, ...]
    chunk_tokens: int | None = None

    @property
    def action(self) -> Action:
        return Action.PREFILL


@dataclass(frozen=True)
class Decode:
    """Run one decode step of the running batch."""

    @property
    def action(self) -> Action:
        return Action.DECODE


@dataclass(frozen=True)
class Wait:
    """Run nothing until a prompt arrives."""

    @property
    def action(self) -> Action:
        return Action.WAIT


Decision = Prefill | Decode | Wait
DECODE = Decode()
WAIT = Wait()


class Policy(Protocol):
    """A colocated node's scheduling policy."""

    def choose(self, state: SchedulerState) -> Decision:
        """What the node runs next."""
        ...


ALWAYS = 1 << 62  # decode steps in a row: until something changes


@runtime_checkable
class Lookahead(Protocol):
    """A policy that can say how long it keeps decoding, so the engine runs those steps as one
    event (`rdusim.serving.batch`); a policy without it is asked before every step."""

    def decodes_ahead(self, state: SchedulerState) -> int:
        """How many decisions in a row, from `state` on, are `DECODE` if nothing changes but
        the steps (each adds one to `steps_since_prefill` and makes `last` DECODE): 0 if this
        one is not, `ALWAYS` if none will stop."""
        ...


def first_come(state: SchedulerState) -> Prefill:
    """The longest-waiting prompts, as many as one prefill run and the free slots take."""
    most = min(state.prefill_batch, state.free_slots)
    return Prefill(tuple(islice(state.waiting, most)))


def _can_prefill(state: SchedulerState) -> bool:
    return len(state.waiting) > 0 and state.free_slots > 0


def _or_decode(state: SchedulerState) -> Decision:
    return DECODE if len(state.running) > 0 else WAIT


@dataclass(frozen=True)
class PrefillFirst:
    """Prefill whenever a prompt waits and a slot is free."""

    def choose(self, state: SchedulerState) -> Decision:
        return first_come(state) if _can_prefill(state) else _or_decode(state)

    def decodes_ahead(self, state: SchedulerState) -> int:
        return 0 if _can_prefill(state) or not state.running else ALWAYS


@dataclass(frozen=True)
class DecodeFirst:
    """Admit only into an empty batch, then back to back until the slots or the queue run out."""

    def choose(self, state: SchedulerState) -> Decision:
        admitting = len(state.running) == 0 or state.last == Action.PREFILL
        return first_come(state) if _can_prefill(state) and admitting else _or_decode(state)

    def decodes_ahead(self, state: SchedulerState) -> int:
        # a running batch admits only right after a prefill; once it decodes, it goes on
        if not state.running or (_can_prefill(state) and state.last == Action.PREFILL):
            return 0
        return ALWAYS


@dataclass(frozen=True)
class Mixed:
    """Prefill-first, with at least `steps_per_prefill` decode steps of a running batch between
    two prefills."""

    steps_per_prefill: int = DEFAULT_DECODE_STEPS_PER_PREFILL

    def choose(self, state: SchedulerState) -> Decision:
        due = len(state.running) == 0 or state.steps_since_prefill >= self.steps_per_prefill
        return first_come(state) if _can_prefill(state) and due else _or_decode(state)

    def decodes_ahead(self, state: SchedulerState) -> int:
        if not state.running:
            return 0
        if not _can_prefill(state):
            return ALWAYS
        # a waiting prompt is prefilled once the batch has had its steps
        return max(0, self.steps_per_prefill - state.steps_since_prefill)


# each workload `policy:` and the policy it names, given `decode_steps_per_prefill`
POLICIES: dict[SchedulingPolicy, Callable[[int], Policy]] = {
    SchedulingPolicy.PREFILL_FIRST: lambda steps: PrefillFirst(),
    SchedulingPolicy.DECODE_FIRST: lambda steps: DecodeFirst(),
    SchedulingPolicy.MIXED: Mixed,
}


def policy_for(
    name: SchedulingPolicy, steps_per_prefill: int = DEFAULT_DECODE_STEPS_PER_PREFILL
) -> Policy:
    """The policy a workload names (`steps_per_prefill`: `mixed`'s decode steps)."""
    return POLICIES[name](steps_per_prefill)


def check_prefill(decision: Prefill, state: SchedulerState, chunk: int | None = None) -> None:
    """Refuse a prefill the node cannot run: none or too many requests, one chosen twice or not
    waiting, or a chunk shorter than a prompt that is not the deployment's static chunk graph
    (`chunk`, None without chunked prefill)."""
    chosen = decision.requests
    most = min(state.prefill_batch, state.free_slots)
    if not 1 <= len(chosen) <= most:
        raise ValueError(
            f"a prefill takes 1 to {most} waiting requests (prefill batch "
            f"{state.prefill_batch}, {state.free_slots} free slots), not {len(chosen)}"
        )
    if len({id(r) for r in chosen}) != len(chosen):
        raise ValueError(f"a prefill chose a request twice: {[r.id for r in chosen]}")
    ahead = list(islice(state.waiting, len(chosen)))
    if any(a is not r for a, r in zip(ahead, chosen, strict=True)):
        waiting = {id(r) for r in state.waiting}
        missing = [r.id for r in chosen if id(r) not in waiting]
        if missing:
            raise ValueError(f"a prefill chose requests that are not waiting: {missing}")
    asked = decision.chunk_tokens
    if asked is not None and asked != chunk and any(asked < r.prompt_tokens for r in chosen):
        graph = f"the deployment's chunk graph is {chunk} tokens" if chunk else "no chunk graph"
        raise ValueError(
            f"a chunk of {asked} tokens is shorter than a chosen prompt and {graph} (give "
            "chunk_tokens=None or the whole prompt, or set deployment.prefill_chunk)"
        )
