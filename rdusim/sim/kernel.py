"""A kernel's time: its pipeline at the real tile count, its call, and looped calls.

The pipeline of a kernel with T tiles and S stages takes about A + B/T: A the steady state, B
the fill and drain of one tile's trip through the stages. Real prefill tiles are small (a PMU's
worth of rows), so a long prompt has thousands; simulating them all would be slow, simulating
fewer would overstate fill and drain. The engine therefore runs at two resolutions and the
kernel's time is read off the line at its real tile count.

Each call costs program load, argument load and the sockets' barrier, plus the host's round trip
when the host issues it (`rdusim.cost.calls`). A looped call (Koeplinger et al., "Kernel Looping", arXiv 2410.23668) runs N
consecutive executions of one kernel as one call with a pipelined outer loop: one call, one fill
and drain, and iterations that overlap. Chained iterations are simulated until one adds what the
one before it added: the second still profits from the idle bandwidth of the first, and from
the third or fourth on the loop runs at its steady period, which every later one repeats.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace

from rdusim.compiler.program import Kernel
from rdusim.cost.calls import call_cost
from rdusim.sim.engine import MAX_SIM_TILES, OpTiming, PipelineRun, Slice, simulate_pipeline
from rdusim.spec.hardware import Hardware

# A looped call's iterations are chained in the simulation until one adds what the one before it
# added (to this fraction), at most this many: the first still profits from an idle channel, a
# rate-matched kernel may take another to settle, and every later one repeats the period.
PERIOD_TOLERANCE = 1e-6
MAX_CHAINED = 8


@dataclass
class KernelTiming:
    """Per-socket timing of one kernel of a layer.

    `pipeline_s` is one execution from an empty chip to the last write. Inside a looped call,
    `second_s` is the time the second iteration adds and `period_s` the steady time every later
    one adds (both equal to `pipeline_s` when not looped); `executions` how many executions one
    call covers.
    """

    name: str
    pipeline_s: float
    second_s: float
    period_s: float
    call_s: float
    executions: int
    ops: list[OpTiming]
    bottleneck: str
    hbm_bytes: float  # per execution
    p2p_bytes: float
    hbm_busy_s: float
    p2p_busy_s: float
    slices: list[Slice] = field(default_factory=list)
    # what the iterations after the second add beyond the steady period while the loop settles
    settle_s: float = 0.0
    # trace slices are simulated at fewer tiles than the kernel has, and stretched by this factor
    # onto the extrapolated pipeline
    trace_scale: float = 1.0
    ddr_bytes: float = 0.0  # per execution
    ddr_busy_s: float = 0.0

    @property
    def call_time_s(self) -> float:
        """One call: its cost, the first execution, and the looped ones."""
        looped = 0.0
        if self.executions >= 2:
            looped = self.second_s + (self.executions - 2) * self.period_s + self.settle_s
        return self.call_s + self.pipeline_s + looped

    @property
    def latency_s(self) -> float:
        """Time per execution, the call's cost shared over the executions it covers."""
        return self.call_time_s / self.executions

    @property
    def call_share_s(self) -> float:
        """The call cost per execution."""
        return self.call_s / self.executions


# Pipeline runs kept by what the engine reads: a looped kernel's first iteration is the same
# run as its unlooped form's (the loop's prefetch and its larger SRAM plan change nothing in
# one iteration), and finalists and the hand mapping share kernels. A run is a pure function of
# the key. Traced runs are not kept.
PIPELINE_CACHE_SIZE = 512
_runs: OrderedDict[tuple[object, ...], PipelineRun] = OrderedDict()


def pipeline_key(
    kernel: Kernel, hw: Hardware, tiles: int, iterations: int, sockets: int
) -> tuple[object, ...]:
    """Everything `simulate_pipeline` reads given the tiles to simulate: the kernel's ops (every
    field), collectives and edges, whether it prefetches the next iteration (read only when
    there is one), the hardware (a frozen spec, compared by value), the tiles simulated,
    iterations and sockets."""
    prefetch = kernel.prefetch_iteration and iterations > 1
    parts = repr((kernel.ops, kernel.collectives, kernel.edges, prefetch))
    return (parts, hw, tiles, iterations, sockets)


def clear_runs() -> None:
    """Forget the kept pipeline runs."""
    _runs.clear()


def _run(
    kernel: Kernel, hw: Hardware, *, tiles: int, iterations: int = 1, sockets: int = 1
) -> PipelineRun:
    """`simulate_pipeline` (untraced), each distinct run once."""
    key = pipeline_key(kernel, hw, tiles, iterations, sockets)
    run = _runs.get(key)
    if run is None:
        run = simulate_pipeline(kernel, hw, tiles=tiles, iterations=iterations, sockets=sockets)
        _runs[key] = run
        if len(_runs) > PIPELINE_CACHE_SIZE:
            _runs.popitem(last=False)
    else:
        _runs.move_to_end(key)
    return run


def extrapolate(t_coarse: float, n_coarse: int, t_fine: float, n_fine: int, n: int) -> float:
    """Time at `n` tiles on the line A + B/n through two simulated resolutions."""
    b = (t_coarse - t_fine) / (1.0 / n_coarse - 1.0 / n_fine)
    if b <= 0:  # finer tiles did not help: nothing to extrapolate
        return t_fine
    a = t_fine - b / n_fine
    return a + b / n


def _pipeline_at(
    kernel: Kernel, hw: Hardware, run: PipelineRun, n: int, iterations: int, sockets: int
) -> float:
    """Pipeline time at the kernel's real tile count, given `run` at `n` simulated tiles."""
    if kernel.tiles <= n:
        return run.pipeline_s
    half = max(1, n // 2)
    coarse = _run(kernel, hw, tiles=half, iterations=iterations, sockets=sockets)
    return extrapolate(coarse.pipeline_s, half, run.pipeline_s, n, kernel.tiles)


def time_kernel(
    kernel: Kernel,
    hw: Hardware,
    *,
    orchestration: str = "hardware",
    looped_executions: int = 1,
    sockets: int = 1,
    trace: bool = False,
) -> KernelTiming:
    """Time `kernel`: one call covering `looped_executions` executions (1: not looped)."""
    n = max(1, min(kernel.tiles, MAX_SIM_TILES))
    if trace:
        one = simulate_pipeline(kernel, hw, tiles=n, sockets=sockets, trace=True)
    else:
        one = _run(kernel, hw, tiles=n, sockets=sockets)
    pipeline = _pipeline_at(kernel, hw, one, n, 1, sockets)
    second = period = pipeline
    settle = 0.0
    if looped_executions > 1:
        two = _run(kernel, hw, tiles=n, iterations=2, sockets=sockets)
        t2 = _pipeline_at(kernel, hw, two, n, 2, sockets)
        second = period = t2 - pipeline
        done, last = 2, t2
        steps: list[float] = []
        # chain iterations until one adds what the one before it added: the loop's period
        while done < min(looped_executions, MAX_CHAINED):
            chained = _run(kernel, hw, tiles=n, iterations=done + 1, sockets=sockets)
            t = _pipeline_at(kernel, hw, chained, n, done + 1, sockets)
            steps.append(t - last)
            done, last = done + 1, t
            if len(steps) > 1 and abs(steps[-1] - steps[-2]) <= PERIOD_TOLERANCE * steps[-1]:
                break
        if steps:
            period = steps[-1]
            settle = sum(x - period for x in steps)
    scale = pipeline / one.pipeline_s if one.pipeline_s > 0 else 1.0
    ops = [
        replace(o, stall_s=max(0.0, pipeline - max(o.busy_s, o.hbm_s, o.ddr_s))) for o in one.ops
    ]
    call = call_cost(kernel, hw, orchestration)
    slices = [
        Slice(s.track, s.name, call + s.start * scale, call + s.end * scale, s.socket)
        for s in one.slices
    ]
    return KernelTiming(
        name=kernel.name,
        pipeline_s=pipeline,
        second_s=second,
        period_s=period,
        call_s=call,
        executions=looped_executions,
        ops=ops,
        bottleneck=one.bottleneck,
        hbm_bytes=one.hbm_bytes,
        p2p_bytes=one.p2p_bytes,
        hbm_busy_s=one.hbm_busy_s,
        p2p_busy_s=one.p2p_busy_s,
        slices=slices,
        trace_scale=scale,
        settle_s=settle,
        ddr_bytes=one.ddr_bytes,
        ddr_busy_s=one.ddr_busy_s,
    )
