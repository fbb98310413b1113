"""Expected-value statistics of mixture-of-experts routing in one step.

Each of n tokens sends itself to `top_k` distinct experts out of E. A step streams the weights of
every expert that received at least one token, and under expert parallelism (E/d contiguous
experts per socket) the busiest socket sets the pace. These functions give the expected number
of experts touched, the expected touched count and the expected token-slot count of the busiest
block, for a routing distribution described by each expert's marginal inclusion probability.

Only marginals are known (a measured load histogram or a Zipf fit), so the per-block statistics
assume independent picks: expert i receives a given token with probability pi_i, independently
of the other experts and tokens. Expected experts touched needs no such assumption.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "EXACT_FFT_POINTS",
    "RoutingModel",
    "expected_experts_touched",
    "expected_max_experts_touched",
    "expected_max_token_slots",
    "routing_from_loads",
    "uniform_routing",
    "zipf_routing",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
ComplexArray = NDArray[np.complex128]

# FFT points (groups x window length) up to which the busiest block's slot count is convolved
# exactly; larger steps use the Edgeworth-corrected normal. The window grows with the standard
# deviation of a block's slots (~sqrt(tokens)), so this caps the exact path at ~0.4 ms; at the
# hand-over the normal series agrees with it to within 0.01 slot (measured, E=8..256, k=1..8).
EXACT_FFT_POINTS = 1 << 14
# Normal approximation: integrate E[max] over mean +- this many standard deviations, on this grid.
_NORMAL_SPAN_SIGMAS = 10.0
_NORMAL_GRID_POINTS = 1025
# Slack on sum(inclusion) == top_k for models built by hand from rounded numbers.
_SUM_TOLERANCE = 1e-6
# Characteristic-function values below this are zero for a PMF read to ~1e-15.
_NEGLIGIBLE = 1e-18
_SQRT_2PI = math.sqrt(2.0 * math.pi)


@dataclass(frozen=True)
class RoutingModel:
    """Marginal probability that one token picks each expert (sums to top_k, each in [0, 1]).

    Marginals are all that a load histogram or a popularity fit determine, and all that the
    expected number of experts touched depends on.
    """

    inclusion: tuple[float, ...]
    top_k: int

    def __post_init__(self) -> None:
        probs = _finite_vector(self.inclusion, "inclusion")
        top_k = _positive_int(self.top_k, "top_k")
        if top_k > probs.size:
            raise ValueError(f"top_k ({top_k}) exceeds the number of experts ({probs.size})")
        if probs.min() < 0.0 or probs.max() > 1.0:
            raise ValueError("inclusion probabilities must lie in [0, 1]")
        if abs(float(probs.sum()) - top_k) > _SUM_TOLERANCE * top_k:
            raise ValueError(f"inclusion probabilities sum to {probs.sum():.9g}, not top_k={top_k}")
        object.__setattr__(self, "inclusion", tuple(float(p) for p in probs))
        object.__setattr__(self, "top_k", top_k)

    @property
    def experts(self) -> int:
        """Number of experts E."""
        return len(self.inclusion)

    @cached_property
    def probabilities(self) -> FloatArray:
        """The inclusion probabilities as a read-only array (built once, reused by every call)."""
        arr = np.array(self.inclusion, dtype=np.float64)
        arr.setflags(write=False)
        return arr


# --------------------------------------------------------------------------------------------
# Building routing models


def uniform_routing(experts: int, top_k: int) -> RoutingModel:
    """Every expert equally likely: pi_i = top_k / E (a perfectly balanced router)."""
    experts = _positive_int(experts, "experts")
    top_k = _positive_int(top_k, "top_k")
    _check_top_k(top_k, experts)
    return RoutingModel((top_k / experts,) * experts, top_k)


def zipf_routing(experts: int, top_k: int, exponent: float) -> RoutingModel:
    """Skewed popularity p_i ∝ (i+1)^-exponent, expert 0 the hottest; exponent 0 is uniform.

    A token cannot pick one expert twice, so inclusion is popularity scaled up and capped at 1:
    pi_i = min(1, c p_i), with c chosen so that the pi_i sum to top_k.
    """
    experts = _positive_int(experts, "experts")
    top_k = _positive_int(top_k, "top_k")
    _check_top_k(top_k, experts)
    exponent = _finite_scalar(exponent, "exponent")
    if exponent < 0:
        raise ValueError(f"exponent must be >= 0, got {exponent}")
    log_popularity = -exponent * np.log(np.arange(1, experts + 1, dtype=np.float64))
    return RoutingModel(tuple(_capped_proportional(log_popularity, top_k)), top_k)


def routing_from_loads(loads: Sequence[float] | FloatArray, top_k: int) -> RoutingModel:
    """Inclusion from a measured per-expert load histogram (counts or fractions, any scale).

    Loads are scaled to sum to top_k and capped at 1 the same way as `zipf_routing`; at least
    top_k experts need a positive load, since a token picks top_k distinct experts.
    """
    weights = _finite_vector(loads, "loads")
    top_k = _positive_int(top_k, "top_k")
    _check_top_k(top_k, weights.size)
    if weights.min() < 0:
        raise ValueError("loads must be non-negative")
    positive = int(np.count_nonzero(weights))
    if positive < top_k:
        raise ValueError(f"only {positive} experts have a positive load; top_k={top_k} needs more")
    with np.errstate(divide="ignore"):
        log_weights = np.log(weights)
    return RoutingModel(tuple(_capped_proportional(log_weights, top_k)), top_k)


def _capped_proportional(log_weights: FloatArray, top_k: int) -> FloatArray:
    """pi_i = min(1, c w_i) with sum pi_i = top_k, by water-filling over the heaviest experts.

    With the m heaviest experts capped, c = (top_k - m) / (sum of the other weights); the answer
    is the smallest m whose next expert stays at or below the cap (m = top_k - 1 always does).
    Weights come as logarithms, so steep popularity curves (weights below 1e-308) stay exact.
    """
    order = np.argsort(-log_weights, kind="stable")
    ranked = log_weights[order]
    log_tail = np.logaddexp.accumulate(ranked[::-1])[::-1]  # log of sum(weights[m:])
    log_scale = np.log(top_k - np.arange(top_k)) - log_tail[:top_k]
    m = int(np.argmax(log_scale + ranked[:top_k] <= 0.0))
    ranked_pi = np.exp(np.minimum(0.0, log_scale[m] + ranked))
    ranked_pi[:m] = 1.0
    pi = np.empty_like(ranked_pi)
    pi[order] = ranked_pi
    return pi


# --------------------------------------------------------------------------------------------
# Statistics


def expected_experts_touched(model: RoutingModel, tokens: float) -> float:
    """E[experts receiving at least one of n tokens] = sum_i 1 - (1 - pi_i)^n.

    Exact for independent tokens whatever the correlation between one token's picks (linearity
    of expectation); uniform routing gives E(1 - (1 - k/E)^n).
    """
    n = _check_tokens(tokens)
    if n == 0:
        return 0.0
    return float(_touch_probabilities(model.probabilities, n).sum())


def expected_max_experts_touched(model: RoutingModel, tokens: float, groups: int) -> float:
    """E[experts touched in the busiest of `groups` contiguous equal blocks of experts].

    A block's touched count is Poisson-binomial over its experts with p_i = 1 - (1 - pi_i)^n
    (its exact distribution under independent picks), blocks are taken as independent, and
    E[max] = sum_{x>=1} (1 - prod_j P(X_j < x)). One group is `expected_experts_touched`.
    """
    n = _check_tokens(tokens)
    blocks = _check_groups(model, groups)
    if n == 0:
        return 0.0
    if blocks == 1:
        return expected_experts_touched(model, n)
    touched = _touch_probabilities(model.probabilities, n).reshape(blocks, -1)
    cdf = np.cumsum(_poisson_binomial_pmf(touched), axis=1)
    value = _expected_max_from_cdf(cdf)
    return float(min(max(value, touched.sum(axis=1).max()), touched.shape[1]))


def expected_max_token_slots(model: RoutingModel, tokens: float, groups: int) -> float:
    """E[(token, expert) pairs landing on the busiest of `groups` contiguous expert blocks].

    One token's slots on block j are Poisson-binomial over the block's pi_i (independent picks:
    mean m_j = sum pi_i, variance v_j = sum pi_i (1 - pi_i)); blocks are taken as independent.
    Over n tokens a block's count is the n-fold convolution, computed exactly by FFT while that
    costs at most EXACT_FFT_POINTS (uniform E=256 in 16 groups: ~7,000 tokens), beyond which
    the normal N(n m_j, n v_j) with second-order Edgeworth terms is within ~0.01 slot of it.
    Fractional n interpolates between neighbouring integers in the exact range. The result is
    never below n max_j m_j; one group holds every slot: n x top_k.
    """
    n = _check_tokens(tokens)
    blocks = _check_groups(model, groups)
    if n == 0:
        return 0.0
    if blocks == 1:
        return n * model.top_k
    pi = model.probabilities.reshape(blocks, -1)
    low = math.floor(n)
    if low == n:
        value = _max_slots_at(pi, low)
    elif low == 0 or _exact_is_cheap(pi, low):
        # linear between integers: continuous, and monotone across the hand-over to the normal
        below = _max_slots_at(pi, low) if low > 0 else 0.0
        value = below + (n - low) * (_max_slots_at(pi, low + 1) - below)
    else:
        value = _normal_max_slots(pi, n)
    return float(max(value, n * pi.sum(axis=1).max()))


# --------------------------------------------------------------------------------------------
# Distributions


def _touch_probabilities(pi: FloatArray, n: float) -> FloatArray:
    """P(expert i receives at least one of n tokens) = 1 - (1 - pi_i)^n, accurate for tiny pi."""
    with np.errstate(divide="ignore"):
        return -np.expm1(n * np.log1p(-pi))


def _poisson_binomial_pmf(probs: FloatArray) -> FloatArray:
    """Row-wise PMF (size + 1 values) of a sum of independent Bernoulli(probs[j, i]).

    The characteristic function prod_i (1 - p_i + p_i w) is evaluated at the roots of unity and
    inverted by FFT: one vectorised pass for all blocks, accurate to ~1e-15 per value.
    """
    size = probs.shape[-1] + 1
    roots = np.exp(-2j * np.pi * np.arange(size // 2 + 1) / size)
    p = probs[..., None]
    char = np.prod(1.0 - p + p * roots, axis=-2)
    return np.clip(np.fft.irfft(char, n=size, axis=-1), 0.0, None)


def _expected_max_from_cdf(cdf: FloatArray) -> float:
    """E[max_j X_j] for independent X_j on 0..L-1 given row-wise CDFs: sum_x 1 - prod_j F_j(x)."""
    cdf = np.minimum(cdf / cdf[:, -1:], 1.0)
    return float((1.0 - np.prod(cdf[:, :-1], axis=0)).sum())


def _exact_is_cheap(pi: FloatArray, n: int) -> bool:
    """Whether the exact convolution for n tokens fits in EXACT_FFT_POINTS."""
    return pi.shape[0] * _slot_windows(pi, n)[2] <= EXACT_FFT_POINTS


def _max_slots_at(pi: FloatArray, n: int) -> float:
    """E[max slots] at an integer n: exact when cheap, else the Edgeworth-corrected normal."""
    return _exact_max_slots(pi, n) if _exact_is_cheap(pi, n) else _normal_max_slots(pi, n)


def _slot_windows(pi: FloatArray, n: int) -> tuple[IntArray, IntArray, int]:
    """Per-block slot ranges [lo_j, hi_j] holding all but ~1e-15 of the mass, and an FFT length.

    Bernstein's inequality for a sum of independent Bernoullis, P(|S - mean| >= t) <=
    2 exp(-t^2 / (2 (sigma^2 + t/3))), puts under 5e-16 of the mass beyond the t that makes the
    exponent 36: t = 12 + sqrt(144 + 72 sigma^2). The FFT length covers the widest range (and
    one token's support), so reading the convolution modulo that length aliases nothing.
    """
    mean = n * pi.sum(axis=1)
    half = 12.0 + np.sqrt(144.0 + 72.0 * n * (pi * (1.0 - pi)).sum(axis=1))
    lo = np.maximum(0, np.floor(mean - half)).astype(np.int64)
    hi = np.minimum(n * pi.shape[1], np.ceil(mean + half)).astype(np.int64)
    length = next_fast_len(int(max((hi - lo).max() + 1, pi.shape[1] + 1)))
    return lo, hi, length


def next_fast_len(target: int) -> int:
    """The smallest 5-smooth number (2^a 3^b 5^c) at or above `target`: a length the FFT of
    real input does fast (what scipy.fft.next_fast_len(target, real=True) returns)."""
    best = 1 << max(0, (target - 1).bit_length())  # a power of two always qualifies
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            # the least power of two that lifts p35 to the target
            quotient = -(-target // p35)
            candidate = p35 << max(0, (quotient - 1).bit_length())
            best = min(best, candidate)
            p35 *= 3
        p5 *= 5
    return best


def _exact_max_slots(pi: FloatArray, n: int) -> float:
    """E[max_j S_j], S_j = a block's slots over n tokens: the per-token PMF convolved n times.

    The n-th power of the per-token characteristic function is inverted modulo the FFT length,
    so the cost grows with a block's spread (sqrt(n)), not with n. Every row is read from
    x = start (the highest window start): position i holds P(S_j = start + i) up to the block's
    window end, and past it the mass below `start` that wrapped around, which is P(S_j < start).
    """
    lo, hi, length = _slot_windows(pi, n)
    start, stop = int(lo.max()), int(hi.max())
    # numpy's FFT (pocketfft, as scipy.fft's) loads with numpy; scipy.fft would add 0.2 s
    char = np.fft.rfft(_poisson_binomial_pmf(pi), n=length, axis=1)
    pmf = np.roll(np.fft.irfft(_power(char, n), n=length, axis=1), -(start % length), axis=1)
    np.clip(pmf, 0.0, None, out=pmf)
    pmf /= pmf.sum(axis=1, keepdims=True)
    wrapped = np.arange(length)[None, :] > (hi - start)[:, None]
    below = np.where(wrapped, pmf, 0.0).sum(axis=1, keepdims=True)
    cdf = np.where(wrapped, 1.0, below + np.cumsum(np.where(wrapped, 0.0, pmf), axis=1))
    # E[max] = start + sum_{x >= start} P(max > x); below `start` the top block's CDF is ~0
    return start + float((1.0 - np.prod(np.minimum(cdf[:, : stop - start], 1.0), axis=0)).sum())


def _power(char: ComplexArray, n: int) -> ComplexArray:
    """char**n in polar form (exact phase for integer n); terms below 1e-18 are dropped as zero."""
    with np.errstate(divide="ignore"):
        magnitude = np.exp(n * np.log(np.abs(char)))
    keep = magnitude > _NEGLIGIBLE
    phase = n * np.angle(char[keep])
    out = np.zeros_like(char)
    out[keep] = magnitude[keep] * (np.cos(phase) + 1j * np.sin(phase))
    return out


def _normal_max_slots(pi: FloatArray, n: float) -> float:
    """E[max_j Y_j] for independent block slot counts approximated by their Edgeworth series.

    Each block's CDF is the normal N(n m_j, n v_j) corrected to second order (skewness and
    kurtosis), with Sheppard's 1/12 taken off the variance because the counts are integers:
    integrating that smooth CDF then matches summing the lattice one at half-integers. The
    corrections fade out for blocks spread over fewer than ~3 slots (nearly idle or nearly
    saturated blocks), where the series diverges and a block is close to its mean anyway.
    E[max] = lo + integral_lo^hi (1 - prod_j F_j(x)) dx by the trapezoid rule, where below lo
    the block with the highest lower bound already makes prod F_j negligible.
    """
    mean = n * pi.sum(axis=1)
    spread = pi * (1.0 - pi)
    var = n * spread.sum(axis=1)
    std = np.sqrt(var - np.minimum(1.0 / 12.0, 0.5 * var))
    lo = float((mean - _NORMAL_SPAN_SIGMAS * std).max())
    hi = float((mean + _NORMAL_SPAN_SIGMAS * std).max())
    if hi <= lo:
        return lo
    x = np.linspace(lo, hi, _NORMAL_GRID_POINTS)
    positive = std > 0
    safe_std = np.where(positive, std, 1.0)
    weight = np.clip(0.5 * (std - 1.0), 0.0, 1.0)  # zero wherever std <= 1
    wide = np.maximum(std, 1.0)
    skew = weight * n * (spread * (1.0 - 2.0 * pi)).sum(axis=1) / wide**3
    kurt = weight * n * (spread * (1.0 - 6.0 * spread)).sum(axis=1) / wide**4
    # beyond 40 standard units the CDF is 0 or 1 to double precision
    z = np.clip((x[None, :] - mean[:, None]) / safe_std[:, None], -40.0, 40.0)
    cdf = _edgeworth_cdf(z, skew[:, None], kurt[:, None])
    step_cdf = (x[None, :] >= mean[:, None]).astype(np.float64)
    cdf = np.clip(np.where(positive[:, None], cdf, step_cdf), 0.0, 1.0)
    tail = 1.0 - np.prod(cdf, axis=0)
    step = (hi - lo) / (_NORMAL_GRID_POINTS - 1)
    return lo + step * float(tail.sum() - 0.5 * (tail[0] + tail[-1]))


def _edgeworth_cdf(z: FloatArray, skew: FloatArray, kurt: FloatArray) -> FloatArray:
    """Second-order Edgeworth CDF in standard units, from skewness and excess kurtosis."""
    z2 = z * z
    series = (
        skew / 6.0 * (z2 - 1.0)
        + kurt / 24.0 * z * (z2 - 3.0)
        + skew * skew / 72.0 * z * ((z2 - 10.0) * z2 + 15.0)
    )
    from scipy.special import ndtr

    return ndtr(z) - np.exp(-0.5 * z2) / _SQRT_2PI * series


# --------------------------------------------------------------------------------------------
# Validation


def _finite_vector(values: Sequence[float] | FloatArray, name: str) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    return arr


def _finite_scalar(value: float, name: str) -> float:
    try:
        result = float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a number, got {value!r}") from exc
    if not math.isfinite(result):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return result


def _positive_int(value: int, name: str) -> int:
    try:
        result = operator.index(value)
    except TypeError as exc:
        raise ValueError(f"{name} must be an integer, got {value!r}") from exc
    if result < 1:
        raise ValueError(f"{name} must be >= 1, got {result}")
    return result


def _check_top_k(top_k: int, experts: int) -> None:
    if top_k > experts:
        raise ValueError(f"top_k ({top_k}) exceeds the number of experts ({experts})")


def _check_tokens(tokens: float) -> float:
    n = _finite_scalar(tokens, "tokens")
    if n < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens!r}")
    return n


def _check_groups(model: RoutingModel, groups: int) -> int:
    groups = _positive_int(groups, "groups")
    if model.experts % groups:
        raise ValueError(f"{model.experts} experts do not split into {groups} equal groups")
    return groups
