"""What a serving run records: each request's path, and the graph executions of each node."""

from __future__ import annotations

from dataclasses import dataclass, field

NAN = float("nan")


@dataclass(slots=True)
class RequestRecord:
    """One request's path through the deployment; NaN or -1 where it did not pass."""

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    model: int = 0  # index of the model it asks for
    graph_len: int = 0  # the prefill graph it ran on
    prefill_node: int = -1
    prefill_start_s: float = NAN
    first_token_s: float = NAN
    decode_node: int = -1  # colocated: its node
    slot: int = -1
    slot_from_s: float = NAN  # when its slot was reserved
    transfer_start_s: float = NAN  # disaggregated: its cache on the link
    transfer_end_s: float = NAN
    last_token_s: float = NAN  # also when its slot frees
    join_step: int = -1  # decode steps its node had run when it joined
    steps: int = 0  # decode steps it took
    completions: int = 0  # times it completed (exactly once, or the engine has a bug)

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.last_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first (None for a one-token output)."""
        if self.output_tokens <= 1:
            return None
        return (self.last_token_s - self.first_token_s) / (self.output_tokens - 1)


@dataclass(frozen=True)
class PrefillRun:
    node: int
    start_s: float
    end_s: float
    graph_len: int
    requests: tuple[int, ...]
    model: int = 0
    chunk: int = -1  # chunked prefill: which chunk of the prompts (-1: whole prompts)


@dataclass
class DecodeRun:
    """Consecutive decode steps of one node's batch of one model, merged."""

    node: int
    start_s: float
    end_s: float
    steps: int
    model: int = 0


@dataclass(frozen=True)
class SwitchRun:
    """A node loading `model`'s weights into HBM, in place of the `evicted` models."""

    node: int
    start_s: float
    end_s: float
    model: int
    evicted: tuple[int, ...]


@dataclass
class RunLog:
    """What the nodes did, appended as it happens: graph executions, switches, and each change
    of a decode batch's occupied slots (time, batch, occupied)."""

    prefills: list[PrefillRun]
    decode_runs: list[DecodeRun]
    switches: list[SwitchRun]
    occupancy: list[tuple[float, int, int]]
    slot_steps: int = 0  # occupied slots summed over every decode step
    decode_steps: int = 0
    # each decode run's first step: when it ended and its node's priority (the order an event
    # per step would have recorded the runs in; `ordered_decode_runs`)
    run_firsts: list[tuple[float, int]] = field(default_factory=list)

    @classmethod
    def empty(cls) -> RunLog:
        return cls([], [], [], [])

    def ordered_decode_runs(self) -> list[DecodeRun]:
        """The decode runs in the order their first steps ended (at one instant, in node
        order): a run of steps taken as one event is recorded when it ends."""
        order = sorted(range(len(self.decode_runs)), key=self.run_firsts.__getitem__)
        return [self.decode_runs[i] for i in order]
