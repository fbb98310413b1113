"""Export a simulated run as a Chrome Trace Event file (opens in ui.perfetto.dev).

The engine records one slice per tile for every op and every HBM/P2P transfer, and a model has
dozens of identical layers: written out as is, a 61-layer R1 prefill would be millions of events
and far too large for a browser. The trace therefore shows what a reader needs to see the
pipeline, and nothing that repeats:

* one representative layer per layer kind (args carry `count` and `runs`), then the extras, laid
  end to end in execution order (embedding, layers, head, MTP), so kernel slices never overlap
  and their durations add up to the report's layer latencies;
* per op, one slice per kernel execution spanning its first to its last tile;
* per resource (HBM, P2P), transfers closer than `merge_gap_s` merged into one slice.

Each simulated socket is a process ("pid"); its tracks are threads ("tid"). A run simulated
with `sockets=1` stands for every socket (they run identical schedules) and shows one process.
Times are microseconds, as the format requires.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from rdusim.sim.engine import Slice
from rdusim.sim.kernel import KernelTiming
from rdusim.sim.model import LayerResult, SimResult

MERGE_GAP_S = 1e-6  # transfers closer than this on one resource become one slice
MAX_STREAMS_IN_ARGS = 8  # names listed in a merged transfer slice's args

US = 1e6  # seconds -> microseconds
_TID_STRIDE = 1000  # tids are unique across processes: pid * stride + local index
_TID_LAYERS, _TID_KERNELS, _TID_HBM, _TID_P2P, _TID_FIRST_OP = 0, 1, 2, 3, 10
_RESOURCE_TIDS = {"HBM": _TID_HBM, "P2P": _TID_P2P}


def _execution_order(result: SimResult) -> list[LayerResult]:
    """Embedding, one layer of each kind (program order), then the other extras."""
    extras = result.extras
    first = [extras["embedding"]] if "embedding" in extras else []
    rest = [lr for name, lr in extras.items() if name != "embedding"]
    return [*first, *result.layers.values(), *rest]


def _sockets_simulated(result: SimResult) -> int:
    kernels = [k for lr in _execution_order(result) for k in lr.kernels]
    sockets = {s.socket for k in kernels for s in k.slices}
    if not sockets:
        raise ValueError("the result has no trace slices: simulate with trace=True")
    return max(sockets) + 1


def _merge(slices: Iterable[Slice], gap_s: float) -> Iterator[list[Slice]]:
    """Group slices (sorted by start) whose union has no hole of `gap_s` or more."""
    group: list[Slice] = []
    end = float("-inf")
    for s in sorted(slices, key=lambda x: (x.start, x.end)):
        if group and s.start - end >= gap_s:
            yield group
            group = []
        end = max(end, s.end) if group else s.end
        group.append(s)
    if group:
        yield group


def _event(
    name: str, cat: str, start_s: float, end_s: float, pid: int, tid: int, args: dict[str, Any]
) -> dict[str, Any]:
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


def _meta(kind: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": args}


class _Tracks:
    """Thread ids and their metadata for one process, created on first use."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.ops: dict[str, int] = {}
        base = pid * _TID_STRIDE
        self.fixed = {
            "layers": base + _TID_LAYERS,
            "kernels": base + _TID_KERNELS,
            "HBM": base + _TID_HBM,
            "P2P": base + _TID_P2P,
        }

    def op(self, name: str) -> int:
        if name not in self.ops:
            self.ops[name] = self.pid * _TID_STRIDE + _TID_FIRST_OP + len(self.ops)
        return self.ops[name]

    def metadata(self) -> list[dict[str, Any]]:
        out = []
        for order, (label, tid) in enumerate(self.fixed.items()):
            out.append(_meta("thread_name", self.pid, tid, name=label))
            out.append(_meta("thread_sort_index", self.pid, tid, sort_index=order))
        for order, (name, tid) in enumerate(self.ops.items(), start=len(self.fixed)):
            out.append(_meta("thread_name", self.pid, tid, name=f"op {name}"))
            out.append(_meta("thread_sort_index", self.pid, tid, sort_index=order))
        return out


def _kernel_events(
    k: KernelTiming, lr: LayerResult, t0: float, socket: int, tracks: _Tracks, merge_gap_s: float
) -> list[dict[str, Any]]:
    pid = tracks.pid
    where = {"layer": lr.kind, "kernel": k.name}
    events = [
        _event(
            k.name,
            "kernel",
            t0,
            t0 + k.latency_s,
            pid,
            tracks.fixed["kernels"],
            {
                **where,
                "count": lr.count,
                "runs": lr.executions,
                "latency_s": k.latency_s,
                "call_s": k.call_share_s,
                "pipeline_s": k.pipeline_s,
                "bottleneck": k.bottleneck,
                "hbm_bytes": k.hbm_bytes,
                "p2p_bytes": k.p2p_bytes,
            },
        )
    ]
    mine = [s for s in k.slices if s.socket == socket]

    # ops: first tile start to last tile end
    spans: dict[str, list[float]] = {}
    tiles: dict[str, int] = defaultdict(int)
    for s in mine:
        if s.track != "op":
            continue
        span = spans.setdefault(s.name, [s.start, s.end])
        span[0], span[1] = min(span[0], s.start), max(span[1], s.end)
        tiles[s.name] += 1
    timing = {o.name: o for o in k.ops}
    for name, (start, end) in spans.items():
        o = timing.get(name)
        detail = (
            {
                "busy_s": o.busy_s,
                "hbm_s": o.hbm_s,
                "stall_s": o.stall_s,
                "pcus": o.pcus,
                "bound": o.bound,
            }
            if o
            else {}
        )
        events.append(
            _event(
                name,
                "op",
                t0 + start,
                t0 + end,
                pid,
                tracks.op(name),
                {**where, "tiles": tiles[name], **detail},
            )
        )

    # HBM / P2P: merged transfers
    for track, tid_key in (("HBM", "HBM"), ("P2P", "P2P")):
        for group in _merge((s for s in mine if s.track == track), merge_gap_s):
            held: dict[str, float] = defaultdict(float)
            for s in group:
                held[s.name] += s.end - s.start
            ranked = sorted(held, key=lambda n: (-held[n], n))
            name = ranked[0] if len(ranked) == 1 else f"{ranked[0]} +{len(ranked) - 1}"
            start = min(s.start for s in group)
            end = max(s.end for s in group)
            events.append(
                _event(
                    name,
                    track.lower(),
                    t0 + start,
                    t0 + end,
                    pid,
                    tracks.fixed[tid_key],
                    {
                        **where,
                        "transfers": len(group),
                        "streams": ranked[:MAX_STREAMS_IN_ARGS],
                        "streams_total": len(ranked),
                    },
                )
            )
    return events


def chrome_trace(result: SimResult, *, merge_gap_s: float = MERGE_GAP_S) -> dict[str, Any]:
    """The run as a Chrome Trace Event dict (`json.dumps` it; open in ui.perfetto.dev).

    `result` must come from `simulate(..., trace=True)`. Layers of a kind are shown once; their
    `count` (and `runs`, executions per prompt/step) are in each kernel slice's args.
    """
    program = result.program
    order = _execution_order(result)
    n_sockets = _sockets_simulated(result)
    events: list[dict[str, Any]] = []
    metadata: list[dict[str, Any]] = []
    for socket in range(n_sockets):
        pid = socket + 1  # pid 0 is reserved by some viewers
        tracks = _Tracks(pid)
        label = f"socket {socket}"
        if n_sockets == 1 and program.sockets > 1:
            label += f" (stands for all {program.sockets} sockets: identical schedules)"
        metadata.append(_meta("process_name", pid, 0, name=label))
        metadata.append(_meta("process_sort_index", pid, 0, sort_index=socket))
        t = 0.0
        for lr in order:
            layer_start = t
            for k in lr.kernels:
                events.extend(_kernel_events(k, lr, t, socket, tracks, merge_gap_s))
                t += k.latency_s
            title = f"{lr.kind} x{lr.count}" if lr.count > 1 else lr.kind
            if lr.executions != lr.count:
                title += f" ({lr.executions} runs)"
            events.append(
                _event(
                    title,
                    "layer",
                    layer_start,
                    t,
                    pid,
                    tracks.fixed["layers"],
                    {
                        "layer": lr.kind,
                        "count": lr.count,
                        "runs": lr.executions,
                        "latency_s": lr.latency_s,
                        "kernels": [k.name for k in lr.kernels],
                    },
                )
            )
        metadata.extend(tracks.metadata())
    return {
        "traceEvents": metadata + events,
        "displayTimeUnit": "ms",
        "otherData": {
            "mapping": program.mapping,
            "model": program.model,
            "hardware": program.hardware,
            "phase": program.phase,
            "batch": program.workload.batch,
            "seq_len": program.seq_len,
            "snapstream": program.snapstream,
            "sockets": program.sockets,
            "sockets_simulated": n_sockets,
            "total_latency_s": result.total_latency_s,
            "layout": "one representative layer per kind (args: count, runs), then extras; "
            "per-tile slices aggregated per op; transfers merged across gaps < "
            f"{merge_gap_s * US:g} us",
        },
    }
