"""Requests drawn from a workload spec: each arrival process and length distribution, the seed's
independent streams, and traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rdusim.serving.arrivals import ARRIVALS, LENGTHS, Requests, request_columns, requests_of
from rdusim.spec.workload import ArrivalProcess, LengthDist, load_workload


def workload(tmp_path: Path, text: str, name: str = "w.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return load_workload(path)


BASE = """
requests: {n}
seed: {seed}
arrival: {arrival}
prompt_tokens: {prompt}
output_tokens: {{dist: fixed, value: 7}}
slo: {{ttft_s: 1, tpot_s: 1}}
"""


def spec_text(
    n: int = 5000,
    seed: int = 0,
    arrival: str = "{process: poisson, rate: 2.0}",
    prompt: str = "{dist: fixed, value: 100}",
) -> str:
    return BASE.format(n=n, seed=seed, arrival=arrival, prompt=prompt)


def test_every_process_and_distribution_has_a_sampler() -> None:
    assert set(ARRIVALS) | {ArrivalProcess.TRACE} == set(ArrivalProcess)
    assert set(LENGTHS) == set(LengthDist)


def test_poisson_gaps_have_mean_one_over_rate(tmp_path: Path) -> None:
    reqs = requests_of(workload(tmp_path, spec_text(n=20_000)))
    times = np.array([r.arrival_s for r in reqs])
    gaps = np.diff(np.concatenate([[0.0], times]))
    assert gaps.mean() == pytest.approx(0.5, rel=0.03)
    assert gaps.std() == pytest.approx(0.5, rel=0.05)  # exponential: sd = mean
    assert (gaps >= 0).all() and [r.id for r in reqs] == list(range(20_000))


def test_constant_arrivals_are_evenly_spaced(tmp_path: Path) -> None:
    wl = workload(tmp_path, spec_text(n=4, arrival="{process: constant, rate: 4}"))
    assert [r.arrival_s for r in requests_of(wl)] == [0.0, 0.25, 0.5, 0.75]


def test_duration_keeps_the_arrivals_inside_the_window(tmp_path: Path) -> None:
    text = spec_text(arrival="{process: poisson, rate: 5}").replace(
        "requests: 5000", "duration_s: 2000"
    )
    reqs = requests_of(workload(tmp_path, text))
    assert all(r.arrival_s < 2000 for r in reqs)
    assert len(reqs) == pytest.approx(10_000, rel=0.05)
    constant = text.replace("poisson, rate: 5", "constant, rate: 2").replace("2000", "3")
    assert [r.arrival_s for r in requests_of(workload(tmp_path, constant, "c.yaml"))] == [
        0.0,
        0.5,
        1.0,
        1.5,
        2.0,
        2.5,
    ]


def test_uniform_lengths_cover_both_ends(tmp_path: Path) -> None:
    wl = workload(tmp_path, spec_text(prompt="{dist: uniform, low: 3, high: 6}"))
    prompts = [r.prompt_tokens for r in requests_of(wl)]
    assert set(prompts) == {3, 4, 5, 6}
    assert np.mean(prompts) == pytest.approx(4.5, rel=0.03)


def test_lognormal_lengths_have_their_median_and_are_clipped(tmp_path: Path) -> None:
    wl = workload(
        tmp_path,
        spec_text(n=20_000, prompt="{dist: lognormal, median: 1000, sigma: 1.0, max: 5000}"),
    )
    prompts = np.array([r.prompt_tokens for r in requests_of(wl)])
    assert np.median(prompts) == pytest.approx(1000, rel=0.05)
    assert prompts.max() == 5000 and prompts.min() >= 1
    # P(X > 5000) = P(Z > ln 5 / 1) = 0.0535 of the draws land on the clip
    assert (prompts == 5000).mean() == pytest.approx(0.0535, abs=0.01)


def test_same_seed_same_requests_and_rate_leaves_lengths_alone(tmp_path: Path) -> None:
    wl = workload(tmp_path, spec_text(n=50, prompt="{dist: uniform, low: 1, high: 1000}"))
    a, b = requests_of(wl), requests_of(wl)
    assert a == b
    faster = requests_of(wl, rate=20.0)
    assert [r.prompt_tokens for r in faster] == [r.prompt_tokens for r in a]
    assert [r.arrival_s for r in faster] != [r.arrival_s for r in a]
    other = requests_of(
        workload(
            tmp_path,
            spec_text(n=50, seed=1, prompt="{dist: uniform, low: 1, high: 1000}"),
            "o.yaml",
        )
    )
    assert [r.prompt_tokens for r in other] != [r.prompt_tokens for r in a]


def test_trace_requests_in_file_order_cut_by_requests(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text(
        '{"arrival_s": 0.5, "prompt_tokens": 10, "output_tokens": 2}\n\n'
        '{"arrival_s": 1.5, "prompt_tokens": 20, "output_tokens": 3}\n'
        '{"arrival_s": 1.5, "prompt_tokens": 30, "output_tokens": 4}\n',
        encoding="utf-8",
    )
    text = "arrival: {process: trace, file: t.jsonl}\nslo: {ttft_s: 1, tpot_s: 1}\n"
    reqs = requests_of(workload(tmp_path, text))
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in reqs] == [
        (0.5, 10, 2),
        (1.5, 20, 3),
        (1.5, 30, 4),
    ]
    assert len(requests_of(workload(tmp_path, text + "requests: 2\n", "two.yaml"))) == 2
    assert len(requests_of(workload(tmp_path, text + "duration_s: 1.5\n", "d.yaml"))) == 1


def test_the_columns_are_the_requests(tmp_path: Path) -> None:
    wl = workload(tmp_path, spec_text(n=50, prompt="{dist: uniform, low: 10, high: 90}"))
    columns = request_columns(wl)
    objects = requests_of(wl)
    assert len(columns) == 50 and columns.objects() == objects
    assert [columns.request(i) for i in range(50)] == objects
    assert all(type(v) is float for v in (objects[0].arrival_s, columns.request(0).arrival_s))
    short = columns.where(columns.prompt_tokens < 50)
    assert short.objects() == [r for r in objects if r.prompt_tokens < 50]
    assert Requests.of(objects).objects() == objects
