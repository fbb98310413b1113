"""Serving metrics from a run's records: latencies, throughput, goodput, occupancy.

Definitions (per request; `rdusim.serving.engine.RequestRecord` holds the timestamps):

* TTFT, time to first token: first token - arrival (the prefill graph produces the first token);
* TPOT, time per output token: (last token - first token) / (output tokens - 1); a one-token
  request has none and is left out of the TPOT statistics (it meets any TPOT objective);
* end-to-end latency: last token - arrival.

Over the run, whose window runs from the first arrival to the last completion (`duration_s`):

* `throughput_tokens_per_s`: output tokens / duration;
* `goodput_requests_per_s`: requests meeting both SLOs (TTFT and TPOT at or under the
  objective) / duration (DistServe's goodput, Zhong et al. 2024); with no `slo:` in the workload
  it and `slo_attainment` are null and `goodput_note` says why (`NO_SLO`);
* `mean_requests_in_system`: the time average of the number of requests that have arrived and
  not completed, integrated over the window from the arrival and completion events (Little's law
  says it equals arrival rate x mean end-to-end latency in a stationary run);
* `arrival_rate`: (requests - 1) / (last arrival - first arrival), the measured rate (null with
  fewer than two arrival times);
* `slot_occupancy`: the time-average fraction of decode slots holding a decoding request, and
  a timeline of occupied slots (all decode nodes together), averaged over at most
  `TIMELINE_POINTS` equal intervals of the window.

Floats are rounded to `SIGNIFICANT` significant digits so that the JSON is stable and readable;
a run with the same inputs gives byte-identical JSON (no times of day, no paths).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from rdusim.serving.engine import EngineResult, RequestRecord
from rdusim.serving.records import NAN
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


def stats(values: Sequence[float] | np.ndarray) -> dict[str, float | None]:
    """p50, p90, p99 (linear interpolation between order statistics) and the mean."""
    if len(values) == 0:
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
    return bool(_meet(np.array(rec.ttft_s), np.array(NAN if tpot is None else tpot), slo))


def _meet(ttft: np.ndarray, tpot: np.ndarray, slo: SloSpec) -> np.ndarray:
    """Which requests meet both objectives (a NaN TPOT, a one-token request's, meets any)."""
    return (ttft <= slo.ttft_s) & (np.isnan(tpot) | (tpot <= slo.tpot_s))


def time_average_in_system(records: Iterable[RequestRecord], start: float, end: float) -> float:
    """The time average over [start, end] of the number of requests arrived and not completed
    (`in_system`)."""
    done = list(records)
    arrivals = np.array([r.arrival_s for r in done], dtype=float)
    return in_system(arrivals, np.array([r.last_token_s for r in done], dtype=float), start, end)


def in_system(arrivals: np.ndarray, completions: np.ndarray, start: float, end: float) -> float:
    """The time average over [start, end] of the number of requests arrived and not completed,
    integrated from the sorted arrival (+1) and completion (-1) events (at one instant, the
    completions first), each interval's count x length added in time order."""
    times = np.concatenate([arrivals, completions])
    deltas = np.concatenate(
        [np.ones(len(arrivals), np.int64), -np.ones(len(completions), np.int64)]
    )
    order = np.lexsort((deltas, times))
    times, counts = times[order], np.cumsum(deltas[order])
    before = np.concatenate([[0], counts[:-1]]) if len(counts) else counts
    gaps = np.diff(times, prepend=start)  # each event's time less the one before (or start)
    last = times[-1] if len(times) else start
    final = (counts[-1] if len(counts) else 0) * (end - last)
    area = float(np.cumsum(np.append(before * gaps, final))[-1])  # summed in time order
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
    span = end - start
    bins = TIMELINE_POINTS if span > 0 else 1
    edges = np.linspace(start, end, bins + 1)
    area = np.zeros(bins)
    t0, t1, value = _occupied_intervals(result, batches, start, end)
    _spread(area, edges, t0, t1, value)
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


def _occupied_intervals(
    result: EngineResult, batches: Sequence[int], start: float, end: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The intervals between changes of the occupied slots of `batches` (together) over
    [start, end]: their starts, ends and occupied slots."""
    log = result.log
    batch = log.column("changes", "batch")
    keep = np.isin(batch, batches)
    order = np.argsort(log.column("changes", "time")[keep], kind="stable")
    times = log.column("changes", "time")[keep][order]
    batch, occupied = batch[keep][order], log.column("changes", "occupied")[keep][order]
    # each change's step: occupied now less what the same batch held before (0 at first)
    by_batch = np.lexsort((np.arange(len(batch)), batch))
    held = occupied[by_batch]
    before = np.concatenate([[0], held[:-1]]) if len(held) else held
    before[np.flatnonzero(np.diff(batch[by_batch], prepend=-1) != 0)] = 0
    step = np.empty_like(occupied)
    step[by_batch] = held - before
    current = np.cumsum(step)  # all of them after each change
    ends = np.append(times, end)
    starts = np.concatenate([[start], ends[:-1]])
    values = np.concatenate([[0], current])
    kept = (ends > starts) & (values != 0)
    return starts[kept], np.minimum(ends[kept], end), values[kept]


def _spread(
    area: np.ndarray, edges: np.ndarray, t0: np.ndarray, t1: np.ndarray, value: np.ndarray
) -> None:
    """Add each interval's `value` x its overlap with each bin, interval after interval."""
    first = np.maximum(0, np.searchsorted(edges, t0, side="right") - 1)
    last = np.minimum(len(area) - 1, np.searchsorted(edges, t1, side="left") - 1)
    count = np.maximum(0, last - first + 1)
    k = np.repeat(np.arange(len(t0)), count)  # an interval's index, once per bin it touches
    b = first[k] + np.arange(len(k)) - np.repeat(np.cumsum(count) - count, count)
    overlap = np.minimum(t1[k], edges[b + 1]) - np.maximum(t0[k], edges[b])
    touched = overlap > 0
    np.add.at(area, b[touched], value[k][touched] * overlap[touched])


def summary(result: EngineResult, slo: SloSpec | None) -> dict[str, Any]:
    """The run's metrics, with the JSON keys `rdusim serve` reports (no goodput without an
    `slo`), and the same for each model under `per_model`, over the whole run's window (so
    throughputs, goodputs, requests in the system and switches add up over the models)."""
    table = result.table
    arrival = table.column("arrival_s")
    done = table.column("completions") == 1
    start = float(arrival.min())
    end = float(table.column("last_token_s")[done].max()) if done.any() else start
    everyone = np.ones(len(table), dtype=bool)
    whole = _metrics(result, everyone, slo, start, end, None)
    names = model_names(result)
    model = table.column("model")
    if len(names) == 1:  # the one model's metrics are the run's
        whole["per_model"] = {names[0]: copy.deepcopy(whole)}
        return whole
    whole["per_model"] = {
        name: _metrics(result, model == m, slo, start, end, m) for m, name in enumerate(names)
    }
    return whole


def model_names(result: EngineResult) -> list[str]:
    """The models' names, in order (`model` for an unnamed one)."""
    return [g.name or "model" for g in result.models]


def _metrics(
    result: EngineResult,
    rows: np.ndarray,
    slo: SloSpec | None,
    start: float,
    end: float,
    model: int | None,
) -> dict[str, Any]:
    """The metrics of the requests in `rows` (all, or one `model`'s) over the window
    [start, end]."""
    table = result.table
    done = rows & (table.column("completions") == 1)
    arrival, first = table.column("arrival_s")[done], table.column("first_token_s")[done]
    last, output = table.column("last_token_s")[done], table.column("output_tokens")[done]
    duration = end - start
    tokens = int(output.sum())  # a completed request produced what it asked for
    arrivals = table.column("arrival_s")[rows]
    arrival_span = float(arrivals.max() - arrivals.min()) if len(arrivals) else 0.0
    ttft = first - arrival
    many = output > 1  # a one-token request has no time per output token
    tpot = np.full(len(output), NAN)
    tpot[many] = (last[many] - first[many]) / (output[many] - 1)
    good = int(_meet(ttft, tpot, slo).sum()) if slo is not None else 0
    completed = int(done.sum())

    def per_s(x: float) -> float | None:
        return rounded(x / duration) if duration > 0 else None

    goodput: dict[str, Any] = {
        "goodput_requests_per_s": per_s(good),
        "slo_attainment": rounded(good / completed) if completed else None,
    }
    if slo is None:
        goodput = {"goodput_requests_per_s": None, "slo_attainment": None, "goodput_note": NO_SLO}
    switches = [s for s in result.switches if model is None or s.model == model]
    return {
        "requests": int(rows.sum()),
        "completed": completed,
        "output_tokens": tokens,
        "duration_s": rounded(duration),
        "ttft_s": stats(ttft),
        "tpot_s": stats(tpot[many]),
        "e2e_s": stats(last - arrival),
        "throughput_tokens_per_s": per_s(tokens),
        **goodput,
        "mean_requests_in_system": rounded(in_system(arrival, last, start, end)),
        "arrival_rate": rounded((len(arrivals) - 1) / arrival_span) if arrival_span > 0 else None,
        "slot_occupancy": occupancy(result, start, end, model),
        "model_switches": len(switches),
        "switch_time_s": rounded(sum(s.end_s - s.start_s for s in switches)) or 0.0,
        "prefill_graphs": prefill_graphs(result, model),
    }


def prefill_graphs(result: EngineResult, model: int | None = None) -> list[dict[str, Any]]:
    """The prefill graphs the run executed (all models', or one's): the model, its prompt
    length (a chunk graph's chunk), which chunk (null for a whole-prompt graph), one
    execution's time and how many executions."""
    log = result.log
    models, chunk, graph = (
        log.column("prefill", n).astype(np.int64) for n in ("model", "chunk", "graph_len")
    )
    if model is not None:
        mine = models == model
        models, chunk, graph = models[mine], chunk[mine], graph[mine]
    # one number per (model, chunk, length), in that order: count each distinct one
    chunks, lengths = int(chunk.max(initial=-1)) + 2, int(graph.max(initial=0)) + 1
    keys, counts = np.unique((models * chunks + chunk + 1) * lengths + graph, return_counts=True)
    uses = [(k // lengths // chunks, k // lengths % chunks - 1, k % lengths) for k in keys.tolist()]
    names = model_names(result)
    times = result.model_prefill_s or [result.prefill_s]
    chunk_s = result.model_chunk_s or [{}]
    return [
        {
            "model": names[m],
            "tokens": n,
            "chunk": k if k >= 0 else None,
            "time_s": rounded(chunk_s[m][k] if k >= 0 else times[m][n]),
            "uses": count,
        }
        for (m, k, n), count in zip(uses, counts.tolist(), strict=True)
    ]
