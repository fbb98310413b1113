"""The allocation of one kernel under many hardware parameter sets at once (numpy over them).

Pricing a program under the calibration ensemble re-allocates every kernel under every member
(`rdusim.uncertainty.pricing`). The members share the socket's geometry and differ in its
calibrated rates, so the allocation's steps are the same for all of them and only the numbers
differ: this module runs `rdusim.compiler.allocate.allocation` with every per-member number an
array over the members, the same operations in the same order on each (IEEE arithmetic, so
every member's PCUs and PMUs are those the scalar pass gives; `tests/compiler` compares them on
shipped kernels and ensemble members). Each member's PMU search keeps its own bounds and stops
when its own would.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from rdusim.compiler.allocate import _least_pcus, efficiency, phases
from rdusim.compiler.program import Kernel
from rdusim.spec.hardware import Hardware

Floats = NDArray[np.float64]


def same_socket(hws: list[Hardware]) -> bool:
    """Whether `hws` differ at most in what the passes over members take per member (the
    calibration, the links' bandwidth and latency): the same socket, node and link topology,
    so that one pass serves them all."""
    first = hws[0]
    return all(
        h.socket == first.socket
        and h.node == first.node
        and h.links.topology == first.links.topology
        for h in hws[1:]
    )


def _by_work(
    work: dict[str, Floats], floor: dict[str, int], total: int, m: int
) -> dict[str, Floats]:
    """`allocate._by_work` for every member: each op its floor, the spare PCUs by work, the
    remainders to the largest fractions (ties to the earlier op)."""
    names = list(work)
    spare = total - sum(floor.values())
    total_work: Floats = sum(work.values(), np.zeros(m))
    out = {n: np.full(m, float(floor[n])) for n in names}
    if spare <= 0 or not names:
        return out
    live = total_work > 0
    shares = {n: spare * w / np.where(live, total_work, 1.0) for n, w in work.items()}
    whole = {n: np.floor(s) for n, s in shares.items()}
    left = spare - sum(whole.values(), np.zeros(m))
    key = np.array([whole[n] - shares[n] for n in names])  # (ops, members)
    order = np.argsort(key, axis=0, kind="stable")  # ascending, equal keys in op order
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(len(names))[:, None], axis=0)
    for i, n in enumerate(names):
        extra = (rank[i] < left).astype(np.float64)
        out[n] = np.where(live, floor[n] + whole[n] + extra, float(floor[n]))
    return out


class _Rows:
    """`allocate._Demand` over the members: each compute op's root-work, pace and share as
    arrays, its floor and buffer PMUs as numbers."""

    def __init__(self, kernel: Kernel, hws: list[Hardware], phase: dict[str, int]) -> None:
        m = len(hws)
        socket = hws[0].socket
        stages, pmu_bytes, fpp = socket.pcu.stages, socket.pmu_bytes, socket.flops_per_pcu
        self.staging = socket.staging_pmus_per_pcu
        least: dict[str, int] = {}
        work: dict[str, Floats] = {}
        self.buffers: dict[str, int] = {}
        for p in kernel.ops:
            least[p.name] = _least_pcus(p, stages)
            if least[p.name] > 0:
                eff = np.array([efficiency(h, p.cost_class) for h in hws])
                work[p.name] = p.flops / (fpp * eff)
            self.buffers[p.name] = max(1, math.ceil(p.sram_bytes / pmu_bytes))
        self.least = least
        shared = _by_work(work, {n: least[n] for n in work}, socket.pcus, m)
        pace = _phase_memory_s(kernel, hws, phase)
        roots: dict[int, Floats] = {}
        for n, w in work.items():
            k = phase[n]
            here = np.where(shared[n] > 0, w / np.where(shared[n] > 0, shared[n], 1.0), np.inf)
            pace[k] = np.maximum(pace.get(k, np.zeros(m)), here)
            roots[k] = roots.get(k, np.zeros(m)) + np.sqrt(w)
        self.rows = [
            (n, np.sqrt(w) * roots[phase[n]], pace[phase[n]], least[n], shared[n])
            for n, w in work.items()
        ]
        self.fixed_pmus = sum(b for n, b in self.buffers.items() if n not in work)

    def pcus(self, root: Floats, pace: Floats, least: int, shared: Floats, slack: Floats) -> Floats:
        live = pace > 0
        need = np.where(live, root / np.where(live, pace * slack, 1.0), np.inf)
        return np.maximum(least, np.minimum(shared, np.ceil(need * (1 - 1e-9))))

    def pmus_at(self, slack: Floats) -> Floats:
        total = np.full(slack.shape, float(self.fixed_pmus))
        for n, root, pace, least, shared in self.rows:
            staged = np.ceil(self.staging * self.pcus(root, pace, least, shared, slack))
            total = total + np.maximum(self.buffers[n], staged)
        return total


def _phase_memory_s(
    kernel: Kernel, hws: list[Hardware], phase: dict[str, int]
) -> dict[int, Floats]:
    """`allocate.phase_memory_s` for every member."""
    m = len(hws)
    hbm_rate = np.array([h.socket.hbm.bandwidth * h.calibration.hbm_efficiency for h in hws])
    ddr_rate = np.array([h.socket.ddr.bandwidth for h in hws])
    p2p_rate = np.array([h.links.p2p_bandwidth for h in hws])
    hbm: dict[int, Floats] = {}
    ddr: dict[int, Floats] = {}
    for p in kernel.ops:
        k = phase[p.name]
        hbm_bytes, ddr_bytes = p.traffic()
        hbm[k] = hbm.get(k, np.zeros(m)) + hbm_bytes / hbm_rate
        ddr[k] = ddr.get(k, np.zeros(m)) + ddr_bytes / ddr_rate
    links: dict[int, Floats] = {}
    for c in kernel.collectives:
        at = c.dst if c.dst in phase else c.src
        k = phase.get(at, 0) if at is not None else 0
        links[k] = links.get(k, np.zeros(m)) + c.bytes / p2p_rate
    zero = np.zeros(m)
    return {
        k: np.maximum(np.maximum(hbm.get(k, zero), ddr.get(k, zero)), links.get(k, zero))
        for k in set(hbm) | set(links)
    }


def _slack(rows: _Rows, pmus: int, m: int) -> tuple[Floats, NDArray[np.bool_]]:
    """Each member's pace slack (`allocate._fit_pmus`), and which members get the minimum
    placement (no slack fits)."""
    slack = np.ones(m)
    least = np.zeros(m, dtype=bool)
    search = rows.pmus_at(slack) > pmus
    lo, hi = np.ones(m), np.full(m, 2.0)
    doubling = search.copy()
    while doubling.any():
        over = doubling & (rows.pmus_at(hi) > pmus)
        doubling &= over
        lo, hi = np.where(over, hi, lo), np.where(over, hi * 2, hi)
        gone = over & (hi > 1e6)
        least |= gone
        doubling &= ~gone
    halving = search & ~least & (hi / lo > 1.01)
    while halving.any():
        mid = np.sqrt(lo * hi)
        fits = rows.pmus_at(np.where(halving, mid, hi)) <= pmus
        hi = np.where(halving & fits, mid, hi)
        lo = np.where(halving & ~fits, mid, lo)
        halving &= hi / lo > 1.01
    return np.where(search, hi, slack), least


def allocations(
    kernel: Kernel, hws: list[Hardware], phase: dict[str, int] | None = None
) -> dict[str, tuple[NDArray[np.int64], NDArray[np.int64]]]:
    """Each op's (PCUs, PMUs) under each of `hws` (`allocate.allocation` of each; the members
    share one socket: `same_socket`)."""
    m = len(hws)
    phase = phase if phase is not None else phases(kernel)
    rows = _Rows(kernel, hws, phase)
    slack, least = _slack(rows, hws[0].socket.pmus, m)
    pcus: dict[str, Floats] = {}
    for n, root, pace, floor, shared in rows.rows:
        pcus[n] = np.where(least, float(floor), rows.pcus(root, pace, floor, shared, slack))
    out = {}
    for p in kernel.ops:
        units = pcus.get(p.name, np.zeros(m))
        pmus = np.maximum(rows.buffers[p.name], np.ceil(rows.staging * units))
        out[p.name] = (units.astype(np.int64), pmus.astype(np.int64))
    return out
