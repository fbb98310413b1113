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
a request whose cache arrives during a step joins at the next step boundary (one that arrives
at the very instant a step ends joins at that boundary: a node acts after everything else that
happens at an instant, `rdusim.serving.events`). Records keep every timestamp, so the metrics and
the trace are computed afterwards from data, not from the engine's counters.

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
first, until it is switched in or another node takes its prompts). Each switch is a `SwitchRun`.

**Speed.** A run of decode steps during which nothing changes takes one event
(`rdusim.serving.batch`): the batch and its step time change only when a request joins or
completes, and the node's policy is asked how many steps it commits to (`Lookahead`), so the
simulation costs a few events per request, not per step, with the times an event per step gives
(`EngineConfig.coalesce_steps=False` runs that way, for comparison). Idle prefill nodes wait in
a line, woken in the order they began waiting, and a cache's transfer is timed when it is queued
on its link (first come, first served), so neither costs an event per waiting node.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import simpy
from simpy.events import NORMAL, URGENT

from rdusim.serving.acceptance import drawn_steps
from rdusim.serving.arrivals import Request, Requests
from rdusim.serving.batch import UNBOUNDED, DecodeBatch, Replan, cut, poke_all
from rdusim.serving.events import Alarm, Ring, ServingEnvironment, node_priority
from rdusim.serving.records import (
    NAN,
    DecodeRun,
    PrefillRun,
    RecordTable,
    RequestRecord,
    RequestSet,
    RunLog,
    SwitchRun,
)
from rdusim.serving.scheduler import (
    Action,
    Decode,
    Lookahead,
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
from rdusim.serving.turns import ModelTurns
from rdusim.spec.workload import (
    DEFAULT_DECODE_STEPS_PER_PREFILL,
    DecodeStepCost,
    DeploymentMode,
    SchedulingPolicy,
)

__all__ = [
    "NAN",
    "DecodeBatch",
    "DecodeRun",
    "Engine",
    "EngineConfig",
    "EngineResult",
    "ModelGraphs",
    "ModelTurns",
    "PrefillRun",
    "RecordTable",
    "RequestRecord",
    "RequestSet",
    "SwitchRun",
    "simulate_models",
    "simulate_serving",
]

Process = Generator[simpy.Event, Any, None]
Steps = Generator[simpy.Event, Any, tuple[int, list[RequestRecord]]]  # steps run, completed
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
    coalesce_steps: bool = True  # False: an event per decode step (the reference for tests)

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


@dataclass
class EngineResult:
    table: RecordTable  # every request's record, as columns
    log: RunLog  # the graph executions and occupancy changes, as columns
    decode_node_count: int
    slots_per_node: int
    config: EngineConfig
    shape: GraphShape
    decode_step_s: float  # the static graph's step time
    prefill_s: dict[int, float] = field(default_factory=dict)  # per graph length
    models: list[ModelGraphs] = field(default_factory=list)
    # per model: its prefill graphs' times, by length (those the run used)
    model_prefill_s: list[dict[int, float]] = field(default_factory=list)
    static_step_s: list[float] = field(default_factory=list)  # per model: its graph's step
    model_chunk_s: list[dict[int, float]] = field(default_factory=list)  # per model, by chunk

    @property
    def records(self) -> list[RequestRecord]:
        """Every request's record, in id order (objects built from `table` on each call)."""
        return self.table.records()

    @property
    def prefills(self) -> list[PrefillRun]:
        """Every prefill graph execution (objects built from `log` on each call)."""
        return self.log.prefills()

    @property
    def decode_runs(self) -> list[DecodeRun]:
        """The runs of consecutive decode steps of each batch (built on each call)."""
        return self.log.decode_runs()

    @property
    def occupancy(self) -> list[tuple[float, int, int]]:
        """(time, decode batch, occupied slots) at each change (built on each call)."""
        return self.log.occupancy()

    @property
    def switches(self) -> list[SwitchRun]:
        return self.log.switches

    @property
    def slot_steps(self) -> int:
        """Occupied slots summed over every decode step."""
        return self.log.slot_steps

    @property
    def decode_steps(self) -> int:
        return self.log.decode_steps

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


class Engine:
    """One simulation run; build it and call `run()` once."""

    def __init__(
        self,
        requests: Sequence[Request] | Requests | RequestSet,
        models: Sequence[ModelGraphs],
        config: EngineConfig,
        progress: Progress | None = None,
    ) -> None:
        if not models:
            raise ValueError("a deployment serves at least one model")
        if len(models) > 1 and config.mode != DeploymentMode.COLOCATED:
            raise ValueError("many models are served on colocated nodes only")
        self.env = ServingEnvironment()
        self.progress = progress
        self.models = list(models)
        self.shape = models[0].shape
        self.times = models[0].times
        self.config = config
        self.most = UNBOUNDED if config.coalesce_steps else 1  # steps a stretch may take
        self.requests = requests if isinstance(requests, RequestSet) else RequestSet(requests)
        self.table = RecordTable(self.requests)
        self.prefill_s: list[dict[int, float]] = [{} for _ in models]  # filled on first use
        self.chunk_s: list[dict[int, float]] = [{} for _ in models]  # by chunk index
        self.static_step_s = [
            g.times.decode_step_s(g.shape.decode_slots, g.shape.cache_len) for g in models
        ]
        self.queues: list[deque[RequestRecord]] = [deque() for _ in models]  # waiting prefill
        self.queue = self.queues[0]
        self._drawn = drawn_steps_of(self.requests, self.models, config.seed)
        self.log = RunLog()
        self.completed = 0
        self.alarms: list[Alarm] = []  # each colocated or decode node's
        self.sleepers: list[Alarm] = []  # colocated nodes waiting for a prompt, in that order
        if config.mode == DeploymentMode.COLOCATED:
            self._build_colocated()
        else:
            self._build_disaggregated()
        self.arrived_count = 0  # requests arrived so far, in arrival order
        self._due = partial(self._arrivals, True)  # the next arrival's event
        self.env.call_at(0, URGENT, self._arrivals)  # after the nodes

    def _batches(self, node: int, rank: int) -> list[DecodeBatch]:
        """A node's decode batches, one per model, waking at the node's priority."""
        alarm = Alarm(self.env, node_priority(rank))
        self.alarms.append(alarm)
        return [
            DecodeBatch(
                self.env,
                self.log,
                (node, m, node * len(self.models) + m),
                g.shape,
                g.times,
                self.static_step_s[m],
                self.config.step_cost,
                self.steps_of,
                alarm,
            )
            for m, g in enumerate(self.models)
        ]

    def _build_colocated(self) -> None:
        self.batches = [self._batches(i, i) for i in range(self.config.nodes)]
        self.stretchable = [b for node in self.batches for b in node]  # poked by the queues
        for i in range(self.config.nodes):
            self.env.process(self._colocated(i))

    def _build_disaggregated(self) -> None:
        cfg = self.config
        self.stretchable = []
        self.batches = [self._batches(i, cfg.prefill_nodes + i) for i in range(cfg.decode_nodes)]
        self.ready: deque[RequestRecord] = deque()  # prefilled, waiting for a decode slot
        self.held = [0] * cfg.prefill_nodes  # caches each prefill node holds
        self.idle: deque[int] = deque(range(cfg.prefill_nodes))  # in the order they began waiting
        self.is_idle = [True] * cfg.prefill_nodes
        self.link_free = [0.0] * cfg.decode_nodes  # when each decode node's link is next free
        decoding = [b[0] for b in self.batches]
        self._stepped = [_call(self._decode_stretch_end, b) for b in decoding]
        self._woken = [_call(self._decode_node, b) for b in decoding]
        for batch in decoding:
            self._decode_node(batch)

    # --- shared -----------------------------------------------------------------------------

    def steps_of(self, rec: RequestRecord) -> int:
        """Decode steps the request takes: drawn before the run when steps verify drafts
        (`rdusim.serving.acceptance`), else at the mean rate."""
        if self._drawn is not None:
            steps = self._drawn[self.requests.row(rec.id)]
            if steps >= 0:
                return steps
        return self.models[rec.model].shape.decode_steps(rec.output_tokens)

    def _arrivals(self, due: bool = False) -> None:
        """The requests of this instant join their models' queues (the one the event was due
        for, and those arriving no later than now), whoever waits for prompts is told, and the
        next arrival is scheduled (as simpy's timeout would: now + the gap)."""
        env, queues, a = self.env, self.queues, self.requests.arriving
        ids, times, prompts, outputs, models = (
            a["id"],
            a["arrival_s"],
            a["prompt_tokens"],
            a["output_tokens"],
            a["model"],
        )
        first = i = self.arrived_count
        now, n = env.now, len(ids)
        while i < n and ((due and i == first) or not times[i] > now):
            m = models[i]
            queues[m].append(RequestRecord(ids[i], times[i], prompts[i], outputs[i], m))
            i += 1
        if i > first:
            self.arrived_count = i
            self._arrived()
        if i < n:
            env.call_at(now + (times[i] - now), NORMAL, self._due)

    def _arrived(self) -> None:
        if self.config.mode == DeploymentMode.COLOCATED:
            for alarm in self.sleepers:
                alarm.wake()
            self.sleepers.clear()
            poke_all(self.stretchable)
        elif self.queue:
            self._wake_idle()

    def _take_prompts(self, most: int, model: int = 0) -> list[RequestRecord]:
        queue = self.queues[model]
        taken = [queue.popleft() for _ in range(min(most, len(queue)))]
        if self.stretchable:
            poke_all(self.stretchable)
        return taken

    def graph_s(self, model: int, graph_len: int) -> float:
        """One execution of `model`'s prefill graph of `graph_len` tokens (asked once)."""
        known = self.prefill_s[model]
        if graph_len not in known:
            known[graph_len] = self.models[model].times.prefill_s(graph_len)
        return known[graph_len]

    def _start_prefill(self, node: int, group: list[RequestRecord], model: int = 0) -> int:
        """Start the prefill graph that holds the group's longest prompt; its length."""
        shape = self.models[model].shape
        graph = shape.graph_len(max(r.prompt_tokens for r in group))  # lengths only grow
        start = self.env.now
        for rec in group:
            rec.prefill_node, rec.prefill_start_s, rec.graph_len = node, start, graph
        return graph

    def _prefilled(
        self, node: int, group: list[RequestRecord], start: float, graph: int, model: int = 0
    ) -> None:
        """The group's prefill graph has run: its first tokens are out."""
        now = self.env.now
        self.log.add_prefill(node, start, now, graph, [r.id for r in group], model)
        for rec in group:
            rec.first_token_s = now

    def _complete(self, rec: RequestRecord) -> None:
        rec.completions += 1
        self.table.store(rec)
        self.completed += 1
        if self.progress is not None and self.completed % PROGRESS_EVERY == 0:
            self.progress(PROGRESS_EVERY)

    def _decode_steps(self, batch: DecodeBatch, most: int, replan: Replan = cut) -> Steps:
        """Up to `most` steps of `batch` (fewer if a request completes or a poke cuts them);
        the requests they complete free their slots. Returns how many steps ran, and those
        requests."""
        yield batch.plan(most, replan)
        steps = batch.stretch.steps if batch.stretch is not None else 0
        done = batch.finish()
        for rec in done:
            batch.release(rec.slot)
            self._complete(rec)
        return steps, done

    # --- colocated --------------------------------------------------------------------------

    def _colocated(self, node: int) -> Process:
        """The node's loop: take the next model's turn (switching it in if it is not resident),
        ask the policy what to run of it, run it. Every decision goes through it; the decode
        steps the policy commits to in a row are one pass (`_ahead`)."""
        env = self.env
        policy = self.config.colocated_policy()
        ahead = policy if self.config.coalesce_steps and isinstance(policy, Lookahead) else None
        turns = ModelTurns(
            self.models,
            self.config.hbm_budget,
            self.config.pinned,
            self.batches[node],
            self.queues,
        )
        last = [Action.WAIT] * len(self.models)
        since = [0] * len(self.models)
        waited: set[int] = set()  # models whose policy chose to wait since the node last ran
        while True:
            m = turns.next()
            if m is None:
                yield self._sleep(node)
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
                yield from self._colocated_prefill(batch, decision, state)
                since[m] = 0
            elif isinstance(decision, Decode):
                most, replan = self._ahead(ahead, state, turns, batch)
                steps, _ = yield from self._decode_steps(batch, most, replan)
                since[m] += steps
            elif isinstance(decision, Wait):
                waited.add(m)
                if waited >= turns.with_work():  # nothing to run on any model: wait
                    waited.clear()
                    yield self._sleep(node)
            else:
                raise TypeError(f"a policy chose {decision!r}, not a Prefill, Decode or Wait")
            if not isinstance(decision, Wait):
                waited.clear()
            last[m] = decision.action
            turns.last_used[m] = env.now

    def _sleep(self, node: int) -> Ring:
        """Wait for the next prompt to arrive."""
        self.sleepers.append(self.alarms[node])
        return self.alarms[node].sleep()

    def _ahead(
        self,
        policy: Lookahead | None,
        state: SchedulerState,
        turns: ModelTurns,
        batch: DecodeBatch,
    ) -> tuple[int, Replan]:
        """How many decode steps the node's policy commits to from `state` (one, unless it
        says, `Lookahead`, and no other model can take a turn meanwhile), and how to re-plan
        them when a queue changes (with one model: ask the policy again, as of the boundary;
        with several: stop at the boundary and take the turn afresh)."""
        if policy is None or not turns.sole(batch.model):
            return 1, cut
        most = max(1, policy.decodes_ahead(state))
        if turns.count > 1:
            return most, cut

        def replan(first: int) -> int:
            later = SchedulerState(
                batch.bound(first),
                state.node,
                state.waiting,
                state.free_slots,
                state.running,
                state.prefill_batch,
                state.steps_since_prefill + first,
                Action.DECODE,
            )
            return first + policy.decodes_ahead(later)

        return most, replan

    def _colocated_prefill(
        self, batch: DecodeBatch, decision: Prefill, state: SchedulerState
    ) -> Process:
        """Prefill the chosen requests into free slots of `batch`'s node, whole or in chunks;
        they join its batch."""
        chunk = self.config.prefill_chunk
        check_prefill(decision, state, chunk)
        group = self._take_chosen(decision.requests, batch.model)
        whole = decision.chunk_tokens or chunk or 0
        if chunk is not None and any(r.prompt_tokens > whole for r in group):
            yield from self._chunked_prefill(batch, group, chunk)
            return
        env, node = self.env, batch.node
        for rec in group:
            rec.decode_node, rec.slot, rec.slot_from_s = node, batch.reserve(), env.now
        start = env.now
        graph = self._start_prefill(node, group, batch.model)
        yield env.after(self.graph_s(batch.model, graph), batch.alarm.priority)
        self._prefilled(node, group, start, graph, batch.model)
        for rec in group:
            self._first_token(batch, rec)
        batch.admit(env.now)

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
            yield env.after(self._chunk_s(m, k, tokens), batch.alarm.priority)
            ids = tuple(r.id for r, c in zip(group, chunks, strict=True) if c > k)
            self.log.add_prefill(node, start, env.now, tokens, ids, m, k)
            for rec, count in zip(group, chunks, strict=True):
                if count == k + 1:
                    self._first_token(batch, rec)
            batch.admit(env.now)
            if k + 1 < max(chunks) and batch.active:
                yield from self._decode_steps(batch, 1)

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
        yield self.env.after(self.models[m].load_s, turns.batches[m].alarm.priority)
        node = turns.batches[m].node
        self.log.switches.append(SwitchRun(node, start, self.env.now, m, evicted))

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
        poke_all(self.stretchable)
        return taken

    # --- disaggregated ----------------------------------------------------------------------

    def _try_prefill(self, node: int) -> bool:
        """Start a prefill on an idle prefill node if a prompt waits and the node has room for
        its cache (it holds at most `prefill_batch + prefill_hold`); whether it started."""
        if not self.queue:
            return False
        shape = self.shape
        most = min(shape.prefill_batch, shape.prefill_batch + shape.prefill_hold - self.held[node])
        if most < 1:
            return False
        group = self._take_prompts(most)
        start = self.env.now
        graph = self._start_prefill(node, group)
        done = self.env.now + self.graph_s(0, graph)
        self.env.call_at(
            done, node_priority(node), partial(self._prefill_done, node, group, start, graph)
        )
        return True

    def _prefill_done(
        self, node: int, group: list[RequestRecord], start: float, graph: int
    ) -> None:
        """A prefill node's graph has run: one-token requests are done, the others' caches wait
        for a decode slot; the node takes its next prompts or waits in line."""
        self._prefilled(node, group, start, graph)
        for rec in group:
            if rec.output_tokens <= 1:
                rec.last_token_s = self.env.now
                self._complete(rec)
            else:
                self.held[node] += 1
                self.ready.append(rec)
        self._dispatch()
        if not self._try_prefill(node):
            self.idle.append(node)
            self.is_idle[node] = True

    def _wake_idle(self) -> None:
        """Prompts arrived: the idle prefill nodes take them, in the order they began waiting
        (the others keep their places)."""
        idle = self.idle
        started = []
        for node in idle:
            if not self.queue:
                break
            if self._try_prefill(node):
                started.append(node)
        for node in started:
            idle.remove(node)
            self.is_idle[node] = False

    def _dispatch(self) -> None:
        """Give prefilled caches, first come first served, to decode nodes with a free slot."""
        while self.ready:
            if len(self.batches) == 1:
                batch = self.batches[0][0]
            else:
                batch = max((b[0] for b in self.batches), key=lambda b: (len(b.free), -b.node))
            if not batch.free:
                return
            rec = self.ready.popleft()
            rec.decode_node, rec.slot, rec.slot_from_s = batch.node, batch.reserve(), self.env.now
            seconds = self._transfer_s(rec)
            if seconds > 0:  # queued on the decode node's link, one cache at a time
                start = max(self.env.now, self.link_free[batch.node])
                end = self.link_free[batch.node] = start + seconds
                rec.transfer_start_s, rec.transfer_end_s = start, end
                self.env.call_at(end, NORMAL, partial(self._arrive, rec, batch))
            else:  # nothing to move: the cache is there before the next step starts
                rec.transfer_start_s = rec.transfer_end_s = self.env.now
                self._arrive(rec, batch)

    def _transfer_s(self, rec: RequestRecord) -> float:
        cfg = self.config
        return self.shape.kv_bytes(rec.prompt_tokens) / cfg.link_bandwidth + cfg.link_latency_s

    def _arrive(self, rec: RequestRecord, batch: DecodeBatch) -> None:
        """The cache is on the decode node: free its prefill node's memory (a node waiting for
        room wakes, and waits at the back of the line if there is nothing to take), join the
        batch at the next step boundary."""
        node = rec.prefill_node
        self.held[node] -= 1
        if self.is_idle[node]:  # it wakes: takes prompts, or goes to the back of the line
            self.idle.remove(node)
            if self._try_prefill(node):
                self.is_idle[node] = False
            else:
                self.idle.append(node)
        batch.pending.append(rec)
        batch.alarm.wake()
        batch.poke()

    def _decode_node(self, batch: DecodeBatch) -> None:
        """A decode node at a step boundary, or woken: the arrived caches join, then it runs
        steps until the next completion, or sleeps until a cache arrives."""
        batch.admit(self.env.now)
        if batch.active:
            batch.plan(self.most).callbacks.append(self._stepped[batch.node])
        else:
            batch.alarm.sleep().callbacks.append(self._woken[batch.node])

    def _decode_stretch_end(self, batch: DecodeBatch) -> None:
        """A decode node's steps have run: the requests they completed free their slots, and
        waiting caches take them."""
        done = batch.finish()
        for rec in done:
            batch.release(rec.slot)
            self._complete(rec)
        if done:
            self._dispatch()
        self._decode_node(batch)

    # --- run --------------------------------------------------------------------------------

    def run(self) -> EngineResult:
        self.env.run_all()
        if self.progress is not None:
            self.progress(self.completed % PROGRESS_EVERY)
        self.log.close()
        completions = self.table.column("completions")
        unfinished = self.table.column("id")[completions != 1]
        if len(unfinished):
            raise RuntimeError(
                f"requests did not complete exactly once: {unfinished[:10].tolist()}"
            )
        return EngineResult(
            table=self.table,
            log=self.log,
            decode_node_count=len(self.batches),
            slots_per_node=self.shape.decode_slots,
            config=self.config,
            shape=self.shape,
            decode_step_s=self.static_step_s[0],
            prefill_s=dict(self.prefill_s[0]),
            models=self.models,
            model_prefill_s=[dict(p) for p in self.prefill_s],
            static_step_s=list(self.static_step_s),
            model_chunk_s=[dict(c) for c in self.chunk_s],
        )


def _call(f: Callable[[DecodeBatch], None], batch: DecodeBatch) -> Callable[[object], None]:
    """An event's callback that calls `f(batch)`."""
    return lambda _: f(batch)


def drawn_steps_of(
    requests: RequestSet, models: Sequence[ModelGraphs], seed: int
) -> Sequence[int] | None:
    """Each request's decode steps by row, drawn in id order (each model from its own stream)
    for the models whose steps verify drafts (-1 for the others' requests); None when every
    step of every model accepts the mean. Kept with the requests for the next run."""
    key = (seed, tuple((g.shape.draft_tokens, g.shape.acceptance) for g in models))
    if key not in requests.drawn:
        model = requests.columns["model"]
        tokens = requests.columns["output_tokens"] - 1
        steps = np.full(len(requests), -1, dtype=np.int64)
        drafted = False
        for m, graphs in enumerate(models):
            shape = graphs.shape
            if shape.draft_tokens:
                rows = np.flatnonzero(model == m)
                steps[rows] = drawn_steps(
                    tokens[rows], shape.draft_tokens, shape.acceptance, seed, stream=m
                )
                drafted = True
        requests.drawn[key] = array("q", steps.tobytes()) if drafted else None
    return requests.drawn[key]


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
    requests: Sequence[Request] | Requests | RequestSet,
    models: Sequence[ModelGraphs],
    config: EngineConfig,
    progress: Progress | None = None,
) -> EngineResult:
    """Serve `requests`, each asking for one of `models` (`Request.model`, an index), on the
    deployment `config` (a `RequestSet` of them can be shared by several runs)."""
    return Engine(requests, models, config, progress).run()
