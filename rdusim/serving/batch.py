"""One node's decode batch of one model, and its runs of decode steps taken as one event.

A static decode graph's step time changes only when the batch does (`decode_step: static`: never;
`occupied`: with its occupied slots and longest cache), and the batch changes only at a step
boundary where a request joins or completes. So the engine asks the batch for a *stretch*: up
to a number of steps (what the node's policy commits to), ending at the next completion, timed
by adding each step's time to the last boundary exactly as an event per step would
(`Stretch.bounds`), with one alarm at its end. Whatever may change the batch or the node's
choice before then (a cache arriving, a prompt arriving or taken) *pokes* the batch: the
stretch is re-planned from its first boundary not yet passed (in the engine's event order,
`rdusim.serving.events`), cut short there or extended, so the node wakes at the boundary the
step-by-step run would have acted at, and at no other.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, islice, repeat

from rdusim.serving.events import Alarm, Ring, ServingEnvironment
from rdusim.serving.records import JOINED, LEFT, DecodeRun, RequestRecord, RunLog
from rdusim.serving.shape import GraphShape
from rdusim.serving.step_times import StepTimes
from rdusim.spec.workload import DecodeStepCost

UNBOUNDED = 1 << 62  # steps: as many as it takes
Replan = Callable[[int], int]  # first boundary not yet passed -> steps the stretch runs to


def cut(first: int) -> int:
    """Re-plan of a stretch whose batch changes at the next boundary: stop there."""
    return first


@dataclass(slots=True)
class Stretch:
    """Decode steps run back to back: step i ends at `bounds[i]` (`bounds[0]`, the start);
    the alarm rings at `bounds[steps]`, or earlier at the batch's next completion, `until`."""

    bounds: list[float]
    steps: int
    until: int
    replan: Replan
    joins: list[tuple[int, int]] = field(default_factory=list)  # (boundary, requests) joining


class DecodeBatch:
    """The static decode graph of one model on one node: its slots, the requests decoding in
    them, its steps."""

    def __init__(
        self,
        env: ServingEnvironment,
        log: RunLog,
        index: tuple[int, int, int],  # node, model, number in the occupancy records
        shape: GraphShape,
        times: StepTimes,
        static_step_s: float,  # the graph's step at its full batch and cache
        step_cost: DecodeStepCost,
        steps_of: Callable[[RequestRecord], int],
        alarm: Alarm,
    ) -> None:
        self.env, self.log = env, log
        self.node, self.model, self.index = index
        self.shape, self.times = shape, times
        self.static = step_cost == DecodeStepCost.STATIC
        self.static_step_s = static_step_s
        self.steps_of = steps_of
        self.alarm = alarm
        self.free = list(range(shape.decode_slots))  # a heap: the lowest slot first
        self.steps = 0
        self.active = 0
        self.pending: list[RequestRecord] = []  # arrived caches, joining at the next step
        self._finish: list[tuple[int, int, RequestRecord]] = []  # (step, id, record)
        self._cache: list[tuple[float, int]] = []  # (-cache key, id), stale entries skipped
        self.running: dict[int, RequestRecord] = {}  # requests in the batch, by id
        self._last_run = -1  # the index of its last decode run in the log (-1: none yet)
        self._last_step = ((-1, -1), 0.0)  # occupied cost: the last (slots, cache) and time
        self.stretch: Stretch | None = None

    def reserve(self) -> int:
        return heapq.heappop(self.free)

    def release(self, slot: int) -> None:
        heapq.heappush(self.free, slot)

    def admit(self, now: float) -> None:
        """Bring the requests whose caches have arrived into the batch (a step boundary)."""
        if not self.pending:
            return
        self._join(self.pending, self.steps)
        self.active += len(self.pending)
        self.pending.clear()
        self.log.occupied(now, self.index, self.active, self.env.priority, JOINED)

    def _join(self, recs: list[RequestRecord], steps: int) -> None:
        """`recs` join the batch when it has run `steps` steps."""
        shape = self.shape
        for rec in recs:
            rec.join_step = steps
            heapq.heappush(self._finish, (steps + self.steps_of(rec), rec.id, rec))
            if not self.static:  # the longest cache sets the step time
                # its cache during global step s is key + s * tokens_per_step (`_occupied_s`)
                key = shape.kv_tokens(rec.prompt_tokens) + 1 - (steps + 1) * shape.tokens_per_step
                heapq.heappush(self._cache, (-key, rec.id))
            self.running[rec.id] = rec

    # --- stretches of steps -----------------------------------------------------------------

    def plan(self, most: int, replan: Replan = cut) -> Ring:
        """Start `most` steps now (fewer if a request completes first); the event that rings
        at the end of the last. `replan` re-plans it when the batch is poked."""
        until = self._finish[0][0] - self.steps if self._finish else UNBOUNDED
        steps = most if most < until else until
        st = Stretch([self.env._now], steps, until, replan)
        self._extend(st, steps)
        self.stretch = st
        return self.alarm.set(st.bounds[steps])

    def poke(self) -> None:
        """Something the batch or its node's choice depends on changed now: re-plan the
        stretch from its first step boundary not yet passed. Caches that arrived join there;
        with a static step (whose time the batch does not change) that is accounted now and
        the stretch runs on, else it stops there."""
        st = self.stretch
        if st is None:
            return
        env = self.env
        # a boundary at this instant comes after the current event if its priority is higher
        if self.alarm.priority > env.priority:
            first = bisect_left(st.bounds, env.now, 1, st.steps + 1)
        else:
            first = bisect_right(st.bounds, env.now, 1, st.steps + 1)
        if self.pending and self.static and first < st.steps:
            self._join(self.pending, self.steps + first)
            if st.joins and st.joins[-1][0] == first:  # one change for all joining there
                first, before = st.joins.pop()
                st.joins.append((first, before + len(self.pending)))
            else:
                st.joins.append((first, len(self.pending)))
            self.pending.clear()
            st.until = min(st.until, self._finish[0][0] - self.steps)
            steps = st.until
        else:
            steps = max(first, min(st.replan(first), st.until))
        if steps != st.steps:
            self._extend(st, steps)
            st.steps = steps
            self.alarm.move(st.bounds[steps])

    def bound(self, i: int) -> float:
        """When the current stretch's step i ends (its start for 0)."""
        assert self.stretch is not None
        self._extend(self.stretch, i)
        return self.stretch.bounds[i]

    def finish(self) -> list[RequestRecord]:
        """Account the stretch that just ended: the requests it completed, their slots still
        held."""
        st, self.stretch = self.stretch, None
        assert st is not None
        k, bounds = st.steps, st.bounds
        start, now = bounds[0], bounds[k]
        log, run, priority = self.log, self._last_run, self.alarm.priority
        log.slot_steps += self.active * k
        for j, joined in st.joins:  # joined at boundary j: in the batch for the steps after
            self.active += joined
            log.slot_steps += joined * (k - j)
            log.occupied(bounds[j], self.index, self.active, priority, JOINED)
        steps = self.steps = self.steps + k
        log.decode_steps += k
        if run >= 0 and log.decode_end_s(run) == start:
            log.extend_decode_run(run, now, k)
        else:
            self._last_run = log.add_decode_run(
                DecodeRun(self.node, start, now, k, self.model), bounds[1], priority
            )
        finish, running = self._finish, self.running
        if not finish or finish[0][0] != steps:
            return []
        done = []
        while finish and finish[0][0] == steps:
            rec = heapq.heappop(finish)[2]
            rec.steps = steps - rec.join_step
            rec.last_token_s = now
            del running[rec.id]
            done.append(rec)
        self.active -= len(done)
        log.occupied(now, self.index, self.active, priority, LEFT)
        return done

    def _extend(self, st: Stretch, upto: int) -> None:
        """Time the stretch's steps up to step `upto`: each boundary is the last plus a step,
        the sum an event per step would make."""
        bounds = st.bounds
        t = bounds[-1]
        if self.static:  # the running sum, t + step + step ..., each added in turn
            more = upto + 1 - len(bounds)
            if more > 0:
                bounds.extend(
                    islice(accumulate(repeat(self.static_step_s, more), initial=t), 1, None)
                )
            return
        for i in range(len(bounds) - 1, upto):
            t = t + self._occupied_s(self.steps + i)
            bounds.append(t)

    def _occupied_s(self, steps: int) -> float:
        """The time of the step after `steps` global steps: the occupied slots at the longest
        cache any of them has then."""
        while self._cache[0][1] not in self.running:
            heapq.heappop(self._cache)
        shape = self.shape
        longest = -self._cache[0][0] + (steps + 1) * shape.tokens_per_step
        cache_len = min(shape.cache_len, math.ceil(longest - 1e-9))
        key = (self.active, cache_len)
        if key != self._last_step[0]:  # a cache at its cap repeats the same step
            self._last_step = (key, self.times.decode_step_s(self.active, cache_len))
        return self._last_step[1]


def poke_all(batches: Sequence[DecodeBatch]) -> None:
    """Poke every batch in a stretch."""
    for batch in batches:
        if batch.stretch is not None:
            batch.poke()
