"""Independent oracles shared by the compiler's tests (written with plain loops, not numpy)."""

from __future__ import annotations


def capped_inclusion(weights: list[float], top_k: int) -> list[float]:
    """pi_i = min(1, c w_i) summing to top_k, with c found by plain bisection."""
    lo, hi = 0.0, 1.0
    while sum(min(1.0, hi * w) for w in weights) < top_k:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if sum(min(1.0, mid * w) for w in weights) < top_k:
            lo = mid
        else:
            hi = mid
    return [min(1.0, hi * w) for w in weights]
