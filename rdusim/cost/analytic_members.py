"""The closed form of one kernel under many hardware parameter sets at once (numpy over them).

`rdusim.cost.analytic.estimate` for every member of the calibration ensemble, each member with
its own allocation of the kernel's PCUs and PMUs: the same steps in the same order as the
scalar closed form, every per-member number an array over the members (IEEE arithmetic, so
each member's figures are the scalar ones to the last bit; `tests/cost` compares them). The
kernel's structure (its stages' order, wiring and phases) is the members' common part. A
kernel that moves bytes over DDR is left to the scalar form (`supports`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from rdusim.compiler.collectives import CollectiveKind, Topology, collective_cost
from rdusim.compiler.program import Kernel
from rdusim.cost.analytic import _OUT, _phases, _producers, _topological
from rdusim.spec.hardware import Hardware
from rdusim.spec.mapping import Orchestration

Floats = NDArray[np.float64]
Units = dict[str, tuple[NDArray[np.int64], NDArray[np.int64]]]  # op -> (PCUs, PMUs) by member


def supports(kernel: Kernel) -> bool:
    """Whether the kernel is priced here: it moves nothing over DDR."""
    return not any(p.ddr_in_bytes or p.ddr_write for p in kernel.ops)


@dataclass(frozen=True)
class Estimates:
    """`KernelEstimate`'s times for each member."""

    pipeline_s: Floats
    period_s: Floats
    call_s: Floats


@dataclass(frozen=True)
class _Stage:
    name: str
    blocking: bool
    compute_s: Floats
    load_s: Floats
    write_s: Floats


@dataclass(frozen=True)
class _Feed:
    src: str | None
    latency_s: Floats
    transfer_s: Floats


class _Members:
    """The members' per-member constants, as arrays."""

    def __init__(self, hws: Sequence[Hardware]) -> None:
        self.m = len(hws)
        self.hws = hws
        self.hbm_rate = np.array(
            [h.socket.hbm.bandwidth * h.calibration.hbm_efficiency for h in hws]
        )
        self.p2p_rate = np.array([h.links.p2p_bandwidth for h in hws])
        self.p2p_latency = np.array([h.links.p2p_latency_s for h in hws])
        self.fpp = np.array([h.socket.flops_per_pcu for h in hws])
        self.zero = np.zeros(self.m)
        self._eff: dict[str, Floats] = {}

    def efficiency(self, cost_class: str) -> Floats:
        if cost_class not in self._eff:
            self._eff[cost_class] = np.array(
                [h.calibration.efficiency(cost_class) for h in self.hws]
            )
        return self._eff[cost_class]


class _Pipe:
    """`analytic._Pipeline` over the members."""

    def __init__(self, kernel: Kernel, units: Units, mb: _Members, weights: bool = True) -> None:
        self.n = max(1, kernel.tiles)
        self.mb = mb
        self.producers = _producers(kernel)
        names = {p.name for p in kernel.ops}
        self.feeds: dict[str, list[_Feed]] = {}
        for c in kernel.collectives:
            f = _Feed(
                c.src if c.src in names else None,
                c.rounds * mb.p2p_latency,
                c.bytes / mb.p2p_rate,
            )
            self.feeds.setdefault(c.dst if c.dst in names else _OUT, []).append(f)
        self.stages: dict[str, _Stage] = {}
        for p in _topological(kernel.ops, self.producers):
            # without weights: the op as the closed form prices a looped call's next iteration
            hbm_in = (p if weights else replace(p, weight_read_bytes=0.0)).hbm_in_bytes
            rate = units[p.name][0] * mb.fpp * mb.efficiency(p.cost_class)
            live = (rate > 0) & (p.flops > 0)
            compute = np.where(live, p.flops / np.where(live, rate, 1.0), 0.0)
            self.stages[p.name] = _Stage(
                p.name, p.blocking, compute, hbm_in / mb.hbm_rate, p.hbm_write / mb.hbm_rate
            )
        self.phase = _phases(self.stages.values(), self.producers, self.feeds)
        self.start: dict[str, Floats] = {}
        self.end: dict[str, Floats] = {}
        self.jobs: list[tuple[Floats, Floats]] = []


def _makespan(jobs: list[tuple[Floats, Floats]], zero: Floats) -> Floats:
    """`analytic._makespan` for each member: its jobs in (release, work) order."""
    if not jobs:
        return zero
    release = np.array([r for r, _ in jobs])
    work = np.array([w for _, w in jobs])
    order = np.lexsort((work, release), axis=0)
    release = np.take_along_axis(release, order, axis=0)
    work = np.take_along_axis(work, order, axis=0)
    finish = zero
    for r, w in zip(release, work, strict=True):
        finish = np.where(w > 0, np.maximum(finish, r) + w, finish)
    return finish


def _tile_rate(per_tile: list[Floats], caps: list[Floats], zero: Floats) -> Floats:
    """`analytic._tile_rate` for each member."""
    seconds = np.array(per_tile)
    cap = np.array(caps)
    order = np.lexsort((seconds, cap), axis=0)
    seconds = np.take_along_axis(seconds, order, axis=0)
    cap = np.take_along_axis(cap, order, axis=0)
    used = zero
    remaining: Floats = sum(per_tile, zero)
    rate = np.full(zero.shape, math.inf)
    going = np.ones(zero.shape, dtype=bool)
    for c, s in zip(cap, seconds, strict=True):
        going &= remaining > 0
        with np.errstate(invalid="ignore"):
            fits = used + c * remaining <= 1.0
        take, stop = going & fits, going & ~fits
        rate = np.where(stop, (1.0 - used) / np.where(stop, remaining, 1.0), rate)
        with np.errstate(invalid="ignore"):
            used = np.where(take, used + c * s, used)
        remaining = np.where(take, remaining - s, remaining)
        going &= fits
    return rate


def _emitted(pl: _Pipe, f: _Feed) -> Floats:
    if f.src is None:
        return f.latency_s
    return pl.start[f.src] + pl.stages[f.src].compute_s / pl.n + f.latency_s


def _arrival(pl: _Pipe, s: _Stage) -> tuple[Floats, Floats]:
    n = pl.n
    first, last = s.load_s / n, pl.mb.zero
    for u in pl.producers.get(s.name, ()):
        first = np.maximum(first, pl.start[u] + pl.stages[u].compute_s / n)
        last = np.maximum(last, pl.end[u])
    for f in pl.feeds.get(s.name, ()):
        emitted = _emitted(pl, f)
        f_last = emitted + f.transfer_s
        if f.src is not None:
            f_last = np.maximum(pl.end[f.src] + f.transfer_s / n, f_last)
        first = np.maximum(first, emitted + f.transfer_s / n)
        last = np.maximum(last, f_last)
    return first, last


def _end(pl: _Pipe, s: _Stage, last_input: Floats, reads_done: Floats, rate: Floats) -> Floats:
    n, k = pl.n, pl.phase[s.name]
    tile = s.compute_s / n
    e = np.maximum(pl.start[s.name] + s.compute_s, last_input + tile)
    for u in pl.producers.get(s.name, ()):
        if pl.phase[u] == k:
            e = np.maximum(e, pl.end[u] + tile)
    for f in pl.feeds.get(s.name, ()):
        if f.src is not None and pl.phase[f.src] == k:
            e = np.maximum(e, pl.end[f.src] + f.transfer_s / n + tile)
    with np.errstate(divide="ignore"):
        paced = (s.load_s > 0) & (s.compute_s < n / rate)
    return np.where(paced, np.maximum(e, reads_done + tile), e)


def _time_phase(pl: _Pipe, k: int) -> None:
    n = pl.n
    ops = [s for s in pl.stages.values() if pl.phase[s.name] == k]
    last_input: dict[str, Floats] = {}
    for s in ops:
        first, last = _arrival(pl, s)
        pl.start[s.name] = np.maximum(first, last) if s.blocking else first
        last_input[s.name] = last
        pl.end[s.name] = np.maximum(pl.start[s.name] + s.compute_s, last + s.compute_s / n)
    ahead = min(2, n) / n
    for s in ops:
        start = pl.start[s.name]
        pl.jobs += [
            (pl.mb.zero, s.load_s * ahead),
            (start, s.load_s * (1.0 - ahead)),
            (start + s.compute_s / n, s.write_s),
        ]
    reads_done = _makespan(pl.jobs, pl.mb.zero)
    with np.errstate(divide="ignore"):
        caps = [np.where(s.compute_s > 0, n / s.compute_s, math.inf) for s in ops]
    rate = _tile_rate([(s.load_s + s.write_s) / n for s in ops], caps, pl.mb.zero)
    for s in ops:
        pl.end[s.name] = _end(pl, s, last_input[s.name], reads_done, rate)


def _pipeline_s(pl: _Pipe) -> Floats:
    """`analytic.pipeline_s` for each member."""
    for k in sorted(set(pl.phase.values())):
        _time_phase(pl, k)
    n, zero = pl.n, pl.mb.zero
    finish = zero  # with no op: 0.0, as the scalar form's default
    for i, o in enumerate(pl.end):
        written = pl.end[o] + pl.stages[o].write_s / n
        finish = written if i == 0 else np.maximum(finish, written)
    finish = np.maximum(np.maximum(finish, _makespan(pl.jobs, zero)), zero)
    for f in pl.feeds.get(_OUT, ()):
        if f.src is not None:
            finish = np.maximum(finish, pl.end[f.src] + f.transfer_s / n)
    links = [(_emitted(pl, f), f.transfer_s) for fs in pl.feeds.values() for f in fs]
    return np.maximum(finish, _makespan(links, zero))


def _call_s(kernel: Kernel, units: Units, mb: _Members, orchestration: str) -> Floats:
    """`rdusim.cost.calls.call_cost` for each member."""
    socket = mb.hws[0].socket
    pcus = sum((units[p.name][0] for p in kernel.ops), np.zeros(mb.m, dtype=np.int64))
    pmus = sum((units[p.name][1] for p in kernel.ops), np.zeros(mb.m, dtype=np.int64))
    program = pcus * socket.config_bytes_per_pcu + pmus * socket.config_bytes_per_pmu
    hw0 = mb.hws[0]
    rounds = collective_cost(
        CollectiveKind.ALL_GATHER, 0.0, hw0.sockets, Topology(hw0.links.topology)
    ).rounds
    cal = [h.calibration for h in mb.hws]
    host = Orchestration(orchestration) == Orchestration.SOFTWARE
    return (
        program / np.array([c.config_bandwidth for c in cal])
        + np.array([c.argument_load_s for c in cal])
        + rounds * mb.p2p_latency
        + (np.array([c.host_round_trip_s for c in cal]) if host else 0.0)
    )


def estimates(
    kernel: Kernel,
    hws: Sequence[Hardware],
    units: Units,
    *,
    orchestration: Orchestration | str,
    looped_executions: int = 1,
) -> Estimates:
    """`analytic.estimate` of `kernel` under each of `hws` (one socket's geometry), each member
    with its ops' (PCUs, PMUs) in `units`; the kernel `supports` this form."""
    mb = _Members(hws)
    pipe = _pipeline_s(_Pipe(kernel, units, mb))
    period = pipe
    if looped_executions > 1 and kernel.prefetch_iteration:
        hbm_bytes: float = 0  # `estimate`'s sum, in op order
        for p in kernel.ops:
            hbm_bytes += p.traffic()[0]
        p2p_bytes = sum(c.bytes for c in kernel.collectives)
        hbm, p2p = hbm_bytes / mb.hbm_rate, p2p_bytes / mb.p2p_rate
        ddr = kernel.ddr_bytes / np.array([h.socket.ddr.bandwidth for h in hws])
        loaded = _pipeline_s(_Pipe(kernel, units, mb, weights=False))
        period = np.maximum(np.maximum(np.maximum(hbm, ddr), p2p), loaded)
    return Estimates(pipe, period, _call_s(kernel, units, mb, str(orchestration)))
