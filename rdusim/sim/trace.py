"""Export a simulated run as a Chrome Trace Event file (opens in ui.perfetto.dev).

The engine records one slice per tile for every op and every HBM/P2P transfer, and a model has
dozens of identical layers: written out as is, a 61-layer R1 prefill would be millions of events
and far too large for a browser. Two layouts keep the file small:

* `chrome_trace` (`rdusim map --trace`): one representative layer per layer kind (args carry
  `count` and `runs`), then the extras, laid end to end in execution order (embedding, layers,
  head, MTP), so kernel slices never overlap and their durations add up to the report's layer
  latencies; the timeline is one layer of each kind long, not the whole run;
* `chrome_trace_full` (`rdusim map --trace-full`): every layer execution in order on one
  timeline (a draft model's k steps, embedding, each layer in the model's order, head, the MTP
  drafts), ending at the
  report's `total_latency_s`; the detail below is drawn for the first execution of each layer
  kind and extra only, the rest show kernel slices.

Detail, where drawn:

* per op, one slice per kernel execution spanning its first to its last tile;
* per resource (HBM, P2P), transfers closer than `merge_gap_s` merged into one slice.

Each simulated socket is a process ("pid"); its tracks are threads ("tid"). A run simulated
with `sockets=1` stands for every socket (they run identical schedules) and shows one process.
The events themselves are built by `rdusim.sim.trace_events`, as the serving trace's are.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rdusim.compiler.program import ExtraRole
from rdusim.sim.engine import Slice
from rdusim.sim.kernel import KernelTiming
from rdusim.sim.model import LayerResult, SimResult
from rdusim.sim.trace_events import US, complete, process, thread, trace

MERGE_GAP_S = 1e-6  # transfers closer than this on one resource become one slice
MAX_STREAMS_IN_ARGS = 8  # names listed in a merged transfer slice's args
DETAILED_EXECUTIONS = 1  # full trace: executions of each layer kind / extra drawn in detail

_TID_STRIDE = 1000  # tids are unique across processes: pid * stride + local index
_TID_LAYERS, _TID_KERNELS, _TID_HBM, _TID_P2P, _TID_DDR, _TID_FIRST_OP = 0, 1, 2, 3, 4, 10
_RESOURCE_TIDS = {"HBM": _TID_HBM, "P2P": _TID_P2P, "DDR": _TID_DDR}


def _extra(result: SimResult, role: ExtraRole, module: int | None = None) -> LayerResult | None:
    """The extra with `role` (and MTP `module`), if the run has it."""
    return next(
        (lr for lr in result.extras.values() if lr.role == role and lr.module == module), None
    )


def _execution_order(result: SimResult) -> list[LayerResult]:
    """Embedding, one layer of each kind (program order), then the other extras."""
    extras = result.extras.values()
    first = [lr for lr in extras if lr.role == ExtraRole.EMBEDDING]
    rest = [lr for lr in extras if lr.role != ExtraRole.EMBEDDING]
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

    def resource(self, track: str) -> int:
        """A channel's thread: HBM and P2P always, DDR from its first transfer on."""
        if track not in self.fixed:
            self.fixed[track] = self.pid * _TID_STRIDE + _RESOURCE_TIDS[track]
        return self.fixed[track]

    def op(self, name: str) -> int:
        if name not in self.ops:
            self.ops[name] = self.pid * _TID_STRIDE + _TID_FIRST_OP + len(self.ops)
        return self.ops[name]

    def metadata(self) -> list[dict[str, Any]]:
        out = []
        for order, (label, tid) in enumerate(self.fixed.items()):
            out += thread(self.pid, tid, label, order)
        for order, (name, tid) in enumerate(self.ops.items(), start=len(self.fixed)):
            out += thread(self.pid, tid, f"op {name}", order)
        return out


def _kernel_slice(
    k: KernelTiming, lr: LayerResult, t0: float, tracks: _Tracks, where: dict[str, Any]
) -> dict[str, Any]:
    """One kernel execution, its share of the call included."""
    return complete(
        k.name,
        "kernel",
        t0,
        t0 + k.latency_s,
        tracks.pid,
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


def _op_events(
    k: KernelTiming, mine: list[Slice], t0: float, tracks: _Tracks, where: dict[str, Any]
) -> list[dict[str, Any]]:
    """Per op: first tile start to last tile end, with the op's timing in args."""
    spans: dict[str, list[float]] = {}
    tiles: dict[str, int] = defaultdict(int)
    for s in mine:
        if s.track != "op":
            continue
        span = spans.setdefault(s.name, [s.start, s.end])
        span[0], span[1] = min(span[0], s.start), max(span[1], s.end)
        tiles[s.name] += 1
    timing = {o.name: o for o in k.ops}
    events = []
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
            complete(
                name,
                "op",
                t0 + start,
                t0 + end,
                tracks.pid,
                tracks.op(name),
                {**where, "tiles": tiles[name], **detail},
            )
        )
    return events


def _transfer_events(
    mine: list[Slice], t0: float, tracks: _Tracks, where: dict[str, Any], merge_gap_s: float
) -> list[dict[str, Any]]:
    """HBM, DDR and P2P transfers, those closer than `merge_gap_s` merged into one slice."""
    events = []
    for track in ("HBM", "DDR", "P2P"):
        for group in _merge((s for s in mine if s.track == track), merge_gap_s):
            held: dict[str, float] = defaultdict(float)
            for s in group:
                held[s.name] += s.end - s.start
            ranked = sorted(held, key=lambda n: (-held[n], n))
            name = ranked[0] if len(ranked) == 1 else f"{ranked[0]} +{len(ranked) - 1}"
            events.append(
                complete(
                    name,
                    track.lower(),
                    t0 + min(s.start for s in group),
                    t0 + max(s.end for s in group),
                    tracks.pid,
                    tracks.resource(track),
                    {
                        **where,
                        "transfers": len(group),
                        "streams": ranked[:MAX_STREAMS_IN_ARGS],
                        "streams_total": len(ranked),
                    },
                )
            )
    return events


def _kernel_events(
    k: KernelTiming,
    lr: LayerResult,
    t0: float,
    socket: int,
    tracks: _Tracks,
    merge_gap_s: float,
    *,
    detailed: bool = True,
    where: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The kernel's slice and, when `detailed`, its op and transfer slices on `socket`."""
    where = {"layer": lr.kind, "kernel": k.name, **(where or {})}
    events = [_kernel_slice(k, lr, t0, tracks, where)]
    if detailed:
        mine = [s for s in k.slices if s.socket == socket]
        events += _op_events(k, mine, t0, tracks, where)
        events += _transfer_events(mine, t0, tracks, where, merge_gap_s)
    return events


@dataclass(frozen=True)
class _Run:
    """One layer execution on the timeline (or a representative of `lr.executions` of them)."""

    lr: LayerResult
    title: str
    detailed: bool = True
    args: dict[str, Any] = field(default_factory=dict)  # added to its slices' args


def _representatives(result: SimResult) -> list[_Run]:
    """Each layer kind and extra once, titled with how often it runs."""
    runs = []
    for lr in _execution_order(result):
        title = f"{lr.kind} x{lr.count}" if lr.count > 1 else lr.kind
        if lr.executions != lr.count:
            title += f" ({lr.executions} runs)"
        runs.append(_Run(lr, title))
    return runs


def _check_order(result: SimResult, layer_order: Sequence[str]) -> None:
    have = Counter(layer_order)
    want = {kind: lr.count for kind, lr in result.layers.items()}
    if have != want:
        raise ValueError(f"layer_order has {dict(have)} layers by kind; the program has {want}")


class _Sequencer:
    """Every execution of a run in order, each layer kind or extra drawn in detail for its first
    `detailed` executions; `leftovers` adds any execution the known order did not place."""

    def __init__(self, result: SimResult, detailed: int) -> None:
        self.left = {id(lr): lr.executions if lr.kernels else 0 for lr in result.all_layers()}
        self.seen: dict[int, int] = defaultdict(int)
        self.detailed = detailed
        self.runs: list[_Run] = []

    def add(self, lr: LayerResult | None, title: str, **args: Any) -> None:
        if lr is None or self.left[id(lr)] <= 0:
            return
        self.left[id(lr)] -= 1
        self.seen[id(lr)] += 1
        detail = self.seen[id(lr)] <= self.detailed
        self.runs.append(_Run(lr, title, detail, {"execution": self.seen[id(lr)], **args}))

    def leftovers(self, result: SimResult) -> None:
        for lr in result.all_layers():
            while self.left[id(lr)] > 0:
                self.add(lr, f"{lr.kind} (run {self.seen[id(lr)] + 1})")


def _every_execution(result: SimResult, layer_order: Sequence[str], detailed: int) -> list[_Run]:
    """A draft model's k steps first (each: its embedding, every layer, its head), then the
    target's: embedding, each layer in `layer_order`, head, then per MTP draft: its embedding,
    the module that drafts it (draft j: module j mod modules), its head."""
    seq = _Sequencer(result, detailed)
    _draft_model_steps(seq, result)
    seq.add(_extra(result, ExtraRole.EMBEDDING), "embedding")
    for index, kind in enumerate(layer_order):
        seq.add(result.layers[kind], f"layer {index} ({kind})", index=index)
    seq.add(_extra(result, ExtraRole.HEAD), "head")
    modules = sum(1 for lr in result.extras.values() if lr.role == ExtraRole.MTP_PROJECTION)
    embedding = _extra(result, ExtraRole.MTP_EMBEDDING)
    drafts = embedding.executions if embedding is not None else 0
    for j in range(drafts if modules else 0):
        m = j % modules
        for part in (
            embedding,
            _extra(result, ExtraRole.MTP_PROJECTION, m),
            _extra(result, ExtraRole.MTP_LAYER, m),
            _extra(result, ExtraRole.MTP_HEAD),
        ):
            if part is not None:
                seq.add(part, f"{part.kind} (draft {j + 1})", draft=j + 1)
    seq.leftovers(result)
    return seq.runs


def _draft_model_steps(seq: _Sequencer, result: SimResult) -> None:
    """A draft model's decode steps, one after another, as the step runs them before it
    verifies."""
    embedding = _extra(result, ExtraRole.DRAFT_EMBEDDING)
    layers = [lr for lr in result.extras.values() if lr.role == ExtraRole.DRAFT_LAYER]
    head = _extra(result, ExtraRole.DRAFT_HEAD)
    for j in range(embedding.executions if embedding is not None else 0):
        seq.add(embedding, f"draft embedding (draft {j + 1})", draft=j + 1)
        for lr in layers:
            for i in range(lr.count):
                kind = lr.kind.removeprefix("draft_")
                seq.add(lr, f"draft layer {i} ({kind}, draft {j + 1})", draft=j + 1)
        seq.add(head, f"draft head (draft {j + 1})", draft=j + 1)


def _timeline(
    result: SimResult, runs: list[_Run], merge_gap_s: float, layout: str
) -> dict[str, Any]:
    """`runs` laid end to end on every simulated socket, as a Chrome Trace Event dict."""
    program = result.program
    n_sockets = _sockets_simulated(result)
    events: list[dict[str, Any]] = []
    metadata: list[dict[str, Any]] = []
    for socket in range(n_sockets):
        pid = socket + 1  # pid 0 is reserved by some viewers
        tracks = _Tracks(pid)
        label = f"socket {socket}"
        if n_sockets == 1 and program.sockets > 1:
            label += f" (stands for all {program.sockets} sockets: identical schedules)"
        metadata += process(pid, label, socket)
        t = 0.0
        for run in runs:
            lr, start = run.lr, t
            for k in lr.kernels:
                events += _kernel_events(
                    k, lr, t, socket, tracks, merge_gap_s, detailed=run.detailed, where=run.args
                )
                t += k.latency_s
            args = {
                "layer": lr.kind,
                **run.args,
                "count": lr.count,
                "runs": lr.executions,
                "latency_s": lr.latency_s,
                "kernels": [k.name for k in lr.kernels],
            }
            events.append(complete(run.title, "layer", start, t, pid, tracks.fixed["layers"], args))
        metadata.extend(tracks.metadata())
    other = {
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
        "layout": f"{layout}; per-tile slices aggregated per op; transfers merged across "
        f"gaps < {merge_gap_s * US:g} us",
    }
    return trace(metadata, events, other)


def chrome_trace(result: SimResult, *, merge_gap_s: float = MERGE_GAP_S) -> dict[str, Any]:
    """The run as a Chrome Trace Event dict (`json.dumps` it; open in ui.perfetto.dev).

    `result` must come from `simulate(..., trace=True)`. Layers of a kind are shown once; their
    `count` (and `runs`, executions per prompt/step) are in each kernel slice's args.
    """
    layout = "one representative layer per kind (args: count, runs), then extras"
    return _timeline(result, _representatives(result), merge_gap_s, layout)


def chrome_trace_full(
    result: SimResult,
    *,
    layer_order: Sequence[str] | None = None,
    detailed: int = DETAILED_EXECUTIONS,
    merge_gap_s: float = MERGE_GAP_S,
) -> dict[str, Any]:
    """Every layer execution of the run on one timeline, ending at `result.total_latency_s`.

    `layer_order` is the kind of each of the model's layers in order (default: each kind's
    layers together, in program order); a looped kind's call cost is shared over its layers.
    Op and transfer slices are drawn for the first `detailed` executions of each layer kind and
    extra, so the file stays small however many layers the model has.
    """
    order = list(layer_order) if layer_order is not None else default_layer_order(result)
    _check_order(result, order)
    layout = (
        "every layer execution in order (embedding, layers, head, MTP drafts); op and transfer "
        f"slices for the first {detailed} execution(s) of each layer kind and extra"
    )
    return _timeline(result, _every_execution(result, order, detailed), merge_gap_s, layout)


def default_layer_order(result: SimResult) -> list[str]:
    """Each kind's layers together, kinds in program order."""
    return [kind for kind, lr in result.layers.items() for _ in range(lr.count)]
