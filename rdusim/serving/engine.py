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

**Many models** (colocated nodes only; `ModelGraphs`, one per model): each model has its own
graphs, queue of waiting prompts and decode batch (its own slots) on every node, and a decode
step runs one model's batch. A node's HBM holds a set of resident models, each taking its decode
plan's bytes per socket (weights, its slots' caches, workspace) out of `EngineConfig.hbm_budget`;
the pinned models and then the others in the order given (stopping at the first that does not
fit) are resident when the run starts. The node takes the models in turn (round robin over the
models with work, one graph execution each; `ModelTurns`). A model that is not resident is
switched in when its turn comes: the least recently used unpinned models without requests in
flight are evicted until it fits, then its weight shard is loaded from DDR
(`ModelGraphs.load_s`), during which the node runs nothing else. A model in flight is never
evicted (its caches are in HBM), so when a waiting model can only fit by evicting some, those
stop admitting prompts and drain first (the waiting model whose oldest prompt came first goes
first). Each switch is a `SwitchRun`.
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
    """How the nodes are deployed (from the workload's `deployment:` and `residency:`)."""

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
    hbm_budget: float = math.inf  # many models: bytes per socket the resident models share
    pinned: tuple[int, ...] = ()  # many models: models always resident (indices)
    prefill_chunk: int | None = None  # colocated: tokens of the static chunk graph

    def colocated_policy(self) -> Policy:
        """The policy colocated nodes choose by: `scheduler` if given, else the one `policy`
        names."""
        if self.scheduler is not None:
            return self.scheduler
        return policy_for(self.policy, self.steps_per_prefill)


@dataclass(frozen=True)
class ModelGraphs:
    """One model a deployment serves: its graphs and their times, and what it takes to hold it
    in HBM (`hbm_bytes` per socket while resident) and to switch it in (`load_s`)."""

    name: str
    shape: GraphShape
    times: StepTimes
    hbm_bytes: float = 0.0
    load_s: float = 0.0


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
class EngineResult:
    records: list[RequestRecord]
    prefills: list[PrefillRun]
    decode_runs: list[DecodeRun]
    occupancy: list[tuple[float, int, int]]  # (time, decode batch, occupied slots) on change
    slot_steps: int  # occupied slots summed over every decode step
    decode_steps: int
    decode_node_count: int
    slots_per_node: int
    config: EngineConfig
    shape: GraphShape
    decode_step_s: float  # the static graph's step time
    prefill_s: dict[int, float] = field(default_factory=dict)  # per graph length
    models: list[ModelGraphs] = field(default_factory=list)
    switches: list[SwitchRun] = field(default_factory=list)
    # per model: its prefill graphs' times, by length (those the run used)
    model_prefill_s: list[dict[int, float]] = field(default_factory=list)
    static_step_s: list[float] = field(default_factory=list)  # per model: its graph's step
    model_chunk_s: list[dict[int, float]] = field(default_factory=list)  # per model, by chunk

    def batch_model(self, batch: int) -> int:
        """The model of a decode batch (the batches are numbered node by node, a model each)."""
        return batch % max(1, len(self.models))

    def batch_slots(self, batch: int) -> int:
        """The slots of a decode batch."""
        if not self.models:
            return self.slots_per_node
        return self.models[self.batch_model(batch)].shape.decode_slots

    @property
    def batch_count(self) -> int:
        return self.decode_node_count * max(1, len(self.models))


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
    """The static decode graph of one model on one node: its slots, the requests decoding in
    them, its steps."""

    def __init__(self, engine: Engine, node: int, model: int = 0) -> None:
        self.engine = engine
        self.node = node
        self.model = model
        self.index = node * len(engine.models) + model  # its number in the occupancy records
        self.graphs = engine.models[model]
        self.shape = self.graphs.shape
        self.static_step_s = engine.static_step_s[model]
        self.free = list(range(self.shape.decode_slots))  # a heap: the lowest slot first
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
        shape = self.shape
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
        self.engine.occupancy.append((now, self.index, self.active))

    def step_s(self) -> float:
        """The next step's time: the static graph's, or its occupied slots at their longest."""
        if self.engine.config.step_cost == DecodeStepCost.STATIC:
            return self.static_step_s
        while self._cache[0][1] not in self.running:
            heapq.heappop(self._cache)
        shape = self.shape
        longest = -self._cache[0][0] + (self.steps + 1) * shape.tokens_per_step
        cache_len = min(shape.cache_len, math.ceil(longest - 1e-9))
        return self.graphs.times.decode_step_s(self.active, cache_len)

    def step(self, start: float, now: float) -> list[RequestRecord]:
        """Account one finished step: the requests it completed, their slots still held."""
        self.steps += 1
        self.engine.slot_steps += self.active
        self.engine.decode_steps += 1
        run = self._last_run
        if run is not None and run.end_s == start:
            run.end_s, run.steps = now, run.steps + 1
        else:
            self._last_run = DecodeRun(self.node, start, now, 1, self.model)
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
            self.engine.occupancy.append((now, self.index, self.active))
        return done


class ModelTurns:
    """Which model a colocated node runs next, and what its HBM holds (see the module's
    docstring: round robin over the models with work; LRU switching; draining)."""

    def __init__(self, engine: Engine, node: int) -> None:
        self.engine = engine
        self.node = node
        models = engine.models
        self.count = len(models)
        self.pinned = set(engine.config.pinned)
        self.resident = [False] * self.count
        self.last_used = [0.0] * self.count
        used = 0.0
        for m in [*sorted(self.pinned), *(i for i in range(self.count) if i not in self.pinned)]:
            if used + models[m].hbm_bytes > engine.config.hbm_budget:
                if m in self.pinned:
                    raise ValueError(f"the pinned models do not fit the HBM budget ({m})")
                break
            self.resident[m] = True
            used += models[m].hbm_bytes
        self.turn = self.count - 1  # the model served last: the first turn is model 0's
        self.draining: frozenset[int] = frozenset()
        self.claim = -1  # the waiting model the draining ones make room for (-1: none)

    def _busy(self, m: int) -> bool:
        return self.engine.batches[self.node][m].active > 0

    def _has_work(self, m: int) -> bool:
        """Requests in flight, or waiting ones it may admit (a draining model admits none)."""
        return self._busy(m) or (len(self.engine.queues[m]) > 0 and m not in self.draining)

    def with_work(self) -> set[int]:
        """The models with requests in flight or waiting ones they may admit."""
        return {m for m in range(self.count) if self._has_work(m)}

    def _room(self) -> float:
        used = sum(self.engine.models[m].hbm_bytes for m in range(self.count) if self.resident[m])
        return self.engine.config.hbm_budget - used

    def victims(self, m: int, idle_only: bool) -> list[int] | None:
        """The resident models to evict, least recently used first, for `m` to fit (only those
        without requests in flight if `idle_only`); None if it cannot fit so."""
        need = self.engine.models[m].hbm_bytes - self._room()
        order = sorted(
            (i for i in range(self.count) if self.resident[i] and i not in self.pinned),
            key=lambda i: (self.last_used[i], i),
        )
        out: list[int] = []
        for i in order:
            if need <= 1e-9:
                break
            if idle_only and self._busy(i):
                continue
            out.append(i)
            need -= self.engine.models[i].hbm_bytes
        return out if need <= 1e-9 else None

    def next(self) -> int | None:
        """The next model to run (round robin over those with work that are resident or can
        be switched in now), or None when no model has work. Sets `draining`."""
        if self.count == 1:
            return 0
        self._update_draining()
        for k in range(1, self.count + 1):
            m = (self.turn + k) % self.count
            if not self._has_work(m):
                continue
            if self.resident[m] or self.victims(m, idle_only=True) is not None:
                self.turn = m
                return m
        return None

    def _update_draining(self) -> None:
        """The models that stop admitting prompts so that the longest-waiting model that cannot
        be switched in yet will fit once they drain. The choice holds until that model is
        switched in (victims chosen afresh at every decision would take turns draining, and
        none would empty)."""
        if self.claim >= 0 and not self.resident[self.claim]:
            return
        self.claim = -1
        queues = self.engine.queues
        blocked = [
            m
            for m in range(self.count)
            if not self.resident[m] and queues[m] and self.victims(m, idle_only=True) is None
        ]
        if not blocked:
            self.draining = frozenset()
            return
        first = min(blocked, key=lambda m: (queues[m][0].arrival_s, queues[m][0].id))
        self.claim = first
        self.draining = frozenset(self.victims(first, idle_only=False) or ())

    def switch_in(self, m: int) -> tuple[int, ...]:
        """Evict what `m` needs (idle, least recently used first) and mark it resident."""
        evicted = tuple(self.victims(m, idle_only=True) or ())
        for i in evicted:
            self.resident[i] = False
        self.resident[m] = True
        return evicted


class Engine:
    """One simulation run; build it and call `run()` once."""

    def __init__(
        self,
        requests: Sequence[Request],
        models: Sequence[ModelGraphs],
        config: EngineConfig,
        progress: Progress | None = None,
    ) -> None:
        if not models:
            raise ValueError("a deployment serves at least one model")
        if len(models) > 1 and config.mode != DeploymentMode.COLOCATED:
            raise ValueError("many models are served on colocated nodes only")
        self.env = simpy.Environment()
        self.progress = progress
        self.models = list(models)
        self.shape = models[0].shape
        self.times = models[0].times
        self.config = config
        self.records = [
            RequestRecord(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens, r.model)
            for r in sorted(requests, key=lambda r: (r.arrival_s, r.id))
        ]
        self.prefill_s: list[dict[int, float]] = [{} for _ in models]  # filled on first use
        self.chunk_s: list[dict[int, float]] = [{} for _ in models]  # by chunk index
        self.static_step_s = [
            g.times.decode_step_s(g.shape.decode_slots, g.shape.cache_len) for g in models
        ]
        self.queues: list[deque[RequestRecord]] = [deque() for _ in models]  # waiting prefill
        self.queue = self.queues[0]
        self._drawn = _drawn_steps(self.records, self.models, config.seed)
        self.arrived = Signal(self.env)
        self.prefills: list[PrefillRun] = []
        self.decode_runs: list[DecodeRun] = []
        self.switches: list[SwitchRun] = []
        self.occupancy: list[tuple[float, int, int]] = []
        self.slot_steps = 0
        self.decode_steps = 0
        self.completed = 0
        if config.mode == DeploymentMode.COLOCATED:
            self.batches = [
                [DecodeBatch(self, i, m) for m in range(len(models))] for i in range(config.nodes)
            ]
            for i in range(config.nodes):
                self.env.process(self._colocated(i))
        else:
            self.batches = [[DecodeBatch(self, i)] for i in range(config.decode_nodes)]
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
        if self._drawn is not None and rec.id in self._drawn:
            return self._drawn[rec.id]
        return self.models[rec.model].shape.decode_steps(rec.output_tokens)

    def _arrivals(self) -> Process:
        env = self.env
        for rec in self.records:
            if rec.arrival_s > env.now:
                yield env.timeout(rec.arrival_s - env.now)
            self.queues[rec.model].append(rec)
            self.arrived.fire()

    def _take_prompts(self, most: int, model: int = 0) -> list[RequestRecord]:
        queue = self.queues[model]
        return [queue.popleft() for _ in range(min(most, len(queue)))]

    def graph_s(self, model: int, graph_len: int) -> float:
        """One execution of `model`'s prefill graph of `graph_len` tokens (asked once)."""
        known = self.prefill_s[model]
        if graph_len not in known:
            known[graph_len] = self.models[model].times.prefill_s(graph_len)
        return known[graph_len]

    def _prefill(self, node: int, group: list[RequestRecord], model: int = 0) -> Process:
        """Run the prefill graph that holds the group's longest prompt."""
        env = self.env
        shape = self.models[model].shape
        graph = max(shape.graph_len(r.prompt_tokens) for r in group)
        start = env.now
        for rec in group:
            rec.prefill_node, rec.prefill_start_s, rec.graph_len = node, start, graph
        yield env.timeout(self.graph_s(model, graph))
        self.prefills.append(
            PrefillRun(node, start, env.now, graph, tuple(r.id for r in group), model)
        )
        for rec in group:
            rec.first_token_s = env.now

    def _complete(self, rec: RequestRecord) -> None:
        rec.completions += 1
        self.completed += 1
        if self.progress is not None and self.completed % PROGRESS_EVERY == 0:
            self.progress(PROGRESS_EVERY)

    # --- colocated --------------------------------------------------------------------------

    def _colocated(self, node: int) -> Process:
        """The node's loop: take the next model's turn (switching it in if it is not resident),
        ask the policy what to run of it, run it. This is the loop every step goes through."""
        env = self.env
        policy = self.config.colocated_policy()
        turns = ModelTurns(self, node)
        last = [Action.WAIT] * len(self.models)
        since = [0] * len(self.models)
        waited: set[int] = set()  # models whose policy chose to wait since the node last ran
        while True:
            m = turns.next()
            if m is None:
                yield self.arrived.wait()
                continue
            if not turns.resident[m]:
                yield from self._switch(turns, m)
            batch = self.batches[node][m]
            state = SchedulerState(
                now=env.now,
                node=node,
                waiting=() if m in turns.draining else self.queues[m],
                free_slots=len(batch.free),
                running=batch.running.values(),
                prefill_batch=batch.shape.prefill_batch,
                steps_since_prefill=since[m],
                last=last[m],
            )
            decision = policy.choose(state)
            if isinstance(decision, Prefill):
                chunk = self.config.prefill_chunk
                check_prefill(decision, state, chunk)
                group = self._take_chosen(decision.requests, m)
                whole = decision.chunk_tokens or chunk or 0
                if chunk is not None and any(r.prompt_tokens > whole for r in group):
                    yield from self._chunked_prefill(batch, group, chunk)
                else:
                    yield from self._colocated_prefill(batch, group)
                since[m] = 0
            elif isinstance(decision, Decode):
                yield from self._decode_step(batch)
                since[m] += 1
            elif isinstance(decision, Wait):
                waited.add(m)
                if waited >= turns.with_work():  # nothing to run on any model: wait
                    waited.clear()
                    yield self.arrived.wait()
            else:
                raise TypeError(f"a policy chose {decision!r}, not a Prefill, Decode or Wait")
            if not isinstance(decision, Wait):
                waited.clear()
            last[m] = decision.action
            turns.last_used[m] = env.now

    def _decode_step(self, batch: DecodeBatch) -> Process:
        """One step of `batch`; the requests it completes free their slots."""
        start = self.env.now
        yield self.env.timeout(batch.step_s())
        for rec in batch.step(start, self.env.now):
            batch.release(rec.slot)
            self._complete(rec)

    def _chunk_s(self, model: int, index: int, tokens: int) -> float:
        known = self.chunk_s[model]
        if index not in known:
            known[index] = self.models[model].times.chunk_s(index, tokens)
        return known[index]

    def _chunked_prefill(
        self, batch: DecodeBatch, group: list[RequestRecord], tokens: int
    ) -> Process:
        """Prefill `group` in chunks of `tokens`, one execution of the chunk graph (every
        request's next chunk) and then one decode step of the running batch, until every
        prompt is in; a request joins the batch when its last chunk is done."""
        env, node, m = self.env, batch.node, batch.model
        chunks = [math.ceil(r.prompt_tokens / tokens) for r in group]
        for rec, count in zip(group, chunks, strict=True):
            rec.decode_node, rec.slot, rec.slot_from_s = node, batch.reserve(), env.now
            rec.prefill_node, rec.prefill_start_s = node, env.now
            rec.graph_len = count * tokens
        for k in range(max(chunks)):
            start = env.now
            yield env.timeout(self._chunk_s(m, k, tokens))
            ids = tuple(r.id for r, c in zip(group, chunks, strict=True) if c > k)
            self.prefills.append(PrefillRun(node, start, env.now, tokens, ids, m, k))
            for rec, count in zip(group, chunks, strict=True):
                if count == k + 1:
                    self._first_token(batch, rec)
            batch.admit(env.now)
            if k + 1 < max(chunks) and batch.active:
                yield from self._decode_step(batch)

    def _first_token(self, batch: DecodeBatch, rec: RequestRecord) -> None:
        """A request's prefill is done: its first token leaves, and it completes (one token)
        or joins the batch at the next step."""
        rec.first_token_s = self.env.now
        if rec.output_tokens <= 1:
            rec.last_token_s = self.env.now
            batch.release(rec.slot)
            self._complete(rec)
        else:
            batch.pending.append(rec)

    def _switch(self, turns: ModelTurns, m: int) -> Process:
        """Load model `m`'s weights into the node's HBM in place of idle models; the node runs
        nothing else meanwhile."""
        start = self.env.now
        evicted = turns.switch_in(m)
        yield self.env.timeout(self.models[m].load_s)
        self.switches.append(SwitchRun(turns.node, start, self.env.now, m, evicted))

    def _take_chosen(self, chosen: Sequence[WaitingRequest], model: int = 0) -> list[RequestRecord]:
        """Take the chosen requests out of the queue, in the chosen order (the longest-waiting
        ones, the usual choice, from its head)."""
        queue = self.queues[model]
        if all(queue[i] is rec for i, rec in enumerate(chosen)):
            return self._take_prompts(len(chosen), model)
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
        yield from self._prefill(node, group, batch.model)
        for rec in group:
            self._first_token(batch, rec)
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
            batch = max((b[0] for b in self.batches), key=lambda b: (len(b.free), -b.node))
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
        env, batch = self.env, self.batches[node][0]
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
            decode_step_s=self.static_step_s[0],
            prefill_s=dict(self.prefill_s[0]),
            models=self.models,
            switches=self.switches,
            model_prefill_s=[dict(p) for p in self.prefill_s],
            static_step_s=list(self.static_step_s),
            model_chunk_s=[dict(c) for c in self.chunk_s],
        )


def _drawn_steps(
    records: Sequence[RequestRecord], models: Sequence[ModelGraphs], seed: int
) -> dict[int, int] | None:
    """Each request's decode steps by id, drawn in id order (each model from its own stream)
    for the models whose steps verify drafts; None when every step of every model accepts the
    mean."""
    drawn: dict[int, int] = {}
    for m, graphs in enumerate(models):
        shape = graphs.shape
        if not shape.draft_tokens:
            continue
        ordered = sorted((r for r in records if r.model == m), key=lambda r: r.id)
        tokens = [r.output_tokens - 1 for r in ordered]
        steps = drawn_steps(tokens, shape.draft_tokens, shape.acceptance, seed, stream=m)
        drawn.update({r.id: int(n) for r, n in zip(ordered, steps.tolist(), strict=True)})
    return drawn or None


def simulate_serving(
    requests: Sequence[Request],
    shape: GraphShape,
    times: StepTimes,
    config: EngineConfig,
    progress: Progress | None = None,
) -> EngineResult:
    """Serve `requests` on the deployment `config` with graphs of `shape` timed by `times`
    (`progress`, if given, is told of completed requests as the run goes)."""
    return Engine(requests, [ModelGraphs("", shape, times)], config, progress).run()


def simulate_models(
    requests: Sequence[Request],
    models: Sequence[ModelGraphs],
    config: EngineConfig,
    progress: Progress | None = None,
) -> EngineResult:
    """Serve `requests`, each asking for one of `models` (`Request.model`, an index), on the
    deployment `config`."""
    return Engine(requests, models, config, progress).run()
