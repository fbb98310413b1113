"""Accepted tokens per step drawn, not averaged: the draws' frequencies and mean against the
truncated geometric distribution worked out by hand (within the binomial spread of a large seeded
sample), the steps a request takes (a brute-force walk over the seed's stream), and the engine's
runs with drawn acceptance (same seed, same run; the draws independent of the deployment)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.serving import acceptance
from rdusim.serving.acceptance import (
    LEAST_DRAWS,
    acceptance_rng,
    draw_accepted,
    drawn_steps,
    sampled_steps,
)
from rdusim.serving.metrics import generated_tokens
from tests.serving.synthetic import colocated, disaggregated, requests, run, shape

SAMPLE = 200_000
SIGMAS = 5.0  # a seeded sample outside 5 standard errors is a defect, not bad luck


def pmf_by_hand(k: int, a: float) -> list[float]:
    """P(1 + j tokens): j drafts kept, then a rejection (a^j (1 - a)); all k kept: a^k."""
    return [a**j * (1.0 - a) for j in range(k)] + [a**k]


@pytest.mark.parametrize(("k", "a"), [(4, 0.8), (2, 0.8), (1, 0.5), (6, 0.3), (3, 0.95)])
def test_draws_follow_the_truncated_geometric_distribution(k: int, a: float) -> None:
    draws = draw_accepted(k, a, np.random.default_rng(12345), SAMPLE)
    assert draws.min() >= 1 and draws.max() <= k + 1
    pmf = pmf_by_hand(k, a)
    for x, p in enumerate(pmf, start=1):
        freq = float(np.mean(draws == x))
        assert abs(freq - p) <= SIGMAS * math.sqrt(p * (1 - p) / SAMPLE), (x, freq, p)
    mean = sum(x * p for x, p in enumerate(pmf, start=1))
    var = sum(x * x * p for x, p in enumerate(pmf, start=1)) - mean**2
    assert abs(float(draws.mean()) - mean) <= SIGMAS * math.sqrt(var / SAMPLE)


def test_the_mean_of_four_drafts_at_eighty_percent_converges_to_3_3616() -> None:
    draws = draw_accepted(4, 0.8, np.random.default_rng(7), SAMPLE)
    assert float(draws.mean()) == pytest.approx(3.3616, abs=0.01)


def test_certain_and_impossible_acceptance() -> None:
    rng = np.random.default_rng(0)
    assert set(draw_accepted(4, 1.0, rng, 100).tolist()) == {5}
    assert set(draw_accepted(4, 0.0, rng, 100).tolist()) == {1}
    assert sampled_steps(100, 4, 1.0, rng) == 20  # ceil(100 / 5)
    assert sampled_steps(100, 4, 0.0, rng) == 100
    assert sampled_steps(0, 4, 0.5, rng) == 0


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5000), st.integers(1, 8), st.floats(0.0, 1.0), st.integers(0, 1 << 20))
def test_steps_lie_between_all_and_none_accepted(tokens: int, k: int, a: float, seed: int) -> None:
    steps = sampled_steps(tokens, k, a, np.random.default_rng(seed))
    assert math.ceil(tokens / (k + 1)) <= steps <= tokens


def test_steps_are_the_first_draw_count_that_reaches_the_tokens() -> None:
    # replay the same stream by hand: cumulative draws, first index reaching the tokens
    rng, replay = np.random.default_rng(99), np.random.default_rng(99)
    steps = sampled_steps(37, 3, 0.7, rng)
    totals = np.cumsum(draw_accepted(3, 0.7, replay, 64))
    assert steps == int(np.argmax(totals >= 37)) + 1


def test_mean_steps_over_many_requests_match_the_expected_rate() -> None:
    # renewal: about tokens / E[X] steps, plus less than one step of overshoot; a request's
    # step count spreads with sd ~ sqrt(tokens Var[X] / E[X]^3)
    tokens, k, a, n = 1000, 4, 0.8, 400
    pmf = pmf_by_hand(k, a)
    mean = sum(x * p for x, p in enumerate(pmf, start=1))
    var = sum(x * x * p for x, p in enumerate(pmf, start=1)) - mean**2
    se = math.sqrt(tokens * var / mean**3 / n)
    steps = drawn_steps([tokens] * n, k, a, seed=3)
    assert tokens / mean - SIGMAS * se <= steps.mean() <= tokens / mean + 1.0 + SIGMAS * se
    assert len(set(steps.tolist())) > 1  # drawn: requests of one length differ


def _walk(draws: np.ndarray, tokens: int) -> int:
    """Brute force: steps until the running sum of `draws` reaches `tokens`."""
    total = 0
    for step, x in enumerate(draws.tolist(), start=1):
        total += x
        if total >= tokens:
            return step
    raise AssertionError("not enough draws")


def test_drawn_steps_walk_the_seed_s_stream_block_by_block() -> None:
    # each request, in order, takes ceil(1.25 tokens / E[X]) + LEAST_DRAWS consecutive draws
    # of the acceptance stream and needs the steps until they reach its tokens
    k, a, seed = 4, 0.8, 11
    tokens = [0, 1, 7, 150, 2, 999, 40]
    got = drawn_steps(tokens, k, a, seed)
    rng, mean = acceptance_rng(seed), 3.3616
    for t, steps in zip(tokens, got.tolist(), strict=True):
        if t == 0:
            assert steps == 0
            continue
        block = draw_accepted(k, a, rng, math.ceil(1.25 * t / mean) + LEAST_DRAWS)
        assert steps == _walk(block, t)


def test_a_block_that_falls_short_draws_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # with no spare draws, 2 draws for 3 tokens fall short whenever both add 1 (1 in 4 at
    # a = 0.5): the request draws on from the same stream
    monkeypatch.setattr(acceptance, "LEAST_DRAWS", 0)
    for seed in range(40):
        steps = drawn_steps([3], 8, 0.5, seed)[0]
        assert steps == _walk(draw_accepted(8, 0.5, acceptance_rng(seed), 64), 3)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 3000), min_size=1, max_size=30),
    st.integers(1, 8),
    st.floats(0.0, 1.0),
    st.integers(0, 1 << 20),
)
def test_drawn_steps_lie_between_all_and_none_accepted(
    tokens: list[int], k: int, a: float, seed: int
) -> None:
    steps = drawn_steps(tokens, k, a, seed)
    for t, n in zip(tokens, steps.tolist(), strict=True):
        assert math.ceil(t / (k + 1)) <= n <= t
    if a == 1.0:
        assert steps.tolist() == [math.ceil(t / (k + 1)) for t in tokens]
    assert drawn_steps(tokens, k, a, seed).tolist() == steps.tolist()  # same seed, same steps


def test_chunks_do_not_change_the_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = [500, 20, 3000, 1, 77] * 20
    whole = drawn_steps(tokens, 2, 0.8, 5)
    monkeypatch.setattr(acceptance, "CHUNK_DRAWS", 100)  # a chunk per request or so
    assert drawn_steps(tokens, 2, 0.8, 5).tolist() == whole.tolist()


# ---------------------------------------------------------------------------------------------
# the engine


def _drafting(**kw: object):
    return shape(4, tokens_per_step=3.3616, draft_tokens=4, acceptance=0.8, **kw)


def test_the_engine_takes_each_request_s_drawn_steps() -> None:
    reqs = requests(*[(0.1 * i, 10, 200 + i) for i in range(12)])
    result = run(reqs, _drafting(), colocated(seed=5))
    drawn = drawn_steps([199 + i for i in range(12)], 4, 0.8, 5)
    assert [r.steps for r in result.records] == drawn.tolist()
    assert len({r.steps for r in result.records}) > 1
    assert sum(generated_tokens(r, 3.3616) for r in result.records) == sum(
        200 + i for i in range(12)
    )


def test_same_seed_same_run_another_seed_other_draws() -> None:
    reqs = requests(*[(0.05 * i, 10, 300) for i in range(20)])
    first = run(reqs, _drafting(), colocated(seed=1))
    again = run(reqs, _drafting(), colocated(seed=1))
    other = run(reqs, _drafting(), colocated(seed=2))
    assert [r.steps for r in first.records] == [r.steps for r in again.records]
    assert [r.last_token_s for r in first.records] == [r.last_token_s for r in again.records]
    assert [r.steps for r in first.records] != [r.steps for r in other.records]


def test_the_draws_do_not_depend_on_the_deployment() -> None:
    # common random numbers: the same requests draw the same steps however they are served
    reqs = requests(*[(0.05 * i, 10, 300) for i in range(10)])
    a = run(reqs, _drafting(), colocated(seed=4))
    b = run(reqs, _drafting(), disaggregated(decode_nodes=2, seed=4))
    assert [r.steps for r in a.records] == [r.steps for r in b.records]


def test_a_reported_factor_is_not_drawn() -> None:
    # tokens_per_step without drafts (mtp mode scaled): ceil((output - 1) / 2.4) for everyone
    graph = shape(4, tokens_per_step=2.4)
    result = run(requests(*[(0.0, 10, 101)] * 4), graph, colocated(seed=5))
    assert {r.steps for r in result.records} == {math.ceil(100 / 2.4)}


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 8),
    st.one_of(st.floats(0.0, 1.0), st.sampled_from([1 / 3, 2 / 3, 0.6666666666666667, 0.8])),
    st.integers(0, 1 << 30),
    st.integers(0, 3000),
)
def test_draws_are_numpy_s_geometric_truncated(k: int, a: float, seed: int, size: int) -> None:
    # the thresholds on one uniform or exponential give what numpy's geometric(1 - a) gives,
    # cut at k + 1, and leave the stream where it leaves it
    rng, reference = np.random.default_rng(seed), np.random.default_rng(seed)
    got = draw_accepted(k, a, rng, size)
    if 0.0 < a < 1.0:
        want = np.minimum(reference.geometric(1.0 - a, size), k + 1)
    else:
        want = np.full(size, k + 1 if a >= 1.0 else 1)
    assert got.dtype == np.int64 and got.tolist() == want.tolist()
    assert rng.random() == reference.random()
