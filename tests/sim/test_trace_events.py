"""The Chrome Trace Event format both traces are written in (`rdusim.sim.trace_events`)."""

from __future__ import annotations

import json

from rdusim.sim.trace_events import US, complete, metadata, process, thread, trace


def test_a_complete_event_is_in_microseconds_and_never_negative() -> None:
    e = complete("k", "kernel", 1.5e-6, 4e-6, 1, 1001, {"count": 3})
    assert list(e) == ["name", "cat", "ph", "ts", "dur", "pid", "tid", "args"]
    assert e["ph"] == "X" and (e["ts"], e["args"]) == (1.5e-6 * US, {"count": 3})
    assert e["dur"] == (4e-6 - 1.5e-6) * US
    assert complete("k", "kernel", 2.0, 1.0, 1, 1, {})["dur"] == 0.0


def test_processes_and_threads_are_named_and_ordered_by_metadata() -> None:
    assert metadata("thread_name", 2, 7, name="slot 0") == {
        "name": "thread_name",
        "ph": "M",
        "pid": 2,
        "tid": 7,
        "args": {"name": "slot 0"},
    }
    assert process(3, "socket 2", 2) == [
        metadata("process_name", 3, 0, name="socket 2"),
        metadata("process_sort_index", 3, 0, sort_index=2),
    ]
    assert thread(3, 3001, "kernels", 1) == [
        metadata("thread_name", 3, 3001, name="kernels"),
        metadata("thread_sort_index", 3, 3001, sort_index=1),
    ]


def test_a_trace_puts_metadata_first_and_keeps_other_data_when_given() -> None:
    meta = process(1, "node 0", 0)
    events = [complete("decode", "decode", 0.0, 1.0, 1, 1, {"steps": 2})]
    assert trace(meta, events) == {"traceEvents": meta + events, "displayTimeUnit": "ms"}
    full = trace(meta, events, {"phase": "decode"})
    assert list(full) == ["traceEvents", "displayTimeUnit", "otherData"]
    assert full["otherData"] == {"phase": "decode"}
    assert json.loads(json.dumps(full)) == full
