"""Workload specs: the shipped examples, every rule of the schema, and located errors (file,
line, key, a fix; a "did you mean" for a misspelt key), traces included."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdusim.errors import SpecError, SpecErrors
from rdusim.spec.workload import (
    MAX_REQUESTS,
    DeploymentMode,
    SchedulingPolicy,
    WorkloadSpec,
    load_workload,
    parse_workload,
    read_trace,
    resolve_workload,
    shipped_workloads,
)
from tests.conftest import line_with

GOOD = """\
requests: 10
seed: 0
arrival: {process: poisson, rate: 2.0}
prompt_tokens: {dist: fixed, value: 1024}
output_tokens: {dist: fixed, value: 64}
slo: {ttft_s: 30, tpot_s: 0.2}
deployment:
  mode: colocated
  policy: prefill-first
"""


def write(tmp_path: Path, text: str, name: str = "w.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(tmp_path: Path, text: str) -> SpecError:
    with pytest.raises(SpecError) as err:
        load_workload(write(tmp_path, text))
    return err.value


def test_shipped_workloads_load_by_name() -> None:
    names = set(shipped_workloads())
    assert {"r1_colocated", "r1_disaggregated", "mixed_lengths", "trace_example"} <= names
    for name in names:
        wl = load_workload(name)
        assert wl.spec.name
        assert load_workload(f"{name}.yaml").spec == wl.spec
    assert load_workload("trace_example").trace is not None


def test_an_existing_path_wins_and_a_missing_name_lists_the_shipped_ones(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD, "r1_colocated.yaml")
    assert resolve_workload(str(path)) == str(path)
    with pytest.raises(SpecError) as err:
        resolve_workload("no_such_workload")
    assert "r1_disaggregated" in (err.value.fix or "")


def test_a_good_workload(tmp_path: Path) -> None:
    spec = load_workload(write(tmp_path, GOOD)).spec
    assert spec.deployment.mode == DeploymentMode.COLOCATED
    assert spec.deployment.scheduling == SchedulingPolicy.PREFILL_FIRST
    assert spec.arrival.rate == 2.0 and spec.prompt_tokens and spec.prompt_tokens.longest == 1024


def test_an_unknown_key_suggests_the_nearest(tmp_path: Path) -> None:
    text = GOOD.replace("arrival:", "arival:")
    err = error_of(tmp_path, text)
    assert err.key == "arival" and err.line == line_with(text, "arival")
    assert "did you mean 'arrival'?" in (err.fix or "")


def test_an_unknown_nested_key_suggests_the_nearest(tmp_path: Path) -> None:
    text = GOOD.replace("  policy: prefill-first", "  polcy: prefill-first")
    err = error_of(tmp_path, text)
    assert err.key == "deployment.polcy" and err.line == 9
    assert "did you mean 'policy'?" in (err.fix or "")


def test_several_unknown_keys_are_reported_together(tmp_path: Path) -> None:
    text = GOOD.replace("seed:", "sede:").replace("ttft_s", "ttf_s")
    with pytest.raises(SpecErrors) as err:
        load_workload(write(tmp_path, text))
    assert [e.key for e in err.value.errors] == ["sede", "slo.ttf_s"]


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        (
            "  policy: prefill-first",
            "  prefill_nodes: 4",
            "prefill_nodes applies to mode 'disaggregated'",
        ),
        ("mode: colocated", "mode: disaggregated", "policy applies to mode 'colocated'"),
        ("  policy: prefill-first", "  decode_steps_per_prefill: 4", "applies to policy 'mixed'"),
        (
            "{dist: fixed, value: 1024}",
            "{dist: fixed, value: 1024, low: 3}",
            "low applies to dist 'uniform'",
        ),
        ("{dist: fixed, value: 1024}", "{dist: uniform, low: 3}", "needs high"),
        (
            "{dist: fixed, value: 1024}",
            "{dist: uniform, low: 9, high: 3}",
            "low (9) is above high (3)",
        ),
        ("{dist: fixed, value: 1024}", "{dist: lognormal, median: 500}", "needs sigma"),
        (
            "{dist: fixed, value: 1024}",
            "{dist: fixed, value: 1024, max: 9}",
            "max applies to dist 'lognormal'",
        ),
        ("{process: poisson, rate: 2.0}", "{process: poisson}", "needs a rate"),
        (
            "{process: poisson, rate: 2.0}",
            "{process: trace, file: t.jsonl, rate: 2}",
            "rate applies to",
        ),
        ("requests: 10", "requests: 10\nduration_s: 5", "not both"),
        ("requests: 10\n", "", "either requests"),
        ("  policy: prefill-first", "  prefill_buckets: [4096, 1024]", "increasing"),
    ],
)
def test_rules_of_the_schema(tmp_path: Path, old: str, new: str, needle: str) -> None:
    text = GOOD.replace(old, new)
    assert text != GOOD
    err = error_of(tmp_path, text)
    assert needle in err.problem, err.render()
    assert err.fix and err.file


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("requests: 10", "requests: true", "requests"),
        ("requests: 10", "requests: 0", "requests"),
        ("requests: 10", f"requests: {MAX_REQUESTS + 1}", "requests"),
        ("rate: 2.0", "rate: -1", "arrival.rate"),
        ("rate: 2.0", "rate: .inf", "arrival.rate"),
        ("value: 1024", "value: 1.5", "prompt_tokens.value"),
        ("tpot_s: 0.2", "tpot_s: 0", "slo.tpot_s"),
        ("policy: prefill-first", "policy: prefill_first", "deployment.policy"),
        ("mode: colocated", "mode: split", "deployment.mode"),
        ("seed: 0", "seed: -3", "seed"),
    ],
)
def test_bad_values_name_their_key_and_line(tmp_path: Path, old: str, new: str, key: str) -> None:
    text = GOOD.replace(old, new)
    err = error_of(tmp_path, text)
    assert err.key == key, err.render()
    assert err.line == line_with(text, key.split(".")[-1] + ":")
    assert err.fix


def test_expected_requests_are_bounded(tmp_path: Path) -> None:
    text = GOOD.replace("requests: 10", "duration_s: 1.0e+7").replace("rate: 2.0", "rate: 1000")
    assert "rdusim's limit" in error_of(tmp_path, text).problem


def test_a_workload_rate_too_small_for_its_requests_is_refused(tmp_path: Path) -> None:
    text = GOOD.replace("rate: 2.0", "rate: 1e-308")
    err = error_of(tmp_path, text)
    assert (err.key, err.line) == ("arrival.rate", line_with(text, "arrival:"))
    assert "would arrive over" in err.problem and "at least 1e-06/s" in (err.fix or "")


def test_a_window_expecting_no_request_is_refused(tmp_path: Path) -> None:
    text = GOOD.replace("requests: 10", "duration_s: 10").replace("rate: 2.0", "rate: 0.01")
    err = error_of(tmp_path, text)
    assert err.key == "duration_s" and "fewer than one" in err.problem


def test_the_slo_is_optional(tmp_path: Path) -> None:
    assert "slo: {ttft_s: 30, tpot_s: 0.2}\n" in GOOD
    path = write(tmp_path, GOOD.replace("slo: {ttft_s: 30, tpot_s: 0.2}\n", ""))
    assert load_workload(path).spec.slo is None


def test_lengths_come_from_the_trace(tmp_path: Path) -> None:
    write(tmp_path, '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 2}\n', "t.jsonl")
    text = GOOD.replace("{process: poisson, rate: 2.0}", "{process: trace, file: t.jsonl}")
    assert "come from the trace" in error_of(tmp_path, text).problem
    trace_only = "arrival: {process: trace, file: t.jsonl}\nslo: {ttft_s: 1, tpot_s: 1}\n"
    wl = load_workload(write(tmp_path, trace_only, "ok.yaml"))
    assert wl.trace is not None and wl.trace.prompt_tokens == (10,)


def test_a_missing_trace_is_an_error_at_its_key(tmp_path: Path) -> None:
    text = "arrival: {process: trace, file: nowhere.jsonl}\nslo: {ttft_s: 1, tpot_s: 1}\n"
    err = error_of(tmp_path, text)
    assert err.key == "arrival.file" and err.line == 1


def trace_error(tmp_path: Path, text: str) -> SpecError | SpecErrors:
    path = write(tmp_path, text, "t.jsonl")
    with pytest.raises((SpecError, SpecErrors)) as err:
        read_trace(path)
    return err.value


def test_trace_lines_are_checked_with_their_line(tmp_path: Path) -> None:
    good = '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 2}\n'
    err = trace_error(
        tmp_path, good + "\n" + '{"arrival_s": 1, "prompt_token": 5, "output_tokens": 2}\n'
    )
    assert isinstance(err, SpecError)
    assert (err.line, err.key) == (3, "prompt_token")
    assert "did you mean 'prompt_tokens'?" in (err.fix or "")


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("not json", "not a JSON object"),
        ("[1, 2]", "not a JSON object"),
        ('{"arrival_s": -1, "prompt_tokens": 5, "output_tokens": 2}', "greater than or equal"),
        ('{"arrival_s": 1, "prompt_tokens": 0, "output_tokens": 2}', "greater than or equal"),
        ('{"arrival_s": 1, "prompt_tokens": true, "output_tokens": 2}', "boolean"),
    ],
)
def test_bad_trace_lines(tmp_path: Path, line: str, needle: str) -> None:
    err = trace_error(
        tmp_path, '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 2}\n' + line + "\n"
    )
    assert isinstance(err, SpecError), err
    assert err.line == 2 and needle in err.problem


def test_trace_times_must_not_go_back(tmp_path: Path) -> None:
    text = (
        '{"arrival_s": 5, "prompt_tokens": 10, "output_tokens": 2}\n'
        '{"arrival_s": 4, "prompt_tokens": 10, "output_tokens": 2}\n'
    )
    err = trace_error(tmp_path, text)
    assert isinstance(err, SpecError) and err.line == 2 and "sort the trace" in (err.fix or "")


def test_an_empty_trace_is_refused(tmp_path: Path) -> None:
    assert "no requests" in str(trace_error(tmp_path, "\n\n"))


def test_the_model_is_frozen_and_strict() -> None:
    data = {
        "requests": 1,
        "arrival": {"process": "constant", "rate": 1},
        "prompt_tokens": {"dist": "fixed", "value": 1},
        "output_tokens": {"dist": "fixed", "value": 1},
        "slo": {"ttft_s": 1, "tpot_s": 1},
    }
    spec = WorkloadSpec.model_validate(data)
    with pytest.raises(ValueError):
        spec.seed = 3  # type: ignore[misc]


def test_a_workload_from_text_names_its_source() -> None:
    wl = parse_workload(GOOD, file="notebook")
    assert wl.file == "notebook" and wl.spec.requests == 10
    with pytest.raises(SpecError) as err:
        parse_workload(GOOD.replace("seed:", "sed:"), file="notebook")
    assert err.value.file == "notebook" and err.value.line == 2


# --- many models --------------------------------------------------------------------------------

MODELS = (
    GOOD
    + """\
models:
  - {name: router, model: llama-3.2-3b, share: 3, output_tokens: {dist: fixed, value: 4}}
  - {model: qwen2.5-7b, decode_batch: 64}
  - {prefill: llama31_8b_prefill, decode: llama31_8b_decode, set: {snapstream.enabled: false}}
residency: {pinned: [router], hbm_bytes: 3.0e+10}
"""
)


def test_a_workload_of_several_models(tmp_path: Path) -> None:
    spec = load_workload(write(tmp_path, MODELS)).spec
    assert spec.model_labels == ["router", "qwen2.5-7b", "llama31_8b_decode"]
    assert spec.models is not None
    assert spec.models[1].decode_overrides() == ["batch=64"]
    assert spec.models[2].overrides() == ["snapstream.enabled=false"]
    assert spec.residency is not None and spec.residency.pinned == ["router"]


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        ("  - {model: qwen2.5-7b, decode_batch: 64}", "  - {share: 1}", "give model:"),
        (
            "  - {model: qwen2.5-7b, decode_batch: 64}",
            "  - {model: qwen2.5-7b, prefill: r1_prefill}",
            "not both",
        ),
        (
            "  - {model: qwen2.5-7b, decode_batch: 64}",
            "  - {prefill: r1_prefill}",
            "give decode:",
        ),
        ("{model: qwen2.5-7b, decode_batch: 64}", "{name: router, model: qwen2.5-7b}", "twice"),
        ("pinned: [router]", "pinned: [routr]", "none of the models"),
        (
            "  mode: colocated\n  policy: prefill-first",
            "  mode: disaggregated",
            "colocated nodes only",
        ),
        ("share: 3,", "share: 0,", "greater than 0"),
    ],
)
def test_rules_of_many_models(tmp_path: Path, old: str, new: str, needle: str) -> None:
    assert old in MODELS
    err = error_of(tmp_path, MODELS.replace(old, new))
    assert needle in err.problem, err.problem


def test_residency_needs_models(tmp_path: Path) -> None:
    err = error_of(tmp_path, GOOD + "residency: {hbm_bytes: 1.0e+10}\n")
    assert "residency applies to a workload that lists models:" in err.problem


def test_every_model_with_its_own_lengths_needs_no_workload_lengths(tmp_path: Path) -> None:
    text = MODELS.replace("prompt_tokens: {dist: fixed, value: 1024}\n", "")
    assert "prompt_tokens" in error_of(tmp_path, text).problem
    own = ", prompt_tokens: {dist: fixed, value: 10}}"
    lines = [line[:-1] + own if line.startswith("  - {") else line for line in text.splitlines()]
    assert load_workload(write(tmp_path, "\n".join(lines) + "\n", "own.yaml")).spec.models


def test_trace_lines_name_their_model(tmp_path: Path) -> None:
    write(
        tmp_path,
        '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 2, "model": "a"}\n'
        '{"arrival_s": 1, "prompt_tokens": 10, "output_tokens": 2, "model": "b"}\n',
        "t.jsonl",
    )
    base = "arrival: {process: trace, file: t.jsonl}\nmodels: [{name: a, model: llama-3.1-8b}"
    wl = load_workload(write(tmp_path, base + ", {name: b, model: qwen2.5-7b}]\n"))
    assert wl.trace is not None and wl.trace.models == ("a", "b")
    err = error_of(tmp_path, base + ", {name: c, model: qwen2.5-7b}]\n")
    assert (err.line, err.key) == (2, "model") and "'b' is not one of" in err.problem


def test_the_coe_workloads_ship(tmp_path: Path) -> None:
    coe = load_workload("coe").spec
    assert len(coe.model_labels) >= 4 and coe.residency and coe.residency.pinned == ["router"]
    resident = load_workload("coe_resident").spec
    assert resident.model_labels == coe.model_labels
