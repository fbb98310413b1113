"""MoE routing statistics against oracles written here: closed forms, exact enumeration, Monte Carlo.

Two routing processes serve as ground truth. "k-subset" routing is the real one: every token
picks top_k distinct experts (uniformly here). "Independent picks" sends each token to expert i
with probability pi_i independently; it is the only process fixed by the marginals alone, and
the one the per-block statistics assume, so against it they must agree to sampling error.
Against k-subset routing they are approximations, with the bias measured and bounded below.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.signal import fftconvolve
from scipy.stats import binom

from rdusim.compiler.routing import (
    RoutingModel,
    expected_experts_touched,
    expected_max_experts_touched,
    expected_max_token_slots,
    routing_from_loads,
    uniform_routing,
    zipf_routing,
)
from tests.compiler.oracles import capped_inclusion as oracle_capped

E, K, G = 256, 8, 16  # DeepSeek-R1: 256 routed experts, 8 per token, EP over 16 sockets
# Monte Carlo acceptance: |model - sample mean| <= Z_TOL standard errors (+ a stated bias).
# With about 40 comparisons in the file, 4.5 SE keeps a false failure below 1e-4 (and the
# seeds are fixed, so a pass is reproducible).
Z_TOL = 4.5


# --------------------------------------------------------------------------------------------
# Oracles


def uniform_touched(experts: int, top_k: int, tokens: float) -> float:
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def block_stats(counts: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per trial: experts touched, touched in the busiest block, slots in the busiest block."""
    trials = counts.shape[0]
    blocks = counts.reshape(trials, groups, -1)
    touched = (blocks > 0).sum(axis=2)
    return touched.sum(axis=1), touched.max(axis=1), blocks.sum(axis=2).max(axis=1)


def subset_counts(
    rng: np.random.Generator, trials: int, tokens: int, experts: int, top_k: int
) -> np.ndarray:
    """Tokens per expert when every token picks a uniformly random top_k-subset of experts."""
    counts = np.zeros((trials, experts), dtype=np.int64)
    rows = max(1, 4_000_000 // (tokens * experts))
    for first in range(0, trials, rows):
        chunk = min(rows, trials - first)
        keys = rng.random((chunk, tokens, experts))
        picks = np.argpartition(keys, top_k - 1, axis=2)[:, :, :top_k]
        hit = np.zeros_like(keys, dtype=bool)
        np.put_along_axis(hit, picks, True, axis=2)
        counts[first : first + chunk] = hit.sum(axis=1)
    return counts


def bernoulli_counts(
    rng: np.random.Generator, trials: int, tokens: int, pi: np.ndarray
) -> np.ndarray:
    """Tokens per expert under independent picks, token by token (Bernoulli(pi_i) each)."""
    return (rng.random((trials, tokens, pi.size)) < pi).sum(axis=1)


def assert_mc(value: float, samples: np.ndarray, rel_bias: float = 0.0) -> None:
    """Agreement within Z_TOL standard errors of the sample mean, plus an allowed relative bias."""
    mean = float(samples.mean())
    se = float(samples.std(ddof=1)) / math.sqrt(samples.size)
    assert abs(value - mean) <= Z_TOL * se + rel_bias * abs(mean) + 1e-9, (value, mean, se)


def enumerate_subsets(experts: int, top_k: int, tokens: int, groups: int) -> tuple[float, ...]:
    """Exact expectations over every sequence of uniform top_k-subsets (k-subset routing)."""
    subsets = list(itertools.combinations(range(experts), top_k))
    totals = np.zeros(3)
    for choice in itertools.product(subsets, repeat=tokens):
        counts = np.zeros((1, experts))
        for subset in choice:
            counts[0, list(subset)] += 1
        totals += [float(s[0]) for s in block_stats(counts, groups)]
    return tuple(totals / len(subsets) ** tokens)


def enumerate_independent(pi: list[float], tokens: int, groups: int) -> tuple[float, ...]:
    """Exact expectations over every pick pattern of independent picks, weighted by probability."""
    patterns = list(itertools.product((0, 1), repeat=len(pi)))
    weights = [
        math.prod(p if bit else 1 - p for p, bit in zip(pi, pat, strict=True)) for pat in patterns
    ]
    totals = np.zeros(3)
    for choice in itertools.product(range(len(patterns)), repeat=tokens):
        counts = np.sum([patterns[c] for c in choice], axis=0, dtype=float)[None, :]
        weight = math.prod(weights[c] for c in choice)
        totals += weight * np.array([float(s[0]) for s in block_stats(counts, groups)])
    return tuple(totals)


def oracle_max_binomials(pi: np.ndarray, tokens: int) -> float:
    """E[max_i B_i], B_i ~ Binomial(tokens, pi_i) independent: a one-expert-per-block split."""
    x = np.arange(tokens + 1)
    cdf = np.array([binom.cdf(x, tokens, p) for p in pi])
    return float((1.0 - np.prod(cdf[:, :-1], axis=0)).sum())


def oracle_max_block_slots(pi: np.ndarray, tokens: int, groups: int) -> float:
    """E[max block slots] by convolving each block's per-expert binomial PMFs."""
    cdfs = []
    for block in pi.reshape(groups, -1):
        pmf = np.array([1.0])
        for p in block:
            pmf = fftconvolve(pmf, binom.pmf(np.arange(tokens + 1), tokens, p))
        cdfs.append(np.cumsum(pmf))
    cdf = np.array(cdfs)
    return float((1.0 - np.prod(np.minimum(cdf[:, :-1], 1.0), axis=0)).sum())


# --------------------------------------------------------------------------------------------
# Routing models


def test_uniform_routing_inclusion_is_k_over_e():
    model = uniform_routing(E, K)
    assert model.experts == E and model.top_k == K
    assert all(p == K / E for p in model.inclusion)
    assert math.fsum(model.inclusion) == pytest.approx(K, abs=1e-12)


@pytest.mark.parametrize("exponent", [0.0, 0.3, 0.8, 1.2, 2.0, 4.0])
def test_zipf_routing_matches_bisection(exponent):
    model = zipf_routing(E, K, exponent)
    expected = oracle_capped([(i + 1) ** -exponent for i in range(E)], K)
    assert model.inclusion == pytest.approx(expected, abs=1e-9)
    assert math.fsum(model.inclusion) == pytest.approx(K, abs=1e-9)
    assert all(0.0 <= p <= 1.0 for p in model.inclusion)
    assert all(a >= b for a, b in itertools.pairwise(model.inclusion))  # expert 0 hottest


def test_zipf_exponent_zero_is_uniform():
    assert zipf_routing(E, K, 0.0).inclusion == pytest.approx(uniform_routing(E, K).inclusion)


def test_zipf_hot_experts_hit_the_cap():
    mild = zipf_routing(E, K, 0.3)
    assert max(mild.inclusion) < 1.0
    steep = zipf_routing(E, K, 3.0)
    capped = [p for p in steep.inclusion if p == 1.0]
    assert steep.inclusion[0] == 1.0 and 1 <= len(capped) < K
    assert math.fsum(steep.inclusion) == pytest.approx(K, abs=1e-9)
    # so steep that only top_k experts ever receive tokens (popularities far below 1e-308)
    for exponent in (400.0, 1e6):
        extreme = zipf_routing(E, K, exponent)
        assert extreme.inclusion[:K] == pytest.approx([1.0] * K, abs=1e-12)
        assert sum(extreme.inclusion[K:]) == pytest.approx(0.0, abs=1e-12)


def test_routing_from_loads_matches_bisection():
    rng = np.random.default_rng(7)
    loads = rng.gamma(0.5, size=E) * 1000.0
    loads[:5] = 0.0
    model = routing_from_loads(loads.tolist(), K)
    assert model.inclusion == pytest.approx(oracle_capped(loads.tolist(), K), abs=1e-9)
    assert model.inclusion[:5] == (0.0,) * 5
    assert math.fsum(model.inclusion) == pytest.approx(K, abs=1e-9)


def test_routing_from_loads_is_scale_free_and_proportional_below_the_cap():
    counts = [float(c) for c in range(1, 65)]
    by_count = routing_from_loads(counts, 4)
    by_fraction = routing_from_loads(np.array(counts) / sum(counts), 4)
    assert by_count.inclusion == pytest.approx(by_fraction.inclusion, abs=1e-12)
    assert by_count.inclusion == pytest.approx([4 * c / sum(counts) for c in counts])
    assert routing_from_loads([3.0] * 32, 2).inclusion == pytest.approx(
        uniform_routing(32, 2).inclusion
    )


def test_routing_from_loads_exactly_top_k_positive():
    model = routing_from_loads([0, 5, 0, 1, 0, 0], 2)
    assert model.inclusion == (0.0, 1.0, 0.0, 1.0, 0.0, 0.0)


# --------------------------------------------------------------------------------------------
# Expected experts touched: closed forms


@pytest.mark.parametrize("tokens", [0, 0.5, 1, 2, 7, 16, 48, 100, 1000, 131072])
def test_uniform_touched_closed_form(tokens):
    got = expected_experts_touched(uniform_routing(E, K), tokens)
    assert got == pytest.approx(uniform_touched(E, K, tokens), rel=1e-12, abs=1e-12)


def test_uniform_touched_reference_values():
    model = uniform_routing(E, K)
    assert expected_experts_touched(model, 1) == pytest.approx(8.0, abs=1e-12)
    assert expected_experts_touched(model, 16) == pytest.approx(101.962162, abs=1e-5)
    assert expected_experts_touched(model, 48) == pytest.approx(200.229786, abs=1e-5)
    assert expected_experts_touched(model, 0) == 0.0


def test_touched_with_certain_experts():
    model = RoutingModel((1.0, 1.0, 0.0, 0.0), 2)
    assert expected_experts_touched(model, 1) == 2.0
    assert expected_experts_touched(model, 1e6) == 2.0


def test_one_group_is_the_whole_layer():
    model = zipf_routing(64, 6, 1.1)
    for tokens in (1, 3.5, 40, 5000):
        touched = expected_experts_touched(model, tokens)
        assert expected_max_experts_touched(model, tokens, 1) == pytest.approx(touched)
        assert expected_max_token_slots(model, tokens, 1) == pytest.approx(6 * tokens)


def test_one_token_busiest_block_touched_equals_slots():
    """One token touches exactly the experts it occupies, so both maxima coincide."""
    for model in (uniform_routing(E, K), zipf_routing(E, K, 0.9)):
        assert expected_max_token_slots(model, 1, G) == pytest.approx(
            expected_max_experts_touched(model, 1, G), abs=1e-9
        )


# --------------------------------------------------------------------------------------------
# Exact enumeration (E=4, k=2, 2 groups)


@pytest.mark.parametrize("tokens", [1, 2, 3])
def test_enumeration_independent_picks_is_exact(tokens):
    """Under independent picks every function is exact: all 16^n pick patterns, weighted."""
    pi = [0.9, 0.6, 0.3, 0.2]
    model = RoutingModel(tuple(pi), 2)
    touched, max_touched, max_slots = enumerate_independent(pi, tokens, 2)
    assert expected_experts_touched(model, tokens) == pytest.approx(touched, abs=1e-12)
    assert expected_max_experts_touched(model, tokens, 2) == pytest.approx(max_touched, abs=1e-12)
    assert expected_max_token_slots(model, tokens, 2) == pytest.approx(max_slots, abs=1e-12)


# k-subset routing: model minus truth for (max touched, max slots), from the full enumeration
# n=1: (+3.1%, +3.1%), n=2: (-4.5%, -0.3%), n=3: (-1.9%, -1.2%). Two blocks of two experts is
# the least favourable case for treating picks as independent; 256 experts are within 2.1%.
SUBSET_BIAS_TINY = 0.05


@pytest.mark.parametrize("tokens", [1, 2, 3])
def test_enumeration_k_subsets(tokens):
    model = uniform_routing(4, 2)
    touched, max_touched, max_slots = enumerate_subsets(4, 2, tokens, 2)
    assert expected_experts_touched(model, tokens) == pytest.approx(touched, abs=1e-12)
    assert expected_max_experts_touched(model, tokens, 2) == pytest.approx(
        max_touched, rel=SUBSET_BIAS_TINY
    )
    assert expected_max_token_slots(model, tokens, 2) == pytest.approx(
        max_slots, rel=SUBSET_BIAS_TINY
    )


# --------------------------------------------------------------------------------------------
# Monte Carlo


# Uniform k-subset routing over 256 experts in 16 blocks, model minus truth measured with 20,000
# trials: -2.0% at one token (1.975 vs 2.016 +- 0.004), -0.3% at 4, under 0.2% from 16 tokens on
# (a token's count on a block is hypergeometric, not Poisson-binomial).
SUBSET_BIAS = {1: 0.025, 4: 0.006, 16: 0.004}


@pytest.mark.parametrize("tokens", [1, 4, 16])
def test_monte_carlo_uniform_k_subsets(tokens):
    rng = np.random.default_rng(2024 + tokens)
    counts = subset_counts(rng, 4000, tokens, E, K)
    touched, max_touched, max_slots = block_stats(counts, G)
    model = uniform_routing(E, K)
    assert_mc(expected_experts_touched(model, tokens), touched)  # exact for any routing
    bias = SUBSET_BIAS[tokens]
    assert_mc(expected_max_experts_touched(model, tokens, G), max_touched, bias)
    assert_mc(expected_max_token_slots(model, tokens, G), max_slots, bias)


@pytest.mark.parametrize(("exponent", "tokens"), [(0.5, 1), (0.5, 16), (1.0, 4), (1.0, 64)])
def test_monte_carlo_skewed_independent_picks(exponent, tokens):
    """Skewed marginals: drawing top_k *without replacement* in proportion to popularity does
    not reproduce pi_i, so tokens pick each expert independently with probability pi_i. Expected
    touched holds for any routing with these marginals; the per-block maxima are exact for
    this process (touched and slot counts of different experts are then independent)."""
    model = zipf_routing(E, K, exponent)
    rng = np.random.default_rng(int(100 * exponent) + tokens)
    counts = bernoulli_counts(rng, 20_000 // tokens + 2000, tokens, model.probabilities)
    touched, max_touched, max_slots = block_stats(counts, G)
    assert_mc(expected_experts_touched(model, tokens), touched)
    assert_mc(expected_max_experts_touched(model, tokens, G), max_touched)
    assert_mc(expected_max_token_slots(model, tokens, G), max_slots)


@pytest.mark.parametrize(
    ("model", "tokens"),
    [
        (uniform_routing(E, K), 4096),
        (uniform_routing(E, K), 131072),
        (zipf_routing(E, K, 0.5), 100_000),
        (zipf_routing(E, K, 1.2), 1_000_000),
    ],
    ids=["uniform-4k", "uniform-128k", "zipf0.5-100k", "zipf1.2-1M"],
)
def test_monte_carlo_prefill_sized_steps(model, tokens):
    """Large steps (the normal series beyond ~13k tokens) against independent picks, drawn as
    per-expert token counts: n independent Bernoulli(pi_i) picks sum to Binomial(n, pi_i)."""
    rng = np.random.default_rng(tokens)
    counts = rng.binomial(tokens, model.probabilities, size=(20_000, E))
    touched, max_touched, max_slots = block_stats(counts, G)
    assert_mc(expected_experts_touched(model, tokens), touched)
    assert_mc(expected_max_experts_touched(model, tokens, G), max_touched)
    assert_mc(expected_max_token_slots(model, tokens, G), max_slots)


# --------------------------------------------------------------------------------------------
# Busiest-block slots against exact distributions, both computation paths


@pytest.mark.parametrize("tokens", [1, 2, 17, 300, 2500, 20_000, 60_000])
@pytest.mark.parametrize("exponent", [0.0, 1.0])
def test_max_slots_single_expert_blocks_vs_binomials(exponent, tokens):
    """One expert per block: a block's slots are exactly Binomial(n, pi_i)."""
    model = zipf_routing(64, 4, exponent)
    expected = oracle_max_binomials(model.probabilities, tokens)
    got = expected_max_token_slots(model, tokens, 64)
    assert got == pytest.approx(expected, rel=1e-9, abs=0.01)


@pytest.mark.parametrize("tokens", [1, 5, 64, 900, 6000, 20_000])
def test_max_slots_two_expert_blocks_vs_convolution(tokens):
    model = zipf_routing(32, 4, 0.7)
    expected = oracle_max_block_slots(model.probabilities, tokens, 16)
    got = expected_max_token_slots(model, tokens, 16)
    assert got == pytest.approx(expected, rel=1e-9, abs=0.01)


def test_max_touched_vs_poisson_binomial_by_recursion():
    """The busiest block's touched count, from a direct O(b^2) recursion per block."""
    model = zipf_routing(E, K, 0.8)
    for tokens in (1, 7, 60):
        q = [1.0 - (1.0 - p) ** tokens for p in model.inclusion]
        cdfs = []
        for j in range(G):
            pmf = [1.0]
            for p in q[j * 16 : (j + 1) * 16]:
                pmf = [
                    (pmf[x] if x < len(pmf) else 0.0) * (1 - p) + (pmf[x - 1] * p if x else 0.0)
                    for x in range(len(pmf) + 1)
                ]
            cdfs.append(list(itertools.accumulate(pmf)))
        expected = sum(1.0 - math.prod(cdf[x] for cdf in cdfs) for x in range(16))
        got = expected_max_experts_touched(model, tokens, G)
        assert got == pytest.approx(expected, abs=1e-9)


def test_fractional_tokens_interpolate_slots():
    model = uniform_routing(E, K)
    lo, hi = expected_max_token_slots(model, 3, G), expected_max_token_slots(model, 4, G)
    assert expected_max_token_slots(model, 3.25, G) == pytest.approx(lo + 0.25 * (hi - lo))
    assert expected_max_token_slots(model, 0.5, G) == pytest.approx(
        0.5 * expected_max_token_slots(model, 1, G)
    )


def test_max_slots_is_smooth_across_the_exact_to_normal_hand_over():
    """Token by token over the range where the exact convolution hands over to the normal series
    (near 7,150 tokens here): every extra token adds the hottest block's mean, ~0.5 slot."""
    model = uniform_routing(E, K)
    values = [expected_max_token_slots(model, n, G) for n in range(6500, 7800)]
    steps = np.diff(values)
    assert steps.min() > 0.49 and steps.max() < 0.52


# --------------------------------------------------------------------------------------------
# Properties


@st.composite
def routed(draw: st.DrawFn) -> tuple[RoutingModel, int]:
    groups = draw(st.sampled_from([1, 2, 4, 8, 16]))
    experts = groups * draw(st.integers(1, 16))
    top_k = draw(st.integers(1, min(experts, 8)))
    kind = draw(st.sampled_from(["uniform", "zipf", "loads"]))
    if kind == "uniform":
        return uniform_routing(experts, top_k), groups
    if kind == "zipf":
        return zipf_routing(experts, top_k, draw(st.floats(0.0, 4.0))), groups
    loads = draw(
        st.lists(st.floats(0.0, 1e4), min_size=experts, max_size=experts).filter(
            lambda xs: sum(x > 0 for x in xs) >= top_k
        )
    )
    return routing_from_loads(loads, top_k), groups


token_counts = st.one_of(st.integers(0, 3000), st.floats(0.0, 1e6))
FUNCTIONS: list[Callable[[RoutingModel, float, int], float]] = [
    lambda m, n, g: expected_experts_touched(m, n),
    expected_max_experts_touched,
    expected_max_token_slots,
]


@settings(max_examples=80, deadline=None)
@given(routed(), token_counts, token_counts)
def test_monotone_in_tokens(case, a, b):
    model, groups = case
    lo, hi = sorted((a, b))
    for f in FUNCTIONS:
        assert f(model, hi, groups) >= f(model, lo, groups) - 1e-9 * max(1.0, hi)


@settings(max_examples=80, deadline=None)
@given(routed(), token_counts)
def test_bounds(case, tokens):
    model, groups = case
    experts, k, block = model.experts, model.top_k, model.experts // groups
    touched = expected_experts_touched(model, tokens)
    max_touched = expected_max_experts_touched(model, tokens, groups)
    max_slots = expected_max_token_slots(model, tokens, groups)
    tol = 1e-9 * max(1.0, tokens * k)
    assert -tol <= touched <= experts + tol
    if tokens >= 1 or tokens == 0:  # 1 - (1-pi)^n > n pi for a fraction of one token
        assert touched <= tokens * k + tol
    assert touched / groups - tol <= max_touched <= block + tol
    assert max_slots >= tokens * k / groups - tol
    assert max_slots <= tokens * min(k, block) + tol
    if float(tokens).is_integer():  # a touched expert holds at least one slot
        assert max_slots >= max_touched - tol


# --------------------------------------------------------------------------------------------
# Input errors


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: uniform_routing(8, 9), "exceeds"),
        (lambda: uniform_routing(0, 1), "experts must be >= 1"),
        (lambda: uniform_routing(8, 0), "top_k must be >= 1"),
        (lambda: uniform_routing(8.5, 2), "must be an integer"),
        (lambda: zipf_routing(8, 2, -0.1), "exponent must be >= 0"),
        (lambda: zipf_routing(8, 2, math.nan), "finite"),
        (lambda: zipf_routing(8, 2, math.inf), "finite"),
        (lambda: routing_from_loads([1.0, -1.0, 2.0], 1), "non-negative"),
        (lambda: routing_from_loads([1.0, math.nan, 2.0], 1), "finite"),
        (lambda: routing_from_loads([1.0, 0.0, 0.0], 2), "positive load"),
        (lambda: routing_from_loads([1.0, 2.0], 3), "exceeds"),
        (lambda: routing_from_loads([], 1), "non-empty"),
        (lambda: routing_from_loads([[1.0, 2.0]], 1), "1-D"),
        (lambda: RoutingModel((0.5, 0.5, 0.5), 2), "sum to"),
        (lambda: RoutingModel((1.5, 0.5, 0.0), 2), r"\[0, 1\]"),
        (lambda: RoutingModel((-0.5, 1.0, 1.0, 0.5), 2), r"\[0, 1\]"),
        (lambda: RoutingModel((math.inf, 1.0), 1), "finite"),
        (lambda: RoutingModel((1.0,), 2), "exceeds"),
        (lambda: expected_experts_touched(uniform_routing(8, 2), -1), "tokens must be >= 0"),
        (lambda: expected_experts_touched(uniform_routing(8, 2), math.nan), "finite"),
        (lambda: expected_max_experts_touched(uniform_routing(8, 2), 1, 3), "equal groups"),
        (lambda: expected_max_token_slots(uniform_routing(8, 2), 1, 0), "groups must be >= 1"),
        (lambda: expected_max_token_slots(uniform_routing(8, 2), math.inf, 2), "finite"),
    ],
)
def test_input_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_the_fft_length_is_the_next_five_smooth_number():
    """What scipy.fft.next_fast_len gives for real input, found by brute force here."""
    from scipy.fft import next_fast_len as scipys

    from rdusim.compiler.routing import next_fast_len

    def smooth(n: int) -> bool:
        for p in (2, 3, 5):
            while n % p == 0:
                n //= p
        return n == 1

    for target in [*range(1, 3000), 65537, 123457, 1_000_001]:
        want = next(m for m in itertools.count(target) if smooth(m))
        assert next_fast_len(target) == want == scipys(target, real=True), target
