"""A serving run as a Chrome Trace Event file (open it in ui.perfetto.dev).

The layout follows `rdusim.sim.trace` (complete "X" events in microseconds, one process per
piece of hardware, named threads as tracks, all built by `rdusim.sim.trace_events`), one level
up: a process per node, and on it

* `prefill graph`: one slice per prefill execution (its graph length and requests in args);
* `decode graph`: consecutive decode steps merged into one slice (their count in args), so a
  run of thousands of steps stays a few slices between prefills;
* `KV link in` (disaggregated decode nodes): one slice per cache transfer;
* `slot N`: one slice per request that held the slot, from its reservation (prefill start on a
  colocated node, transfer start on a decode node) to its last token. A slot never shows two
  overlapping slices.

With several models each graph slice names its model, each model's slots have tracks of their
own (`<model> slot N`), and a `model switch` track shows each switch (the model loaded, the ones
evicted).
"""

from __future__ import annotations

import math
from typing import Any

from rdusim.serving.engine import EngineResult, RequestRecord
from rdusim.sim.trace_events import complete, process, thread, trace
from rdusim.spec.workload import DeploymentMode

_TID_PREFILL, _TID_DECODE, _TID_LINK, _TID_SWITCH, _TID_FIRST_SLOT = 0, 1, 2, 3, 10
_DECODE_PID_BASE = 1000  # disaggregated decode nodes come after the prefill nodes


def _request_args(rec: RequestRecord) -> dict[str, Any]:
    return {
        "request": rec.id,
        "prompt_tokens": rec.prompt_tokens,
        "output_tokens": rec.output_tokens,
        "arrival_s": rec.arrival_s,
        "ttft_s": rec.ttft_s,
    }


class _Tracks:
    """The trace's processes and named tracks, each declared once, and the models' names."""

    def __init__(self, result: EngineResult) -> None:
        self.colocated = result.config.mode == DeploymentMode.COLOCATED
        self.meta: list[dict[str, Any]] = []
        self.seen: set[tuple[int, int]] = set()
        self.names = [g.name for g in result.models] if len(result.models) > 1 else [""]

    def prefill_pid(self, node: int) -> int:
        return node + 1

    def decode_pid(self, node: int) -> int:
        return node + 1 if self.colocated else _DECODE_PID_BASE + node

    def track(self, pid: int, tid: int, label: str) -> tuple[int, int]:
        if (pid, tid) not in self.seen:
            self.seen.add((pid, tid))
            self.meta.extend(thread(pid, tid, label, tid))
        return pid, tid

    def of(self, model: int) -> str:
        """A slice's model prefix (none with one model)."""
        return f"{self.names[model]} " if self.names[model] else ""


def _graph_events(result: EngineResult, t: _Tracks) -> list[dict[str, Any]]:
    """Prefill executions, merged decode steps and model switches."""
    events: list[dict[str, Any]] = []
    for run in result.prefills:
        pid, tid = t.track(t.prefill_pid(run.node), _TID_PREFILL, "prefill graph")
        args = {"graph_len": run.graph_len, "requests": list(run.requests)}
        what = f"chunk {run.chunk}" if run.chunk >= 0 else str(run.graph_len)
        name = f"{t.of(run.model)}prefill {what}"
        events.append(complete(name, "prefill", run.start_s, run.end_s, pid, tid, args))
    for drun in result.decode_runs:
        pid, tid = t.track(t.decode_pid(drun.node), _TID_DECODE, "decode graph")
        name = f"{t.of(drun.model)}decode" + (f" x{drun.steps}" if drun.steps > 1 else "")
        args = {"steps": drun.steps}
        events.append(complete(name, "decode", drun.start_s, drun.end_s, pid, tid, args))
    for sw in result.switches:
        pid, tid = t.track(t.decode_pid(sw.node), _TID_SWITCH, "model switch")
        args = {"model": t.names[sw.model], "evicted": [t.names[e] for e in sw.evicted]}
        name = f"load {t.names[sw.model]}"
        events.append(complete(name, "switch", sw.start_s, sw.end_s, pid, tid, args))
    return events


def _request_events(result: EngineResult, t: _Tracks) -> list[dict[str, Any]]:
    """Each request's cache transfer and its time in its decode slot."""
    slot_base = [
        _TID_FIRST_SLOT + sum(g.shape.decode_slots for g in result.models[:m])
        for m in range(len(t.names))
    ]
    events: list[dict[str, Any]] = []
    for rec in result.records:
        if rec.slot < 0:
            continue
        pid = t.decode_pid(rec.decode_node)
        if not math.isnan(rec.transfer_start_s):
            _, tid = t.track(pid, _TID_LINK, "KV link in")
            events.append(
                complete(
                    f"KV req {rec.id}",
                    "transfer",
                    rec.transfer_start_s,
                    rec.transfer_end_s,
                    pid,
                    tid,
                    {"request": rec.id},
                )
            )
        label = f"{t.of(rec.model)}slot {rec.slot}"
        _, tid = t.track(pid, slot_base[rec.model] + rec.slot, label)
        events.append(
            complete(
                f"req {rec.id}",
                "slot",
                rec.slot_from_s,
                rec.last_token_s,
                pid,
                tid,
                _request_args(rec),
            )
        )
    return events


def serving_trace(result: EngineResult) -> dict[str, Any]:
    """The trace of a run: nodes as processes, graphs, link and slots as their tracks."""
    t = _Tracks(result)
    events = _graph_events(result, t) + _request_events(result, t)
    cfg = result.config
    nodes: dict[int, str] = {}
    if t.colocated:
        nodes = {t.prefill_pid(i): f"node {i}" for i in range(cfg.nodes)}
    else:
        nodes = {t.prefill_pid(i): f"prefill node {i}" for i in range(cfg.prefill_nodes)}
        nodes |= {t.decode_pid(i): f"decode node {i}" for i in range(cfg.decode_nodes)}
    for order, (pid, label) in enumerate(sorted(nodes.items())):
        t.meta.extend(process(pid, label, order))
    events.sort(key=lambda e: (e["pid"], e["tid"], e["ts"]))
    return trace(t.meta, events)
