"""The stores and channels of the pipeline simulation, lighter than simpy's own.

The engine (`rdusim.sim.engine`) runs on simpy: its environment, processes, timeouts and
events. Its tiles wait in FIFO stores and its transfers queue for a socket's HBM channel or P2P
link by priority (earlier iterations first). simpy's general `Store` and `PriorityResource`
do that through several layers per request; these do exactly what those do for the engine's
use, creating and scheduling the same events in the same order, so that every simulated time
is the same to the last bit (tests/sim/test_channels.py runs the engine on both and compares),
in about 60% of the time.

What simpy does, and these do too:
- `put` queues the item's event and tries the *first* waiting put (a full store keeps it
  waiting); `get` queues its event and tries the first waiting get. A processed put tries the
  first get, a processed get the first put.
- `request` queues by (priority, request time), ties in arrival order, and grants the first
  request while the channel has room; `release` frees the channel at once and schedules an
  event whose processing grants the next request.
"""

from __future__ import annotations

from bisect import insort_right
from collections import deque
from heapq import heappop, heappush
from typing import Any

import simpy
from simpy.events import NORMAL, Event, Timeout


def _event(env: simpy.Environment) -> Event:
    """A pending simpy event, made without Event.__init__'s call."""
    ev = Event.__new__(Event)
    ev.env = env
    ev.callbacks = []
    return ev


def _succeed(ev: Event, value: Any = None) -> None:
    """Event.succeed for an event known to be pending (`Environment.schedule`, inlined)."""
    ev._ok = True
    ev._value = value
    env = ev.env
    heappush(env._queue, (env._now, NORMAL, next(env._eid), ev))


class Environment(simpy.Environment):
    """simpy's environment with its timeouts made and its events processed in fewer calls:
    `timeout` schedules what simpy's `Timeout` does, and `run` without `until` processes the
    queue as `step` does, in the same order."""

    def timeout(self, delay: float, value: Any = None) -> Timeout:  # type: ignore[override]
        if delay < 0:  # as simpy's `Timeout` refuses it
            raise ValueError(f"Negative delay {delay}")
        ev = Timeout.__new__(Timeout)
        ev.env = self
        ev.callbacks = []
        ev._value = value
        ev._delay = delay
        ev._ok = True
        heappush(self._queue, (self._now + delay, NORMAL, next(self._eid), ev))
        return ev

    def run(self, until: Any = None) -> Any:
        if until is not None:
            return super().run(until)
        queue = self._queue
        while queue:
            self._now, _, _, event = heappop(queue)
            callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]
            for callback in callbacks:
                callback(event)
            if not event._ok and not hasattr(event, "_defused"):
                exc = type(event._value)(*event._value.args)
                exc.__cause__ = event._value
                raise exc
        return None


class Store:
    """A FIFO store of items, as simpy.Store."""

    def __init__(self, env: simpy.Environment, capacity: float = float("inf")) -> None:
        self.env = env
        self.capacity = capacity
        self.items: deque[Any] = deque()
        self._puts: deque[Event] = deque()
        self._gets: deque[Event] = deque()
        # the callbacks, bound once
        self._on_put = self._trigger_get
        self._on_get = self._trigger_put

    def put(self, item: Any) -> Event:
        env = self.env
        ev = Event.__new__(Event)
        ev.env = env
        ev.callbacks = [self._on_put]
        if not self._puts and len(self.items) < self.capacity:
            # `_trigger_put` with this put the only one waiting: taken at once
            self.items.append(item)
            ev._ok = True
            ev._value = None
            heappush(env._queue, (env._now, NORMAL, next(env._eid), ev))
            return ev
        ev.item = item  # type: ignore[attr-defined]
        self._puts.append(ev)
        self._trigger_put(None)
        return ev

    def get(self) -> Event:
        env = self.env
        ev = Event.__new__(Event)
        ev.env = env
        ev.callbacks = [self._on_get]
        if not self._gets and self.items:
            # `_trigger_get` with this get the only one waiting: served at once
            ev._ok = True
            ev._value = self.items.popleft()
            heappush(env._queue, (env._now, NORMAL, next(env._eid), ev))
            return ev
        self._gets.append(ev)
        self._trigger_get(None)
        return ev

    def _trigger_put(self, _: Event | None) -> None:
        if self._puts and len(self.items) < self.capacity:
            ev = self._puts.popleft()
            self.items.append(ev.item)  # type: ignore[attr-defined]
            _succeed(ev)

    def _trigger_get(self, _: Event | None) -> None:
        if self._gets and self.items:
            _succeed(self._gets.popleft(), self.items.popleft())


def _key(ev: Event) -> tuple[int, float, bool]:
    return ev.key  # type: ignore[attr-defined]


class PriorityResource:
    """A channel of `capacity` users granted by priority (lower first), as
    simpy.PriorityResource (whose requests do not preempt)."""

    def __init__(self, env: simpy.Environment, capacity: int = 1) -> None:
        self.env = env
        self.capacity = capacity
        self.users: list[Event] = []
        self._queue: list[Event] = []  # sorted by key; equal keys in arrival order
        self._on_release = self._trigger_put  # the callback, bound once

    def request(self, priority: int = 0) -> Event:
        ev = _event(self.env)
        ev.key = (priority, self.env._now, False)  # type: ignore[attr-defined]
        if not self._queue and len(self.users) < self.capacity:
            # `_trigger_put` with this request the only one waiting: granted at once
            self.users.append(ev)
            _succeed(ev)
            return ev
        insort_right(self._queue, ev, key=_key)
        self._trigger_put(None)
        return ev

    def release(self, request: Event) -> Event:
        ev = Event.__new__(Event)
        ev.env = self.env
        ev.callbacks = [self._on_release]
        if request in self.users:
            self.users.remove(request)
        _succeed(ev)
        return ev

    def _trigger_put(self, _: Event | None) -> None:
        if self._queue and len(self.users) < self.capacity:
            ev = self._queue.pop(0)
            self.users.append(ev)
            _succeed(ev)
