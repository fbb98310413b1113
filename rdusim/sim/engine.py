"""Discrete-event simulation of one fused kernel as a spatial pipeline (simpy).

Each op is a pipeline stage that processes the kernel's tiles in order. A stage starts tile i
when its in-kernel producers have delivered tile i and its loader has brought tile i's HBM
bytes (activations, cache, this tile's share of the weights) on chip; loaders run ahead by one
tile (double buffering). Outputs that leave the kernel go back to HBM through a writer. HBM and
the P2P links are per-socket bandwidth resources shared by every stage; a collective is a stage
on the P2P link that streams tile by tile as its producer emits them, so communication overlaps
compute (paper Fig. 6). Sockets doing identical work can be simulated once (`sockets=1`); with
`sockets=N` every socket is simulated and collectives wait for all peers, tile by tile.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import simpy

from rdusim.compiler.allocate import efficiency
from rdusim.compiler.program import Collective, Kernel
from rdusim.spec.hardware import Hardware

# Tiles simulated per kernel at most. Real tiles are fine-grained, so a pipeline's fill and drain
# are a small fraction of a kernel; with T simulated tiles and S stages they cost ~S/T of it.
# 64 keeps that under a few percent for the paper's kernels while a full R1 prefill simulates in
# about 0.1 s (benchmarks/). A modelling resolution, not a fitted value.
MAX_SIM_TILES = 64


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
    bound: str  # what limits this stage: compute | hbm | input


@dataclass
class KernelTiming:
    name: str
    latency_s: float  # launch + pipeline
    launch_s: float
    pipeline_s: float
    ops: list[OpTiming]
    bottleneck: str
    hbm_bytes: float
    p2p_bytes: float
    hbm_busy_s: float
    p2p_busy_s: float
    slices: list[Slice] = field(default_factory=list)


class _Barrier:
    """All sockets' parts of one collective tile must arrive before any socket proceeds."""

    def __init__(self, env: simpy.Environment, parties: int) -> None:
        self.env = env
        self.parties = parties
        self.count: dict[int, int] = defaultdict(int)
        self.events: dict[int, simpy.Event] = {}

    def arrive(self, tile: int) -> simpy.Event:
        ev = self.events.setdefault(tile, self.env.event())
        self.count[tile] += 1
        if self.count[tile] == self.parties:
            ev.succeed()
        return ev


def simulate_kernel(
    kernel: Kernel, hw: Hardware, *, sockets: int = 1, trace: bool = False
) -> KernelTiming:
    """Simulate one execution of `kernel` (per-socket figures)."""
    env = simpy.Environment()
    cal = hw.calibration
    hbm_rate = hw.socket.hbm.bandwidth * cal.hbm_efficiency
    p2p_rate = hw.links.p2p_bandwidth * cal.p2p_efficiency
    n = max(1, min(kernel.tiles, MAX_SIM_TILES))
    launch = cal.kernel_launch_s
    names = {p.name for p in kernel.ops}
    slices: list[Slice] = []
    busy: dict[str, float] = defaultdict(float)
    hbm_time: dict[str, float] = defaultdict(float)
    totals = {"hbm": 0.0, "p2p": 0.0, "hbm_bytes": 0.0, "p2p_bytes": 0.0}
    barriers = {id(c): _Barrier(env, sockets) for c in kernel.collectives}

    def record(track: str, name: str, start: float, socket: int) -> None:
        if trace:
            slices.append(Slice(track, name, start, env.now, socket))

    def transfer(res: simpy.Resource, nbytes: float, rate: float, who: str, kind: str, socket: int):
        if nbytes <= 0:
            return
        with res.request() as req:
            yield req
            start = env.now
            yield env.timeout(nbytes / rate)
            if socket == 0:
                totals[kind] += nbytes / rate
                totals[f"{kind}_bytes"] += nbytes
                if kind == "hbm":
                    hbm_time[who] += nbytes / rate
            record(f"{kind.upper()}", who, start, socket)

    # the kernel's wiring is the same on every socket
    consumers: dict[str, list[str]] = defaultdict(list)
    producers: dict[str, list[str]] = defaultdict(list)
    coll_for_dst: dict[str, list[Collective]] = defaultdict(list)
    coll_from_src: dict[str, list[Collective]] = defaultdict(list)
    for c in kernel.collectives:
        if c.src in names:
            coll_from_src[c.src].append(c)
        if c.dst in names:
            coll_for_dst[c.dst].append(c)
    for src, dst in kernel.edges:
        consumers[src].append(dst)
        producers[dst].append(src)
    ops = kernel.ops

    for s in range(sockets):
        hbm = simpy.Resource(env, capacity=1)
        p2p = simpy.Resource(env, capacity=1)
        # each socket has its own stores: one per (producer -> consumer) edge inside the kernel,
        # two per collective. The processes below bind them as default arguments, because their
        # bodies only run in env.run(), after this loop has moved on to the last socket.
        edges: dict[tuple[str, str], simpy.Store] = {e: simpy.Store(env) for e in kernel.edges}
        coll_out: dict[int, simpy.Store] = {}
        coll_in: dict[int, simpy.Store] = {}
        for c in kernel.collectives:
            coll_out[id(c)] = simpy.Store(env)  # delivers converted tiles to the consumer
            coll_in[id(c)] = simpy.Store(env)  # tiles from the producer

        def loader(p, out: simpy.Store, sock=s, hbm=hbm):
            weights = p.weight_bytes if p.cost_class != "memory" else 0.0
            per_tile = (p.hbm_read + weights + p.spill_bytes) / n
            for i in range(n):
                yield from transfer(hbm, per_tile, hbm_rate, p.name, "hbm", sock)
                yield out.put(i)

        def writer(p, inbox: simpy.Store, done: simpy.Event, sock=s, hbm=hbm):
            per_tile = p.hbm_write / n
            for _ in range(n):
                yield inbox.get()
                yield from transfer(hbm, per_tile, hbm_rate, p.name, "hbm", sock)
            done.succeed()

        def collective(c: Collective, sock=s, p2p=p2p, coll_in=coll_in, coll_out=coll_out):
            per_tile = c.bytes / n
            for i in range(n):
                if c.src in names:
                    yield coll_in[id(c)].get()
                start = env.now
                latency = c.steps * hw.links.p2p_latency_s if i == 0 else 0.0
                if latency:
                    yield env.timeout(latency)
                yield from transfer(p2p, per_tile, p2p_rate, f"{c.kind} {c.tensor}", "p2p", sock)
                yield barriers[id(c)].arrive(i)
                record("P2P", f"{c.kind} {c.tensor}", start, sock)
                yield coll_out[id(c)].put(i)

        def stage(
            p,
            loaded: simpy.Store,
            wbox: simpy.Store | None,
            sock=s,
            edges=edges,
            coll_in=coll_in,
            coll_out=coll_out,
        ):
            rate = p.pcus * hw.socket.flops_per_pcu * efficiency(hw, p.cost_class)
            per_tile = p.flops / n / rate if rate > 0 and p.flops > 0 else 0.0
            waits = n if p.blocking else 1  # a blocking op first takes in every input tile
            for i in range(n):
                for _ in range(waits if i == 0 else (0 if p.blocking else 1)):
                    for src in producers[p.name]:
                        yield edges[(src, p.name)].get()
                    for c in coll_for_dst[p.name]:
                        yield coll_out[id(c)].get()
                yield loaded.get()
                start = env.now
                if per_tile:
                    yield env.timeout(per_tile)
                    if sock == 0:
                        busy[p.name] += per_tile
                record("op", p.name, start, sock)
                for dst in consumers[p.name]:
                    yield edges[(p.name, dst)].put(i)
                for c in coll_from_src[p.name]:
                    yield coll_in[id(c)].put(i)
                if wbox is not None:
                    yield wbox.put(i)

        writes_done: list[simpy.Event] = []
        for p in ops:
            loaded = simpy.Store(env, capacity=2)
            env.process(loader(p, loaded))
            wbox = None
            if p.hbm_write > 0:
                wbox = simpy.Store(env)
                done = env.event()
                writes_done.append(done)
                env.process(writer(p, wbox, done))
            env.process(stage(p, loaded, wbox))
        for c in kernel.collectives:
            env.process(collective(c))

    env.run()
    pipeline = env.now
    latency = launch + pipeline
    timings: list[OpTiming] = []
    for p in kernel.ops:
        b = busy[p.name]
        h = hbm_time[p.name]
        bound = "compute" if b >= h and b > 0 else ("hbm" if h > 0 else "input")
        timings.append(OpTiming(p.name, b, h, max(0.0, pipeline - max(b, h)), p.pcus, bound))
    candidates = {f"op {t.name}": max(t.busy_s, 0.0) for t in timings}
    candidates["HBM bandwidth"] = totals["hbm"]
    candidates["P2P links"] = totals["p2p"]
    bottleneck = max(candidates, key=lambda k: candidates[k]) if candidates else "launch"
    if trace:
        slices = [
            Slice(x.track, x.name, x.start + launch, x.end + launch, x.socket) for x in slices
        ]
    return KernelTiming(
        name=kernel.name,
        latency_s=latency,
        launch_s=launch,
        pipeline_s=pipeline,
        ops=timings,
        bottleneck=bottleneck,
        hbm_bytes=totals["hbm_bytes"],
        p2p_bytes=totals["p2p_bytes"],
        hbm_busy_s=totals["hbm"],
        p2p_busy_s=totals["p2p"],
        slices=slices,
    )
