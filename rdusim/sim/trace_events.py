"""The Chrome Trace Event format (opens in ui.perfetto.dev): the events every rdusim trace is made
of, for the simulated run (`rdusim.sim.trace`) and the serving run (`rdusim.serving.trace`).

A trace is complete ("X") events, each on a thread ("tid") of a process ("pid"), with metadata
("M") events naming the processes and threads and fixing their order on screen. Times are
microseconds, as the format requires; rdusim's are seconds, converted here.
"""

from __future__ import annotations

from typing import Any

US = 1e6  # seconds -> microseconds


def complete(
    name: str, cat: str, start_s: float, end_s: float, pid: int, tid: int, args: dict[str, Any]
) -> dict[str, Any]:
    """A slice from `start_s` to `end_s` (never of negative length) on thread `tid` of `pid`."""
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": start_s * US,
        "dur": max(0.0, end_s - start_s) * US,
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def metadata(kind: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    """A metadata event: `process_name`, `thread_sort_index`, ..."""
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": args}


def process(pid: int, name: str, sort_index: int) -> list[dict[str, Any]]:
    """The events that name process `pid` and place it `sort_index`-th."""
    return [
        metadata("process_name", pid, 0, name=name),
        metadata("process_sort_index", pid, 0, sort_index=sort_index),
    ]


def thread(pid: int, tid: int, name: str, sort_index: int) -> list[dict[str, Any]]:
    """The events that name thread `tid` of `pid` (a track) and place it `sort_index`-th."""
    return [
        metadata("thread_name", pid, tid, name=name),
        metadata("thread_sort_index", pid, tid, sort_index=sort_index),
    ]


def trace(
    meta: list[dict[str, Any]],
    events: list[dict[str, Any]],
    other: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The trace file's content (`json.dumps` it): the metadata first, then the events, shown in
    milliseconds; `other` is kept as `otherData`, which viewers list as the trace's metadata."""
    out: dict[str, Any] = {"traceEvents": meta + events, "displayTimeUnit": "ms"}
    if other is not None:
        out["otherData"] = other
    return out
