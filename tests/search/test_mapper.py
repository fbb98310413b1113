"""The auto-mapper end to end: at least as good as the paper's hand mappings, deterministic, and
its emitted mapping reproduces its result. Each search weighs thousands of candidate kernels
and takes one to three seconds (candidates shared between sharding plans, timings and prices
kept across programs), so these run in the default selection."""

from __future__ import annotations

import math

import pytest

from rdusim.api import run_mapping
from rdusim.search.mapper import SearchOptions, auto_map
from rdusim.search.objective import Objective
from rdusim.spec.mapping import load_mapping


def auto(name: str, *overrides: str, **options):
    return run_mapping(name, [*overrides, "kernels=auto"], search=SearchOptions(**options))


def test_r1_prefill_ttft_is_no_worse_than_the_paper_mapping():
    hand = run_mapping("r1_prefill").report["total_latency_s"]
    found = auto("r1_prefill").report["total_latency_s"]
    assert found <= hand * (1 + 1e-9)


@pytest.fixture(scope="module")
def r1_decode_auto():
    """`rdusim map r1_decode --set kernels=auto` (once for the module)."""
    return auto("r1_decode")


def test_r1_decode_throughput_at_the_largest_batch_is_no_worse_than_the_paper_mapping(
    r1_decode_auto,
):
    hand = run_mapping("r1_decode").report
    found = r1_decode_auto.report
    assert found["batch"] >= hand["batch"]
    assert found["throughput_tokens_per_s"] >= hand["throughput_tokens_per_s"] * (1 - 1e-9)


def test_r1_decode_pick_reports_its_gain_over_the_hand_kernels_across_the_ensemble(
    r1_decode_auto,
):
    """The decode pick against r1_decode's own two kernels a layer at the pick's batch: its
    throughput over theirs in each ensemble member (each program re-priced here under every
    member), as p05/p50/p95 and the share of members in which the pick is better."""
    import numpy as np

    from rdusim.uncertainty.ensemble import shipped_ensemble
    from rdusim.uncertainty.pricing import AnchoredPricer

    a = r1_decode_auto.report["auto_mapping"]
    batch = r1_decode_auto.report["batch"]
    hand = run_mapping("r1_decode", [f"batch={batch}"], uncertainty=False)
    ensemble = shipped_ensemble()
    assert ensemble is not None

    def throughputs(run) -> list[float]:
        members = ensemble.applied(run.mapping.hardware)
        priced = AnchoredPricer(run.program, run.result, run.mapping.hardware).price_all(members)
        return [batch * run.program.tokens_per_step / r.total_latency_s for r in priced]

    gains = np.array(throughputs(r1_decode_auto)) / np.array(throughputs(hand))
    q = np.percentile(gains, [5, 50, 95])
    assert a["gain_vs_hand"] == pytest.approx({"p05": q[0], "p50": q[1], "p95": q[2]}, rel=1e-9)
    assert a["p_better"] == pytest.approx(float(np.mean(gains > 1.0)))
    point = (
        r1_decode_auto.report["throughput_tokens_per_s"] / hand.report["throughput_tokens_per_s"]
    )
    assert a["gain_at_point"] == pytest.approx(point, rel=1e-9)
    assert a["hand_objective"] == pytest.approx(hand.report["throughput_tokens_per_s"], rel=1e-9)
    # and the pick's kernels are legal on one socket
    socket = r1_decode_auto.mapping.hardware.socket
    for lp in r1_decode_auto.program.all_layers():
        for k in lp.kernels:
            assert k.pcus <= socket.pcus and k.pmus <= socket.pmus
            assert k.sram_bytes <= socket.sram_bytes
    # the text (what `rdusim map` prints of the report) says it in one line
    from rdusim.report.mapping_report import render_map_report

    flat = " ".join(render_map_report(r1_decode_auto.report, width=200).split())
    g = a["gain_vs_hand"]
    assert (
        f"against the mapping's own kernels: {g['p50']:.2f}x better "
        f"({g['p05']:.2f}–{g['p95']:.2f} over the calibration ensemble), better in "
        f"{a['p_better']:.0%} of it"
    ) in flat


def test_llama_8b_decode_step_at_batch_1_is_no_worse_than_the_shipped_mapping():
    hand = run_mapping("llama31_8b_decode", ["batch=1"]).report["total_latency_s"]
    found = auto("llama31_8b_decode", "batch=1").report["total_latency_s"]
    assert found <= hand * (1 + 1e-9)


def test_llama_70b_decode_at_batch_1_runs_on_eight_sockets():
    run = auto("llama31_8b_decode", "model=llama-3.1-70b", "hardware=sn40l-8", "batch=1")
    assert run.program.sockets == 8
    assert math.isfinite(run.report["total_latency_s"]) and run.program.hbm.fits


def test_the_search_is_deterministic():
    rm = load_mapping("llama31_8b_prefill", ["kernels=auto", "seq_len=8192"])
    a, b = auto_map(rm), auto_map(rm)
    assert a.mapping.spec == b.mapping.spec
    assert a.chosen.score == b.chosen.score


def test_the_emitted_mapping_reproduces_the_result(tmp_path, run_cli):
    import json

    out = tmp_path / "auto.yaml"
    code, text, err = run_cli(
        [
            "map",
            "llama31_8b_prefill",
            "--set",
            "kernels=auto",
            "--set",
            "seq_len=8192",
            "--emit-mapping",
            out,
            "--json",
        ]
    )
    assert code == 0, err
    searched = json.loads(text)
    code, text, err = run_cli(["map", out, "--json"])
    assert code == 0, err
    again = json.loads(text)
    assert again["total_latency_s"] == searched["total_latency_s"]
    assert again["layers"] == searched["layers"]
    assert "auto_mapping" not in again


def test_alternatives_are_distinct_and_no_better_than_the_choice():
    run = auto("llama31_8b_decode", "batch=4", alternatives=2)
    report = run.report
    chosen = report["total_latency_s"]
    alts = report["alternatives"]
    assert 1 <= len(alts) <= 2
    seen = {str(report["layers"])}
    for alt in alts:
        assert alt["total_latency_s"] >= chosen * (1 - 1e-9)
        key = str(alt["kernels"]) + str(alt["kernel_looping"]) + str(alt["sharding_plans"])
        assert key not in seen
        seen.add(key)


def test_throughput_under_a_latency_bound_meets_it():
    free = auto("llama31_8b_decode", "batch=max", "seq_len=32768").report
    bound = free["total_latency_s"] / 2
    run = auto(
        "llama31_8b_decode",
        "batch=max",
        "seq_len=32768",
        objective=Objective.THROUGHPUT_UNDER_LATENCY,
        latency_bound_s=bound,
    )
    assert run.report["total_latency_s"] <= bound
    assert run.report["batch"] < free["batch"]


def test_a_throughput_objective_runs_at_the_batch_it_chose():
    """A numeric batch with --objective throughput: the search picks the batch, and the run and
    the mapping it writes out use that batch, not the file's."""
    run = auto("llama31_8b_decode", "batch=8", objective=Objective.THROUGHPUT)
    assert run.report["auto_mapping"]["batch"] == run.report["batch"] == run.mapping.spec.batch
    assert run.report["batch"] > 8


def test_searched_kernel_names_work_as_set_paths(tmp_path, run_cli):
    out = tmp_path / "auto.yaml"
    args = ["map", "llama31_8b_prefill", "--set", "kernels=auto", "--set", "seq_len=8192"]
    code, _, err = run_cli([*args, "--emit-mapping", out, "--json"])
    assert code == 0, err
    from rdusim.spec.mapping import load_mapping

    name = load_mapping(str(out), []).spec.kernels["dense"][0].name
    code, _, err = run_cli(["map", out, "--set", f"kernels.dense.{name}.tiling.tile_tokens=16"])
    assert code == 0, err


def test_alternatives_are_ordered_best_first():
    run = run_mapping("r1_decode", ["kernels=auto"], search=SearchOptions(alternatives=2))
    scores = [a["throughput_tokens_per_s"] for a in run.report["alternatives"]]
    assert scores == sorted(scores, reverse=True)
    assert all(s <= run.report["throughput_tokens_per_s"] * (1 + 1e-9) for s in scores)
