"""The serving engine's event queue: simpy's, with a fixed order for what happens at one instant.

simpy processes events by time, then priority, then the order they were scheduled in. That last
key is an accident of the run's history (which event happened to be created first), and it is
what would decide, say, whether a cache that arrives exactly when a decode step ends joins at
that step boundary or the next. The engine instead gives the end of every graph execution a
node runs (a prefill, a chunk, a decode step, a model switch) its own priority, after every
ordinary event of that instant (arrivals, cache transfers, wake-ups) and in node order
(`node_priority`): a node deciding at an instant sees everything else that happened at it.

An idle node that something wakes (a prompt arrives, a cache arrives) runs after all of that
instant's graph executions have ended, idle nodes in the order they began waiting.

That rule is what lets a run of identical decode steps take one event (`Alarm`): a step end at
which nothing changes schedules nothing, so leaving it out changes the order of no other event,
and the end of the run sorts where its last step's end would have.

An event that no process waits on and nothing moves (an arrival, a disaggregated prefill's end,
a cache's transfer) is queued as the function it calls (`call_at`), taking the same place in
the order an event made at that moment would, without an event object and its callback list.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from heapq import heappop, heappush
from types import FunctionType, MethodType
from typing import Any

import simpy
from simpy.events import NORMAL, Event

FIRST_NODE_PRIORITY = 2  # after simpy's URGENT (0) and NORMAL (1) events of the same instant
WAKE_PRIORITY = 1 << 30  # an idle node woken: after every node's graph execution of the instant


# What `call_at` queues in place of an event: a function called with no argument (the kinds
# `run_all` tells from an event by their class alone).
CALLS: frozenset[Any] = frozenset({FunctionType, MethodType, partial})


def node_priority(rank: int) -> int:
    """The priority of the graph executions of the node of `rank` (its order among nodes)."""
    return FIRST_NODE_PRIORITY + rank


class Ring(Event):
    """An event that is triggered when created and processed when it is scheduled for."""

    _value = None  # triggered, with no value, successfully (class attributes: made often)
    _ok = True

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.callbacks: list[Any] = []


class ServingEnvironment(simpy.Environment):
    """simpy's environment with events scheduled at an absolute time and a record of the
    priority of the event being processed (`priority`)."""

    def __init__(self) -> None:
        super().__init__()
        self.priority = NORMAL
        self.processed = 0  # events processed by `run_all`

    def at(self, time: float, priority: int) -> Ring:
        """An event processed at `time` (no earlier than now) with `priority`."""
        event = Ring(self)
        queue: list[Any] = self._queue
        heappush(queue, (time, priority, next(self._eid), event))
        return event

    def after(self, delay: float, priority: int) -> Ring:
        """An event `delay` seconds from now (the time simpy's `timeout` would give)."""
        return self.at(self._now + delay, priority)

    def call_at(self, time: float, priority: int, call: Callable[[], object]) -> None:
        """`call()` at `time` (no earlier than now) with `priority`: an event no one waits for
        and nothing cancels, queued as the function itself (in the order an event made now
        would take) rather than as an event with a list of callbacks."""
        if call.__class__ not in CALLS:
            raise TypeError(f"call_at takes a function, method or partial, not {call!r}")
        queue: list[Any] = self._queue
        heappush(queue, (time, priority, next(self._eid), call))

    def run_all(self) -> None:
        """Process every event (simpy's `run()` without `until`), noting each one's priority."""
        queue: list[Any] = self._queue
        calls = CALLS
        while queue:
            self.processed += 1
            self._now, self.priority, _, event = heappop(queue)
            if event.__class__ in calls:  # queued by `call_at`
                event()
                continue
            callbacks, event.callbacks = event.callbacks, None
            for callback in callbacks:
                callback(event)
            if not event._ok and not hasattr(event, "_defused"):
                exc = type(event._value)(*event._value.args)
                exc.__cause__ = event._value
                raise exc


class Alarm:
    """A node's wake-up, at the node's priority: at a time, which can move earlier or later
    before it rings (the end of a run of decode steps that an arrival cuts short or lets run
    longer), or when something wakes it (a node with nothing to do)."""

    def __init__(self, env: ServingEnvironment, priority: int) -> None:
        self.env = env
        self.priority = priority
        self.event: Ring | None = None
        self.asleep = False

    def set(self, time: float) -> Ring:
        """The event to wait for: ringing at `time`."""
        self.event = self.env.at(time, self.priority)
        return self.event

    def move(self, time: float) -> None:
        """Ring at `time` instead; the process waiting for the old event waits for the new one
        (the old one stays queued, with nothing to call)."""
        old = self.event
        assert old is not None and old.callbacks is not None, "the alarm rang already"
        new = self.env.at(time, self.priority)
        new.callbacks, old.callbacks = old.callbacks, []
        self.event = new

    def sleep(self) -> Ring:
        """The event to wait for: ringing at the instant of the next `wake()`, after the
        instant's graph executions (`WAKE_PRIORITY`)."""
        self.event = Ring(self.env)
        self.asleep = True
        return self.event

    def wake(self) -> None:
        """Ring now (after the instant's ordinary events), if asleep."""
        if self.asleep:
            self.asleep = False
            env = self.env
            queue: list[Any] = env._queue
            heappush(queue, (env._now, WAKE_PRIORITY, next(env._eid), self.event))
