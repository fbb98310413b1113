"""`rdusim serve` as a function: a workload on a pair of mappings, at one or more settings.

`serve` ties the pieces together: the step times of the two graphs (simulated once per mapping
pair and overrides, `rdusim.serving.step_times`), their shapes with the workload's prefill
buckets (`rdusim.serving.shape`), the requests (`rdusim.serving.arrivals`), checked against
the graphs before anything runs, and the discrete-event run (`rdusim.serving.engine`), summarised
by `rdusim.serving.metrics`. `serve_points` runs a grid: every combination of the `--set` values
(`snapstream.enabled=true,false`) and arrival rates.

The link a disaggregated deployment moves caches over is not published for SN40L. Unless the
workload's `deployment.kv_link` says otherwise, each of the decode node's sockets receives its
shard of the cache at the hardware's per-socket P2P bandwidth, all at once (`sockets x
hardware.links.p2p_bandwidth`, itself an assumption, see the hardware preset), with one P2P
latency per cache. A cache is the request's cached positions (SnapStream: at most the compressed
budget) x the model's KV bytes per token.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rdusim.errors import SpecError, SpecErrors
from rdusim.serving.arrivals import Requests, request_columns
from rdusim.serving.engine import (
    EngineConfig,
    EngineResult,
    ModelGraphs,
    Progress,
    RequestSet,
    simulate_models,
)
from rdusim.serving.metrics import rounded, summary
from rdusim.serving.models import ServedModel, served_models
from rdusim.serving.shape import GraphShape, check_requests, shape_of
from rdusim.serving.step_times import (
    GraphFacts,
    ScaledStepTimes,
    SimulatedStepTimes,
    simulated_step_times,
)
from rdusim.spec.workload import (
    ArrivalProcess,
    DecodeStepCost,
    DeploymentMode,
    DeploymentSpec,
    ResolvedWorkload,
    request_count_problem,
)
from rdusim.uncertainty.ensemble import shipped_ensemble
from rdusim.uncertainty.pricing import AnchoredPricer


@dataclass(frozen=True)
class ServePoint:
    """One run of a sweep: `--set` values (as written) and an arrival rate (None: the
    workload's)."""

    sets: tuple[tuple[str, str], ...] = ()
    rate: float | None = None

    @property
    def overrides(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.sets]

    def label(self) -> str:
        parts = [f"{k}={v}" for k, v in self.sets]
        if self.rate is not None:
            parts.append(f"rate={self.rate:g}")
        return ", ".join(parts) or "(workload as written)"


@dataclass
class ServeRun:
    point: ServePoint
    result: EngineResult
    metrics: dict[str, Any]
    document: dict[str, Any]  # the point's JSON


def engine_config(deployment: DeploymentSpec, facts: GraphFacts | None = None) -> EngineConfig:
    """The engine's view of a `deployment:` section (link defaults from the decode hardware)."""
    link = deployment.kv_link
    bandwidth = link.bandwidth if link and link.bandwidth is not None else None
    latency = link.latency_s if link and link.latency_s is not None else None
    if facts is not None:
        bandwidth = bandwidth if bandwidth is not None else facts.sockets * facts.p2p_bandwidth
        latency = latency if latency is not None else facts.p2p_latency_s
    base = EngineConfig(
        mode=deployment.mode,
        nodes=deployment.nodes or 1,
        policy=deployment.scheduling,
        steps_per_prefill=deployment.steps_per_prefill,
        prefill_nodes=deployment.prefill_nodes or 1,
        decode_nodes=deployment.decode_nodes or 1,
        step_cost=deployment.decode_step,
        prefill_chunk=deployment.prefill_chunk,
    )
    if bandwidth is not None:
        base = replace(base, link_bandwidth=bandwidth)
    if latency is not None:
        base = replace(base, link_latency_s=latency)
    return base


def workload_requests(workload: ResolvedWorkload, rate: float | None) -> Requests:
    """The workload's requests at `rate` (None: its own), refusing a rate for a trace and an
    empty arrival window."""
    spec = workload.spec
    if rate is not None:
        if spec.arrival.process == ArrivalProcess.TRACE:
            raise SpecError(
                "a trace's arrival times are its own; --rate applies to processes poisson and "
                "constant",
                key="--rate",
                fix="drop --rate, or use arrival: {process: poisson, rate: ...}",
            )
        problem = request_count_problem(rate, spec.duration_s, spec.requests)
        if problem is not None:
            raise SpecError(
                f"{problem.problem} (workload {workload.file})", key="--rate", fix=problem.fix
            )
    requests = request_columns(workload, rate)
    if not len(requests):
        raise workload.error(
            "no request arrives within duration_s",
            ("duration_s",),
            "lengthen duration_s or raise the arrival rate",
        )
    return requests


def _prefetch(
    times: SimulatedStepTimes,
    shape: GraphShape,
    workload: ResolvedWorkload,
    requests: Requests,
) -> None:
    """Simulate every graph the run needs before it starts: a bucket that cannot be compiled is
    an error at the workload's bucket list, and the run never waits on the simulator. Listed
    buckets are all compiled; default ones only where a request runs."""
    key = ("deployment", "prefill_buckets")
    lengths = set(shape.prefill_lengths)
    if not isinstance(workload.spec.deployment.prefill_buckets, list):
        lengths = {shape.graph_len(p) for p in np.unique(requests.prompt_tokens).tolist()}
    for length in sorted(lengths):
        try:
            times.prefill_s(length)
        except SpecErrors as many:
            raise _bucket_error(workload, key, length, many.errors[0]) from None
        except SpecError as exc:
            raise _bucket_error(workload, key, length, exc) from None
    if workload.spec.deployment.decode_step == DecodeStepCost.OCCUPIED:
        times.grid()
    chunk = workload.spec.deployment.prefill_chunk
    if chunk is not None:
        check_chunk(times.facts, chunk, workload)
        longest = int(requests.prompt_tokens.max())
        for k in range(math.ceil(longest / chunk) if longest > chunk else 0):
            times.chunk_s(k, chunk)


def check_chunk(facts: GraphFacts, chunk: int, workload: ResolvedWorkload) -> None:
    """A chunk graph must tile the prefill graph's static cache, and chunks cannot carry
    SnapStream's compression (it runs once, on the whole prompt, at the end of its prefill)."""
    key = ("deployment", "prefill_chunk")
    if facts.snapstream:
        raise workload.error(
            f"{facts.model}'s mappings run SnapStream, which compresses a prompt's whole cache "
            "at the end of its prefill graph; a chunked prefill of it is not modelled",
            key,
            "drop prefill_chunk, or --set snapstream.enabled=false",
        )
    if facts.prefill_len % chunk:
        raise workload.error(
            f"a chunk of {chunk} tokens does not divide the prefill graph's {facts.prefill_len} "
            "tokens (the chunks tile its static cache)",
            key,
            f"use a divisor of {facts.prefill_len}, e.g. {_divisor_near(facts.prefill_len, chunk)}",
        )


def _divisor_near(n: int, target: int) -> int:
    """The divisor of `n` nearest `target` (the smaller on a tie)."""
    return min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: (abs(d - target), d))


def _bucket_error(
    workload: ResolvedWorkload, key: tuple[str, ...], length: int, exc: SpecError
) -> SpecError:
    return workload.error(
        f"the prefill graph for {length}-token prompts cannot be built: {exc.problem}",
        key,
        exc.fix or "use longer buckets",
    )


def point_document(
    point: ServePoint,
    workload: ResolvedWorkload,
    result: EngineResult,
    metrics: dict[str, Any],
) -> dict[str, Any]:
    """A run's JSON: the metrics, then what produced them (settings, deployment, graphs)."""
    spec = workload.spec
    config = result.config
    deployment: dict[str, Any] = {"mode": config.mode.value}
    if config.mode == DeploymentMode.COLOCATED:
        deployment |= {"nodes": config.nodes, "policy": config.policy.value}
    else:
        deployment |= {
            "prefill_nodes": config.prefill_nodes,
            "decode_nodes": config.decode_nodes,
            "kv_link_bandwidth": rounded(config.link_bandwidth),
            "kv_link_latency_s": rounded(config.link_latency_s),
        }
    deployment["decode_step"] = config.step_cost.value
    if len(result.models) > 1 or config.pinned or math.isfinite(config.hbm_budget):
        deployment["residency"] = {
            "hbm_bytes_per_socket": rounded(config.hbm_budget),
            "pinned": [result.models[p].name for p in config.pinned],
            "models_hbm_bytes_per_socket": {g.name: rounded(g.hbm_bytes) for g in result.models},
            "load_s": {g.name: rounded(g.load_s) for g in result.models},
        }
    graphs = [model_graphs(result, m) for m in range(len(result.models))]
    for name, g in zip(metrics["per_model"], graphs, strict=True):
        metrics["per_model"][name]["graphs"] = g
    document = metrics | {
        "settings": {
            "set": {k: v for k, v in point.sets},
            "rate": point.rate if point.rate is not None else spec.arrival.rate,
            "seed": spec.seed,
            "workload": spec.name,
            "slo": ({"ttft_s": spec.slo.ttft_s, "tpot_s": spec.slo.tpot_s} if spec.slo else None),
        },
        "deployment": deployment,
    }
    if len(graphs) == 1:
        document["graphs"] = graphs[0]
    return document


def model_graphs(result: EngineResult, model: int) -> dict[str, Any]:
    """What a model's graphs are: slots, cache, maximum sequence, tokens per step, SnapStream,
    the decode step's and each executed prefill graph's time, KV bytes per token."""
    shape = result.models[model].shape
    prefill_s = result.model_prefill_s[model]
    return {
        "decode_slots": shape.decode_slots,
        "cache_len": shape.cache_len,
        "max_sequence": shape.max_sequence,
        "tokens_per_step": rounded(shape.tokens_per_step),
        "snapstream": shape.snapstream,
        "decode_step_s": rounded(result.static_step_s[model]),
        "prefill_s": {str(n): rounded(t) for n, t in sorted(prefill_s.items())},
        "kv_bytes_per_token": rounded(shape.kv_bytes_per_token),
    }


@dataclass(frozen=True)
class ModelRun:
    """One served model's simulated graphs, their shape, and its requests' index."""

    served: ServedModel
    times: SimulatedStepTimes
    shape: GraphShape

    def graphs(self) -> ModelGraphs:
        f = self.times.facts
        return ModelGraphs(self.name, self.shape, self.times, f.hbm_bytes, f.load_s)

    @property
    def name(self) -> str:
        return self.served.name or self.times.facts.model


def model_runs(
    prefill: str | None, decode: str | None, workload: ResolvedWorkload, point: ServePoint
) -> list[ModelRun]:
    """Each model's graphs simulated (once per process) and shaped with the buckets."""
    buckets = workload.spec.deployment.prefill_buckets
    runs = []
    for served in served_models(workload, prefill, decode, point.overrides):
        times = simulated_step_times(
            served.prefill,
            served.decode,
            [*served.overrides, *point.overrides],
            served.prefill_overrides,
            served.decode_overrides,
        )
        runs.append(ModelRun(served, times, shape_of(times.facts, buckets, workload)))
    return runs


def serve(
    prefill: str | None,
    decode: str | None,
    workload: ResolvedWorkload,
    point: ServePoint = ServePoint(),
    progress: Progress | None = None,
    intervals: bool = True,
) -> ServeRun:
    """Run `workload` on its models (or the two mappings) at one point (`progress` hears of
    completed requests). With `intervals`, it runs twice more, under the calibration
    ensemble's members at the 5th and 95th percentile of the graphs' time scale, for each
    metric's interval."""
    runs = model_runs(prefill, decode, workload, point)
    requests = workload_requests(workload, point.rate)
    for m, run in enumerate(runs):
        mine = requests.where(requests.model == m)
        if len(mine):
            check_requests(mine, run.shape, workload)
            _prefetch(run.times, run.shape, workload, mine)
    config = engine_config(workload.spec.deployment, runs[0].times.facts)
    config = replace(config, seed=workload.spec.seed)
    config = residency_config(config, workload, runs)
    graphs = [r.graphs() for r in runs]
    shared = RequestSet(requests)  # and the accepted-token draws, for the interval runs
    result = simulate_models(shared, graphs, config, progress)
    metrics = summary(result, workload.spec.slo)
    document = point_document(point, workload, result, metrics)
    if intervals:
        bounds = [_bound(shared, scaled, config, workload) for scaled in bounding_graphs(runs)]
        if bounds:
            document["intervals"] = serving_intervals(metrics | graph_times(result), bounds)
    return ServeRun(point, result, metrics, document)


def _bound(
    requests: RequestSet,
    graphs: list[ModelGraphs],
    config: EngineConfig,
    workload: ResolvedWorkload,
) -> dict[str, Any]:
    """The metrics and graph times of a run under an ensemble member's graphs (the run itself
    is let go)."""
    result = simulate_models(requests, graphs, config)
    return summary(result, workload.spec.slo) | graph_times(result)


def graph_times(result: EngineResult) -> dict[str, Any]:
    """The run's graph times as the document's `graphs` holds them (for their intervals); none
    with several models, whose graphs are per model."""
    if len(result.models) > 1:
        return {}
    return {
        "graphs": {
            "decode_step_s": rounded(result.decode_step_s),
            "prefill_s": {str(n): rounded(t) for n, t in sorted(result.prefill_s.items())},
        }
    }


def residency_config(
    config: EngineConfig, workload: ResolvedWorkload, runs: Sequence[ModelRun]
) -> EngineConfig:
    """The HBM budget and pinned models of a many-model node, checked: one hardware for all,
    each model's plan within the budget beside the pinned ones."""
    if len(runs) == 1 and workload.spec.residency is None:
        return config
    spec = workload.spec.residency
    facts = [r.times.facts for r in runs]
    if len({(f.hardware, f.sockets) for f in facts}) > 1:
        raise workload.error(
            "the models' decode mappings run on different hardware: "
            + ", ".join(f"{r.name} on {f.hardware}" for r, f in zip(runs, facts, strict=True)),
            ("models",),
            "run every model on the same hardware (one node holds them all)",
        )
    budget = spec.hbm_bytes if spec and spec.hbm_bytes is not None else facts[0].hbm_capacity
    names = [r.name for r in runs]
    pinned = tuple(names.index(p) for p in (spec.pinned if spec else []))
    check_residency(workload, names, [f.hbm_bytes for f in facts], budget, pinned)
    return replace(config, hbm_budget=budget, pinned=pinned)


def check_residency(
    workload: ResolvedWorkload,
    names: Sequence[str],
    hbm: Sequence[float],
    budget: float,
    pinned: Sequence[int],
) -> None:
    """Every model must fit the budget beside the pinned ones, or it could never be served."""
    held = sum(hbm[p] for p in pinned)
    for m, name in enumerate(names):
        need = held + (0.0 if m in pinned else hbm[m])
        if need > budget:
            beside = " beside the pinned models" if pinned and m not in pinned else ""
            raise workload.error(
                f"{name}'s decode plan takes {hbm[m] / 1e9:.3g} GB of HBM per socket, and "
                f"{need / 1e9:.3g} GB{beside} is more than the {budget / 1e9:.3g} GB per socket "
                "the models share",
                ("residency",),
                "raise residency.hbm_bytes, pin fewer models, or give the model a smaller plan "
                "(set: {batch: ...} or a shorter seq_len)",
            )


def bounding_graphs(runs: Sequence[ModelRun]) -> list[list[ModelGraphs]]:
    """Every model's graphs under the two calibration ensemble members at the 5th and 95th
    percentile of the graphs' combined time scale (the geometric mean over the models of their
    prefill's and decode step's scale against the point); none without a shipped ensemble."""
    ensemble = shipped_ensemble()
    if ensemble is None:
        return []
    per_model = [member_scales(r.times, ensemble) for r in runs]
    ranked = sorted(
        range(len(ensemble)), key=lambda i: math.prod(p[i][0] * p[i][1] for p in per_model)
    )
    picks = (ranked[round(0.05 * (len(ranked) - 1))], ranked[round(0.95 * (len(ranked) - 1))])
    return [
        [
            replace(r.graphs(), times=ScaledStepTimes(r.times, *scales[i]))
            for r, scales in zip(runs, per_model, strict=True)
        ]
        for i in picks
    ]


def member_scales(times: SimulatedStepTimes, ensemble: Any) -> list[tuple[float, float]]:
    """Each ensemble member's (prefill, decode step) time against the point's."""
    pricers = {g: AnchoredPricer(r.program, r, times.hardware[g]) for g, r in times.main.items()}
    members = {g: ensemble.applied(times.hardware[g]) for g in pricers}
    scales = []
    for i in range(len(ensemble)):
        s = {
            g: pricers[g].price(members[g][i]).total_latency_s / times.main[g].total_latency_s
            for g in pricers
        }
        scales.append((s["prefill"], s["decode"]))
    return scales


def _numbers(d: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The numeric leaves of a metrics document, by dotted key."""
    out: dict[str, float] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= _numbers(v, f"{prefix}{k}.")
        elif isinstance(v, int | float) and not isinstance(v, bool):
            out[f"{prefix}{k}"] = float(v)
    return out


# serving metrics that are counts or settings, not outcomes the calibration moves
FIXED_METRICS = frozenset({"requests", "arrival_rate"})


def serving_intervals(
    point: dict[str, Any], bounds: list[dict[str, Any]]
) -> dict[str, dict[str, float]]:
    """{metric: {p05, p50, p95}}: the point's run as the middle, the two bounding members' runs
    as the ends (each metric moves one way with the graphs' time scale)."""
    mid = _numbers(point)
    ends = [_numbers(b) for b in bounds]
    out = {}
    for key, value in mid.items():
        if key in FIXED_METRICS or any(key not in e for e in ends):
            continue
        lo = min(value, *(e[key] for e in ends))
        hi = max(value, *(e[key] for e in ends))
        out[key] = {"p05": lo, "p50": value, "p95": hi}
    return out


def points_of(
    sets: Sequence[tuple[str, Sequence[str]]], rates: Sequence[float]
) -> list[ServePoint]:
    """Every combination of the `--set` values (first key slowest), then the rates."""
    combos: list[tuple[tuple[str, str], ...]] = [()]
    for key, values in sets:
        combos = [(*c, (key, v)) for c in combos for v in values]
    rate_list: list[float | None] = list(rates) or [None]
    return [ServePoint(c, r) for c in combos for r in rate_list]


def serve_points(
    prefill: str | None,
    decode: str | None,
    workload: ResolvedWorkload,
    points: Sequence[ServePoint],
    progress: Progress | None = None,
    starting: Callable[[int, ServePoint], None] | None = None,
) -> list[ServeRun]:
    """Run every point in order (each mapping pair and overrides simulated once); an error at
    one of several points names it. `starting`, if given, hears of each point (its index and
    the point) before it runs."""
    runs = []
    for i, point in enumerate(points):
        if starting is not None:
            starting(i, point)
        try:
            runs.append(serve(prefill, decode, workload, point, progress))
        except SpecError as exc:
            if len(points) == 1:
                raise
            raise type(exc)(
                f"at {point.label()}: {exc.problem}",
                file=exc.file,
                key=exc.key,
                line=exc.line,
                fix=exc.fix,
            ) from None
    return runs
