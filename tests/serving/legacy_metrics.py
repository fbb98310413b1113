"""The serving metrics as they were before they worked on columns: a loop over request objects
and occupancy changes (a frozen copy of `rdusim/serving/metrics.py`, issue 20's starting point).
`tests/serving/test_metrics.py` checks that the column version gives the same JSON, bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from rdusim.serving.engine import EngineResult, RequestRecord
from rdusim.spec.workload import SloSpec

SIGNIFICANT = 6
NO_SLO = "not applicable: the workload sets no slo (e.g. slo: {ttft_s: 30, tpot_s: 0.2})"
TIMELINE_POINTS = 200
PERCENTILES = (50, 90, 99)


def rounded(x: float | None) -> float | None:
    """`x` to `SIGNIFICANT` significant digits (None and non-finite values become None)."""
    if x is None or not math.isfinite(x):
        return None
    return float(f"{x:.{SIGNIFICANT}g}")


def stats(values: Sequence[float]) -> dict[str, float | None]:
    """p50, p90, p99 (linear interpolation between order statistics) and the mean."""
    if not values:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    arr = np.asarray(values, dtype=float)
    p50, p90, p99 = np.percentile(arr, PERCENTILES)
    return {
        "p50": rounded(float(p50)),
        "p90": rounded(float(p90)),
        "p99": rounded(float(p99)),
        "mean": rounded(float(arr.mean())),
    }


def generated_tokens(rec: RequestRecord, tokens_per_step: float) -> int:
    """Tokens a request produced: all it asked for once complete; before that the prefill's
    first, then `tokens_per_step` a decode step it took, no more than it asked for."""
    if math.isnan(rec.first_token_s):
        return 0
    if rec.completions:  # its last step accepted what was left (drawn steps may overshoot)
        return rec.output_tokens
    decoded = math.floor(rec.steps * tokens_per_step + 1e-9)
    return 1 + min(rec.output_tokens - 1, decoded)


def meets_slo(rec: RequestRecord, slo: SloSpec) -> bool:
    tpot = rec.tpot_s
    return rec.ttft_s <= slo.ttft_s and (tpot is None or tpot <= slo.tpot_s)


def time_average_in_system(records: Iterable[RequestRecord], start: float, end: float) -> float:
    """The time average over [start, end] of the number of requests arrived and not completed,
    integrated from the sorted arrival (+1) and completion (-1) events."""
    events = sorted(
        [(r.arrival_s, 1) for r in records] + [(r.last_token_s, -1) for r in records],
        key=lambda e: (e[0], e[1]),
    )
    area, count, t_prev = 0.0, 0, start
    for t, delta in events:
        area += count * (t - t_prev)
        count += delta
        t_prev = t
    area += count * (end - t_prev)
    return area / (end - start) if end > start else 0.0


def occupancy(
    result: EngineResult, start: float, end: float, model: int | None = None
) -> dict[str, Any]:
    """Mean fraction of decode slots in use, and occupied slots over time (all decode nodes;
    of one model's batches if `model` is given)."""
    batches = [
        b for b in range(result.batch_count) if model is None or result.batch_model(b) == model
    ]
    total_slots = sum(result.batch_slots(b) for b in batches)
    wanted = set(batches)
    changes = sorted((c for c in result.occupancy if c[1] in wanted), key=lambda c: c[0])
    span = end - start
    bins = TIMELINE_POINTS if span > 0 else 1
    edges = np.linspace(start, end, bins + 1)
    area = np.zeros(bins)
    per_batch = [0] * result.batch_count
    t_prev, current = start, 0
    for t, batch, occupied in [*changes, (end, -1, 0)]:
        if t > t_prev:
            _spread(area, edges, t_prev, min(t, end), current)
            t_prev = t
        if batch >= 0:
            current += occupied - per_batch[batch]
            per_batch[batch] = occupied
    widths = np.diff(edges)
    mean_slots = float(area.sum() / span) if span > 0 else 0.0
    timeline = [
        [rounded(float(edges[i])), rounded(float(area[i] / widths[i]) if widths[i] > 0 else 0.0)]
        for i in range(bins)
    ]
    return {
        "slots": total_slots,
        "mean": rounded(mean_slots / total_slots) if total_slots else None,
        "timeline": timeline,
    }


def _spread(area: np.ndarray, edges: np.ndarray, t0: float, t1: float, value: int) -> None:
    """Add `value` x the overlap of [t0, t1] with each bin."""
    if value == 0 or t1 <= t0:
        return
    first = max(0, int(np.searchsorted(edges, t0, side="right")) - 1)
    last = min(len(area) - 1, int(np.searchsorted(edges, t1, side="left")) - 1)
    for i in range(first, last + 1):
        overlap = min(t1, edges[i + 1]) - max(t0, edges[i])
        if overlap > 0:
            area[i] += value * overlap


def summary(result: EngineResult, slo: SloSpec | None) -> dict[str, Any]:
    """The run's metrics, with the JSON keys `rdusim serve` reports (no goodput without an
    `slo`), and the same for each model under `per_model`, over the whole run's window (so
    throughputs, goodputs, requests in the system and switches add up over the models)."""
    records = result.records
    done = [r for r in records if r.completions == 1]
    start = min(r.arrival_s for r in records)
    end = max(r.last_token_s for r in done) if done else start
    whole = _metrics(result, records, slo, start, end, None)
    names = model_names(result)
    whole["per_model"] = {
        name: _metrics(result, [r for r in records if r.model == m], slo, start, end, m)
        for m, name in enumerate(names)
    }
    return whole


def model_names(result: EngineResult) -> list[str]:
    """The models' names, in order (`model` for an unnamed one)."""
    return [g.name or "model" for g in result.models]


def _metrics(
    result: EngineResult,
    records: Sequence[RequestRecord],
    slo: SloSpec | None,
    start: float,
    end: float,
    model: int | None,
) -> dict[str, Any]:
    """The metrics of `records` (all, or one `model`'s) over the window [start, end]."""
    done = [r for r in records if r.completions == 1]
    duration = end - start
    tokens = sum(generated_tokens(r, _tokens_per_step(result, r)) for r in done)
    arrivals = sorted(r.arrival_s for r in records)
    arrival_span = arrivals[-1] - arrivals[0] if arrivals else 0.0
    good = sum(meets_slo(r, slo) for r in done) if slo is not None else 0
    tpots = [t for r in done if (t := r.tpot_s) is not None]

    def per_s(x: float) -> float | None:
        return rounded(x / duration) if duration > 0 else None

    goodput: dict[str, Any] = {
        "goodput_requests_per_s": per_s(good),
        "slo_attainment": rounded(good / len(done)) if done else None,
    }
    if slo is None:
        goodput = {"goodput_requests_per_s": None, "slo_attainment": None, "goodput_note": NO_SLO}
    switches = [s for s in result.switches if model is None or s.model == model]
    return {
        "requests": len(records),
        "completed": len(done),
        "output_tokens": tokens,
        "duration_s": rounded(duration),
        "ttft_s": stats([r.ttft_s for r in done]),
        "tpot_s": stats(tpots),
        "e2e_s": stats([r.e2e_s for r in done]),
        "throughput_tokens_per_s": per_s(tokens),
        **goodput,
        "mean_requests_in_system": rounded(time_average_in_system(done, start, end)),
        "arrival_rate": rounded((len(arrivals) - 1) / arrival_span) if arrival_span > 0 else None,
        "slot_occupancy": occupancy(result, start, end, model),
        "model_switches": len(switches),
        "switch_time_s": rounded(sum(s.end_s - s.start_s for s in switches)) or 0.0,
        "prefill_graphs": prefill_graphs(result, model),
    }


def _tokens_per_step(result: EngineResult, rec: RequestRecord) -> float:
    if not result.models:
        return result.shape.tokens_per_step
    return result.models[rec.model].shape.tokens_per_step


def prefill_graphs(result: EngineResult, model: int | None = None) -> list[dict[str, Any]]:
    """The prefill graphs the run executed (all models', or one's): the model, its prompt
    length (a chunk graph's chunk), which chunk (null for a whole-prompt graph), one
    execution's time and how many executions."""
    uses: dict[tuple[int, int, int], int] = {}
    for run in result.prefills:
        if model is None or run.model == model:
            key = (run.model, run.chunk, run.graph_len)
            uses[key] = uses.get(key, 0) + 1
    names = model_names(result)
    times = result.model_prefill_s or [result.prefill_s]
    chunks = result.model_chunk_s or [{}]
    return [
        {
            "model": names[m],
            "tokens": n,
            "chunk": k if k >= 0 else None,
            "time_s": rounded(chunks[m][k] if k >= 0 else times[m][n]),
            "uses": count,
        }
        for (m, k, n), count in sorted(uses.items())
    ]
