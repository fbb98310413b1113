"""A run's headline numbers over the ensemble, and what each time rests on.

**Intervals.** The 5th, 50th and 95th percentiles over the ensemble's members of every headline
number of a run (time to first token or one decode step, time per output token, throughput,
the time in kernel calls, each layer's and kernel's latency and share), under the metric names
of the report. They cover what the calibrated parameters leave open given the evidence; they do
not cover the model's discrepancy (reported beside them), a mechanism rdusim lacks, or a
configuration choice the run fixes (its mapping, batch and kernels).

The maximum batch's interval is each member's largest power-of-two batch whose HBM plan fits
its usable HBM (`max_batch_interval`): the batch a `batch: max` run would compile, though the
run's other numbers stay at the batch compiled at the point.

**Drivers.** A headline time's elasticity to each calibrated parameter, d ln(time) /
d ln(parameter) by a 5% step of the closed form: which unknown the number moves with; and from
those, the time split by cost term (kernel calls, HBM streaming, DDR streaming, compute, the
links, and what none of them accounts for), see `split_by_term`. DDR's bandwidth is a datasheet
value, not calibrated: a run that streams from DDR also gets its elasticity to it
(`DDR_BANDWIDTH`), so the DDR term is measured the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from rdusim.compiler.capacity import largest_batch
from rdusim.cost.calls import barrier_s
from rdusim.sim.model import SimResult
from rdusim.spec.hardware import Hardware
from rdusim.uncertainty.ensemble import Ensemble
from rdusim.uncertainty.parameters import PARAMETERS, with_values
from rdusim.uncertainty.pricing import AnchoredPricer

QUANTILES = (5, 50, 95)
ELASTICITY_STEP = 0.95  # each parameter scaled by this for its elasticity
DDR_BANDWIDTH = "ddr_bandwidth"  # socket.ddr.bandwidth's elasticity, for runs that stream DDR


def headline(result: SimResult) -> dict[str, float]:
    """The run's headline numbers, keyed as the report names them (kernels as
    `layers.<kind>.<kernel>.latency_s` and `.share`)."""
    program = result.program
    total = result.total_latency_s
    out = {
        "total_latency_s": total,
        "kernel_call_time_s": result.kernel_call_time_s,
        "throughput_tokens_per_s": result.throughput_tokens_per_s,
    }
    if program.phase == "decode":
        out["tpot_s"] = total / program.tokens_per_step
    for kind, lr in result.layers.items():
        layer = lr.latency_s
        out[f"layers.{kind}.latency_s"] = layer
        for k in lr.kernels:
            out[f"layers.{kind}.{k.name}.latency_s"] = k.latency_s
            out[f"layers.{kind}.{k.name}.share"] = k.latency_s / layer if layer else 0.0
    return out


def intervals(results: Sequence[SimResult]) -> dict[str, dict[str, float]]:
    """{metric: {p05, p50, p95}} over the members' results."""
    rows = [headline(r) for r in results]
    keys = list(rows[0])
    q = np.percentile([[row[key] for key in keys] for row in rows], QUANTILES, axis=0)
    return {
        key: {"p05": float(q[0, i]), "p50": float(q[1, i]), "p95": float(q[2, i])}
        for i, key in enumerate(keys)
    }


def usable_hbm_bytes(hw: Hardware) -> float:
    """The HBM one socket leaves to weights, cache and workspace."""
    return hw.socket.hbm.capacity_bytes * hw.calibration.hbm_usable_fraction


def max_batch_interval(used: dict[int, float], members: Sequence[Hardware]) -> dict[str, int]:
    """{p05, p50, p95} of the largest power-of-two batch each member's usable HBM holds, from
    `used` (HBM bytes per socket by batch). Each end is a member's batch: the percentiles by
    the inverted distribution function, so never a batch between two powers of two."""
    batches = [largest_batch(used, usable_hbm_bytes(m)) for m in members]
    q = np.percentile(batches, QUANTILES, method="inverted_cdf")
    return {"p05": int(q[0]), "p50": int(q[1]), "p95": int(q[2])}


class Term(StrEnum):
    """What a slice of a run's time is spent on."""

    CALLS = "calls"  # program load, argument load, barrier, host round trip
    HBM = "hbm"  # streaming weights, cache and activations at the achieved bandwidth
    DDR = "ddr"  # streaming the weights and cache placed in DDR, at its peak bandwidth
    COMPUTE = "compute"  # arithmetic at the achieved rates
    LINKS = "links"  # collectives on the P2P links: transfers and each round's latency
    FILL_DRAIN = "fill_drain"  # what no single term's parameters scale


def _barrier_s(result: SimResult, hw: Hardware) -> float:
    """Of the run's call time, the barriers' (their rounds of link latency)."""
    return sum(lr.calls * barrier_s(hw) for lr in result.all_layers())


def split_by_term(
    result: SimResult, hw: Hardware, elasticity: dict[str, float]
) -> dict[Term, float]:
    """The run's total time by term, in seconds.

    Every duration of the model is a rate's work or a latency, and the run's time is built from
    them by sums and maxima, so it scales with them one for one: the share of the time a term's
    parameters move (minus their elasticities for rates, plus for latencies) is the share that
    term takes (Euler's theorem for such functions). Calls are counted exactly; `fill_drain` is
    what no term accounts for (a few percent of rounding in the pipeline's steps).
    """
    total = result.total_latency_s
    calls = result.kernel_call_time_s
    barrier = _barrier_s(result, hw) / total if total else 0.0

    def el(name: str) -> float:
        return elasticity.get(name, 0.0)

    share = {
        Term.CALLS: calls / total if total else 0.0,
        Term.HBM: -el("hbm_efficiency"),
        Term.DDR: -el(DDR_BANDWIDTH),
        Term.COMPUTE: -(el("gemm_efficiency") + el("attention_efficiency") + el("simd_efficiency")),
        Term.LINKS: max(0.0, -el("p2p_bandwidth") + el("p2p_latency_s") - barrier),
    }
    share = {t: max(0.0, v) for t, v in share.items()}
    # finite steps over maxima can overshoot when two resources tie: keep the calls exact and
    # scale the other terms into what is left
    rest = sum(v for t, v in share.items() if t != Term.CALLS)
    room = max(0.0, 1.0 - share[Term.CALLS])
    if rest > room > 0:
        share = {t: (v if t == Term.CALLS else v * room / rest) for t, v in share.items()}
    share[Term.FILL_DRAIN] = max(0.0, 1.0 - sum(share.values()))
    return {t: v * total for t, v in share.items()}


def elasticities(pricer: AnchoredPricer, hw: Hardware) -> dict[str, float]:
    """d ln(total time) / d ln(parameter) for each calibrated parameter that moves a time."""
    moves = [p for p in PARAMETERS if p.name != "hbm_usable_fraction"]  # that one: capacity
    stepped = [with_values(hw, {p.name: p.get(hw) * ELASTICITY_STEP}) for p in moves]
    base, *priced = pricer.price_all([hw, *stepped])  # one socket: priced together
    out = {}
    for p, moved in zip(moves, priced, strict=True):
        ratio = moved.total_latency_s / base.total_latency_s
        out[p.name] = math.log(ratio) / math.log(ELASTICITY_STEP)
    if pricer.point.traffic("ddr") > 0:
        moved = pricer.price(_with_ddr_bandwidth(hw, hw.socket.ddr.bandwidth * ELASTICITY_STEP))
        ratio = moved.total_latency_s / base.total_latency_s
        out[DDR_BANDWIDTH] = math.log(ratio) / math.log(ELASTICITY_STEP)
    return out


def _with_ddr_bandwidth(hw: Hardware, bandwidth: float) -> Hardware:
    """A copy of `hw` whose sockets' DDR streams at `bandwidth`."""
    ddr = hw.socket.ddr.model_copy(update={"bandwidth": bandwidth})
    return hw.model_copy(update={"socket": hw.socket.model_copy(update={"ddr": ddr})})


# the parameters behind each term, for "what does this rest on"
TERM_PARAMETERS: dict[Term, tuple[str, ...]] = {
    Term.CALLS: ("host_round_trip_s", "config_bandwidth", "argument_load_s", "p2p_latency_s"),
    Term.HBM: ("hbm_efficiency",),
    Term.DDR: (DDR_BANDWIDTH,),
    Term.COMPUTE: ("gemm_efficiency", "attention_efficiency", "simd_efficiency"),
    Term.LINKS: ("p2p_bandwidth", "p2p_latency_s"),
    Term.FILL_DRAIN: (),
}


@dataclass(frozen=True)
class Uncertainty:
    """A run's intervals and drivers, as the report carries them."""

    members: int
    intervals: dict[str, dict[str, float]]
    terms: dict[Term, float]
    elasticity: dict[str, float]
    discrepancy: float

    def drivers(self, ensemble: Ensemble, total_s: float) -> dict[str, Any]:
        """The report's `drivers`: each term's seconds and share of the total, the parameters it
        rests on with their elasticity, posterior interval and the items that pin them."""
        terms = {}
        for term, seconds in self.terms.items():
            rests = []
            for name in TERM_PARAMETERS[term]:
                known = ensemble.parameters.get(name, {})
                rests.append(
                    {
                        "parameter": name,
                        "elasticity": self.elasticity.get(name),
                        "p05": known.get("p05"),
                        "p95": known.get("p95"),
                        "narrowing": known.get("narrowing"),
                        "pinned_by": known.get("pinned_by", []),
                    }
                )
            terms[term.value] = {
                "seconds": seconds,
                "share": seconds / total_s if total_s else 0.0,
                "rests_on": rests,
            }
        return {"terms": terms, "elasticity": self.elasticity}


def assess(result: SimResult, hw: Hardware, ensemble: Ensemble) -> Uncertainty:
    """The run's intervals over `ensemble` applied to `hw`, and its drivers."""
    pricer = AnchoredPricer(result.program, result, hw)
    members = pricer.price_all(ensemble.applied(hw))
    elasticity = elasticities(pricer, hw)
    return Uncertainty(
        members=len(members),
        intervals=intervals(members),
        terms=split_by_term(result, hw, elasticity),
        elasticity=elasticity,
        discrepancy=ensemble.discrepancy,
    )
