"""Static-graph shapes: the prefill graph a prompt runs on, the cache it keeps, its decode steps,
and the requests a deployment refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdusim.errors import SpecError, SpecErrors
from rdusim.serving.arrivals import Request
from rdusim.serving.shape import ceil_steps, check_requests, shape_of
from rdusim.serving.step_times import GraphFacts
from rdusim.spec.workload import load_workload
from tests.serving.synthetic import shape

FACTS = GraphFacts(
    decode_slots=64,
    cache_len=32768,
    max_sequence=131072,
    tokens_per_step=2.44,
    prefill_len=131072,
    prefill_batch=1,
    kv_bytes_per_token=70272.0,
    snapstream=True,
    sockets=16,
    p2p_bandwidth=4e11,
    p2p_latency_s=2e-6,
    prefill_hold=75,
    min_cache_len=129,
)


@pytest.fixture
def workload(tmp_path: Path):
    path = tmp_path / "w.yaml"
    path.write_text(
        "requests: 3\narrival: {process: poisson, rate: 1}\n"
        "prompt_tokens: {dist: fixed, value: 100}\noutput_tokens: {dist: fixed, value: 10}\n"
        "slo: {ttft_s: 1, tpot_s: 1}\ndeployment:\n  prefill_buckets: [8192, 200000]\n",
        encoding="utf-8",
    )
    return load_workload(path)


def test_snapstream_caps_the_cache_and_its_bytes() -> None:
    graph = shape(1, cache_len=32768, snapstream=True, kv_bytes_per_token=70272.0)
    assert graph.kv_tokens(131072) == 32768 and graph.kv_tokens(1000) == 1000
    assert graph.kv_bytes(131072) == 32768 * 70272.0
    full = shape(1, cache_len=131072, kv_bytes_per_token=70272.0)
    assert full.kv_bytes(131072) == 131072 * 70272.0


def test_ceil_steps() -> None:
    assert [ceil_steps(n, 2.44) for n in (0, 1, 2, 3, 10, 1023)] == [0, 1, 1, 2, 5, 420]
    assert ceil_steps(10, 2.5) == 4


def test_buckets_longer_than_the_prefill_graph_are_refused(workload) -> None:
    with pytest.raises(SpecError) as err:
        shape_of(FACTS, [8192, 200000], workload)
    assert err.value.key == "deployment.prefill_buckets" and err.value.line == 7
    assert "200000" in err.value.problem and "131072" in err.value.problem


def test_the_mapping_length_is_always_a_graph(workload) -> None:
    graph = shape_of(FACTS, [8192], workload)
    assert graph.prefill_lengths == (8192, 131072)
    assert graph.graph_len(8193) == 131072


def test_requests_that_do_not_fit_are_refused_with_a_count(workload) -> None:
    graph = shape_of(FACTS, None, workload)
    ok = Request(0, 0.0, 130048, 1024)
    long_prompt = Request(1, 0.0, 131073, 1)
    long_total = Request(2, 0.0, 131000, 1024)
    check_requests([ok], graph, workload)
    with pytest.raises(SpecError) as err:
        check_requests([ok, long_total, long_total], graph, workload)
    assert err.value.key == "output_tokens" and "2 of 3 requests" in err.value.problem
    assert "--set seq_len" in (err.value.fix or "")
    with pytest.raises(SpecErrors) as both:
        check_requests([long_prompt, long_total], graph, workload)
    assert [e.key for e in both.value.errors] == ["prompt_tokens", "output_tokens"]


def test_a_trace_request_that_does_not_fit_names_its_line(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text(
        '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 2}\n'
        '{"arrival_s": 1, "prompt_tokens": 200000, "output_tokens": 2}\n',
        encoding="utf-8",
    )
    path = tmp_path / "w.yaml"
    path.write_text("arrival: {process: trace, file: t.jsonl}\nslo: {ttft_s: 1, tpot_s: 1}\n")
    wl = load_workload(path)
    from rdusim.serving.arrivals import requests_of

    with pytest.raises(SpecError) as err:
        check_requests(requests_of(wl), shape_of(FACTS, None, wl), wl)
    assert err.value.file is not None and err.value.file.endswith("t.jsonl")
    assert err.value.line == 2 and err.value.key == "prompt_tokens"
