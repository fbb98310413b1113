"""Request-level discrete-event simulation of static-graph serving, in simpy.

The unit of simulated work is a graph execution, never an operator: a prefill graph run (one
`StepTimes.prefill_s`) or a decode step (one `StepTimes.decode_step_s`). Graph times come from
a `StepTimes` and are looked up, not simulated, so a run of 10,000 requests takes seconds.

Deployments (SnapStream paper §2.1: continuous batching, disaggregated continuous batching):

* **colocated**: each node holds both graphs and runs one at a time, choosing by its policy
  (`rdusim.serving.scheduler`): which waiting prompts to prefill, a decode step, or nothing. A
  prefill takes a free decode slot and writes the request's cache straight into it; the request
  joins the decode batch at once. Nodes share one queue of waiting prompts, in arrival order
  (the shipped policies serve it first come first served).
* **disaggregated** (DistServe, Zhong et al. 2024): prefill nodes run only the prefill graph,
  decode nodes only the decode graph. A prefilled request's cache stays on its prefill node until
  a decode node has a free slot (the node with the most free slots, the lowest index on a tie);
  the slot is reserved, the cache crosses that decode node's incoming link (one cache at a time:
  bytes / bandwidth + latency), and the request joins the batch at the next step boundary. A
  prefill node keeps at most `prefill_batch + prefill_hold` caches (its working cache plus what
  its free HBM holds); when full it stops prefilling until one leaves.

Static decode graph: a step processes every slot whether or not it holds a request (§2.3: all
tensors have fixed shapes; an empty slot is padding), so with `decode_step: static` every step
costs the graph's step time at its full batch and cache length. `decode_step: occupied` asks the
what-if of a runtime that pays only for occupied slots and their longest cache.

A request produces its first token when its prefill ends (the prefill graph generates x_{L+1},
§2.3); with SnapStream the cache is compressed inside the prefill graph (§3.2), so that cost is
in the prefill time and what leaves the prefill node is the compressed cache. Each decode step a
request takes adds the tokens the step accepts for it (drawn when the step verifies drafts:
`rdusim.serving.acceptance`; else `tokens_per_step`, e.g. the paper's 2.4 at 80% in §5.2),
and its slot frees at the end of the step that completes its output (`GraphShape.decode_steps`);
a request whose cache arrives during a step joins at the next step boundary. Records keep every timestamp, so the
metrics and the trace are computed afterwards from data, not from the engine's counters.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import simpy

from rdusim.serving.acceptance import drawn_steps
from rdusim.serving.arrivals import Request
from rdusim.serving.scheduler import (
    Action,
    Decode,
    Policy,
    Prefill,
    SchedulerState,
    Wait,
    WaitingRequest,
    check_prefill,
    policy_for,
)
from rdusim.serving.shape import GraphShape
from rdusim.serving.step_times import StepTimes
from rdusim.spec.workload import (
    DEFAULT_DECODE_STEPS_PER_PREFILL,
    DecodeStepCost,
    DeploymentMode,
    SchedulingPolicy,
)

NAN = float("nan")
Process = Generator[simpy.Event, Any, None]
Progress = Callable[[int], None]  # told how many more requests completed
PROGRESS_EVERY = 1000  # completions between two progress calls


@dataclass(frozen=True)
class EngineConfig:
    """How the nodes are deployed (from the workload's `deployment:` section)."""

    mode: DeploymentMode = DeploymentMode.COLOCATED
    nodes: int = 1  # colocated
    policy: SchedulingPolicy = SchedulingPolicy.PREFILL_FIRST  # colocated
    steps_per_prefill: int = DEFAULT_DECODE_STEPS_PER_PREFILL  # colocated, policy mixed
    prefill_nodes: int = 1  # disaggregated
    decode_nodes: int = 1  # disaggregated
    link_bandwidth: float = math.inf  # disaggregated: bytes/s into a decode node
    link_latency_s: float = 0.0
    step_cost: DecodeStepCost = DecodeStepCost.STATIC
    scheduler: Policy | None = None  # colocated: a policy object in place of `policy`
    seed: int = 0  # the workload's: the accepted-token draws (`rdusim.serving.acceptance`)

    def colocated_policy(self) -> Policy:
        """The policy colocated nodes choose by: `scheduler` if given, else the one `policy`
        names."""
        if self.scheduler is not None:
            return self.scheduler
        return policy_for(self.policy, self.steps_per_prefill)


@dataclass(slots=True)
class RequestRecord:
    """One request's path through the deployment; NaN or -1 where it did not pass."""

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
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


@dataclass
class DecodeRun:
    """Consecutive decode steps of one node, merged."""

    node: int
    start_s: float
    end_s: float
    steps: int


@dataclass
class EngineResult:
    records: list[RequestRecord]
    prefills: list[PrefillRun]
    decode_runs: list[DecodeRun]
    occupancy: list[tuple[float, int, int]]  # (time, decode node, occupied slots) on change
    slot_steps: int  # occupied slots summed over every decode step
    decode_steps: int
    decode_node_count: int
    slots_per_node: int
    config: EngineConfig
    shape: GraphShape
    decode_step_s: float  # the static graph's step time
    prefill_s: dict[int, float] = field(default_factory=dict)  # per graph length


class Signal:
    """A reusable wake-up: processes wait on `wait()`; `fire()` wakes them all."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.event = env.event()

    def wait(self) -> simpy.Event:
        return self.event

    def fire(self) -> None:
        if not self.event.triggered:
            self.event.succeed()
            self.event = self.env.event()


class DecodeBatch:
    """The static decode graph of one node: its slots, the requests decoding in them, its steps."""

    def __init__(self, engine: Engine, node: int) -> None:
        self.engine = engine
        self.node = node
        self.free = list(range(engine.shape.decode_slots))  # a heap: the lowest slot first
        self.steps = 0
        self.active = 0
        self.pending: list[RequestRecord] = []  # arrived caches, joining at the next step
        self._finish: list[tuple[int, int, RequestRecord]] = []  # (step, id, record)
        self._cache: list[tuple[float, int]] = []  # (-cache key, id), stale entries skipped
        self.running: dict[int, RequestRecord] = {}  # requests in the batch, by id
        self._last_run: DecodeRun | None = None

    def reserve(self) -> int:
        return heapq.heappop(self.free)

    def release(self, slot: int) -> None:
        heapq.heappush(self.free, slot)

    def admit(self, now: float) -> None:
        """Bring the requests whose caches have arrived into the batch (a step boundary)."""
        if not self.pending:
            return
        shape = self.engine.shape
        for rec in self.pending:
            rec.join_step = self.steps
            steps = self.engine.steps_of(rec)
            heapq.heappush(self._finish, (self.steps + steps, rec.id, rec))
            # its cache during global step s is key + s * tokens_per_step (see step_s)
            key = shape.kv_tokens(rec.prompt_tokens) + 1 - (self.steps + 1) * shape.tokens_per_step
            heapq.heappush(self._cache, (-key, rec.id))
            self.running[rec.id] = rec
        self.active += len(self.pending)
        self.pending.clear()
        self.engine.occupancy.append((now, self.node, self.active))

    def step_s(self) -> float:
        """The next step's time: the static graph's, or its occupied slots at their longest."""
        engine = self.engine
        if engine.config.step_cost == DecodeStepCost.STATIC:
            return engine.static_step_s
        while self._cache[0][1] not in self.running:
            heapq.heappop(self._cache)
        shape = engine.shape
        longest = -self._cache[0][0] + (self.steps + 1) * shape.tokens_per_step
        cache_len = min(shape.cache_len, math.ceil(longest - 1e-9))
        return engine.times.decode_step_s(self.active, cache_len)

    def step(self, start: float, now: float) -> list[RequestRecord]:
        """Account one finished step: the requests it completed, their slots still held."""
        self.steps += 1
        self.engine.slot_steps += self.active
        self.engine.decode_steps += 1
        run = self._last_run
        if run is not None and run.end_s == start:
            run.end_s, run.steps = now, run.steps + 1
        else:
            self._last_run = DecodeRun(self.node, start, now, 1)
            self.engine.decode_runs.append(self._last_run)
        done = []
        while self._finish and self._finish[0][0] == self.steps:
            _, _, rec = heapq.heappop(self._finish)
            rec.steps = self.steps - rec.join_step
            rec.last_token_s = now
            del self.running[rec.id]
            done.append(rec)
        if done:
            self.active -= len(done)
            self.engine.occupancy.append((now, self.node, self.active))
        return done


class Engine:
    """One simulation run; build it and call `run()` once."""

    def __init__(
        self,
        requests: Sequence[Request],
        shape: GraphShape,
        times: StepTimes,
        config: EngineConfig,
        progress: Progress | None = None,
    ) -> None:
        self.env = simpy.Environment()
        self.progress = progress
        self.shape = shape
        self.times = times
        self.config = config
        self.records = [
            RequestRecord(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens)
            for r in sorted(requests, key=lambda r: (r.arrival_s, r.id))
        ]
        self.prefill_s = {n: times.prefill_s(n) for n in shape.prefill_lengths}
        self.static_step_s = times.decode_step_s(shape.decode_slots, shape.cache_len)
        self._drawn = _drawn_steps(self.records, shape, config.seed)
        self.queue: deque[RequestRecord] = deque()  # waiting for prefill
        self.arrived = Signal(self.env)
        self.prefills: list[PrefillRun] = []
        self.decode_runs: list[DecodeRun] = []
        self.occupancy: list[tuple[float, int, int]] = []
        self.slot_steps = 0
        self.decode_steps = 0
        self.completed = 0
        if config.mode == DeploymentMode.COLOCATED:
            self.batches = [DecodeBatch(self, i) for i in range(config.nodes)]
            for i in range(config.nodes):
                self.env.process(self._colocated(i))
        else:
            self.batches = [DecodeBatch(self, i) for i in range(config.decode_nodes)]
            self.ready: deque[RequestRecord] = deque()  # prefilled, waiting for a decode slot
            self.held = [0] * config.prefill_nodes  # caches each prefill node holds
            self.released = [Signal(self.env) for _ in range(config.prefill_nodes)]
            self.joined = [Signal(self.env) for _ in range(config.decode_nodes)]
            self.links = [simpy.Resource(self.env, 1) for _ in range(config.decode_nodes)]
            for i in range(config.prefill_nodes):
                self.env.process(self._prefill_node(i))
            for i in range(config.decode_nodes):
                self.env.process(self._decode_node(i))
        self.env.process(self._arrivals())

    # --- shared -----------------------------------------------------------------------------

    def steps_of(self, rec: RequestRecord) -> int:
        """Decode steps the request takes: drawn before the run when steps verify drafts
        (`rdusim.serving.acceptance`), else at the mean rate."""
        if self._drawn is not None:
            return self._drawn[rec.id]
        return self.shape.decode_steps(rec.output_tokens)

    def _arrivals(self) -> Process:
        env = self.env
        for rec in self.records:
            if rec.arrival_s > env.now:
                yield env.timeout(rec.arrival_s - env.now)
            self.queue.append(rec)
            self.arrived.fire()

    def _take_prompts(self, most: int) -> list[RequestRecord]:
        return [self.queue.popleft() for _ in range(min(most, len(self.queue)))]

    def _prefill(self, node: int, group: list[RequestRecord]) -> Process:
        """Run the prefill graph that holds the group's longest prompt."""
        env = self.env
        graph = max(self.shape.graph_len(r.prompt_tokens) for r in group)
        start = env.now
        for rec in group:
            rec.prefill_node, rec.prefill_start_s, rec.graph_len = node, start, graph
        yield env.timeout(self.prefill_s[graph])
        self.prefills.append(PrefillRun(node, start, env.now, graph, tuple(r.id for r in group)))
        for rec in group:
            rec.first_token_s = env.now

    def _complete(self, rec: RequestRecord) -> None:
        rec.completions += 1
        self.completed += 1
        if self.progress is not None and self.completed % PROGRESS_EVERY == 0:
            self.progress(PROGRESS_EVERY)

    # --- colocated --------------------------------------------------------------------------

    def _colocated(self, node: int) -> Process:
        env, batch = self.env, self.batches[node]
        policy = self.config.colocated_policy()
        last, since = Action.WAIT, 0
        while True:
            state = SchedulerState(
                now=env.now,
                node=node,
                waiting=self.queue,
                free_slots=len(batch.free),
                running=batch.running.values(),
                prefill_batch=self.shape.prefill_batch,
                steps_since_prefill=since,
                last=last,
            )
            decision = policy.choose(state)
            if isinstance(decision, Prefill):
                check_prefill(decision, state)
                yield from self._colocated_prefill(batch, self._take_chosen(decision.requests))
                since = 0
            elif isinstance(decision, Decode):
                start = env.now
                yield env.timeout(batch.step_s())
                for rec in batch.step(start, env.now):
                    batch.release(rec.slot)
                    self._complete(rec)
                since += 1
            elif isinstance(decision, Wait):
                yield self.arrived.wait()
            else:
                raise TypeError(f"a policy chose {decision!r}, not a Prefill, Decode or Wait")
            last = decision.action

    def _take_chosen(self, chosen: Sequence[WaitingRequest]) -> list[RequestRecord]:
        """Take the chosen requests out of the queue, in the chosen order (the longest-waiting
        ones, the usual choice, from its head)."""
        queue = self.queue
        if all(queue[i] is rec for i, rec in enumerate(chosen)):
            return self._take_prompts(len(chosen))
        wanted = {id(rec): i for i, rec in enumerate(chosen)}
        taken = sorted((r for r in queue if id(r) in wanted), key=lambda r: wanted[id(r)])
        kept = [r for r in queue if id(r) not in wanted]
        queue.clear()
        queue.extend(kept)
        return taken

    def _colocated_prefill(self, batch: DecodeBatch, group: list[RequestRecord]) -> Process:
        """Prefill `group` into free slots of `batch`'s node; the requests join its batch."""
        env, node = self.env, batch.node
        for rec in group:
            rec.decode_node, rec.slot, rec.slot_from_s = node, batch.reserve(), env.now
        yield from self._prefill(node, group)
        for rec in group:
            if rec.output_tokens <= 1:
                rec.last_token_s = env.now
                batch.release(rec.slot)
                self._complete(rec)
            else:
                batch.pending.append(rec)
        batch.admit(env.now)

    # --- disaggregated ----------------------------------------------------------------------

    def _prefill_node(self, node: int) -> Process:
        env, shape = self.env, self.shape
        room = shape.prefill_batch + shape.prefill_hold
        while True:
            most = min(shape.prefill_batch, room - self.held[node])
            if not self.queue or most < 1:
                yield env.any_of([self.arrived.wait(), self.released[node].wait()])
                continue
            group = self._take_prompts(most)
            yield from self._prefill(node, group)
            for rec in group:
                if rec.output_tokens <= 1:
                    rec.last_token_s = env.now
                    self._complete(rec)
                else:
                    self.held[node] += 1
                    self.ready.append(rec)
            self._dispatch()

    def _dispatch(self) -> None:
        """Give prefilled caches, first come first served, to decode nodes with a free slot."""
        while self.ready:
            batch = max(self.batches, key=lambda b: (len(b.free), -b.node))
            if not batch.free:
                return
            rec = self.ready.popleft()
            rec.decode_node, rec.slot, rec.slot_from_s = batch.node, batch.reserve(), self.env.now
            seconds = self._transfer_s(rec)
            if seconds > 0:
                self.env.process(self._transfer(rec, batch, seconds))
            else:  # nothing to move: the cache is there before the next step starts
                rec.transfer_start_s = rec.transfer_end_s = self.env.now
                self._arrive(rec, batch)

    def _transfer_s(self, rec: RequestRecord) -> float:
        cfg = self.config
        return self.shape.kv_bytes(rec.prompt_tokens) / cfg.link_bandwidth + cfg.link_latency_s

    def _transfer(self, rec: RequestRecord, batch: DecodeBatch, seconds: float) -> Process:
        env = self.env
        with self.links[batch.node].request() as turn:
            yield turn
            rec.transfer_start_s = env.now
            yield env.timeout(seconds)
            rec.transfer_end_s = env.now
        self._arrive(rec, batch)

    def _arrive(self, rec: RequestRecord, batch: DecodeBatch) -> None:
        """The cache is on the decode node: free its prefill node's memory, join the batch at
        the next step boundary."""
        self.held[rec.prefill_node] -= 1
        self.released[rec.prefill_node].fire()
        batch.pending.append(rec)
        self.joined[batch.node].fire()

    def _decode_node(self, node: int) -> Process:
        env, batch = self.env, self.batches[node]
        while True:
            batch.admit(env.now)
            if not batch.active:
                yield self.joined[node].wait()
                continue
            start = env.now
            yield env.timeout(batch.step_s())
            done = batch.step(start, env.now)
            for rec in done:
                batch.release(rec.slot)
                self._complete(rec)
            if done:
                self._dispatch()

    # --- run --------------------------------------------------------------------------------

    def run(self) -> EngineResult:
        self.env.run()
        if self.progress is not None:
            self.progress(self.completed % PROGRESS_EVERY)
        unfinished = [r.id for r in self.records if r.completions != 1]
        if unfinished:
            raise RuntimeError(f"requests did not complete exactly once: {unfinished[:10]}")
        return EngineResult(
            records=sorted(self.records, key=lambda r: r.id),
            prefills=self.prefills,
            decode_runs=self.decode_runs,
            occupancy=self.occupancy,
            slot_steps=self.slot_steps,
            decode_steps=self.decode_steps,
            decode_node_count=len(self.batches),
            slots_per_node=self.shape.decode_slots,
            config=self.config,
            shape=self.shape,
            decode_step_s=self.static_step_s,
            prefill_s=dict(self.prefill_s),
        )


def _drawn_steps(
    records: Sequence[RequestRecord], shape: GraphShape, seed: int
) -> dict[int, int] | None:
    """Each request's decode steps by id, drawn in id order when a step verifies drafts; None
    when every step accepts the mean."""
    if not shape.draft_tokens:
        return None
    ordered = sorted(records, key=lambda r: r.id)
    tokens = [r.output_tokens - 1 for r in ordered]
    steps = drawn_steps(tokens, shape.draft_tokens, shape.acceptance, seed)
    return {r.id: int(n) for r, n in zip(ordered, steps.tolist(), strict=True)}


def simulate_serving(
    requests: Sequence[Request],
    shape: GraphShape,
    times: StepTimes,
    config: EngineConfig,
    progress: Progress | None = None,
) -> EngineResult:
    """Serve `requests` on the deployment `config` with graphs of `shape` timed by `times`
    (`progress`, if given, is told of completed requests as the run goes)."""
    return Engine(requests, shape, times, config, progress).run()
