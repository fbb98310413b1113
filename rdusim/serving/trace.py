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


def serving_trace(result: EngineResult) -> dict[str, Any]:
    """The trace of a run: nodes as processes, graphs, link and slots as their tracks."""
    colocated = result.config.mode == DeploymentMode.COLOCATED

    def prefill_pid(node: int) -> int:
        return node + 1

    def decode_pid(node: int) -> int:
        return node + 1 if colocated else _DECODE_PID_BASE + node

    meta: list[dict[str, Any]] = []
    tracks: set[tuple[int, int]] = set()

    def track(pid: int, tid: int, label: str) -> tuple[int, int]:
        if (pid, tid) not in tracks:
            tracks.add((pid, tid))
            meta.extend(thread(pid, tid, label, tid))
        return pid, tid

    names = [g.name for g in result.models] if len(result.models) > 1 else [""]

    def of(model: int) -> str:
        return f"{names[model]} " if names[model] else ""

    events: list[dict[str, Any]] = []
    for run in result.prefills:
        pid, tid = track(prefill_pid(run.node), _TID_PREFILL, "prefill graph")
        args = {"graph_len": run.graph_len, "requests": list(run.requests)}
        what = f"chunk {run.chunk}" if run.chunk >= 0 else str(run.graph_len)
        name = f"{of(run.model)}prefill {what}"
        events.append(complete(name, "prefill", run.start_s, run.end_s, pid, tid, args))
    for drun in result.decode_runs:
        pid, tid = track(decode_pid(drun.node), _TID_DECODE, "decode graph")
        name = f"{of(drun.model)}decode" + (f" x{drun.steps}" if drun.steps > 1 else "")
        args = {"steps": drun.steps}
        events.append(complete(name, "decode", drun.start_s, drun.end_s, pid, tid, args))
    for sw in result.switches:
        pid, tid = track(decode_pid(sw.node), _TID_SWITCH, "model switch")
        args = {"model": names[sw.model], "evicted": [names[e] for e in sw.evicted]}
        name = f"load {names[sw.model]}"
        events.append(complete(name, "switch", sw.start_s, sw.end_s, pid, tid, args))
    slot_base = [
        _TID_FIRST_SLOT + sum(g.shape.decode_slots for g in result.models[:m])
        for m in range(len(names))
    ]
    for rec in result.records:
        if rec.slot < 0:
            continue
        pid = decode_pid(rec.decode_node)
        if not math.isnan(rec.transfer_start_s):
            _, tid = track(pid, _TID_LINK, "KV link in")
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
        _, tid = track(pid, slot_base[rec.model] + rec.slot, f"{of(rec.model)}slot {rec.slot}")
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
    nodes: dict[int, str] = {}
    if colocated:
        nodes = {prefill_pid(i): f"node {i}" for i in range(result.config.nodes)}
    else:
        nodes = {prefill_pid(i): f"prefill node {i}" for i in range(result.config.prefill_nodes)}
        nodes |= {decode_pid(i): f"decode node {i}" for i in range(result.config.decode_nodes)}
    for order, (pid, label) in enumerate(sorted(nodes.items())):
        meta.extend(process(pid, label, order))
    events.sort(key=lambda e: (e["pid"], e["tid"], e["ts"]))
    return trace(meta, events)
