"""The best ways to cut a sequence of ops into contiguous kernels: dynamic programming.

A layer's time is the sum of its kernels' times (they run one after another), and a kernel's
time depends only on which ops it holds, so the best cut of ops[0:j] into m kernels ends in a
kernel ops[i:j] preceded by the best cut of ops[0:i] into m - 1. Keeping the best cut for every
kernel count, not just the best overall, gives the search structurally distinct runners-up (few
large kernels against many small ones) at O(n^3) cost for n ops.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

# cost(i, j): seconds of a kernel of ops[i:j], or math.inf when it cannot be built. `stop(i, j)`
# tells the search that kernels ops[i'..j] for every i' < i cannot be built either (SRAM grows
# as a kernel takes in more ops), so it may stop extending to the left.
Cost = Callable[[int, int], float]
Stop = Callable[[int, int], bool]


@dataclass(frozen=True, order=True)
class Cut:
    """A way to cut ops[0:n]: its total seconds and the end of each kernel."""

    total_s: float
    ends: tuple[int, ...]

    def kernels(self) -> list[tuple[int, int]]:
        starts = (0, *self.ends[:-1])
        return list(zip(starts, self.ends, strict=True))


def best_cuts(
    n: int, cost: Cost, stop: Stop | None = None, bound: Cost | None = None
) -> dict[int, Cut]:
    """The fastest cut of ops[0:n] for each number of kernels that has a legal one. Ties go to
    the cut whose kernels end earlier, so the answer is deterministic.

    `bound(i, j)`, if given, is a number no larger than `cost(i, j)` (math.inf exactly when the
    kernel cannot be built), cheaper to know: a kernel whose bound already makes every cut it
    would end longer than the best one so far of the same kernel count is not costed. The cuts
    found are the same (a sum with a larger addend rounds no lower)."""
    best: list[dict[int, Cut]] = [{0: Cut(0.0, ())}] + [{} for _ in range(n)]
    for j in range(1, n + 1):
        here = best[j]
        for i in range(j - 1, -1, -1):
            prefixes = best[i]
            # a bound can rule a kernel out only when every count it would make has a cut
            if (
                bound is not None
                and all(m + 1 in here for m in prefixes)
                and _ruled_out(bound(i, j), prefixes, here)
            ):
                continue
            c = cost(i, j)
            if not math.isfinite(c):
                if stop is not None and stop(i, j):
                    break
                continue
            for m, prefix in best[i].items():
                cut = Cut(prefix.total_s + c, (*prefix.ends, j))
                if m + 1 not in here or cut < here[m + 1]:
                    here[m + 1] = cut
    return best[n]


def _ruled_out(lower: float, prefixes: dict[int, Cut], here: dict[int, Cut]) -> bool:
    """Whether a kernel of at least `lower` seconds after each of `prefixes` would be longer
    than the best cut of the same count found so far (`here`), for every count."""
    if not math.isfinite(lower):
        return False  # it cannot be built: `cost` says so, and `stop` may end the search
    for m, prefix in prefixes.items():
        found = here.get(m + 1)
        if found is None or prefix.total_s + lower <= found.total_s:
            return False
    return True
