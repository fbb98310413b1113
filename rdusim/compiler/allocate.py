"""Allocation pass: PCUs and PMUs per op inside a kernel, and whether the kernel can be placed.

A spatial pipeline runs at the pace of its slowest stage, and a kernel whose memory (HBM or the
links) sets the pace gains nothing from PCUs beyond those that keep every op at that pace.

- **PCUs.** Each compute op needs a minimum from the PCU's geometry: one systolic PCU for a
  GEMM, as many SIMD PCUs as its element operations need pipeline stages (`stages` a PCU), and
  for flash attention two systolic PCUs (QK^T, PV) and the softmax's SIMD stages. Every PCU is
  first shared by work, as a balanced pipeline does; then each op keeps only the PCUs that
  hold its phase within the phase's pace, set by the phase's slowest op or its memory floor
  (HBM or the links), whichever is longer (rate matching, `_Demand.wanted`).
- **PMUs.** An op's PMUs are the larger of what stages its PCUs' operands and partial sums
  (`staging_pmus_per_pcu` each) and what its buffers' bytes fill; a memory op's its buffers'.
  When staging and buffers together exceed the socket's PMUs, the pace is relaxed (fewer PCUs,
  never below an op's minimum) until they fit.
- **Legality.** A kernel can be placed when its ops' minimum PCUs, the PMUs they then need and
  its SRAM fit one socket; `unit_overflow` says which limit is broken and by which op.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from rdusim.compiler.program import Kernel, OpPlan
from rdusim.errors import InfeasibleError
from rdusim.ir.graph import CostClass, OpKind
from rdusim.ir.ops import SIMD_OPS_PER_ELEMENT
from rdusim.spec.hardware import Hardware
from rdusim.spec.yamlio import kernel_key

# flash attention: QK^T and PV each on a systolic PCU, the online softmax between them on SIMD
ATTENTION_SYSTOLIC_PCUS = 2


def efficiency(hw: Hardware, cost_class: CostClass) -> float:
    return hw.calibration.efficiency(cost_class)


def _least_pcus(p: OpPlan, stages: int) -> int:
    """The fewest PCUs an op can be placed on (0 for an op without arithmetic)."""
    if p.cost_class == CostClass.MEMORY or p.flops <= 0:
        return 0
    if p.cost_class == CostClass.SYSTOLIC:
        return 1
    if p.cost_class == CostClass.ATTENTION:
        softmax = SIMD_OPS_PER_ELEMENT[OpKind.SOFTMAX]
        return ATTENTION_SYSTOLIC_PCUS + math.ceil(softmax / stages)
    return math.ceil(SIMD_OPS_PER_ELEMENT.get(p.kind, 1.0) / stages)


def buffer_pmus(p: OpPlan, hw: Hardware) -> int:
    """PMUs an op's buffers fill (at least one: every op holds something on chip)."""
    return max(1, math.ceil(p.sram_bytes / hw.socket.pmu_bytes))


def op_pmus(p: OpPlan, pcus: int, hw: Hardware) -> int:
    """PMUs of an op on `pcus` PCUs: operand staging or buffers, whichever needs more."""
    staging = math.ceil(hw.socket.staging_pmus_per_pcu * pcus)
    return max(buffer_pmus(p, hw), staging)


def phases(kernel: Kernel) -> dict[str, int]:
    """Each op's phase: a blocking op (softmax over a row, top-k) waits for its whole input, so
    it and what follows run after what precedes it."""
    names = {p.name for p in kernel.ops}
    producers: dict[str, list[str]] = {}
    forward = True
    position = {p.name: i for i, p in enumerate(kernel.ops)}
    for src, dst in kernel.edges:
        producers.setdefault(dst, []).append(src)
        if src in names and dst in names and position[src] >= position[dst]:
            forward = False
    if forward:  # every producer before its consumers (as compiled kernels come): one pass
        phase: dict[str, int] = {}
        for p in kernel.ops:
            ups = [phase[u] for u in producers.get(p.name, ()) if u in names]
            phase[p.name] = max(ups, default=0) + int(p.blocking)
        return phase
    return _phases_in_any_order(kernel, producers, names)


def _phases_in_any_order(
    kernel: Kernel, producers: dict[str, list[str]], names: set[str]
) -> dict[str, int]:
    phase: dict[str, int] = {}

    def of(p: OpPlan) -> int:
        if p.name not in phase:
            phase[p.name] = 0  # a cycle cannot occur; this guards the recursion anyway
            ups = [of(kernel.op(u)) for u in producers.get(p.name, ()) if u in names]
            phase[p.name] = max(ups, default=0) + int(p.blocking)
        return phase[p.name]

    for p in kernel.ops:
        of(p)
    return phase


def phase_memory_s(kernel: Kernel, hw: Hardware, phase: dict[str, int]) -> dict[int, float]:
    """Each phase's memory floor: its ops' HBM bytes at the achieved bandwidth, their DDR bytes
    at DDR's (a separate channel), or the bytes of the collectives that feed them over the
    links, whichever is longest."""
    hbm_rate = hw.socket.hbm.bandwidth * hw.calibration.hbm_efficiency
    ddr_rate = hw.socket.ddr.bandwidth
    hbm: dict[int, float] = {}
    ddr: dict[int, float] = {}
    for p in kernel.ops:
        k = phase[p.name]
        hbm_bytes, ddr_bytes = p.traffic()
        hbm[k] = hbm.get(k, 0.0) + hbm_bytes / hbm_rate
        ddr[k] = ddr.get(k, 0.0) + ddr_bytes / ddr_rate
    links: dict[int, float] = {}
    p2p_rate = hw.links.p2p_bandwidth
    for c in kernel.collectives:
        at = c.dst if c.dst in phase else c.src
        k = phase.get(at, 0) if at is not None else 0
        links[k] = links.get(k, 0.0) + c.bytes / p2p_rate
    return {
        k: max(hbm.get(k, 0.0), ddr.get(k, 0.0), links.get(k, 0.0)) for k in set(hbm) | set(links)
    }


def _by_work(work: dict[str, float], floor: dict[str, int], total: int) -> dict[str, int]:
    """`total` PCUs over the ops: each its floor, the rest by work (largest remainder)."""
    names = list(work)
    pcus = dict(floor)
    spare = total - sum(floor.values())
    total_work = 0.0
    for w in work.values():  # added in order (`sum` compensates floats from Python 3.12 on)
        total_work += w
    if spare <= 0 or total_work <= 0:
        return pcus
    shares = {n: spare * w / total_work for n, w in work.items()}
    whole = {n: math.floor(s) for n, s in shares.items()}
    left = spare - sum(whole.values())
    position = {n: i for i, n in enumerate(names)}
    for n in sorted(names, key=lambda n: (whole[n] - shares[n], position[n]))[:left]:
        whole[n] += 1
    return {n: pcus[n] + whole[n] for n in names}


@dataclass(frozen=True)
class _Demand:
    """What rate matching needs of a kernel under one hardware, per compute op: its root-work
    (the square root of its work times its phase's sum of them), its phase's pace, its floor
    of PCUs and its share of every PCU; and every op's buffer PMUs."""

    # each compute op's (name, root-work, pace, floor, share, buffer PMUs)
    rows: list[tuple[str, float, float, int, int, int]]
    fixed_pmus: int  # the buffers of the ops without arithmetic
    staging: float
    buffers: dict[str, int]  # every op's buffer PMUs (`buffer_pmus`)

    def least(self) -> dict[str, int]:
        """The minimum placement."""
        return {n: least for n, _, _, least, _, _ in self.rows}

    def wanted(self, slack: float = 1.0) -> dict[str, int]:
        """PCUs before the PMU limit, at most every PCU shared by work.

        A phase's pace is its slowest op under that sharing or its memory floor, whichever is
        longer. Each op of a phase then keeps the fewest PCUs such that the phase's ops, even
        one after another, would take no longer than the pace times `slack`: the sum of
        w_i / p_i, which is least for p_i in proportion to sqrt(w_i). A tile's trip through the
        chain (fill and drain) then costs at most the pace over the tile count, so the kernel is
        hardly slower, and one paced by memory configures, and loads at each call, only the
        units it uses.
        """
        return {
            n: _pcus(root, pace, least, shared, slack)
            for n, root, pace, least, shared, _ in self.rows
        }

    def pmus_at(self, slack: float) -> int:
        """The PMUs of the placement `wanted(slack)`: each op's operand staging or buffers,
        whichever needs more (ops without arithmetic: their buffers)."""
        total = self.fixed_pmus
        ceil, staging, inf = math.ceil, self.staging, math.inf
        for _, root, pace, least, shared, b in self.rows:
            # `_pcus`, inlined: the PMU search calls this a few times per kernel it allocates
            need = root / (pace * slack) if pace > 0 else inf
            total += max(b, ceil(staging * max(least, min(shared, ceil(need * (1 - 1e-9))))))
        return total


def _pcus(root: float, pace: float, least: int, shared: int, slack: float) -> int:
    """An op's PCUs at `slack` (see `_Demand.wanted`); `root` is sqrt(its work) times its
    phase's sum of root-works."""
    need = root / (pace * slack) if pace > 0 else math.inf
    return max(least, min(shared, math.ceil(need * (1 - 1e-9))))


def _demand(kernel: Kernel, hw: Hardware, phase: dict[str, int] | None = None) -> _Demand:
    socket = hw.socket
    stages, pmu_bytes, fpp = socket.pcu.stages, socket.pmu_bytes, socket.flops_per_pcu
    rates: dict[CostClass, float] = {}  # PCU flops/s at each cost class's efficiency
    least: dict[str, int] = {}
    work: dict[str, float] = {}
    buffers: dict[str, int] = {}
    for p in kernel.ops:
        n = p.name
        least[n] = floor = _least_pcus(p, stages)
        if floor > 0:  # its compute in PCU-seconds at its cost class's achieved rate
            rate = rates.get(p.cost_class)
            if rate is None:
                rate = rates[p.cost_class] = fpp * efficiency(hw, p.cost_class)
            work[n] = p.flops / rate
        buffers[n] = max(1, math.ceil(p.sram_bytes / pmu_bytes))
    shared = _by_work(work, {n: least[n] for n in work}, socket.pcus)
    phase = phase if phase is not None else phases(kernel)
    pace: dict[int, float] = dict(phase_memory_s(kernel, hw, phase))
    roots: dict[int, float] = {}
    for n, w in work.items():
        k = phase[n]
        pace[k] = max(pace.get(k, 0.0), w / shared[n] if shared[n] else math.inf)
        roots[k] = roots.get(k, 0.0) + math.sqrt(w)
    rows = []
    for n, w in work.items():
        k = phase[n]
        rows.append((n, math.sqrt(w) * roots[k], pace[k], least[n], shared[n], buffers[n]))
    return _Demand(
        rows=rows,
        fixed_pmus=sum(b for n, b in buffers.items() if n not in work),
        staging=socket.staging_pmus_per_pcu,
        buffers=buffers,
    )


def _fit_pmus(demand: _Demand, pmus: int) -> dict[str, int]:
    """The PCUs wanted at the smallest pace slack (1 or more, to 1%) whose staging and buffers
    fit `pmus`; the minimum placement when none does."""
    if demand.pmus_at(1.0) <= pmus:
        return demand.wanted()
    lo, hi = 1.0, 2.0
    while demand.pmus_at(hi) > pmus:
        lo, hi = hi, hi * 2
        if hi > 1e6:
            return demand.least()
    while hi / lo > 1.01:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if demand.pmus_at(mid) <= pmus else (mid, hi)
    return demand.wanted(hi)


def allocation(
    kernel: Kernel, hw: Hardware, phase: dict[str, int] | None = None
) -> dict[str, tuple[int, int]]:
    """Each op's (PCUs, PMUs) under `hw` (see the module's docstring); `phase` may be given
    when the caller already knows it (it depends on the kernel's structure alone)."""
    demand = _demand(kernel, hw, phase)
    pcus = _fit_pmus(demand, hw.socket.pmus)
    ceil, staging, buffers = math.ceil, demand.staging, demand.buffers
    out = {}
    for p in kernel.ops:  # `op_pmus`, with the buffers `_demand` counted
        n = pcus.get(p.name, 0)
        out[p.name] = (n, max(buffers[p.name], ceil(staging * n)))
    return out


def allocate(kernel: Kernel, hw: Hardware, phase: dict[str, int] | None = None) -> None:
    """Fill each op's PCUs and PMUs (see the module's docstring)."""
    units = allocation(kernel, hw, phase)
    for p in kernel.ops:
        p.pcus, p.pmus = units[p.name]


def _kernel_pmus(kernel: Kernel, pcus: dict[str, int], hw: Hardware) -> int:
    """The sum of `op_pmus` over the kernel's ops, the hardware's constants read once."""
    socket = hw.socket
    ceil, staging, pmu_bytes = math.ceil, socket.staging_pmus_per_pcu, socket.pmu_bytes
    return sum(
        max(max(1, ceil(p.sram_bytes / pmu_bytes)), ceil(staging * pcus.get(p.name, 0)))
        for p in kernel.ops
    )


def _largest(kernel: Kernel, key: Callable[[OpPlan], int]) -> OpPlan:
    return max(kernel.ops, key=key)


def unit_overflow(kernel: Kernel, hw: Hardware) -> tuple[str, str] | None:
    """("PCUs" or "PMUs", what overflows) when even the kernel's minimum placement exceeds a
    socket, else None."""
    socket = hw.socket
    stages = socket.pcu.stages
    least = {p.name: _least_pcus(p, stages) for p in kernel.ops}
    need_pcus = sum(least.values())
    if need_pcus > socket.pcus:
        top = _largest(kernel, lambda p: least[p.name])
        return (
            "PCUs",
            f"its {sum(1 for v in least.values() if v)} compute ops need at least "
            f"{need_pcus} PCUs ({top.name!r} {least[top.name]}), more than the {socket.pcus} "
            "a socket has",
        )
    need_pmus = _kernel_pmus(kernel, least, hw)
    if need_pmus > socket.pmus:
        top = _largest(kernel, lambda p: op_pmus(p, least[p.name], hw))
        return (
            "PMUs",
            f"its buffers and operand staging need at least {need_pmus} PMUs "
            f"({top.name!r} {op_pmus(top, least[top.name], hw)}), more than the {socket.pmus} "
            "a socket has",
        )
    return None


def check_units(kernel: Kernel, kind: str, index: int | None, hw: Hardware) -> None:
    """Refuse a kernel that cannot be placed on one socket's PCUs and PMUs."""
    over = unit_overflow(kernel, hw)
    if over is None:
        return
    key = kernel_key(("kernels", kind, index), kernel.name) if index is not None else None
    raise InfeasibleError(
        f"kernel {kernel.name!r} cannot be placed: {over[1]}",
        key=key,
        path=("kernels", kind, index) if index is not None else None,
        fix="split the kernel (move some ops to a kernel of their own), shard it wider, "
        "or use smaller tiles",
        limit=over[0],
    )
