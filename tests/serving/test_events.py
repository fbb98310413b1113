"""The engine's event order at one instant, and the alarms a node waits on."""

from __future__ import annotations

from functools import partial

import pytest
from hypothesis import given
from hypothesis import strategies as st
from simpy.events import NORMAL, URGENT

from rdusim.serving.events import WAKE_PRIORITY, Alarm, ServingEnvironment, node_priority


def _log(env: ServingEnvironment, seen: list[str], name: str):
    return lambda _: seen.append(f"{name}@{env.now}")


def test_an_instant_runs_ordinary_events_then_nodes_in_order_then_woken_nodes() -> None:
    env = ServingEnvironment()
    seen: list[str] = []
    sleeper_a, sleeper_b = Alarm(env, node_priority(5)), Alarm(env, node_priority(0))
    sleeper_a.sleep().callbacks.append(_log(env, seen, "woken a"))
    sleeper_b.sleep().callbacks.append(_log(env, seen, "woken b"))

    def wake(_: object) -> None:  # an arrival wakes both, a first: they began waiting so
        sleeper_a.wake()
        sleeper_b.wake()

    env.at(1.0, node_priority(1)).callbacks.append(_log(env, seen, "node 1"))
    env.at(1.0, node_priority(0)).callbacks.append(_log(env, seen, "node 0"))
    env.at(1.0, NORMAL).callbacks.append(wake)
    env.at(1.0, NORMAL).callbacks.append(_log(env, seen, "arrival"))
    env.at(0.5, node_priority(3)).callbacks.append(_log(env, seen, "node 3"))
    env.at(1.0, URGENT).callbacks.append(_log(env, seen, "urgent"))
    env.run_all()
    assert seen == [
        "node 3@0.5",
        "urgent@1.0",
        "arrival@1.0",
        "node 0@1.0",
        "node 1@1.0",
        "woken a@1.0",
        "woken b@1.0",
    ]
    assert env.processed == 8  # six scheduled, two woken
    assert node_priority(10_000) < WAKE_PRIORITY


def test_after_gives_the_time_simpys_timeout_gives() -> None:
    env = ServingEnvironment()
    rang: list[float] = []

    def later(_: object) -> None:
        env.after(0.2, node_priority(0)).callbacks.append(lambda _: rang.append(env.now))

    env.at(0.1, NORMAL).callbacks.append(later)
    env.run_all()

    def process(e: ServingEnvironment):
        yield e.timeout(0.1)
        yield e.timeout(0.2)

    reference = ServingEnvironment()
    reference.process(process(reference))
    reference.run_all()
    assert rang == [reference.now] == [0.1 + 0.2] != [0.3]


def test_a_moved_alarm_rings_once_at_its_new_time() -> None:
    env = ServingEnvironment()
    alarm = Alarm(env, node_priority(0))
    rang: list[float] = []
    alarm.set(5.0).callbacks.append(lambda _: rang.append(env.now))
    env.at(1.0, NORMAL).callbacks.append(lambda _: alarm.move(2.0))
    env.at(1.5, NORMAL).callbacks.append(lambda _: alarm.move(3.0))
    env.run_all()
    assert rang == [3.0]
    with pytest.raises(AssertionError, match="rang already"):
        alarm.move(4.0)


def test_a_failed_process_fails_the_run_with_its_error() -> None:
    env = ServingEnvironment()

    def fails():
        yield env.timeout(1.0)
        raise ValueError("no chunk graph")

    env.process(fails())
    with pytest.raises(ValueError, match="no chunk graph"):
        env.run_all()


SCHEDULE = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.5, 1.0, 2.0]),  # time: ties are the point
        st.sampled_from([URGENT, NORMAL, node_priority(0), node_priority(3)]),
        st.sampled_from(["event", "function", "method", "partial"]),
    ),
    max_size=30,
)


@given(SCHEDULE)
def test_a_queued_function_runs_where_an_event_made_then_would(
    schedule: list[tuple[float, int, str]],
) -> None:
    """`call_at` entries (functions, bound methods, partials) and events interleave in the
    order events alone would take: by time, then priority, then the order they were made; each
    runs once, and each counts as one processed event."""
    env = ServingEnvironment()
    seen: list[int] = []

    class Holder:
        def __init__(self, k: int) -> None:
            self.k = k

        def ring(self) -> None:
            seen.append(self.k)

    for k, (time, priority, kind) in enumerate(schedule):
        if kind == "event":
            env.at(time, priority).callbacks.append(lambda _, k=k: seen.append(k))
        elif kind == "function":
            env.call_at(time, priority, lambda k=k: seen.append(k))
        elif kind == "method":
            env.call_at(time, priority, Holder(k).ring)
        else:
            env.call_at(time, priority, partial(seen.append, k))
    env.run_all()
    # the oracle: a stable sort of the schedule by (time, priority)
    expected = sorted(range(len(schedule)), key=lambda k: schedule[k][:2])
    assert seen == expected
    assert env.processed == len(schedule)


def test_call_at_refuses_what_the_run_would_take_for_an_event() -> None:
    env = ServingEnvironment()
    with pytest.raises(TypeError, match="function, method or partial"):
        env.call_at(1.0, NORMAL, [].clear)  # a builtin method
    assert env.run_all() is None and env.processed == 0
