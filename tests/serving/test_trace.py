"""The serving trace: a process per node, a track per prefill graph and per decode slot, slices
that never overlap on a slot, in Chrome Trace Event form."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict

from rdusim.serving.trace import serving_trace
from tests.serving.synthetic import colocated, disaggregated, requests, run, shape

REQS = requests((0.0, 10, 3), (0.0, 10, 5), (0.2, 10, 2), (0.3, 10, 1), (4.0, 10, 4))


def _threads(trace: dict) -> dict[tuple[int, int], str]:
    return {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }


def _processes(trace: dict) -> dict[int, str]:
    return {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }


def test_disaggregated_tracks() -> None:
    result = run(REQS, shape(2, kv_bytes_per_token=1e3), disaggregated(2, 1, link_bandwidth=1e6))
    trace = json.loads(json.dumps(serving_trace(result)))  # plain JSON
    assert _processes(trace) == {1: "prefill node 0", 2: "prefill node 1", 1000: "decode node 0"}
    threads = _threads(trace)
    assert {threads[(1, 0)], threads[(2, 0)]} == {"prefill graph"}
    assert {name for (pid, _), name in threads.items() if pid == 1000} == {
        "decode graph",
        "KV link in",
        "slot 0",
        "slot 1",
    }
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert all(e["dur"] >= 0 for e in slices)
    assert sum(e["cat"] == "prefill" for e in slices) == len(REQS)
    assert sum(e["cat"] == "slot" for e in slices) == sum(r.output_tokens > 1 for r in REQS)
    assert sum(e["args"]["steps"] for e in slices if e["cat"] == "decode") == result.decode_steps


def test_slot_slices_never_overlap() -> None:
    result = run(REQS * 1, shape(2), colocated())
    trace = serving_trace(result)
    by_track = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X" and e["cat"] == "slot":
            by_track[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    assert by_track
    for spans in by_track.values():
        for (_, end), (start, _) in itertools.pairwise(sorted(spans)):
            assert start >= end - 1e-6
    assert _processes(trace) == {1: "node 0"}


def test_many_models_have_their_slots_and_a_switch_track() -> None:
    from rdusim.serving.arrivals import Request
    from rdusim.serving.engine import EngineConfig, ModelGraphs, simulate_models
    from tests.serving.synthetic import constant_times

    graphs = [ModelGraphs(n, shape(2), constant_times(), 6.0, 0.5) for n in ("a", "b")]
    reqs = [Request(0, 0.0, 10, 3, 0), Request(1, 0.0, 10, 3, 1)]
    trace = serving_trace(simulate_models(reqs, graphs, EngineConfig(hbm_budget=10.0)))
    names = set(_threads(trace).values())
    assert {"a slot 0", "b slot 0", "model switch"} <= names
    [switch] = [e for e in trace["traceEvents"] if e.get("cat") == "switch"]
    assert switch["name"] == "load b" and switch["args"]["evicted"] == ["a"]
    assert switch["dur"] == 0.5e6
    slices = {e["name"] for e in trace["traceEvents"] if e.get("cat") in ("prefill", "decode")}
    assert {"a prefill 1000", "b prefill 1000", "a decode x2", "b decode x2"} <= slices
    json.dumps(trace)
