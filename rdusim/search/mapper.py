"""Auto-mapping by search: fusion, sharding, tiling and kernel looping of a whole model.

1. Each layer kind is searched on its own (`layer`): under every sharding plan, the k fastest
   cuts of its ops into contiguous kernels, every candidate kernel compiled by the compiler and
   costed by the closed form.
2. Whole mappings combine the kinds' options, weighted by how often each kind runs per prompt or
   step (a decode step also runs the MTP module's MoE layer with the MoE kernels); kernel looping
   is one more option wherever every kind fits in one kernel. The few best by estimate are
   compiled and simulated, each re-priced under every member of the calibration ensemble, and
   the best by the objective's mean over the ensemble (or a percentile, `rank_by`) wins: a
   decision that holds across what the evidence leaves open, not at one point.
3. Objectives that choose the batch start from the largest batch that fits in HBM and go down
   until a mapping is legal (and, under a latency bound, until the step meets it).

Everything is deterministic: candidates are visited in a fixed order and ties are broken by
position.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from rdusim.compiler.capacity import does_not_fit, max_batch, remedies
from rdusim.compiler.compile import (
    compile_context,
    compile_mapping,
    layer_workload,
    looped_form,
)
from rdusim.compiler.program import Program
from rdusim.errors import InfeasibleError, SpecError, SpecErrors
from rdusim.ir.graph import Phase
from rdusim.ir.model import ModelGraphs, build_model
from rdusim.search.boundaries import Cut
from rdusim.search.costing import KernelCost, analytic_cost
from rdusim.search.layer import Boundary, FrontPoint, LayerOption, LayerSearch
from rdusim.search.objective import Objective, better, check_objective, default_objective, score
from rdusim.search.space import ShardingPlan
from rdusim.sim.model import SimResult, simulate
from rdusim.spec.hardware import Hardware
from rdusim.spec.mapping import KernelSpec, ResolvedMapping, snapstream_sizes
from rdusim.uncertainty.ensemble import shipped_ensemble
from rdusim.uncertainty.pricing import AnchoredPricer

Progress = Callable[[str], None]


@dataclass(frozen=True)
class SearchOptions:
    objective: Objective | None = None  # None: the mapping's phase and batch decide
    latency_bound_s: float | None = None  # per decode step, for THROUGHPUT_UNDER_LATENCY
    alternatives: int = 0  # distinct runner-up mappings to report, simulated
    finalists: int = 3  # best estimates compiled and simulated before one is chosen
    options_per_layer: int = 4  # cuts kept per layer kind and plan
    # how finalists are ranked over the calibration ensemble: "mean" of the objective, or a
    # percentile ("p05" ... "p95") of its distribution over the members
    rank_by: str = "mean"


@dataclass
class MappingCandidate:
    """A whole mapping the search considered."""

    kernels: dict[str, list[KernelSpec]]
    looped: bool
    estimate_s: float  # the closed form's layers-only time per prompt or step
    plans: dict[str, ShardingPlan]
    options: dict[str, LayerOption] = field(default_factory=dict)  # unlooped only
    score: float | None = None  # the simulated objective
    program: Program | None = None
    result: SimResult | None = None
    ensemble: list[float] = field(default_factory=list)  # the objective under each member


@dataclass(frozen=True)
class Capacity:
    """`max_batch` of one mapping: the batch, its program, the HBM bytes by batch compiled."""

    mapping: ResolvedMapping
    batch: int
    program: Program
    used: dict[int, float]


@dataclass
class AutoMapping:
    """What the search chose, what it weighed, and why."""

    mapping: ResolvedMapping  # the chosen mapping, kernels written out
    objective: Objective
    batch: int
    chosen: MappingCandidate
    alternatives: list[MappingCandidate]
    boundaries: dict[str, list[Boundary]]
    layer_searches: dict[str, LayerSearch]
    candidates_built: int
    candidates_simulated: int
    seconds: float
    rank_by: str = "mean"
    # the chosen mapping's largest batch that fits, its program and the HBM bytes of each batch
    # compiled on the way (`max_batch`), when the search found them: what `rdusim.api` would
    # compile again for the report of a `batch: max` mapping
    capacity: Capacity | None = None

    def front(self, kind: str) -> list[FrontPoint]:
        """The latency-vs-SRAM front of one layer kind under the chosen plan's search."""
        return self.layer_searches[kind].front()

    def summary(self) -> dict[str, Any]:
        """The report's `auto_mapping` section. It holds no wall time, so the same input gives
        the same report byte for byte (`rdusim map --timings` adds `search_seconds`)."""
        return {
            "objective": self.objective.value,
            "batch": self.batch,
            "kernel_looping": self.chosen.looped,
            "sharding_plans": {k: p.label for k, p in self.chosen.plans.items()},
            "boundaries": {
                kind: [
                    {
                        "after": b.after,
                        "before": b.before,
                        "reason": b.reason.value,
                        "detail": b.detail,
                    }
                    for b in bs
                ]
                for kind, bs in self.boundaries.items()
            },
            "estimated_layers_s": self.chosen.estimate_s,
            "ranked_by": self.rank_by,
            "candidate_kernels_built": self.candidates_built,
            "mappings_simulated": self.candidates_simulated,
        }

    def alternatives_json(self) -> list[dict[str, Any]]:
        """The runner-up mappings, each with its simulated objective and kernels."""
        key = self.objective.report_key
        return [
            {
                key: c.score,
                "kernel_looping": c.looped,
                "sharding_plans": {k: p.label for k, p in c.plans.items()},
                "kernels": {
                    kind: [k.model_dump(mode="json", exclude_defaults=True) for k in ks]
                    for kind, ks in c.kernels.items()
                },
            }
            for c in self.alternatives
        ]


def gain_vs_hand(found: AutoMapping, hand: ResolvedMapping) -> dict[str, Any]:
    """How the search's pick compares with `hand` (the mapping's own kernels) at the pick's
    batch, over the calibration ensemble: the gain (the pick's objective over the hand's, or the
    hand's time over the pick's: above 1 means the pick is better) as {p05, p50, p95}, and the
    share of members in which the pick is better. A hand mapping that does not run at that
    batch says why instead."""
    objective = found.objective
    chosen = found.chosen
    assert chosen.program is not None and chosen.result is not None
    try:
        program = compile_mapping(hand, batch=found.batch)
    except SpecError as exc:
        return {"note": f"the hand kernels do not compile at batch {found.batch}: {exc.problem}"}
    if not program.fits:
        tier = "HBM" if not program.hbm.fits else "DDR"
        return {"note": f"the hand kernels do not fit {tier} at batch {found.batch}"}
    result = simulate(program, hand.hardware)
    members = members_of(hand)
    hand_scores = ensemble_scores(objective, program, result, hand.hardware, members)
    picked = chosen.ensemble or [score(objective, chosen.program, chosen.result)]
    if not hand_scores:
        hand_scores = [score(objective, program, result)]
    gains = [
        (a / h if objective.maximises else h / a) for a, h in zip(picked, hand_scores, strict=True)
    ]
    q = np.percentile(gains, [5, 50, 95])
    point = score(objective, chosen.program, chosen.result) / score(objective, program, result)
    return {
        "gain_vs_hand": {"p05": float(q[0]), "p50": float(q[1]), "p95": float(q[2])},
        "p_better": float(np.mean([g > 1.0 for g in gains])),
        "gain_at_point": point if objective.maximises else 1.0 / point,
        "hand_objective": score(objective, program, result),
    }


def with_kernels(
    rm: ResolvedMapping, kernels: dict[str, list[KernelSpec]], looped: bool
) -> ResolvedMapping:
    """`rm` with its kernels (and kernel looping) written out."""
    spec = rm.spec.model_copy(update={"kernels": kernels, "kernel_looping": looped})
    return ResolvedMapping(spec, rm.model, rm.hardware, rm.source, rm.expert_loads)


def auto_map(
    rm: ResolvedMapping,
    options: SearchOptions | None = None,
    *,
    cost: KernelCost | None = None,
    progress: Progress | None = None,
) -> AutoMapping:
    """Search a mapping for `rm`'s model, hardware and workload (its `kernels` are ignored)."""
    opts = options or SearchOptions()
    objective = opts.objective or default_objective(rm.spec)
    check_objective(objective, rm.spec, opts.latency_bound_s)
    cost = cost or analytic_cost
    say = progress or (lambda _msg: None)
    start = time.perf_counter()
    _check_weights(rm)
    tried: set[int] = set()
    failures: list[SpecError] = []  # why the finalists did not compile, first first
    batches = _batches(rm, objective)
    while batches:
        batch = batches.pop(0)
        tried.add(batch)
        say(f"searching at batch {batch} ({objective.value})")
        found = _search_at(rm, batch, objective, opts, cost, say, failures)
        if found is None:
            say(f"no legal mapping at batch {batch}")
            continue
        bound = opts.latency_bound_s
        step = found.chosen.result.total_latency_s if found.chosen.result else math.inf
        if bound is not None and step > bound:
            continue
        if objective.searches_batch:
            # the chosen kernels may hold a larger batch than the seed mapping did
            used: dict[int, float] = {}
            larger, program = max_batch(found.mapping, used)
            if larger > batch and larger not in tried and bound is None:
                batches.insert(0, larger)
                continue
            found.capacity = Capacity(found.mapping, larger, program, used)
        if objective.searches_batch and (bound is not None or rm.spec.batch != "max"):
            # the search chose the batch: the mapping must run (and be written) with it
            spec = found.mapping.spec.model_copy(update={"batch": batch})
            found.mapping = replace(found.mapping, spec=spec)
        found.seconds = time.perf_counter() - start
        say(f"done in {found.seconds:.1f} s at batch {found.batch}")
        return found
    raise _nothing_found(rm, objective, opts, sorted(tried), failures)


def _check_weights(rm: ResolvedMapping) -> None:
    """Refuse at once when the weights alone overflow a socket's HBM with every weight sharded
    over the whole node: no fusion or sharding the search may choose makes them fit."""
    try:
        program = compile_mapping(rm, batch=1)  # the seed mapping: every op TP over the node
    except (SpecError, SpecErrors):
        return  # the seed does not compile; the search will find out why
    hbm = program.hbm
    if hbm.weights <= hbm.capacity:
        return
    total = hbm.weights * program.sockets
    needed = math.ceil(total / hbm.capacity)
    raise InfeasibleError(
        f"the weights alone need {hbm.weights / 1e9:.1f} GB per socket sharded over all "
        f"{program.sockets} sockets, and {hbm.capacity / 1e9:.1f} GB are usable "
        f"({(hbm.weights - hbm.capacity) / 1e9:.1f} GB over): no mapping of this node fits them",
        file=rm.source.file,
        key="hardware",
        fix=f"use a node with at least {needed} sockets of this kind (their HBM holds "
        f"{total / 1e9:.0f} GB of weights), or a narrower weight dtype",
    )


def _batches(rm: ResolvedMapping, objective: Objective) -> list[int]:
    """Batches to try, best first."""
    spec = rm.spec
    if not objective.searches_batch and isinstance(spec.batch, int):
        return [spec.batch]
    if objective.phase == Phase.PREFILL:
        return [1]
    top = max_batch(rm)[0]  # the seed (greedy) mapping's largest batch that fits HBM
    if not objective.searches_batch:
        return [top]
    return [1 << e for e in range(top.bit_length() - 1, -1, -1)]


def _nothing_found(
    rm: ResolvedMapping,
    objective: Objective,
    opts: SearchOptions,
    tried: list[int],
    failures: list[SpecError],
) -> SpecError:
    batches = ", ".join(str(b) for b in tried)
    unplaced = [f for f in failures if isinstance(f, NoKernelFits)]
    if unplaced and opts.latency_bound_s is None:
        return unplaced[-1]  # at the smallest batch tried
    if failures and opts.latency_bound_s is None:
        first = failures[0]  # the best estimate's reason: the one worth fixing first
        return InfeasibleError(
            f"the searched mappings do not compile (batch {batches}); the best one's problem: "
            f"{getattr(first, 'problem', str(first))}",
            file=rm.source.file,
            key=getattr(first, "key", None) or "kernels",
            fix=getattr(first, "fix", None),
        )
    if opts.latency_bound_s is not None:
        return InfeasibleError(
            f"no mapping meets a step of {opts.latency_bound_s:g} s at any batch ({batches} tried)",
            file=rm.source.file,
            key="--latency-bound",
            fix=remedies(rm, "raise the bound", "shorten seq_len"),
        )
    return InfeasibleError(
        f"no legal mapping found for objective {objective.value} (batch {batches})",
        file=rm.source.file,
        key="kernels",
        fix=remedies(rm, "use a node with more sockets", "shorten seq_len"),
    )


class NoKernelFits(InfeasibleError):
    """No cut of a layer kind's ops into kernels fits a socket under any sharding plan."""


def _no_kernel(rm: ResolvedMapping, kind: str, search: LayerSearch, batch: int) -> NoKernelFits:
    """Why the search found no mapping of one layer kind: the op that fits no kernel of one
    socket even on its own under any sharding plan (or, per plan, the first op that does not),
    with fixes that would shrink it."""
    misfits = search.misfits()
    ops = list(dict.fromkeys(op for _, op, _ in misfits))
    if len(ops) == 1:
        why = misfits[0][2]
        problem = (
            f"op {ops[0]} of the {kind} layers fits no kernel on one socket under any sharding "
            f"plan (batch {batch}; {why.limit.value}: {why.detail})"
        )
    elif misfits:
        per_plan = "; ".join(
            f"{plan.label}: {op} ({why.limit.value}: {why.detail})" for plan, op, why in misfits[:3]
        )
        problem = (
            f"no sharding plan fits every op of the {kind} layers in a kernel on one socket "
            f"(batch {batch}): {per_plan}"
        )
    else:
        problem = f"no cut of the {kind} layers' ops into kernels fits a socket (batch {batch})"
    ops_by_name = {op.name: op for op in search.graph}
    long_context = any(
        ops_by_name[op].traits.is_attention or ops_by_name[op].read is not None for op in ops
    )
    options = ["use a smaller batch"] if batch > 1 else []
    options += ["shorten seq_len"] if long_context else []
    options += ["use a node with more sockets (smaller shards)"]
    if any(why.limit.value == "SRAM" for _, _, why in misfits):
        options.append("use hardware with more SRAM per socket")
    fix = remedies(rm, *options, snapstream_helps=rm.spec.phase == "decode")
    return NoKernelFits(problem, file=rm.source.file, key="kernels", fix=fix)


def _weights(rm: ResolvedMapping, graphs: ModelGraphs) -> tuple[dict[str, int], dict[str, int]]:
    """(looped-able executions, other executions) of each layer kind per prompt or step: the
    decoder layers, and in decode the MTP module's MoE layer, which runs the MoE kernels."""
    layers = dict(graphs.layer_counts)
    extra = dict.fromkeys(layers, 0)
    spec = rm.spec
    if spec.phase == Phase.DECODE and spec.mtp.uses_module and graphs.mtp and "moe" in extra:
        extra["moe"] += spec.mtp.module_runs
    return layers, extra


def _search_at(
    rm: ResolvedMapping,
    batch: int,
    objective: Objective,
    opts: SearchOptions,
    cost: KernelCost,
    say: Progress,
    failures: list[SpecError],
) -> AutoMapping | None:
    spec = rm.spec
    phase = Phase(spec.phase)
    graphs = build_model(rm.model, phase, snapstream_sizes(spec, rm.source.file))
    wl = layer_workload(rm, batch)
    ctx = compile_context(rm)
    counts, extra = _weights(rm, graphs)
    searches: dict[str, LayerSearch] = {}
    layer_options: dict[str, list[LayerOption]] = {}
    kinds = list(graphs.layers)
    for i, (kind, graph) in enumerate(graphs.layers.items(), start=1):
        search = LayerSearch(graph, kind, wl, ctx, cost, spec.orchestration)
        plans = len(search.builders)
        say(
            f"layer kind {i}/{len(kinds)} ({kind}): {len(graph)} ops under {plans} sharding "
            f"plan{'s' if plans != 1 else ''}"
        )
        found = [o for o in search.options(opts.options_per_layer) if math.isfinite(o.layer_s)]
        say(
            f"layer kind {i}/{len(kinds)} ({kind}): {search.candidates_built} candidate kernels "
            f"costed, {len(found)} cuts kept"
        )
        if not found:
            failures.append(_no_kernel(rm, kind, search, batch))
            return None
        searches[kind] = search
        layer_options[kind] = found
    candidates = _unlooped(searches, layer_options, counts, extra)
    looped = _looped(searches, counts, extra)
    if looped is not None:
        candidates.append(looped)
    candidates.sort(key=lambda c: c.estimate_s)
    keep = max(opts.finalists, opts.alternatives + 1)
    shown = min(keep, len(candidates))
    say(
        f"{len(candidates)} whole mappings estimated"
        + (" (one with kernel looping)" if looped is not None else "")
        + f"; simulating the best {shown}"
    )
    finalists: list[MappingCandidate] = []
    for c in candidates:
        if len(finalists) == keep:
            break
        if _simulate(rm, c, batch, objective, failures):
            finalists.append(c)
            say(f"simulated {len(finalists)}/{shown}")
    if not finalists:
        return None
    members = members_of(rm)
    for c in finalists:
        assert c.program is not None and c.result is not None
        c.ensemble = ensemble_scores(objective, c.program, c.result, rm.hardware, members)
    best = finalists[0]
    for c in finalists[1:]:
        if better(objective, ranking(c, opts.rank_by), ranking(best, opts.rank_by)):
            best = c
    others = sorted(
        (c for c in finalists if c is not best),
        key=lambda c: -(c.score or 0.0) if objective.maximises else (c.score or math.inf),
    )[: opts.alternatives]
    boundaries = {kind: searches[kind].boundaries(option) for kind, option in best.options.items()}
    return AutoMapping(
        mapping=with_kernels(rm, best.kernels, best.looped),
        objective=objective,
        batch=batch,
        chosen=best,
        alternatives=others,
        boundaries=boundaries,
        layer_searches=searches,
        candidates_built=sum(s.candidates_built for s in searches.values()),
        candidates_simulated=len(finalists),
        seconds=0.0,
        rank_by=opts.rank_by if members else "point",
    )


def members_of(rm: ResolvedMapping) -> list[Hardware]:
    """The calibration ensemble applied to the mapping's hardware (none without one)."""
    ensemble = shipped_ensemble()
    return ensemble.applied(rm.hardware) if ensemble else []


def ensemble_scores(
    objective: Objective,
    program: Program,
    result: SimResult,
    hw: Hardware,
    members: list[Hardware],
) -> list[float]:
    """A simulated program's objective under each ensemble member (re-priced by the anchored
    closed form)."""
    pricer = AnchoredPricer(program, result, hw)
    return [score(objective, program, r) for r in pricer.price_all(members)]


def ranking(c: MappingCandidate, rank_by: str) -> float:
    """The number finalists are ranked on: the mean of the objective over the ensemble, or one
    of its percentiles ("p05"); the simulated objective without an ensemble."""
    values = c.ensemble or ([c.score] if c.score is not None else [])
    if not values:
        return math.nan
    if rank_by == "mean":
        return float(np.mean(values))
    return float(np.percentile(values, float(rank_by.removeprefix("p"))))


def _unlooped(
    searches: dict[str, LayerSearch],
    layer_options: dict[str, list[LayerOption]],
    counts: dict[str, int],
    extra: dict[str, int],
) -> list[MappingCandidate]:
    kinds = list(layer_options)
    out = []
    for combo in itertools.product(*(layer_options[k] for k in kinds)):
        chosen = dict(zip(kinds, combo, strict=True))
        estimate = sum((counts[k] + extra[k]) * o.layer_s for k, o in chosen.items())
        out.append(
            MappingCandidate(
                kernels={k: searches[k].kernel_specs(o) for k, o in chosen.items()},
                looped=False,
                estimate_s=estimate,
                plans={k: o.plan for k, o in chosen.items()},
                options=chosen,
            )
        )
    return out


def _looped(
    searches: dict[str, LayerSearch], counts: dict[str, int], extra: dict[str, int]
) -> MappingCandidate | None:
    """Every kind as one kernel, the kinds that repeat looped (Koeplinger et al.): one call per
    kind instead of one per layer. None when some kind does not fit in one kernel or no kind
    repeats."""
    if all(counts[k] <= 1 for k in searches):
        return None
    kernels: dict[str, list[KernelSpec]] = {}
    plans: dict[str, ShardingPlan] = {}
    estimate = 0.0
    for kind, search in searches.items():
        best: tuple[float, ShardingPlan, list[KernelSpec]] | None = None
        for plan in search.builders:
            c = search.whole_layer(plan)
            if c is None:
                continue
            n = counts[kind]
            per = (
                search.kernel_s(looped_form(c.kernel, search.ctx.hw), n)
                if n > 1
                else search.kernel_s(c.kernel)
            )
            total = n * per + extra[kind] * search.kernel_s(c.kernel)
            if best is None or total < best[0]:
                option = LayerOption(
                    plan, _whole_cut(search), (c.kv_block,), (per,), (c.kernel.sram_bytes,)
                )
                best = (total, plan, search.kernel_specs(option))
        if best is None:
            return None
        estimate += best[0]
        plans[kind], kernels[kind] = best[1], best[2]
    return MappingCandidate(kernels=kernels, looped=True, estimate_s=estimate, plans=plans)


def _whole_cut(search: LayerSearch) -> Cut:
    return Cut(0.0, (len(search.order),))


def _simulate(
    rm: ResolvedMapping,
    c: MappingCandidate,
    batch: int,
    objective: Objective,
    failures: list[SpecError],
) -> bool:
    """Compile and simulate a candidate; False (and why, in `failures`) when the whole program
    does not compile or does not fit HBM."""
    try:
        program = compile_mapping(with_kernels(rm, c.kernels, c.looped), batch=batch)
    except SpecErrors as many:
        failures.append(many.errors[0])
        return False
    except SpecError as exc:
        failures.append(exc)
        return False
    if not program.fits:
        failures.append(does_not_fit(rm, program))
        return False
    result = simulate(program, rm.hardware)
    c.program, c.result = program, result
    c.score = score(objective, program, result)
    return True
