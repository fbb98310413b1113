"""A frozen copy of `rdusim.cost.analytic.pipeline_s` before it was split into named steps.

Copied verbatim (its helpers too, so later changes to them do not leak in) from the commit
before the refactor, e44c112. `tests/cost/test_pipeline_regression.py` holds the current
`pipeline_s` to this one, to 1e-12 relative, on every shipped mapping's kernels, a sample of the
search's candidates and random small kernels. Do not edit: it is the reference.
"""

# ruff: noqa
# mypy: ignore-errors

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from rdusim.compiler.program import Kernel, OpPlan
from rdusim.spec.hardware import Hardware


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
