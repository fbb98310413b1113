"""Discrete-event simulation of one fused kernel as a spatial pipeline (simpy).

Each op is a pipeline stage that processes the kernel's tiles in order. A stage starts tile i
when its in-kernel producers have delivered tile i and its loader has brought tile i's HBM
bytes (activations, cache, this tile's share of the weights it streams) on chip; loaders run
ahead by one tile (double buffering). Outputs that leave the kernel go back to HBM through a
writer. HBM, DDR and the P2P links are per-socket bandwidth resources shared by every stage
(DDR carries the weights and cache `placement:` puts there; a tile that needs bytes from both
tiers fetches them over both channels at once); a
collective is a stage on the P2P link that streams tile by tile as its producer emits them, so
communication overlaps compute (paper Fig. 6), and pays its rounds of link latency once.

`iterations` > 1 chains executions of the kernel as one looped call does: loaders stream the
next iteration's weights as soon as their buffers free up (with the small activation reads of
that iteration, which decode layers make), while the stages that read the layer's input wait for
the previous iteration to finish. Sockets doing identical work can be simulated
once (`sockets=1`); with `sockets=N` every socket is simulated and collectives wait for all
peers, tile by tile.

This module times the pipeline only; kernel calls and tile-count extrapolation are
`rdusim.sim.kernel`'s business.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from rdusim.compiler.program import Collective, Kernel, OpPlan
from rdusim.sim.channels import Environment, PriorityResource, Store
from rdusim.spec.hardware import Hardware

# Tiles simulated per kernel at most; kernels with more real tiles are extrapolated from two
# resolutions (`rdusim.sim.kernel`).
MAX_SIM_TILES = 64

Process = Generator[simpy.Event, Any, None]


@dataclass
class Slice:
    """One interval on a trace track."""

    track: str
    name: str
    start: float
    end: float
    socket: int = 0


@dataclass
class OpTiming:
    name: str
    busy_s: float  # compute time (PCUs working)
    hbm_s: float  # time its HBM transfers held the channel
    stall_s: float  # time in the kernel neither computing nor moving data
    pcus: int
    bound: str  # what limits this stage: compute | hbm | ddr | input
    ddr_s: float = 0.0  # time its DDR transfers held that channel


@dataclass
class PipelineRun:
    """One simulated run of a kernel's pipeline (all iterations), per socket."""

    pipeline_s: float
    ops: list[OpTiming]  # per iteration
    bottleneck: str
    hbm_bytes: float  # per iteration
    p2p_bytes: float  # per iteration
    hbm_busy_s: float  # per iteration
    p2p_busy_s: float  # per iteration
    slices: list[Slice] = field(default_factory=list)
    ddr_bytes: float = 0.0  # per iteration
    ddr_busy_s: float = 0.0  # per iteration


class _Barrier:
    """All sockets' parts of one collective tile must arrive before any socket proceeds."""

    def __init__(self, env: simpy.Environment, parties: int) -> None:
        self.env = env
        self.parties = parties
        self.count: dict[tuple[int, int], int] = defaultdict(int)
        self.events: dict[tuple[int, int], simpy.Event] = {}

    def arrive(self, key: tuple[int, int]) -> simpy.Event:
        ev = self.events.setdefault(key, self.env.event())
        self.count[key] += 1
        if self.count[key] == self.parties:
            ev.succeed()
        return ev


class _Move:
    """One tile's transfer over one channel, as `_Run.transfer` makes it: the channel, its
    kind, the bytes and the seconds they hold it (and the names its accounts and trace use)."""

    __slots__ = ("kind", "kind_bytes", "nbytes", "res", "seconds", "track")

    def __init__(self, res: PriorityResource, kind: str, nbytes: float, seconds: float) -> None:
        self.res = res
        self.kind = kind
        self.nbytes = nbytes
        self.seconds = seconds
        self.kind_bytes = f"{kind}_bytes"
        self.track = kind.upper()


@dataclass
class _Wiring:
    """Who feeds whom inside the kernel; the same on every socket."""

    producers: dict[str, list[str]]
    consumers: dict[str, list[str]]
    coll_for_dst: dict[str, list[Collective]]
    coll_from_src: dict[str, list[Collective]]

    @classmethod
    def of(cls, kernel: Kernel) -> _Wiring:
        names = {p.name for p in kernel.ops}
        w = cls(defaultdict(list), defaultdict(list), defaultdict(list), defaultdict(list))
        for src, dst in kernel.edges:
            w.consumers[src].append(dst)
            w.producers[dst].append(src)
        for c in kernel.collectives:
            if c.src in names:
                w.coll_from_src[c.src].append(c)
            if c.dst in names:
                w.coll_for_dst[c.dst].append(c)
        return w

    def is_source(self, op: str) -> bool:
        """Reads only what earlier kernels (or the previous iteration) left in HBM."""
        return not self.producers[op] and not any(c.src is not None for c in self.coll_for_dst[op])


class _Run:
    """One simpy environment simulating `sockets` copies of a kernel for `iterations`."""

    def __init__(
        self,
        kernel: Kernel,
        hw: Hardware,
        *,
        tiles: int,
        iterations: int,
        sockets: int,
        trace: bool,
    ) -> None:
        self.kernel = kernel
        self.hw = hw
        self.n = tiles
        self.iterations = iterations
        self.sockets = sockets
        self.trace = trace
        self.env = Environment()
        self.hbm_rate = hw.socket.hbm.bandwidth * hw.calibration.hbm_efficiency
        self.p2p_rate = hw.links.p2p_bandwidth
        # DDR streams at its peak: no public figure pins an achieved fraction
        self.rates = {"hbm": self.hbm_rate, "ddr": hw.socket.ddr.bandwidth, "p2p": self.p2p_rate}
        self.wiring = _Wiring.of(kernel)
        self.slices: list[Slice] = []
        self.busy: dict[str, float] = defaultdict(float)
        self.hbm_time: dict[str, float] = defaultdict(float)
        self.ddr_time: dict[str, float] = defaultdict(float)
        self.totals = {k: 0.0 for k in ("hbm", "ddr", "p2p", "hbm_bytes", "ddr_bytes", "p2p_bytes")}
        self.barriers = {id(c): _Barrier(self.env, sockets) for c in kernel.collectives}
        # iteration j is done on socket s when all of its stages and writers have finished
        self.done = [[self.env.event() for _ in range(iterations)] for _ in range(sockets)]
        self.pending = [[0] * iterations for _ in range(sockets)]

    # --- bookkeeping ---------------------------------------------------------------------
    def record(self, track: str, name: str, start: float, socket: int) -> None:
        if self.trace:
            self.slices.append(Slice(track, name, start, self.env.now, socket))

    def finished(self, socket: int, it: int) -> None:
        self.pending[socket][it] -= 1
        if self.pending[socket][it] == 0:
            self.done[socket][it].succeed()

    def transfer(
        self,
        res: PriorityResource,
        nbytes: float,
        kind: str,
        who: str,
        socket: int,
        iteration: int = 0,
    ) -> Process:
        """Move `nbytes` over a channel; earlier iterations' transfers go first (program
        order), so a looped kernel's prefetch only takes bandwidth the current one leaves."""
        if nbytes <= 0:
            return
        yield from self.carry(
            _Move(res, kind, nbytes, nbytes / self.rates[kind]), who, socket, iteration
        )

    def carry(self, m: _Move, who: str, socket: int, iteration: int) -> Process:
        """Hold `m`'s channel for its seconds, in iteration order, and account for it."""
        req = m.res.request(priority=iteration)
        yield req
        start = self.env._now
        yield self.env.timeout(m.seconds)
        if socket == 0:
            self.moved(m, who)
        if self.trace:
            self.record(m.track, who, start, socket)
        m.res.release(req)

    def fetch(
        self,
        channels: tuple[PriorityResource, PriorityResource],
        nbytes: tuple[float, float],
        who: str,
        socket: int,
        iteration: int,
    ) -> Process:
        """Move one tile's HBM and DDR bytes (`nbytes`) over the two channels at once: the tile
        is there when both have arrived."""
        hbm, ddr = channels
        on_hbm, on_ddr = nbytes
        if on_ddr <= 0:
            yield from self.transfer(hbm, on_hbm, "hbm", who, socket, iteration)
        elif on_hbm <= 0:
            yield from self.transfer(ddr, on_ddr, "ddr", who, socket, iteration)
        else:
            both = [
                self.env.process(self.transfer(hbm, on_hbm, "hbm", who, socket, iteration)),
                self.env.process(self.transfer(ddr, on_ddr, "ddr", who, socket, iteration)),
            ]
            yield self.env.all_of(both)

    # --- processes -------------------------------------------------------------------------
    def move_of(
        self, channels: tuple[PriorityResource, PriorityResource], nbytes: tuple[float, float]
    ) -> _Move | None:
        """How `fetch` moves a tile of `nbytes` (HBM, DDR) that is not on both channels at once:
        over one channel (its `_Move`), or not at all (None)."""
        on_hbm, on_ddr = nbytes
        if on_ddr <= 0:
            if on_hbm <= 0:
                return None
            return _Move(channels[0], "hbm", on_hbm, on_hbm / self.rates["hbm"])
        return _Move(channels[1], "ddr", on_ddr, on_ddr / self.rates["ddr"])

    def moved(self, m: _Move, who: str) -> None:
        """The accounting of one tile moved on socket 0 (`carry`)."""
        self.totals[m.kind] += m.seconds
        self.totals[m.kind_bytes] += m.nbytes
        (self.hbm_time if m.kind == "hbm" else self.ddr_time)[who] += m.seconds

    def loader(
        self,
        p: OpPlan,
        out: Store,
        channels: tuple[PriorityResource, PriorityResource],
        socket: int,
    ) -> Process:
        per_tile = (p.hbm_in_bytes / self.n, p.ddr_in_bytes / self.n)
        both = per_tile[0] > 0 and per_tile[1] > 0  # `fetch` moves it over both at once
        m = None if both else self.move_of(channels, per_tile)
        env, put, name, trace = self.env, out.put, p.name, self.trace
        for it in range(self.iterations):
            for i in range(self.n):
                if both:
                    yield from self.fetch(channels, per_tile, name, socket, it)
                elif m is not None:  # `carry`, inlined: a generator less per tile (6% of a run)
                    req = m.res.request(priority=it)
                    yield req
                    start = env._now
                    yield env.timeout(m.seconds)
                    if socket == 0:
                        self.moved(m, name)
                    if trace:
                        self.record(m.track, name, start, socket)
                    m.res.release(req)
                yield put(i)

    def writer(
        self,
        p: OpPlan,
        inbox: Store,
        channels: tuple[PriorityResource, PriorityResource],
        socket: int,
    ) -> Process:
        per_tile = ((p.hbm_write - p.ddr_write) / self.n, p.ddr_write / self.n)
        both = per_tile[0] > 0 and per_tile[1] > 0  # `fetch` moves it over both at once
        m = None if both else self.move_of(channels, per_tile)
        env, get, name, trace = self.env, inbox.get, p.name, self.trace
        for it in range(self.iterations):
            for _ in range(self.n):
                yield get()
                if both:
                    yield from self.fetch(channels, per_tile, name, socket, it)
                elif m is not None:  # `carry`, inlined: a generator less per tile (6% of a run)
                    req = m.res.request(priority=it)
                    yield req
                    start = env._now
                    yield env.timeout(m.seconds)
                    if socket == 0:
                        self.moved(m, name)
                    if trace:
                        self.record(m.track, name, start, socket)
                    m.res.release(req)
            self.finished(socket, it)

    def collective(
        self,
        c: Collective,
        p2p: PriorityResource,
        inbox: Store,
        outbox: Store,
        socket: int,
    ) -> Process:
        per_tile = c.bytes / self.n
        seconds = per_tile / self.rates["p2p"]
        label = f"{c.kind} {c.tensor}"
        fed = c.src in {p.name for p in self.kernel.ops}
        env, barrier, trace = self.env, self.barriers[id(c)], self.trace
        for it in range(self.iterations):
            if not fed and it > 0:
                yield self.done[socket][it - 1]  # it converts what the last iteration wrote
            for i in range(self.n):
                if fed:
                    yield inbox.get()
                start = env._now
                if i == 0 and c.rounds:
                    yield env.timeout(c.rounds * self.hw.links.p2p_latency_s)
                if per_tile > 0:  # `transfer`, inlined: the same events in the same order
                    req = p2p.request(priority=it)
                    yield req
                    moved = env._now
                    yield env.timeout(seconds)
                    if socket == 0:
                        self.totals["p2p"] += seconds
                        self.totals["p2p_bytes"] += per_tile
                    if trace:
                        self.record("P2P", label, moved, socket)
                    p2p.release(req)
                yield barrier.arrive((it, i))
                if trace:
                    self.record("P2P", label, start, socket)
                yield outbox.put(i)

    def stage(
        self,
        p: OpPlan,
        loaded: Store,
        wbox: Store | None,
        edges: dict[tuple[str, str], Store],
        coll_in: dict[int, Store],
        coll_out: dict[int, Store],
        socket: int,
    ) -> Process:
        w = self.wiring
        rate = p.pcus * self.hw.socket.flops_per_pcu * self.hw.calibration.efficiency(p.cost_class)
        per_tile = p.flops / self.n / rate if rate > 0 and p.flops > 0 else 0.0
        waits_first = self.n if p.blocking else 1  # a blocking op first takes in every tile
        source = w.is_source(p.name)
        # what it takes from and gives to, in the order it does so
        inputs = [edges[(src, p.name)].get for src in w.producers[p.name]]
        inputs += [coll_out[id(c)].get for c in w.coll_for_dst[p.name]]
        outputs = [edges[(p.name, dst)].put for dst in w.consumers[p.name]]
        outputs += [coll_in[id(c)].put for c in w.coll_from_src[p.name]]
        if wbox is not None:
            outputs.append(wbox.put)
        env, load, name, accounts, trace = self.env, loaded.get, p.name, socket == 0, self.trace
        later = 0 if p.blocking else 1  # inputs taken for each tile after the first
        for it in range(self.iterations):
            if source and it > 0:
                yield self.done[socket][it - 1]  # the layer input is the last iteration's output
            for i in range(self.n):
                for _ in range(waits_first if i == 0 else later):
                    for take in inputs:
                        yield take()
                yield load()
                start = env._now
                if per_tile:
                    yield env.timeout(per_tile)
                    if accounts:
                        self.busy[name] += per_tile
                if trace:
                    self.record("op", name, start, socket)
                for give in outputs:
                    yield give(i)
            self.finished(socket, it)

    def start_socket(self, s: int) -> None:
        env = self.env
        hbm = PriorityResource(env, capacity=1)
        channels = (hbm, PriorityResource(env, capacity=1))  # HBM, DDR
        p2p = PriorityResource(env, capacity=1)
        edges = {e: Store(env) for e in self.kernel.edges}
        coll_in = {id(c): Store(env) for c in self.kernel.collectives}
        coll_out = {id(c): Store(env) for c in self.kernel.collectives}
        for it in range(self.iterations):
            self.pending[s][it] = len(self.kernel.ops) + sum(
                1 for p in self.kernel.ops if p.hbm_write > 0
            )
        # double buffering: one tile waits in the store while the next arrives (its transfer
        # holds the second buffer); a looped kernel with room also holds the next iteration's
        depth = 1 + (self.n if self.kernel.prefetch_iteration and self.iterations > 1 else 0)
        for p in self.kernel.ops:
            loaded = Store(env, capacity=depth)
            env.process(self.loader(p, loaded, channels, s))
            wbox = None
            if p.hbm_write > 0:
                wbox = Store(env)
                env.process(self.writer(p, wbox, channels, s))
            env.process(self.stage(p, loaded, wbox, edges, coll_in, coll_out, s))
        for c in self.kernel.collectives:
            env.process(self.collective(c, p2p, coll_in[id(c)], coll_out[id(c)], s))

    def run(self) -> PipelineRun:
        for s in range(self.sockets):
            self.start_socket(s)
        self.env.run()
        pipeline = self.env.now
        k = self.iterations
        timings: list[OpTiming] = []
        for p in self.kernel.ops:
            b = self.busy[p.name] / k
            h = self.hbm_time[p.name] / k
            d = self.ddr_time[p.name] / k
            stall = max(0.0, pipeline / k - max(b, h, d))
            timings.append(OpTiming(p.name, b, h, stall, p.pcus, _bound(b, h, d), d))
        candidates = {f"op {t.name}": t.busy_s for t in timings}
        candidates["HBM bandwidth"] = self.totals["hbm"] / k
        candidates["P2P links"] = self.totals["p2p"] / k
        if self.totals["ddr"] > 0:
            candidates["DDR bandwidth"] = self.totals["ddr"] / k
        return PipelineRun(
            pipeline_s=pipeline,
            ops=timings,
            bottleneck=max(candidates, key=lambda n: candidates[n]),
            hbm_bytes=self.totals["hbm_bytes"] / k,
            p2p_bytes=self.totals["p2p_bytes"] / k,
            hbm_busy_s=self.totals["hbm"] / k,
            p2p_busy_s=self.totals["p2p"] / k,
            slices=self.slices,
            ddr_bytes=self.totals["ddr_bytes"] / k,
            ddr_busy_s=self.totals["ddr"] / k,
        )


def _bound(busy: float, hbm: float, ddr: float) -> str:
    """What limits a stage: its compute, the HBM or DDR channel's time for its bytes, or (with
    neither) its inputs."""
    if busy >= max(hbm, ddr) and busy > 0:
        return "compute"
    if hbm >= ddr and hbm > 0:
        return "hbm"
    return "ddr" if ddr > 0 else "input"


def simulate_pipeline(
    kernel: Kernel,
    hw: Hardware,
    *,
    tiles: int | None = None,
    iterations: int = 1,
    sockets: int = 1,
    trace: bool = False,
) -> PipelineRun:
    """Simulate `iterations` chained executions of `kernel` with `tiles` tiles each (default:
    the kernel's tiles, at most MAX_SIM_TILES)."""
    n = tiles if tiles is not None else max(1, min(kernel.tiles, MAX_SIM_TILES))
    run = _Run(kernel, hw, tiles=n, iterations=iterations, sockets=sockets, trace=trace)
    return run.run()
