"""The cut dynamic programme against brute force over every cut."""

from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.search.boundaries import Cut, best_cuts


def all_cuts(n: int) -> list[tuple[int, ...]]:
    """Every way to cut n ops into contiguous kernels, as kernel end positions."""
    out = []
    for r in range(n):
        for inner in itertools.combinations(range(1, n), r):
            out.append((*inner, n))
    return out


def total(ends: tuple[int, ...], cost: dict[tuple[int, int], float]) -> float:
    starts = (0, *ends[:-1])
    return sum(cost[(i, j)] for i, j in zip(starts, ends, strict=True))


@st.composite
def cost_tables(draw: st.DrawFn) -> tuple[int, dict[tuple[int, int], float]]:
    n = draw(st.integers(1, 7))
    values = st.one_of(st.floats(0.0, 100.0), st.just(math.inf))
    cost = {(i, j): draw(values) for i in range(n) for j in range(i + 1, n + 1)}
    for i in range(n):  # single ops always fit, as in a real layer
        cost[(i, i + 1)] = draw(st.floats(0.0, 100.0))
    return n, cost


@settings(max_examples=300, deadline=None)
@given(cost_tables())
def test_best_cut_per_kernel_count_is_the_brute_force_minimum(table):
    n, cost = table
    found = best_cuts(n, lambda i, j: cost[(i, j)])
    by_count: dict[int, float] = {}
    for ends in all_cuts(n):
        t = total(ends, cost)
        if math.isfinite(t):
            by_count[len(ends)] = min(by_count.get(len(ends), math.inf), t)
    assert set(found) == set(by_count)
    for m, cut in found.items():
        assert len(cut.ends) == m and cut.ends[-1] == n
        assert math.isclose(cut.total_s, by_count[m], rel_tol=1e-12, abs_tol=1e-12)
        assert math.isclose(total(cut.ends, cost), cut.total_s, rel_tol=1e-12, abs_tol=1e-12)


def test_stop_cuts_the_search_short_without_losing_legal_cuts():
    # kernels longer than two ops do not fit; stop says so once a run of three fails
    n = 6
    calls: list[tuple[int, int]] = []

    def cost(i: int, j: int) -> float:
        calls.append((i, j))
        return 1.0 if j - i <= 2 else math.inf

    found = best_cuts(n, cost, stop=lambda i, j: j - i > 2)
    assert min(found) == 3 and found[3].total_s == 3.0
    assert all(j - i <= 3 for i, j in calls)


def test_ties_go_to_the_earlier_ending_cut():
    found = best_cuts(3, lambda i, j: 1.0)
    assert found[2] == Cut(2.0, (1, 3))
    assert found[2].kernels() == [(0, 1), (1, 3)]


@st.composite
def bounded_tables(draw: st.DrawFn) -> tuple[int, dict, dict]:
    """A cost table and a bound for it: each finite cost times a fraction in [0, 1], some equal
    to the cost, infinity exactly where the cost is."""
    n, cost = draw(cost_tables())
    fraction = st.sampled_from([0.0, 0.5, 0.9, 0.999, 1.0])
    bound = {k: (c * draw(fraction) if math.isfinite(c) else math.inf) for k, c in cost.items()}
    return n, cost, bound


@settings(max_examples=300, deadline=None)
@given(bounded_tables())
def test_a_lower_bound_spares_costing_and_changes_no_cut(table):
    n, cost, bound = table
    costed: list[tuple[int, int]] = []

    def counted(i: int, j: int) -> float:
        costed.append((i, j))
        return cost[(i, j)]

    plain = best_cuts(n, lambda i, j: cost[(i, j)])
    assert best_cuts(n, counted, bound=lambda i, j: bound[(i, j)]) == plain
    assert len(costed) == len(set(costed))  # each span costed at most once


def test_a_kernel_its_bound_rules_out_is_not_costed():
    table = {(0, 1): 1.0, (1, 2): 1.0, (2, 3): 1.0, (0, 2): 3.0, (1, 3): 10.0, (0, 3): 20.0}
    costed: list[tuple[int, int]] = []

    def cost(i: int, j: int) -> float:
        costed.append((i, j))
        return table[(i, j)]

    found = best_cuts(3, cost, bound=lambda i, j: 0.8 * table[(i, j)])
    assert found == best_cuts(3, lambda i, j: table[(i, j)])
    # two kernels ending at op 3: ops 0-1 then op 2 take 4 s; op 0 then ops 1-2 take at least
    # 1 + 8, so ops 1-2 are never costed
    assert (1, 3) not in costed
    assert sorted(costed) == sorted(set(table) - {(1, 3)})
