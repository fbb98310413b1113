"""A kernel's time in closed form: the discrete-event pipeline's answer without simulating it.

The simulator (`rdusim.sim`) runs every tile of every stage through simpy. A search that ranks
thousands of candidate kernels cannot afford that, so this module answers the same question from
the same physics in a few passes over the kernel's ops:

- **Stages and tiles.** An op works through the kernel's T tiles at `flops / rate / T` per tile.
  A non-blocking op starts when the first tile of each input arrives and cannot finish before the
  last one has; a blocking op (softmax over a row, top-k) takes in every tile first, which splits
  the kernel into phases that run one after another.
- **Collectives** cost their link latency once, on the first tile, and stream their bytes tile
  by tile as the producer emits them; every collective shares the socket's links.
- **HBM** is one channel for every loader and writer. Loaders run only a double-buffered tile or
  two ahead of their op, so an op's reads become available when the op starts; the channel's
  finish is the single-machine makespan with release times, max over r of (r + the work released
  at or after r), which is exact for any work-conserving order. The channel serves its waiting
  loaders a tile each in turn, so they share one tile rate unless their op consumes slower; an op
  the channel paces (its loads, not its compute, set its rate) finishes with its phase's reads.
- **Calls** cost what `rdusim.cost.calls` says; a looped call pays one fill and drain and repeats
  at the loop's period: when the next iteration's weights stream in during this one
  (`prefetch_iteration`), the longer of the iteration's HBM work and its pipeline with the
  weights already on chip (collective latencies and compute still on its path); otherwise the
  pipeline again.

It imports neither the simulator nor a compiler pass (`tests/test_layers.py`); how close it comes
to the simulator is measured on every kernel of every shipped mapping (`tests/cost`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from rdusim.compiler.program import Kernel, OpPlan
from rdusim.cost.calls import call_cost
from rdusim.spec.hardware import Hardware
from rdusim.spec.mapping import Orchestration


@dataclass(frozen=True)
class KernelEstimate:
    """Closed-form timing of one kernel, per socket.

    `pipeline_s` is one execution from an empty chip to its last write, `period_s` what each
    further execution adds inside a looped call, `call_s` one call's cost.
    """

    pipeline_s: float
    period_s: float
    call_s: float
    executions: int
    hbm_s: float  # the channel's work per execution
    p2p_s: float  # the links' work per execution

    @property
    def call_time_s(self) -> float:
        return self.call_s + self.pipeline_s + (self.executions - 1) * self.period_s

    @property
    def latency_s(self) -> float:
        """Seconds per execution, the call's cost shared over the executions it covers."""
        return self.call_time_s / self.executions


_OUT = "\0kernel output"  # where collectives feeding a later kernel end


def _compute_s(p: OpPlan, hw: Hardware) -> float:
    rate = p.pcus * hw.socket.flops_per_pcu * hw.calibration.efficiency(p.cost_class)
    return p.flops / rate if rate > 0 and p.flops > 0 else 0.0


def _makespan(jobs: Iterable[tuple[float, float]]) -> float:
    """Finish of a single work-conserving server given (release time, work) jobs."""
    finish = 0.0
    for release, work in sorted(jobs):
        if work > 0:  # an empty job occupies nothing, whenever it is released
            finish = max(finish, release) + work
    return finish


def _tile_rate(per_tile: list[float], caps: list[float]) -> float:
    """Tiles per second the HBM channel grants each loader of a phase.

    The channel serves one tile per waiting loader in turn, so loaders move at one common tile
    rate unless their op consumes slower (its cap). The rate is the largest r with
    sum(min(r, cap) * seconds per tile) <= 1: the channel's time, shared.
    """
    used = 0.0
    remaining = sum(per_tile)
    for cap, seconds in sorted(zip(caps, per_tile, strict=True)):
        if remaining <= 0:
            break
        if used + cap * remaining <= 1.0:
            used += cap * seconds
            remaining -= seconds
        else:
            return (1.0 - used) / remaining
    return math.inf


def _topological(ops: list[OpPlan], producers: dict[str, list[str]]) -> list[OpPlan]:
    """`ops` with every producer before its consumers (kernels usually come that way)."""
    position = {p.name: i for i, p in enumerate(ops)}
    if all(position[src] < position[dst] for dst, srcs in producers.items() for src in srcs):
        return ops
    seen: set[str] = set()
    order: list[OpPlan] = []

    def visit(p: OpPlan) -> None:
        if p.name in seen:
            return
        seen.add(p.name)
        for src in producers.get(p.name, ()):
            visit(ops[position[src]])
        order.append(p)

    for p in ops:
        visit(p)
    return order


@dataclass(frozen=True)
class _Feed:
    """A collective as its consumer sees it: who feeds it (None: an earlier kernel), its link
    latency, paid once, and its transfer time."""

    src: str | None
    latency_s: float
    transfer_s: float


def pipeline_s(kernel: Kernel, hw: Hardware) -> float:
    """One execution of `kernel`'s pipeline at its real tile count, in seconds."""
    n = max(1, kernel.tiles)
    hbm_rate = hw.socket.hbm.bandwidth * hw.calibration.hbm_efficiency
    p2p_rate = hw.links.p2p_bandwidth
    names = {p.name for p in kernel.ops}

    producers: dict[str, list[str]] = {}
    for src, dst in kernel.edges:
        if src in names and dst in names:
            producers.setdefault(dst, []).append(src)
    feeds: dict[str, list[_Feed]] = {}
    for c in kernel.collectives:
        feed = _Feed(
            c.src if c.src in names else None,
            c.rounds * hw.links.p2p_latency_s,
            c.bytes / p2p_rate,
        )
        # a collective into a later kernel still runs in this one: its sink is the kernel's end
        feeds.setdefault(c.dst if c.dst in names else _OUT, []).append(feed)

    order = _topological(kernel.ops, producers)
    comp = {p.name: _compute_s(p, hw) for p in order}
    load = {p.name: p.hbm_in_bytes / hbm_rate for p in order}
    write = {p.name: p.hbm_write / hbm_rate for p in order}

    phase: dict[str, int] = {}
    for p in order:
        upstream = [*producers.get(p.name, ()), *(f.src for f in feeds.get(p.name, ()) if f.src)]
        phase[p.name] = max((phase[u] for u in upstream), default=0) + int(p.blocking)

    first: dict[str, float] = {}  # when the op starts its first tile
    end: dict[str, float] = {}  # when it finishes its last
    jobs: list[tuple[float, float]] = []  # the HBM channel's (release, work)
    for k in sorted(set(phase.values())):
        ops = [p for p in order if phase[p.name] == k]
        last_input: dict[str, float] = {}
        for p in ops:
            o = p.name
            a_first, a_last = load[o] / n, 0.0
            for u in producers.get(o, ()):
                a_first = max(a_first, first[u] + comp[u] / n)
                a_last = max(a_last, end[u])
            for f in feeds.get(o, ()):
                if f.src is None:
                    a_first = max(a_first, f.latency_s + f.transfer_s / n)
                    a_last = max(a_last, f.latency_s + f.transfer_s)
                else:
                    emitted = first[f.src] + comp[f.src] / n + f.latency_s
                    a_first = max(a_first, emitted + f.transfer_s / n)
                    a_last = max(a_last, end[f.src] + f.transfer_s / n, emitted + f.transfer_s)
            first[o] = max(a_first, a_last) if p.blocking else a_first
            last_input[o] = a_last
            # provisional, so that consumers later in this phase can read it in this pass
            end[o] = max(first[o] + comp[o], a_last + comp[o] / n)
        ahead = min(2, n) / n  # loaded before the op starts (double buffering)
        for p in ops:
            o = p.name
            jobs.append((0.0, load[o] * ahead))
            jobs.append((first[o], load[o] * (1.0 - ahead)))
            jobs.append((first[o] + comp[o] / n, write[o]))
        reads_done = _makespan(jobs)
        rate = _tile_rate(
            [(load[p.name] + write[p.name]) / n for p in ops],
            [n / comp[p.name] if comp[p.name] > 0 else math.inf for p in ops],
        )
        for p in ops:  # a saturated channel holds back every reader it paces
            o = p.name
            e = max(first[o] + comp[o], last_input[o] + comp[o] / n)
            for u in producers.get(o, ()):
                if phase[u] == k:
                    e = max(e, end[u] + comp[o] / n)
            for f in feeds.get(o, ()):
                if f.src is not None and phase[f.src] == k:
                    e = max(e, end[f.src] + f.transfer_s / n + comp[o] / n)
            if load[o] > 0 and comp[o] < n / rate:  # its loads, not its compute, pace it
                e = max(e, reads_done + comp[o] / n)
            end[o] = e

    finish = max((end[o] + write[o] / n for o in end), default=0.0)
    finish = max(finish, _makespan(jobs))
    links: list[tuple[float, float]] = []  # the links' (release, work)
    for dst, fs in feeds.items():
        for f in fs:
            emitted = f.latency_s if f.src is None else first[f.src] + comp[f.src] / n + f.latency_s
            links.append((emitted, f.transfer_s))
            if dst == _OUT and f.src is not None:
                finish = max(finish, end[f.src] + f.transfer_s / n)
    return max(finish, _makespan(links))


def estimate(
    kernel: Kernel,
    hw: Hardware,
    *,
    orchestration: Orchestration | str = Orchestration.HARDWARE,
    looped_executions: int = 1,
) -> KernelEstimate:
    """Closed-form timing of `kernel`, one call covering `looped_executions` executions."""
    pipe = pipeline_s(kernel, hw)
    hbm_rate = hw.socket.hbm.bandwidth * hw.calibration.hbm_efficiency
    hbm = sum(p.hbm_bytes for p in kernel.ops) / hbm_rate
    p2p = sum(c.bytes for c in kernel.collectives) / hw.links.p2p_bandwidth
    period = pipe
    if looped_executions > 1 and kernel.prefetch_iteration:
        # the next iteration's weights stream in behind this one: the loop runs at the pace of
        # whichever is slower, the channel with every byte, or the pipeline with its weights
        # already on chip (its latencies and compute still in the way)
        loaded = replace(kernel, ops=[replace(p, weight_read_bytes=0.0) for p in kernel.ops])
        period = max(hbm, p2p, pipeline_s(loaded, hw))
    return KernelEstimate(
        pipeline_s=pipe,
        period_s=period,
        call_s=call_cost(kernel, hw, orchestration),
        executions=max(1, looped_executions),
        hbm_s=hbm,
        p2p_s=p2p,
    )


def kernel_latency_s(
    kernel: Kernel,
    hw: Hardware,
    *,
    orchestration: Orchestration | str = Orchestration.HARDWARE,
    looped_executions: int = 1,
) -> float:
    """Seconds per execution of `kernel`, its call's share included: what the search ranks."""
    return estimate(
        kernel, hw, orchestration=orchestration, looped_executions=looped_executions
    ).latency_s


def kernel_latencies_s(
    kernels: Sequence[Kernel],
    hw: Hardware,
    *,
    orchestration: Orchestration | str = Orchestration.HARDWARE,
    looped_executions: int = 1,
) -> list[float]:
    """`kernel_latency_s` over a batch of candidates."""
    return [
        kernel_latency_s(k, hw, orchestration=orchestration, looped_executions=looped_executions)
        for k in kernels
    ]
