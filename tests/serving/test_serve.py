"""`serve` on the paper's mappings: SnapStream's throughput at saturation, determinism, graph
times simulated once per run (never per step), and errors located in the workload."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdusim.errors import SpecError
from rdusim.report.serving import dumps
from rdusim.serving import step_times
from rdusim.serving.serve import ServePoint, serve, serve_points, workload_requests
from rdusim.spec.workload import load_workload

SATURATED = """
requests: {requests}
seed: {seed}
arrival: {{process: poisson, rate: 5.0}}
prompt_tokens: {{dist: fixed, value: 130048}}    # a 128K context: 127K in + 1K out
output_tokens: {{dist: fixed, value: 1024}}
slo: {{ttft_s: 30, tpot_s: 0.2}}
deployment: {{mode: disaggregated, prefill_nodes: 32, decode_nodes: 1}}
"""


def write(tmp_path: Path, text: str, name: str = "w.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def saturated(tmp_path: Path):
    return load_workload(write(tmp_path, SATURATED.format(requests=600, seed=0)))


def test_snapstream_throughput_at_saturation(saturated) -> None:
    """Disaggregated, enough prefill nodes, arrivals far above what decode sustains, 128K
    prompts: SnapStream's 64 decode slots against 16 without it (Table 5's max batch) give at
    least 2.5x the output-token throughput."""
    on = serve("r1_prefill", "r1_decode", saturated, ServePoint((("snapstream.enabled", "true"),)))
    off = serve(
        "r1_prefill", "r1_decode", saturated, ServePoint((("snapstream.enabled", "false"),))
    )
    assert (on.document["graphs"]["decode_slots"], off.document["graphs"]["decode_slots"]) == (
        64,
        16,
    )
    ratio = on.metrics["throughput_tokens_per_s"] / off.metrics["throughput_tokens_per_s"]
    assert ratio >= 2.5, ratio
    # the decode node is the bottleneck: its slots stay busy
    assert on.metrics["slot_occupancy"]["mean"] > 0.85
    assert off.metrics["slot_occupancy"]["mean"] > 0.95


def test_same_seed_gives_byte_identical_json(tmp_path: Path) -> None:
    a = load_workload(write(tmp_path, SATURATED.format(requests=200, seed=4)))
    b = load_workload(write(tmp_path, SATURATED.format(requests=200, seed=4), "again.yaml"))
    first = dumps(serve("r1_prefill", "r1_decode", a).document)
    second = dumps(serve("r1_prefill", "r1_decode", b).document)
    assert first == second
    other = load_workload(write(tmp_path, SATURATED.format(requests=200, seed=5), "o.yaml"))
    assert dumps(serve("r1_prefill", "r1_decode", other).document) != first


def test_graph_times_are_simulated_per_run_not_per_step(tmp_path: Path, monkeypatch) -> None:
    calls: list[int] = []
    real = step_times.simulate

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(step_times, "simulate", counting)
    counts = []
    for n in (10, 300):
        step_times._cached.cache_clear()
        calls.clear()
        wl = load_workload(write(tmp_path, SATURATED.format(requests=n, seed=0), f"{n}.yaml"))
        run = serve("r1_prefill", "r1_decode", wl)
        counts.append(len(calls))
        assert run.result.decode_steps > n  # far more steps than simulations
    assert counts == [2, 2]  # one decode step and one prefill graph
    step_times._cached.cache_clear()


def test_a_bucket_that_cannot_compile_is_an_error_at_the_bucket_list(tmp_path: Path) -> None:
    text = SATURATED.format(requests=5, seed=0).replace(
        "decode_nodes: 1}", "decode_nodes: 1, prefill_buckets: [100]}"
    )
    wl = load_workload(write(tmp_path, text))
    with pytest.raises(SpecError) as err:
        serve("r1_prefill", "r1_decode", wl)
    assert err.value.key == "deployment.prefill_buckets"
    assert "100-token prompts" in err.value.problem


def test_too_long_requests_are_refused_before_the_run(tmp_path: Path) -> None:
    text = SATURATED.format(requests=5, seed=0).replace("value: 130048", "value: 131072")
    wl = load_workload(write(tmp_path, text))
    with pytest.raises(SpecError) as err:
        serve("r1_prefill", "r1_decode", wl)
    assert err.value.key == "output_tokens" and err.value.line == 6
    assert "5 of 5 requests" in err.value.problem


def test_rate_does_not_apply_to_a_trace(tmp_path: Path) -> None:
    write(tmp_path, '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 2}\n', "t.jsonl")
    wl = load_workload(
        write(tmp_path, "arrival: {process: trace, file: t.jsonl}\nslo: {ttft_s: 1, tpot_s: 1}\n")
    )
    with pytest.raises(SpecError) as err:
        workload_requests(wl, 2.0)
    assert err.value.key == "--rate"


def test_an_empty_arrival_window_is_refused(tmp_path: Path) -> None:
    text = SATURATED.format(requests=5, seed=0).replace("requests: 5", "duration_s: 0.001")
    with pytest.raises(SpecError) as err:
        workload_requests(load_workload(write(tmp_path, text)), None)
    assert err.value.key == "duration_s"


@pytest.mark.slow
def test_occupied_step_cost_is_cheaper_on_a_light_load(tmp_path: Path) -> None:
    """Paying only for occupied slots (a what-if) beats the static graph when few slots are
    busy; both runs use simulated times (the occupied one through the interpolated grid)."""
    text = SATURATED.format(requests=50, seed=0).replace("rate: 5.0", "rate: 0.1")
    static = serve("r1_prefill", "r1_decode", load_workload(write(tmp_path, text)))
    occupied_text = text.replace("decode_nodes: 1}", "decode_nodes: 1, decode_step: occupied}")
    occupied = serve(
        "r1_prefill", "r1_decode", load_workload(write(tmp_path, occupied_text, "o.yaml"))
    )
    assert occupied.metrics["tpot_s"]["p50"] < 0.8 * static.metrics["tpot_s"]["p50"]
    assert occupied.document["deployment"]["decode_step"] == "occupied"


def test_an_error_at_one_of_several_points_names_it(saturated) -> None:
    points = [ServePoint((("seq_len", "131072"),)), ServePoint((("seq_len", "1048576"),))]
    with pytest.raises(SpecError) as err:
        serve_points("r1_prefill", "r1_decode", saturated, points)
    assert err.value.problem.startswith("at seq_len=1048576: ")
