"""Simulate a whole compiled program: every distinct kernel once, then count executions.

Layers of one kind run identical kernels, so each kernel is timed once and multiplied by how
often it runs. Prefill time is time to first token (embedding, every layer, LM head for the last
token). A decode step runs the embedding, every layer and the LM head over the verified tokens,
then the MTP module once per draft token. Kernel calls are counted and timed apart from the
pipelines, so a report can say what the calls cost.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdusim.compiler.program import ExtraRole, Kernel, LayerProgram, Program
from rdusim.sim.kernel import KernelTiming, time_kernel
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


class _KernelTimer:
    """Times kernels, each distinct one once per run: layer kinds often share kernels (R1's
    dense and MoE prefill layers run the same four attention-side kernels)."""

    def __init__(self, hw: Hardware, orchestration: str, trace: bool, sockets: int) -> None:
        self.hw = hw
        self.orchestration = orchestration
        self.trace = trace
        self.sockets = sockets
        self.seen: dict[tuple[str, int], KernelTiming] = {}

    def __call__(self, kernel: Kernel, looped_executions: int) -> KernelTiming:
        key = (repr(kernel), looped_executions)
        if key not in self.seen:
            self.seen[key] = time_kernel(
                kernel,
                self.hw,
                orchestration=self.orchestration,
                looped_executions=looped_executions,
                sockets=self.sockets,
                trace=self.trace,
            )
        return self.seen[key]


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
