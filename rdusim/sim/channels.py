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
from typing import Any

import simpy
from simpy.events import Event


def _event(env: simpy.Environment) -> Event:
    """A pending simpy event, made without Event.__init__'s call."""
    ev = Event.__new__(Event)
    ev.env = env
    ev.callbacks = []
    return ev


def _succeed(ev: Event, value: Any = None) -> None:
    """Event.succeed for an event known to be pending."""
    ev._ok = True
    ev._value = value
    ev.env.schedule(ev)


class Store:
    """A FIFO store of items, as simpy.Store."""

    def __init__(self, env: simpy.Environment, capacity: float = float("inf")) -> None:
        self.env = env
        self.capacity = capacity
        self.items: deque[Any] = deque()
        self._puts: deque[Event] = deque()
        self._gets: deque[Event] = deque()

    def put(self, item: Any) -> Event:
        ev = _event(self.env)
        ev.item = item  # type: ignore[attr-defined]
        self._puts.append(ev)
        ev.callbacks.append(self._trigger_get)
        self._trigger_put(None)
        return ev

    def get(self) -> Event:
        ev = _event(self.env)
        self._gets.append(ev)
        ev.callbacks.append(self._trigger_put)
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

    def request(self, priority: int = 0) -> Event:
        ev = _event(self.env)
        ev.key = (priority, self.env.now, False)  # type: ignore[attr-defined]
        insort_right(self._queue, ev, key=_key)
        self._trigger_put(None)
        return ev

    def release(self, request: Event) -> Event:
        ev = _event(self.env)
        ev.callbacks.append(self._trigger_put)
        if request in self.users:
            self.users.remove(request)
        _succeed(ev)
        return ev

    def _trigger_put(self, _: Event | None) -> None:
        if self._queue and len(self.users) < self.capacity:
            ev = self._queue.pop(0)
            self.users.append(ev)
            _succeed(ev)
