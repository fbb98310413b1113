"""Whole-program simulation: determinism and how layer and extra latencies add up.

Layers of a kind are simulated once and counted, so the totals must be exactly the counted sums;
a decode step runs the main model, the MTP module and the LM head once per model.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rdusim.api import run_mapping
from rdusim.sim.model import simulate

MAPPINGS = Path(__file__).resolve().parents[2] / "mappings"
REL = 1e-9


@pytest.fixture(scope="module")
def prefill():
    return run_mapping(MAPPINGS / "r1_prefill.yaml", ["seq_len=8192"])


@pytest.fixture(scope="module")
def decode():
    return run_mapping(MAPPINGS / "r1_decode.yaml", ["seq_len=8192", "batch=16"])


def counted_total(report: dict) -> float:
    layers = sum(r["count"] * r["latency_s"] for r in report["layers"].values())
    extras = sum(r["runs"] * r["latency_s"] for r in report["extras"].values())
    return layers + extras


# ------------------------------------------------------------------ determinism


@pytest.mark.parametrize(
    ("mapping", "overrides"),
    [("r1_prefill", ["seq_len=8192"]), ("r1_decode", ["seq_len=8192", "batch=16"])],
)
def test_report_is_deterministic(mapping, overrides):
    a = run_mapping(MAPPINGS / f"{mapping}.yaml", overrides).report
    b = run_mapping(MAPPINGS / f"{mapping}.yaml", overrides).report
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_cli_json_is_deterministic(run_cli):
    args = [
        "map",
        MAPPINGS / "r1_decode.yaml",
        "--set",
        "seq_len=8192",
        "--set",
        "batch=16",
        "--json",
    ]
    code1, out1, _ = run_cli(args)
    code2, out2, _ = run_cli(args)
    assert code1 == code2 == 0
    assert out1 == out2
    assert json.loads(out1)["batch"] == 16


def test_simulate_is_deterministic(prefill):
    hw = prefill.mapping.hardware
    a = simulate(prefill.program, hw)
    b = simulate(prefill.program, hw)
    assert a.total_latency_s == b.total_latency_s
    for kind in a.layers:
        assert [k.latency_s for k in a.layers[kind].kernels] == [
            k.latency_s for k in b.layers[kind].kernels
        ]


# ------------------------------------------------------------------ prefill totals


def test_prefill_total_is_counted_sum(prefill):
    result, report = prefill.result, prefill.report
    assert result is not None
    for kind, lr in result.layers.items():
        assert lr.runs == 1 and lr.count == prefill.program.layers[kind].count
        assert lr.executions == lr.count
        per_layer = sum(k.call_s + k.pipeline_s for k in lr.kernels)
        assert lr.latency_s == pytest.approx(per_layer, rel=REL)
    assert all(lr.executions == 1 for lr in result.extras.values())
    expected = sum(lr.count * lr.latency_s for lr in result.layers.values()) + sum(
        lr.latency_s for lr in result.extras.values()
    )
    assert result.total_latency_s == pytest.approx(expected, rel=REL)
    assert report["total_latency_s"] == pytest.approx(counted_total(report), rel=REL)
    assert set(report["extras"]) == {"embedding", "head"}
    assert sum(r["count"] for r in report["layers"].values()) == 61  # R1: 3 dense + 58 MoE
    # every kernel of every layer is one host call
    calls = sum(lp.count * len(lp.kernels) for lp in prefill.program.layers.values()) + 2
    assert report["kernel_calls"] == result.kernel_calls == calls
    # each host-issued call loads its kernel's program into the PCUs and PMUs it uses, loads its
    # arguments, waits one barrier round (16 sockets, fully connected) and the host's round trip
    hw = prefill.mapping.hardware
    assert prefill.program.orchestration == "software"
    assert hw.links.topology == "fully-connected" and hw.sockets == 16
    socket, cal = hw.socket, hw.calibration

    def call(k) -> float:
        program = k.pcus * socket.config_bytes_per_pcu + k.pmus * socket.config_bytes_per_pmu
        return (
            program / cal.config_bandwidth
            + cal.argument_load_s
            + hw.links.p2p_latency_s
            + cal.host_round_trip_s
        )

    call_time = sum(
        lp.count * sum(call(k) for k in lp.kernels) for lp in prefill.program.layers.values()
    ) + sum(call(k) for lp in prefill.program.extras.values() for k in lp.kernels)
    assert report["kernel_call_time_s"] == pytest.approx(call_time, rel=REL)
    assert result.kernel_call_time_s == pytest.approx(call_time, rel=REL)
    # calls of different kernels cost different amounts: not calls x one fixed cost
    costs = {call(k) for lp in prefill.program.layers.values() for k in lp.kernels}
    assert len(costs) > 2


def test_prefill_shares_sum_to_one(prefill):
    for layer in prefill.report["layers"].values():
        assert sum(k["share"] for k in layer["kernels"]) == pytest.approx(1.0, rel=REL)
        assert sum(k["latency_s"] for k in layer["kernels"]) == pytest.approx(
            layer["latency_s"], rel=REL
        )


def test_prefill_throughput_is_prompt_over_ttft(prefill):
    r = prefill.report
    assert r["throughput_tokens_per_s"] == pytest.approx(
        r["batch"] * r["seq_len"] / r["total_latency_s"], rel=REL
    )


def test_traffic_is_counted(prefill):
    result = prefill.result
    assert result is not None
    runs = [*result.layers.values(), *result.extras.values()]
    hbm = sum(k.hbm_bytes * r.executions for r in runs for k in r.kernels)
    p2p = sum(k.p2p_bytes * r.executions for r in runs for k in r.kernels)
    assert result.traffic("hbm") == pytest.approx(hbm, rel=REL)
    assert result.traffic("p2p") == pytest.approx(p2p, rel=REL)
    assert prefill.report["traffic_bytes"] == {
        "hbm": result.traffic("hbm"),
        "ddr": 0.0,  # nothing placed in DDR
        "p2p": result.traffic("p2p"),
    }


# ------------------------------------------------------------------ decode step


def test_decode_step_verifies_drafts_and_runs_the_mtp_module_per_draft(decode):
    """k = 2 drafts: the main model sees k + 1 tokens per sequence, the MTP module runs k times
    (with its own embedding lookup and LM head), and 1 + a + a^2 tokens are accepted."""
    result, report = decode.result, decode.report
    assert result is not None
    k, a = 2, 0.8
    assert decode.program.workload.seq == k + 1
    assert report["mtp"] == {"mode": "verify", "draft_tokens": k, "verified_tokens": k + 1}
    assert report["tokens_per_step"] == pytest.approx(1 + a + a * a, rel=REL)
    assert {"mtp0_proj", "mtp0_layer", "mtp_embedding", "mtp_head"} <= set(result.extras)
    for name in ("mtp0_proj", "mtp0_layer", "mtp_embedding", "mtp_head"):
        assert result.extras[name].executions == k
        assert report["extras"][name]["runs"] == k
    for name in ("embedding", "head"):
        assert result.extras[name].executions == 1
    # the MTP module's transformer block is mapped like a MoE layer
    assert [kt.name for kt in result.extras["mtp0_layer"].kernels] == [
        kt.name for kt in result.layers["moe"].kernels
    ]
    step = sum(lr.count * lr.latency_s for lr in result.layers.values()) + sum(
        lr.executions * lr.latency_s for lr in result.extras.values()
    )
    assert result.total_latency_s == pytest.approx(step, rel=REL)
    assert report["total_latency_s"] == pytest.approx(counted_total(report), rel=REL)
    assert report["tpot_s"] == pytest.approx(report["total_latency_s"] / (1 + a + a * a))


def test_scaled_mtp_runs_a_plain_step():
    run = run_mapping(
        MAPPINGS / "r1_decode.yaml",
        [
            "seq_len=8192",
            "batch=16",
            "mtp.draft_tokens=0",
            "mtp.mode=scaled",
            "mtp.tokens_per_step=2.4",
        ],
    )
    assert run.program.workload.seq == 1
    assert run.report["tokens_per_step"] == 2.4
    assert run.result is not None
    assert run.result.extras["mtp0_layer"].executions == 0
    assert "mtp_head" not in run.result.extras
    assert run.report["throughput_tokens_per_s"] == pytest.approx(
        16 * 2.4 / run.report["total_latency_s"], rel=REL
    )


def test_decode_step_longer_than_main_model(decode):
    result = decode.result
    assert result is not None
    main = sum(lr.count * lr.latency_s for lr in result.layers.values())
    assert result.total_latency_s > main + 2 * result.extras["mtp0_layer"].latency_s


def test_decode_throughput(decode):
    r = decode.report
    assert r["phase"] == "decode" and r["batch"] == 16
    assert r["throughput_tokens_per_s"] == pytest.approx(
        r["batch"] * r["tokens_per_step"] / r["total_latency_s"], rel=REL
    )
    assert r["max_batch_size"] == 1024  # capacity at 8K (compressed to 2K), whatever the batch


def test_decode_layers_are_two_kernels(decode):
    for layer in decode.report["layers"].values():
        assert [k["name"] for k in layer["kernels"]] == ["MLA", "FFN"]


def test_identical_kernels_are_simulated_once(prefill, monkeypatch):
    """R1's dense and MoE prefill layers share their attention-side kernels (same ops, sharding
    and tiles): each distinct kernel is timed once per run, and sharing changes no number."""
    import rdusim.sim.model as model

    model.clear_timings()  # timings kept from earlier runs would hide the count
    calls: list[str] = []
    real = model.time_kernel

    def counting(kernel, *args, **kwargs):
        calls.append(kernel.name)
        return real(kernel, *args, **kwargs)

    monkeypatch.setattr(model, "time_kernel", counting)
    result = simulate(prefill.program, prefill.mapping.hardware)
    kernels = [k for lp in prefill.program.all_layers() for k in lp.kernels]
    distinct = {repr(k) for k in kernels}
    assert len(calls) == len(distinct) < len(kernels)
    assert result.total_latency_s == prefill.result.total_latency_s


def _counting_timer(monkeypatch) -> list[str]:
    import rdusim.sim.model as model

    calls: list[str] = []
    real = model.time_kernel

    def counting(kernel, *args, **kwargs):
        calls.append(kernel.name)
        return real(kernel, *args, **kwargs)

    monkeypatch.setattr(model, "time_kernel", counting)
    return calls


def test_a_program_simulated_again_reuses_every_kernel_timing(prefill, monkeypatch):
    calls = _counting_timer(monkeypatch)
    again = simulate(prefill.program, prefill.mapping.hardware)
    assert calls == []
    assert again.total_latency_s == prefill.result.total_latency_s


def test_a_kernel_that_differs_in_one_field_is_simulated_anew(prefill, monkeypatch):
    """The kept timings are keyed by the kernel's every field, the hardware and the call's
    settings: change one and the kernel is timed again, to another answer."""
    import rdusim.sim.model as model

    calls = _counting_timer(monkeypatch)
    hw = prefill.mapping.hardware
    program = prefill.program
    kernel = program.layers["moe"].kernels[0]
    timer = model._KernelTimer(hw, program.orchestration, trace=False, sockets=1)
    base = timer(kernel, 1)
    assert calls == []  # kept from the fixture's run
    op = dataclasses.replace(kernel.ops[0], flops=kernel.ops[0].flops * 4 + 1e12)
    heavier = dataclasses.replace(kernel, ops=[op, *kernel.ops[1:]])
    slower_chip = hw.model_copy(
        update={"calibration": hw.calibration.model_copy(update={"hbm_efficiency": 0.3})}
    )
    assert timer(heavier, 1).pipeline_s != base.pipeline_s
    other = model._KernelTimer(slower_chip, program.orchestration, trace=False, sockets=1)
    assert other(kernel, 1).pipeline_s > base.pipeline_s
    looped = timer(kernel, 3)
    assert looped.executions == 3 != base.executions
    assert len(calls) == 3
