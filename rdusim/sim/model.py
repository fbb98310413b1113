"""Simulate a whole compiled program: every distinct kernel once, then count layers.

Layers of one kind run identical kernels, so each is simulated once and multiplied by the
layer count. Prefill time is time to first token (embedding, every layer, LM head for the last
token); a decode step runs the embedding, every layer, the MTP module(s) and the LM head for the
main model and each MTP module.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdusim.compiler.program import Program
from rdusim.sim.engine import KernelTiming, simulate_kernel
from rdusim.spec.hardware import Hardware


@dataclass
class LayerResult:
    kind: str
    count: int
    runs: int  # executions per prompt / step
    kernels: list[KernelTiming]

    @property
    def latency_s(self) -> float:
        return sum(k.latency_s for k in self.kernels)


@dataclass
class SimResult:
    program: Program
    layers: dict[str, LayerResult]
    extras: dict[str, LayerResult]

    @property
    def total_latency_s(self) -> float:
        return sum(r.latency_s * r.runs for r in (*self.layers.values(), *self.extras.values()))

    def traffic(self, which: str) -> float:
        """Bytes moved per socket over HBM or P2P for the whole prompt/step."""
        attr = "hbm_bytes" if which == "hbm" else "p2p_bytes"
        return sum(
            getattr(k, attr) * r.runs
            for r in (*self.layers.values(), *self.extras.values())
            for k in r.kernels
        )


def simulate(program: Program, hw: Hardware, *, trace: bool = False, sockets: int = 1) -> SimResult:
    layers = {
        kind: LayerResult(
            kind,
            lp.count,
            lp.count,
            [simulate_kernel(k, hw, trace=trace, sockets=sockets) for k in lp.kernels],
        )
        for kind, lp in program.layers.items()
    }
    n_mtp = sum(1 for n in program.extras if n.startswith("mtp") and n.endswith("_layer"))
    extras = {}
    for name, lp in program.extras.items():
        runs = 1 + n_mtp if name == "head" and program.phase == "decode" else 1
        extras[name] = LayerResult(
            name,
            1,
            runs,
            [simulate_kernel(k, hw, trace=trace, sockets=sockets) for k in lp.kernels],
        )
    return SimResult(program, layers, extras)
