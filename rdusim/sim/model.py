"""Simulate a whole compiled program: every distinct kernel once, then count executions.

Layers of one kind run identical kernels, so each kernel is timed once and multiplied by how
often it runs. Prefill time is time to first token (embedding, every layer, LM head for the last
token). A decode step runs the embedding, every layer and the LM head over the verified tokens,
then the MTP module once per draft token. Kernel calls are counted and timed apart from the
pipelines, so a report can say what the calls cost.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from rdusim.compiler.program import ExtraRole, Kernel, LayerProgram, Program
from rdusim.sim.kernel import KernelTiming, clear_runs, time_kernel
from rdusim.spec.hardware import Hardware


@dataclass
class LayerResult:
    kind: str
    count: int
    runs: int  # executions of each layer per prompt / step
    looped: bool
    kernels: list[KernelTiming]
    role: ExtraRole | None = None  # an extra's role (`LayerProgram.role`); a decoder layer: None
    module: int | None = None  # the MTP module an MTP part belongs to

    @property
    def executions(self) -> int:
        return self.count * self.runs

    @property
    def calls(self) -> int:
        """Kernel calls per prompt / step."""
        per_run = len(self.kernels) if self.looped else self.count * len(self.kernels)
        return self.runs * per_run

    @property
    def total_s(self) -> float:
        """All executions of this kind per prompt / step, calls included."""
        calls_per_run = 1 if self.looped else self.count
        return self.runs * calls_per_run * sum(k.call_time_s for k in self.kernels)

    @property
    def call_time_s(self) -> float:
        calls_per_kernel = self.runs * (1 if self.looped else self.count)
        return calls_per_kernel * sum(k.call_s for k in self.kernels)

    @property
    def latency_s(self) -> float:
        """One layer execution, its share of the calls included."""
        return sum(k.latency_s for k in self.kernels)


@dataclass
class SimResult:
    program: Program
    layers: dict[str, LayerResult]
    extras: dict[str, LayerResult]

    def all_layers(self) -> list[LayerResult]:
        return [*self.layers.values(), *self.extras.values()]

    @property
    def total_latency_s(self) -> float:
        return sum(r.total_s for r in self.all_layers())

    @property
    def kernel_calls(self) -> int:
        return sum(r.calls for r in self.all_layers())

    @property
    def kernel_call_time_s(self) -> float:
        return sum(r.call_time_s for r in self.all_layers())

    @property
    def throughput_tokens_per_s(self) -> float:
        """Decode: batch x tokens accepted per step (MTP; the paper's 2.4) / step time.
        Prefill: prompt tokens / time to first token."""
        program = self.program
        wl = program.workload
        tokens = wl.batch * (program.tokens_per_step if program.phase == "decode" else wl.seq)
        return tokens / self.total_latency_s

    def traffic(self, which: str) -> float:
        """Bytes moved per socket over HBM, DDR or P2P for the whole prompt/step."""
        attr = {"hbm": "hbm_bytes", "ddr": "ddr_bytes", "p2p": "p2p_bytes"}[which]
        return sum(getattr(k, attr) * r.executions for r in self.all_layers() for k in r.kernels)


# Kernel timings kept across programs: the auto-mapper's finalists share most of their kernels
# (embedding, head, MTP module, often whole layer kinds), and the chosen one is simulated again
# for its report. A timing is a pure function of the key, so a hit is the same answer.
TIMING_CACHE_SIZE = 256
_timings: OrderedDict[tuple[object, ...], KernelTiming] = OrderedDict()


def timing_key(
    kernel: Kernel, looped_executions: int, hw: Hardware, orchestration: str, sockets: int
) -> tuple[object, ...]:
    """Everything `time_kernel` reads: the kernel's every field (its repr), how many executions
    one call covers, the hardware (a frozen spec, compared by value), orchestration, sockets."""
    return (repr(kernel), looped_executions, hw, orchestration, sockets)


def clear_timings() -> None:
    """Forget the kept kernel timings and pipeline runs (tests that count simulations)."""
    _timings.clear()
    clear_runs()


class _KernelTimer:
    """Times kernels, each distinct one once: layer kinds often share kernels (R1's dense and MoE
    prefill layers run the same four attention-side kernels), and so do programs. A traced run
    keeps its slices to itself."""

    def __init__(self, hw: Hardware, orchestration: str, trace: bool, sockets: int) -> None:
        self.hw = hw
        self.orchestration = orchestration
        self.trace = trace
        self.sockets = sockets
        self.seen: dict[tuple[object, ...], KernelTiming] = {}

    def __call__(self, kernel: Kernel, looped_executions: int) -> KernelTiming:
        key = timing_key(kernel, looped_executions, self.hw, self.orchestration, self.sockets)
        if key in self.seen:
            return self.seen[key]
        timing = None if self.trace else _timings.get(key)
        if timing is None:
            timing = time_kernel(
                kernel,
                self.hw,
                orchestration=self.orchestration,
                looped_executions=looped_executions,
                sockets=self.sockets,
                trace=self.trace,
            )
            if not self.trace:
                _timings[key] = timing
                if len(_timings) > TIMING_CACHE_SIZE:
                    _timings.popitem(last=False)
        else:
            _timings.move_to_end(key)
        self.seen[key] = timing
        return timing


def _time_layer(lp: LayerProgram, timer: _KernelTimer) -> LayerResult:
    if lp.runs == 0:  # deployed but not run (an MTP module in a `scaled` step)
        return LayerResult(lp.kind, lp.count, 0, lp.looped, [], lp.role, lp.module)
    looped = lp.count if lp.looped else 1
    kernels = [timer(k, looped) for k in lp.kernels]
    return LayerResult(lp.kind, lp.count, lp.runs, lp.looped, kernels, lp.role, lp.module)


def simulate(program: Program, hw: Hardware, *, trace: bool = False, sockets: int = 1) -> SimResult:
    timer = _KernelTimer(hw, program.orchestration, trace, sockets)
    layers = {kind: _time_layer(lp, timer) for kind, lp in program.layers.items()}
    extras = {name: _time_layer(lp, timer) for name, lp in program.extras.items()}
    return SimResult(program, layers, extras)
