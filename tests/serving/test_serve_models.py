"""`serve` with several models on their simulated graphs: switches at the closed-form cost of
loading a weight shard from DDR, none when every model fits, per-model metrics that add up,
byte-identical JSON for one seed, default mappings, and prefill buckets by default."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdusim.errors import SpecError
from rdusim.report.serving import dumps
from rdusim.serving.models import template
from rdusim.serving.serve import serve
from rdusim.spec.mapping import load_mapping
from rdusim.spec.workload import load_workload

TWO_MODELS = """\
name: two
requests: 60
seed: {seed}
arrival: {{process: poisson, rate: 2.0}}
prompt_tokens: {{dist: uniform, low: 100, high: 1000}}
output_tokens: {{dist: uniform, low: 2, high: 40}}
deployment: {{mode: colocated}}
models:
  - {{model: llama-3.1-8b, share: 1}}
  - {{model: mistral-7b-v0.3, share: 1}}
{residency}
"""
ONE_AT_A_TIME = "residency: {hbm_bytes: 12.0e+9}"  # each plan takes ~9.6 GB a socket


def workload(tmp_path: Path, seed: int = 0, residency: str = "", name: str = "w.yaml"):
    path = tmp_path / name
    path.write_text(TWO_MODELS.format(seed=seed, residency=residency), encoding="utf-8")
    return load_workload(path)


def llama_like_weights(vocab: int, hidden: int, ffn: int, layers: int, kv_dim: int) -> int:
    """Bytes of a bf16 Llama-style model with an untied head, worked out by hand: embedding and
    head, then per layer q and o (hidden^2 each), k and v (hidden x kv_dim each), the three FFN
    matrices and two norms, then the final norm."""
    per_layer = 2 * hidden * hidden + 2 * hidden * kv_dim + 3 * hidden * ffn + 2 * hidden
    return 2 * (2 * vocab * hidden + layers * per_layer + hidden)


def test_a_switch_costs_the_weight_shard_over_ddr_bandwidth(tmp_path: Path) -> None:
    run = serve(None, None, workload(tmp_path, residency=ONE_AT_A_TIME), intervals=False)
    m = run.metrics
    assert m["model_switches"] > 0 and m["switch_time_s"] > 0
    # SN40L-16: 16 sockets, each loading its shard from DDR at 100 GB/s (the hardware preset)
    by_hand = {
        "llama-3.1-8b": llama_like_weights(128256, 4096, 14336, 32, 1024) / 16 / 100e9,
        "mistral-7b-v0.3": llama_like_weights(32768, 4096, 14336, 32, 1024) / 16 / 100e9,
    }
    names = [g.name for g in run.result.models]
    for s in run.result.switches:
        assert s.end_s - s.start_s == pytest.approx(by_hand[names[s.model]], rel=1e-9)
    total = sum(by_hand[names[s.model]] for s in run.result.switches)
    assert m["switch_time_s"] == pytest.approx(total, rel=1e-5)
    per = m["per_model"]
    assert set(per) == set(by_hand)
    assert sum(p["completed"] for p in per.values()) == m["completed"] == 60
    assert sum(p["model_switches"] for p in per.values()) == m["model_switches"]


def test_models_that_fit_together_never_switch(tmp_path: Path) -> None:
    run = serve(None, None, workload(tmp_path), intervals=False)
    assert run.metrics["model_switches"] == 0 and run.metrics["switch_time_s"] == 0
    res = run.document["deployment"]["residency"]
    assert sum(res["models_hbm_bytes_per_socket"].values()) <= res["hbm_bytes_per_socket"]


def test_same_seed_gives_byte_identical_json_with_many_models(tmp_path: Path) -> None:
    a = serve(None, None, workload(tmp_path, 3, ONE_AT_A_TIME), intervals=False)
    b = serve(None, None, workload(tmp_path, 3, ONE_AT_A_TIME, "b.yaml"), intervals=False)
    assert dumps(a.document) == dumps(b.document)
    c = serve(None, None, workload(tmp_path, 4, ONE_AT_A_TIME, "c.yaml"), intervals=False)
    assert dumps(c.document) != dumps(a.document)


def test_a_4k_prompt_runs_on_a_4k_prefill_graph_by_default(tmp_path: Path) -> None:
    path = tmp_path / "r1.yaml"
    path.write_text(
        "requests: 5\narrival: {process: constant, rate: 0.1}\n"
        "prompt_tokens: {dist: fixed, value: 4096}\noutput_tokens: {dist: fixed, value: 8}\n",
        encoding="utf-8",
    )
    run = serve("r1_prefill", "r1_decode", load_workload(path), intervals=False)
    [graph] = run.metrics["prefill_graphs"]
    assert (graph["tokens"], graph["uses"]) == (4096, 5)
    assert {r.graph_len for r in run.result.records} == {4096}
    padded = tmp_path / "padded.yaml"
    padded.write_text(
        path.read_text(encoding="utf-8") + "deployment: {prefill_buckets: padded}\n",
        encoding="utf-8",
    )
    run = serve("r1_prefill", "r1_decode", load_workload(padded), intervals=False)
    assert [g["tokens"] for g in run.metrics["prefill_graphs"]] == [131072]


def test_a_model_without_default_mappings_is_named_in_the_error(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(
        TWO_MODELS.format(seed=0, residency="").replace("mistral-7b-v0.3", "deepseek-r1"),
        encoding="utf-8",
    )
    with pytest.raises(SpecError) as err:
        serve(None, None, load_workload(path), intervals=False)
    assert err.value.key == "models[1].model"
    assert "default mappings exist for dense GQA models only" in err.value.problem


def test_mappings_come_from_the_workload_or_the_command_not_both(tmp_path: Path) -> None:
    wl = workload(tmp_path)
    with pytest.raises(SpecError) as err:
        serve("r1_prefill", "r1_decode", wl, intervals=False)
    assert err.value.key == "--prefill" and "names its models' mappings" in err.value.problem
    plain = tmp_path / "plain.yaml"
    plain.write_text(
        "requests: 5\narrival: {process: poisson, rate: 1}\n"
        "prompt_tokens: {dist: fixed, value: 100}\noutput_tokens: {dist: fixed, value: 8}\n",
        encoding="utf-8",
    )
    with pytest.raises(SpecError) as err:
        serve(None, None, load_workload(plain), intervals=False)
    assert err.value.key == "--prefill" and "no prefill mapping" in err.value.problem


def test_a_budget_below_a_models_plan_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        serve(None, None, workload(tmp_path, residency="residency: {hbm_bytes: 5.0e+9}"))
    assert err.value.key == "residency" and "more than the 5 GB" in err.value.problem


def test_a_default_mapping_splits_heads_over_the_sockets_the_run_sets(tmp_path: Path) -> None:
    """Qwen2.5-7B's 28 heads: on 16 sockets the prefill attention runs over gcd's largest power
    of two, 4; with --set hardware.node.sockets=2 2 divides 28, so no split is set. The sockets
    are the ones the mapping runs on: `hardware.node.sockets` applies to whichever preset
    `hardware=` names, in any order, and a value is read as YAML reads it (`+2` is 2)."""
    from rdusim.serving.models import served_models

    path = tmp_path / "q.yaml"
    path.write_text(
        TWO_MODELS.format(seed=0, residency="").replace("mistral-7b-v0.3", "qwen2.5-7b"),
        encoding="utf-8",
    )
    w = load_workload(path)

    def split(sets: list[str]) -> tuple[str, ...]:
        return served_models(w, None, None, sets)[1].prefill_overrides

    assert split([]) == ("kernels.dense.MHA.sharding.tp=4",)  # 28 heads, 16 sockets
    assert split(["hardware.node.sockets=2"]) == ()
    assert split(["hardware=sn40l-8"]) == ("kernels.dense.MHA.sharding.tp=4",)  # 28 on 8
    assert split(["hardware.node.sockets=2", "hardware=sn40l-16"]) == ()
    assert split(["hardware.node.sockets=+2"]) == ()
    # the oracle: the sockets `load_mapping` resolves for the default prefill mapping
    sets = ["model=qwen2.5-7b", "hardware.node.sockets=2", "hardware=sn40l-16"]
    assert load_mapping(template("prefill"), sets).hardware.sockets == 2
