"""What a search optimises, and how a simulated program scores on it."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from rdusim.errors import SpecError

if TYPE_CHECKING:  # the command line reads the choices before anything heavy is imported
    from rdusim.compiler.program import Program
    from rdusim.ir.graph import Phase
    from rdusim.sim.model import SimResult
    from rdusim.spec.mapping import MappingSpec


class Objective(StrEnum):
    TTFT = "ttft"  # prefill: time to first token
    STEP_TIME = "step-time"  # decode: one step at the mapping's batch
    THROUGHPUT = "throughput"  # decode: tokens/s at the largest batch that fits
    # decode: tokens/s at the largest batch whose step meets a per-user latency bound
    THROUGHPUT_UNDER_LATENCY = "throughput-under-latency"

    @property
    def phase(self) -> Phase:
        from rdusim.ir.graph import Phase

        return Phase.PREFILL if self == Objective.TTFT else Phase.DECODE

    @property
    def searches_batch(self) -> bool:
        return self in (Objective.THROUGHPUT, Objective.THROUGHPUT_UNDER_LATENCY)

    @property
    def maximises(self) -> bool:
        return self.searches_batch

    @property
    def report_key(self) -> str:
        """The report field the objective is read from."""
        return "throughput_tokens_per_s" if self.maximises else "total_latency_s"


def default_objective(spec: MappingSpec) -> Objective:
    """Prefill: time to first token; decode at `batch: max`: throughput; else step time."""
    if spec.phase == "prefill":
        return Objective.TTFT
    return Objective.THROUGHPUT if spec.batch == "max" else Objective.STEP_TIME


def check_objective(objective: Objective, spec: MappingSpec, latency_bound_s: float | None) -> None:
    """The objective must suit the mapping's phase, and a latency bound needs its objective."""
    if objective.phase != spec.phase:
        fit = [o.value for o in Objective if o.phase == spec.phase]
        raise SpecError(
            f"objective {objective.value!r} is for {objective.phase.value}, and this mapping is "
            f"{spec.phase}",
            key="--objective",
            fix="use one of: " + ", ".join(fit),
        )
    bounded = objective == Objective.THROUGHPUT_UNDER_LATENCY
    if bounded and latency_bound_s is None:
        raise SpecError(
            "objective 'throughput-under-latency' needs a bound on the step time",
            key="--latency-bound",
            fix="give the per-step bound in seconds, e.g. --latency-bound 0.05",
        )
    if not bounded and latency_bound_s is not None:
        fix = (
            "add --objective throughput-under-latency, or drop --latency-bound"
            if spec.phase == "decode"
            else "drop --latency-bound: a prefill mapping has one latency, its time to first token"
        )
        raise SpecError(
            f"--latency-bound applies to objective 'throughput-under-latency', not "
            f"{objective.value!r}",
            key="--latency-bound",
            fix=fix,
        )


def score(objective: Objective, program: Program, result: SimResult) -> float:
    """The objective's value for a simulated program: seconds (lower is better) or tokens/s
    (higher is better)."""
    if objective.maximises:
        step = result.total_latency_s
        return program.workload.batch * program.tokens_per_step / step
    return result.total_latency_s


def better(objective: Objective, a: float, b: float) -> bool:
    """Whether score `a` beats score `b`."""
    return a > b if objective.maximises else a < b
