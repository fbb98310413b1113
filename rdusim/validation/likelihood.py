"""How likely a published figure is given the model's value: one item, one group, all of them.

On the log scale, a published figure y departs from the model's value z by normal noise of
standard deviation sigma, the root of the item's printed precision squared plus the model's
discrepancy squared (capacity and compile-time arithmetic carry the precision alone). A bound
("over 90%") is the probability that the noisy value lies beyond it, a range the probability that
it falls inside.

What a source leaves open is marginalised: an item's own readings with equal weight; the
readings of a deployment several items share once for the whole group, so that Table 5's six
cells are explained by one deployment, not each by its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import log_ndtr, logsumexp

from rdusim.validation.items import Bound, Item, Metric

FLOOR = 1e-9  # model values below this are taken as this before their logarithm
MIN_SIGMA = 1e-3  # no figure is known to better than 0.1% on the log scale


def uses_discrepancy(metric: Metric) -> bool:
    """Every model value carries the model's error but a maximum batch: capacity arithmetic on
    bytes the model counts exactly, whose one unknown (usable HBM) is a calibrated parameter."""
    return metric != Metric.MAX_BATCH


Discrepancy = float | np.ndarray  # one value, or one per parameter set of a batch


def sigma(item: Item, discrepancy: Discrepancy) -> Any:
    """The item's noise: its precision with the model's discrepancy (a batch of discrepancies
    gives a batch of noises, shaped to broadcast against a batch of readings' values)."""
    assert item.measure is not None
    if not uses_discrepancy(item.measure.metric):
        return max(item.precision, MIN_SIGMA)
    d = np.asarray(discrepancy, dtype=float)
    s = np.maximum(np.sqrt(item.precision**2 + d * d), MIN_SIGMA)
    return float(s) if s.ndim == 0 else s[:, None, None]


def log_values(values: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(values, FLOOR))


def item_loglik(item: Item, z: np.ndarray, s: Any) -> np.ndarray:
    """Log-likelihood of the item at log-values `z` (any shape), noise `s` (broadcast)."""
    if item.bound == Bound.VALUE:
        r = (z - math.log(item.low)) / s
        return -0.5 * r * r - np.log(s) - 0.5 * math.log(2 * math.pi)
    if item.bound == Bound.LOWER:
        return log_ndtr((z - math.log(item.low)) / s)
    if item.bound == Bound.UPPER:
        return log_ndtr((math.log(item.high) - z) / s)
    return log_between((math.log(item.low) - z) / s, (math.log(item.high) - z) / s)


def log_between(a: Any, b: Any) -> Any:
    """log(Phi(b) - Phi(a)) for a <= b, without the cancellation of two tails near 1: below the
    range's middle it is taken from the upper tails, Phi(-a) - Phi(-b), above from the lower."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
    upper = a + b > 0  # the model's value lies below the range's middle
    big = np.where(upper, log_ndtr(-a), log_ndtr(b))
    small = np.where(upper, log_ndtr(-b), log_ndtr(a))
    return big + np.log1p(-np.exp(np.minimum(small - big, -1e-300)))


def mixed_over_own(item: Item, z: np.ndarray, s: Any) -> np.ndarray:
    """Per group reading: the item's log-likelihood averaged over its own readings (the last
    axis of `z`)."""
    ll = item_loglik(item, z, s)
    return logsumexp(ll, axis=-1) - math.log(ll.shape[-1])


@dataclass(frozen=True)
class Group:
    """Items that share a deployment's readings (or one item alone)."""

    name: str
    items: tuple[str, ...]


def groups_of(group_names: Mapping[str, str], items: Iterable[str]) -> list[Group]:
    """`items` gathered by their group name, in first-seen order."""
    by: dict[str, list[str]] = {}
    for i in items:
        by.setdefault(group_names[i], []).append(i)
    return [Group(g, tuple(members)) for g, members in by.items()]


def _per_reading(
    group: Group, items: Mapping[str, Item], z: Mapping[str, np.ndarray], discrepancy: Discrepancy
) -> np.ndarray:
    """The group's items' log-likelihood summed, per shared reading (the last axis)."""
    total: Any = 0.0
    for i in group.items:
        total = total + mixed_over_own(items[i], z[i], sigma(items[i], discrepancy))
    return np.asarray(total, dtype=float)


def group_loglik(
    group: Group, items: Mapping[str, Item], z: Mapping[str, np.ndarray], discrepancy: Discrepancy
) -> Any:
    """The group's log-likelihood, its shared readings marginalised (one value, or one per
    parameter set of a batch)."""
    per = _per_reading(group, items, z, discrepancy)
    return logsumexp(per, axis=-1) - math.log(per.shape[-1])


def responsibilities(
    group: Group, items: Mapping[str, Item], z: Mapping[str, np.ndarray], discrepancy: float
) -> np.ndarray:
    """How much each of the group's shared readings explains its items (sums to 1)."""
    per = _per_reading(group, items, z, discrepancy)
    return np.exp(per - logsumexp(per))


def total_loglik(
    groups: Iterable[Group],
    items: Mapping[str, Item],
    z: Mapping[str, np.ndarray],
    discrepancy: Discrepancy,
) -> Any:
    return sum(group_loglik(g, items, z, discrepancy) for g in groups)
