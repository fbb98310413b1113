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
- **DDR** (the weights and cache `placement:` puts there) is a second channel of its own, at its
  peak bandwidth, timed the same way: its own jobs, makespan and tile rate. A tile that needs
  bytes from both tiers has them when the slower channel has delivered; the two overlap.
- **Calls** cost what `rdusim.cost.calls` says; a looped call pays one fill and drain and repeats
  at the loop's period: when the next iteration's weights stream in during this one
  (`prefetch_iteration`), the longer of the iteration's HBM work and its pipeline with the
  weights already on chip (collective latencies and compute still on its path); otherwise the
  pipeline again.

`pipeline_s` runs in named steps: `_pipeline` reads the kernel as stages (each op's compute,
loads and writes in seconds), its wiring (`_producers`, `_feeds`) and its `_phases`; each phase
in turn (`_time_phase`) takes every op's `_arrival` of its first and last input tile, its
`_start_s`, the channel's `_hbm_jobs` and `_phase_tile_rate`, then each op's `_end_s`; and
`_finish_s` ends the kernel with its last writes, the channel's and the links' makespans and
its collectives into later kernels. Each step has a hand-worked test
(`tests/cost/test_pipeline_steps.py`).

It imports neither the simulator nor a compiler pass (`tests/test_layers.py`); how close it comes
to the simulator is measured on every kernel of every shipped mapping (`tests/cost`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple, Protocol

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
    ddr_s: float = 0.0  # DDR's work per execution

    @property
    def call_time_s(self) -> float:
        return self.call_s + self.pipeline_s + (self.executions - 1) * self.period_s

    @property
    def latency_s(self) -> float:
        """Seconds per execution, the call's cost shared over the executions it covers."""
        return self.call_time_s / self.executions


_OUT = "\0kernel output"  # where collectives feeding a later kernel end


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
    used = remaining = 0.0
    for seconds in per_tile:  # added in order (`sum` compensates floats from Python 3.12 on)
        remaining += seconds
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


class _Stage(NamedTuple):
    """One op as the pipeline sees it: whether it blocks, and per execution (all its tiles) its
    compute, its loads from HBM and its writes to HBM, and its loads and writes over DDR, in
    seconds."""

    name: str
    blocking: bool
    compute_s: float
    load_s: float
    write_s: float
    ddr_load_s: float = 0.0
    ddr_write_s: float = 0.0

    def on_ddr(self) -> _Stage:
        """The stage as the DDR channel sees it: its DDR loads and writes in place of HBM's."""
        return self._replace(load_s=self.ddr_load_s, write_s=self.ddr_write_s)


@dataclass(frozen=True, slots=True)
class _Pipeline:
    """A kernel as the closed form reads it: its tile count; its stages, every producer before
    its consumers; each op's in-kernel producers and the collectives into it (those into a later
    kernel under `_OUT`); and the phase each op runs in."""

    tiles: int
    stages: dict[str, _Stage]
    producers: dict[str, list[str]]
    feeds: dict[str, list[_Feed]]
    phase: dict[str, int]
    uses_ddr: bool = True  # False: no op loads from or writes to DDR


class _Arrival(NamedTuple):
    """When an op's first input tile is on chip, and when its last one is."""

    first_s: float
    last_s: float


@dataclass(slots=True)
class _Timeline:
    """What the phases timed so far have fixed: each op's start (its first tile begins) and end
    (its last tile is done), and the HBM and DDR channels' (release, work) jobs."""

    start: dict[str, float] = field(default_factory=dict)
    end: dict[str, float] = field(default_factory=dict)
    jobs: list[tuple[float, float]] = field(default_factory=list)
    ddr_jobs: list[tuple[float, float]] = field(default_factory=list)


# ------------------------------------------------------------------ the kernel as stages


def _producers(kernel: Kernel) -> dict[str, list[str]]:
    """Each op's producers inside the kernel, in edge order (edges to or from ops of other
    kernels are dropped)."""
    names = {p.name for p in kernel.ops}
    producers: dict[str, list[str]] = {}
    for src, dst in kernel.edges:
        if src in names and dst in names:
            producers.setdefault(dst, []).append(src)
    return producers


def _feeds(kernel: Kernel, hw: Hardware) -> dict[str, list[_Feed]]:
    """The kernel's collectives keyed by the op they feed, each with its rounds' latency and its
    bytes' transfer time. One from outside the kernel has no source; one into a later kernel
    still runs in this one and is keyed `_OUT`, the kernel's end."""
    names = {p.name for p in kernel.ops}
    feeds: dict[str, list[_Feed]] = {}
    for c in kernel.collectives:
        feed = _Feed(
            c.src if c.src in names else None,
            c.rounds * hw.links.p2p_latency_s,
            c.bytes / hw.links.p2p_bandwidth,
        )
        feeds.setdefault(c.dst if c.dst in names else _OUT, []).append(feed)
    return feeds


def _stages(ops: Iterable[OpPlan], hw: Hardware) -> dict[str, _Stage]:
    """Each op's whole compute, HBM loads (activations, streamed weights, spills) and HBM
    writes, and its DDR loads and writes, in seconds, in the order given."""
    hbm_rate = hw.socket.hbm.bandwidth * hw.calibration.hbm_efficiency
    ddr_rate = hw.socket.ddr.bandwidth  # peak: no achieved fraction is published
    fpp = hw.socket.flops_per_pcu
    efficiency: dict[str, float] = {}
    stages = {}
    for p in ops:
        hbm_in, ddr_in, ddr_write = p.flows()
        eff = efficiency.get(p.cost_class)
        if eff is None:
            eff = efficiency[p.cost_class] = hw.calibration.efficiency(p.cost_class)
        rate = p.pcus * fpp * eff  # the hardware's constants read once per kernel
        stages[p.name] = _Stage(
            p.name,
            p.blocking,
            p.flops / rate if rate > 0 and p.flops > 0 else 0.0,
            hbm_in / hbm_rate,
            (p.hbm_write - ddr_write) / hbm_rate,
            ddr_in / ddr_rate,
            ddr_write / ddr_rate,
        )
    return stages


class _Phased(Protocol):
    """What `_phases` reads of a stage (here and in `analytic_members`)."""

    @property
    def name(self) -> str: ...

    @property
    def blocking(self) -> bool: ...


class _Sourced(Protocol):
    """What `_phases` reads of a feed."""

    @property
    def src(self) -> str | None: ...


def _phases(
    stages: Iterable[_Phased],
    producers: dict[str, list[str]],
    feeds: Mapping[str, Sequence[_Sourced]],
) -> dict[str, int]:
    """The phase each op runs in: the latest of its producers' (in-kernel ops and the sources
    of its collectives), one later if it blocks; 0 with none. `stages` come producers first."""
    phase: dict[str, int] = {}
    for s in stages:
        upstream = [*producers.get(s.name, ()), *(f.src for f in feeds.get(s.name, ()) if f.src)]
        phase[s.name] = max((phase[u] for u in upstream), default=0) + int(s.blocking)
    return phase


def _pipeline(kernel: Kernel, hw: Hardware) -> _Pipeline:
    """`kernel` as stages in producer-first order, with its wiring and its phases."""
    producers = _producers(kernel)
    feeds = _feeds(kernel, hw)
    stages = _stages(_topological(kernel.ops, producers), hw)
    phase = _phases(stages.values(), producers, feeds)
    ddr = any(s.ddr_load_s or s.ddr_write_s for s in stages.values())
    return _Pipeline(max(1, kernel.tiles), stages, producers, feeds, phase, ddr)


# ------------------------------------------------------------------ arrivals and starts


def _emitted_s(pl: _Pipeline, t: _Timeline, f: _Feed) -> float:
    """When a collective's first bytes can leave, its latency paid: at its latency from an
    earlier kernel, else once its source's first tile is out (start + one tile of compute)."""
    if f.src is None:
        return f.latency_s
    return t.start[f.src] + pl.stages[f.src].compute_s / pl.tiles + f.latency_s


def _feed_arrival(pl: _Pipeline, t: _Timeline, f: _Feed) -> _Arrival:
    """When a collective's first and last tiles reach its consumer: the first one tile's
    transfer after it is emitted; the last its whole transfer after that, and no sooner than one
    tile's transfer after its source ends."""
    n = pl.tiles
    emitted = _emitted_s(pl, t, f)
    last = emitted + f.transfer_s
    if f.src is not None:
        last = max(t.end[f.src] + f.transfer_s / n, last)
    return _Arrival(emitted + f.transfer_s / n, last)


def _arrival(pl: _Pipeline, t: _Timeline, s: _Stage) -> _Arrival:
    """When op `s`'s first input tile and its last are on chip: the latest over its loader
    (a tile of loads over the slower of its two channels; it holds back no last tile), its
    in-kernel producers (their first tile out, their end) and its collectives."""
    n = pl.tiles
    first, last = max(s.load_s, s.ddr_load_s) / n, 0.0
    for u in pl.producers.get(s.name, ()):
        first = max(first, t.start[u] + pl.stages[u].compute_s / n)
        last = max(last, t.end[u])
    for f in pl.feeds.get(s.name, ()):
        a = _feed_arrival(pl, t, f)
        first, last = max(first, a.first_s), max(last, a.last_s)
    return _Arrival(first, last)


def _start_s(s: _Stage, a: _Arrival) -> float:
    """When op `s` starts its first tile: as its first input tile arrives, or, if it blocks,
    once its whole input has."""
    return max(a.first_s, a.last_s) if s.blocking else a.first_s


# ------------------------------------------------------------------ the HBM channel


def _hbm_jobs(pl: _Pipeline, t: _Timeline, ops: Sequence[_Stage]) -> list[tuple[float, float]]:
    """The HBM channel's (release, work) jobs of a phase's ops. A loader runs two tiles ahead
    of its op (double buffering): those come from time 0 (a one-tile kernel's whole load), the
    rest once the op starts. A writer's bytes are released with the op's first tile out."""
    n = pl.tiles
    ahead = min(2, n) / n  # loaded before the op starts (double buffering)
    jobs: list[tuple[float, float]] = []
    for s in ops:
        start = t.start[s.name]
        jobs.append((0.0, s.load_s * ahead))
        jobs.append((start, s.load_s * (1.0 - ahead)))
        jobs.append((start + s.compute_s / n, s.write_s))
    return jobs


def _phase_tile_rate(ops: Sequence[_Stage], n: int) -> float:
    """Tiles per second the channel grants each loader of a phase: its HBM seconds per tile,
    capped by the tiles per second its op's compute consumes (`_tile_rate`)."""
    return _tile_rate(
        [(s.load_s + s.write_s) / n for s in ops],
        [n / s.compute_s if s.compute_s > 0 else math.inf for s in ops],
    )


def _paced_by_channel(s: _Stage, rate: float, n: int) -> bool:
    """Whether the channel, not its compute, sets op `s`'s pace: it loads, and its compute is
    shorter than the channel's `n` tiles at `rate`."""
    return s.load_s > 0 and s.compute_s < n / rate


# ------------------------------------------------------------------ end times


def _own_end_s(s: _Stage, start_s: float, last_input_s: float, n: int) -> float:
    """When op `s` ends with nothing else holding it back: its whole compute after its start,
    and one tile's after its last input tile."""
    return max(start_s + s.compute_s, last_input_s + s.compute_s / n)


def _end_s(
    pl: _Pipeline, t: _Timeline, s: _Stage, last_input_s: float, reads_done_s: float, rate: float
) -> float:
    """When op `s` finishes its last tile: its own end, one tile after each producer in its
    phase ends (a collective's tile of transfer between), and, if the channel paces it, one
    tile after the channel has served the phase's reads (`reads_done_s`)."""
    n, k = pl.tiles, pl.phase[s.name]
    tile = s.compute_s / n
    e = _own_end_s(s, t.start[s.name], last_input_s, n)
    for u in pl.producers.get(s.name, ()):
        if pl.phase[u] == k:
            e = max(e, t.end[u] + tile)
    for f in pl.feeds.get(s.name, ()):
        if f.src is not None and pl.phase[f.src] == k:
            e = max(e, t.end[f.src] + f.transfer_s / n + tile)
    if _paced_by_channel(s, rate, n):
        e = max(e, reads_done_s + tile)
    return e


def _time_phase(pl: _Pipeline, t: _Timeline, k: int) -> None:
    """Time phase `k`'s ops onto `t`: in order, each one's arrivals, start and a provisional end
    (so that consumers later in the phase can read it); then the phase's HBM jobs; then every
    end again, with the phase's producers final and the channel's pace."""
    ops = [s for s in pl.stages.values() if pl.phase[s.name] == k]
    last_input: dict[str, float] = {}
    for s in ops:
        a = _arrival(pl, t, s)
        t.start[s.name] = _start_s(s, a)
        last_input[s.name] = a.last_s
        t.end[s.name] = _own_end_s(s, t.start[s.name], a.last_s, pl.tiles)
    t.jobs.extend(_hbm_jobs(pl, t, ops))
    reads_done = _makespan(t.jobs)
    rate = _phase_tile_rate(ops, pl.tiles)
    if not pl.uses_ddr:  # DDR's jobs would all be empty: it paces nothing and ends at 0
        for s in ops:
            t.end[s.name] = _end_s(pl, t, s, last_input[s.name], reads_done, rate)
        return
    on_ddr = [s.on_ddr() for s in ops]
    t.ddr_jobs.extend(_hbm_jobs(pl, t, on_ddr))
    ddr_done = _makespan(t.ddr_jobs)
    ddr_rate = _phase_tile_rate(on_ddr, pl.tiles)
    for s, d in zip(ops, on_ddr, strict=True):  # a saturated channel holds back what it paces
        end = _end_s(pl, t, s, last_input[s.name], reads_done, rate)
        if _paced_by_channel(d, ddr_rate, pl.tiles):
            end = max(end, ddr_done + s.compute_s / pl.tiles)
        t.end[s.name] = end


def _link_jobs(pl: _Pipeline, t: _Timeline) -> list[tuple[float, float]]:
    """The links' (release, work) jobs: each collective's transfer, from when it is emitted."""
    return [(_emitted_s(pl, t, f), f.transfer_s) for fs in pl.feeds.values() for f in fs]


def _finish_s(pl: _Pipeline, t: _Timeline) -> float:
    """The kernel's end: the latest of each op's last tile written (a tile of writes after its
    end, over the slower channel), the HBM and DDR channels' and the links' makespans, and each
    collective into a later kernel one tile's transfer after its source ends."""
    n = pl.tiles

    def written(o: str) -> float:
        s = pl.stages[o]
        return t.end[o] + max(s.write_s, s.ddr_write_s) / n

    finish = max((written(o) for o in t.end), default=0.0)
    finish = max(finish, _makespan(t.jobs), _makespan(t.ddr_jobs))
    for f in pl.feeds.get(_OUT, ()):
        if f.src is not None:
            finish = max(finish, t.end[f.src] + f.transfer_s / n)
    return max(finish, _makespan(_link_jobs(pl, t)))


def pipeline_s(kernel: Kernel, hw: Hardware) -> float:
    """One execution of `kernel`'s pipeline at its real tile count, in seconds: its phases timed
    one after another (`_time_phase`), then the kernel's end (`_finish_s`)."""
    pl = _pipeline(kernel, hw)
    t = _Timeline()
    for k in sorted(set(pl.phase.values())):
        _time_phase(pl, t, k)
    return _finish_s(pl, t)


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
    hbm_bytes: float = 0
    ddr_bytes: float = 0
    for p in kernel.ops:  # the sums of `hbm_bytes` and `ddr_bytes`, in op order
        h, d = p.traffic()
        hbm_bytes += h
        ddr_bytes += d
    hbm = hbm_bytes / hbm_rate
    ddr = ddr_bytes / hw.socket.ddr.bandwidth
    p2p = sum(c.bytes for c in kernel.collectives) / hw.links.p2p_bandwidth
    period = pipe
    if looped_executions > 1 and kernel.prefetch_iteration:
        # the next iteration's weights stream in behind this one: the loop runs at the pace of
        # whichever is slower, a channel with every byte, or the pipeline with its weights
        # already on chip (its latencies and compute still in the way)
        loaded = replace(kernel, ops=[replace(p, weight_read_bytes=0.0) for p in kernel.ops])
        period = max(hbm, ddr, p2p, pipeline_s(loaded, hw))
    return KernelEstimate(
        pipeline_s=pipe,
        period_s=period,
        call_s=call_cost(kernel, hw, orchestration),
        executions=max(1, looped_executions),
        hbm_s=hbm,
        p2p_s=p2p,
        ddr_s=ddr,
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


# How far below the closed form's own sums `latency_lower_bound_s` stays: more than the
# rounding of the pipeline's float arithmetic (a few ulps over tens of terms), far less than any
# difference between two candidate kernels.
BOUND_MARGIN = 1e-9


def latency_lower_bound_s(
    kernel: Kernel, hw: Hardware, *, orchestration: Orchestration | str = Orchestration.HARDWARE
) -> float:
    """A number no larger than `kernel_latency_s` of one unlooped call of `kernel`, for a
    fraction of its cost: the call, and of the pipeline what no schedule escapes (a channel
    serves all of its jobs one after another, and an op's last tile ends no sooner than its
    whole compute after it starts): the HBM channel's, DDR's and the links' work, and the
    longest op's compute. A search skips pricing a candidate this bound already rules out."""
    socket = hw.socket
    hbm_bytes = ddr_bytes = 0.0
    compute = 0.0
    fpp = socket.flops_per_pcu
    for p in kernel.ops:
        h, d = p.traffic()
        hbm_bytes += h
        ddr_bytes += d
        rate = p.pcus * fpp * hw.calibration.efficiency(p.cost_class)
        if rate > 0 and p.flops > 0:
            compute = max(compute, p.flops / rate)
    hbm = hbm_bytes / (socket.hbm.bandwidth * hw.calibration.hbm_efficiency)
    ddr = ddr_bytes / socket.ddr.bandwidth
    p2p = sum(c.bytes for c in kernel.collectives) / hw.links.p2p_bandwidth
    floor = max(hbm, ddr, p2p, compute) * (1.0 - BOUND_MARGIN)
    return call_cost(kernel, hw, orchestration) + floor


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
