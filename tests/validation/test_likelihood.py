"""`rdusim.validation.likelihood`: one item's log-likelihood against scipy's normal written out
here, the noise, a group's mixture over shared readings computed by hand, responsibilities, and
batched against row-by-row evaluation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from rdusim.validation.items import Bound, Item, Measure, Metric
from rdusim.validation.likelihood import (
    Group,
    group_loglik,
    groups_of,
    item_loglik,
    log_values,
    mixed_over_own,
    responsibilities,
    sigma,
    total_loglik,
)

MEASURE_EXTRAS = {
    Metric.SPEEDUP: {"base": ["kernel_looping=false"]},
    Metric.OVERHEAD: {"base": ["snapstream.enabled=false"]},
    Metric.SHARE: {"kernels": ["MHA"], "layer": "moe"},
    Metric.REQUEST_LATENCY_S: {"prefill": "r1_prefill", "input_tokens": 8, "output_tokens": 8},
}


def make_item(
    value, bound=Bound.VALUE, precision=0.02, metric=Metric.TOTAL_LATENCY_S, item_id="x"
) -> Item:
    return Item(
        id=item_id,
        quantity="q",
        where="w",
        value=value,
        unit="s",
        bound=bound,
        precision=precision,
        use="fit",
        measure=Measure(metric=metric, mapping="r1_prefill", **MEASURE_EXTRAS.get(metric, {})),
    )


# --- one item ------------------------------------------------------------------------------------

figure = st.floats(min_value=1e-3, max_value=1e4)
noise = st.floats(min_value=0.01, max_value=1.0)
offset = st.floats(min_value=-6.0, max_value=6.0)  # model log-value minus the figure's, in sigmas


@settings(deadline=None)
@given(y=figure, s=noise, k=offset)
def test_value_is_the_normal_density_of_the_log_figure(y, s, k):
    z = math.log(y) + k * s
    got = float(item_loglik(make_item(y), np.array(z), s))
    assert got == pytest.approx(norm.logpdf(math.log(y), loc=z, scale=s), rel=1e-9, abs=1e-12)


@settings(deadline=None)
@given(y=figure, s=noise, k=offset)
def test_lower_bound_is_the_chance_the_noisy_figure_is_above_it(y, s, k):
    z = math.log(y) + k * s
    got = float(item_loglik(make_item(y, Bound.LOWER), np.array(z), s))
    assert got == pytest.approx(norm.logsf(math.log(y), loc=z, scale=s), rel=1e-9, abs=1e-12)


@settings(deadline=None)
@given(y=figure, s=noise, k=offset)
def test_upper_bound_is_the_chance_the_noisy_figure_is_below_it(y, s, k):
    z = math.log(y) + k * s
    got = float(item_loglik(make_item(y, Bound.UPPER), np.array(z), s))
    assert got == pytest.approx(norm.logcdf(math.log(y), loc=z, scale=s), rel=1e-9, abs=1e-12)


@settings(deadline=None)
@given(lo=figure, ratio=st.floats(1.01, 10.0), s=noise, k=st.floats(-4.0, 6.0))
def test_range_is_the_chance_the_noisy_figure_falls_inside(lo, ratio, s, k):
    hi = lo * ratio
    z = math.log(hi) - k * s  # from above the range to well below its top
    inside = norm.cdf(math.log(hi), loc=z, scale=s) - norm.cdf(math.log(lo), loc=z, scale=s)
    got = float(item_loglik(make_item((lo, hi), Bound.RANGE), np.array(z), s))
    assert got == pytest.approx(math.log(inside), rel=1e-7, abs=1e-9)


def test_bounds_by_hand():
    s = 0.1
    at = np.array(math.log(2.0))
    # at the bound itself, half the noise lies beyond it
    assert float(item_loglik(make_item(2.0, Bound.LOWER), at, s)) == pytest.approx(math.log(0.5))
    assert float(item_loglik(make_item(2.0, Bound.UPPER), at, s)) == pytest.approx(math.log(0.5))
    # a value item at its figure: the density's peak, 1 / (s sqrt(2 pi))
    peak = float(item_loglik(make_item(2.0), at, s))
    assert peak == pytest.approx(-math.log(s * math.sqrt(2 * math.pi)))
    # a range of +-1 sigma around the model's value holds 68.27% of the noise
    z = np.array(0.0)
    rng = float(item_loglik(make_item((math.exp(-s), math.exp(s)), Bound.RANGE), z, s))
    assert rng == pytest.approx(math.log(0.682689492137), rel=1e-9)


def test_range_far_above_the_model_keeps_an_accurate_log_likelihood():
    # model at 0.5%, figure "2-5%", noise 0.15: 9.2 sigma below the range's bottom
    s, z = 0.15, np.array(math.log(0.5))
    want = math.log(norm.sf(math.log(2), z, s) - norm.sf(math.log(5), z, s))  # about -45.9
    got = float(item_loglik(make_item((2.0, 5.0), Bound.RANGE), z, s))
    assert got == pytest.approx(want, rel=1e-6)


def test_log_values_floor_non_positive_values():
    got = log_values(np.array([0.0, -1.0, math.e]))
    assert got == pytest.approx([math.log(1e-9), math.log(1e-9), 1.0])


# --- noise ---------------------------------------------------------------------------------------

TIMING = [m for m in Metric if m != Metric.MAX_BATCH]


@settings(deadline=None)
@given(metric=st.sampled_from(TIMING), p=st.floats(0.0, 0.5), d=st.floats(1e-6, 1.0))
def test_timing_noise_is_the_root_of_precision_and_discrepancy_squared(metric, p, d):
    """... and never below 0.1%: no figure is known better than that on the log scale."""
    assert sigma(make_item(1.0, precision=p, metric=metric), d) == pytest.approx(
        max(math.hypot(p, d), 1e-3), rel=1e-12, abs=1e-300
    )


@settings(deadline=None)
@given(p=st.floats(0.0, 0.5), d=st.floats(0.0, 1.0))
def test_max_batch_noise_is_the_precision_alone(p, d):
    got = sigma(make_item(64.0, precision=p, metric=Metric.MAX_BATCH), d)
    assert got == max(p, 1e-3)


def test_batch_of_discrepancies_gives_a_batch_of_noises():
    s = sigma(make_item(1.0, precision=0.03), np.array([0.04, 0.0]))
    assert s.shape == (2, 1, 1)
    assert s.ravel() == pytest.approx([0.05, 0.03])


# --- groups --------------------------------------------------------------------------------------


def two_reading_group():
    """Two items sharing a deployment with two readings; item `a` has two readings of its own."""
    items = {
        "a": make_item(10.0, precision=0.05, item_id="a"),
        "b": make_item(3.0, Bound.LOWER, precision=0.02, item_id="b"),
    }
    z = {
        "a": np.log(np.array([[9.0, 12.0], [20.0, 25.0]])),  # (group readings, own readings)
        "b": np.log(np.array([[3.3], [2.0]])),
    }
    return Group("dep", ("a", "b")), items, z


def by_hand_per_reading(items, z, d):
    """Per shared reading: sum over items of log(mean over own readings of the likelihood)."""
    out = []
    for g in range(2):
        total = 0.0
        for i, item in items.items():
            s = math.hypot(item.precision, d)
            likes = []
            for zz in z[i][g]:
                if item.bound == Bound.VALUE:
                    likes.append(norm.pdf(math.log(item.low), loc=zz, scale=s))
                else:
                    likes.append(norm.sf(math.log(item.low), loc=zz, scale=s))
            total += math.log(sum(likes) / len(likes))
        out.append(total)
    return out


def test_group_loglik_of_two_readings_by_hand():
    group, items, z = two_reading_group()
    d = 0.1
    per = by_hand_per_reading(items, z, d)
    want = math.log((math.exp(per[0]) + math.exp(per[1])) / 2)
    assert float(group_loglik(group, items, z, d)) == pytest.approx(want, rel=1e-10)
    # and the item's own mixture, reading by reading
    s = math.hypot(0.05, d)
    own = mixed_over_own(items["a"], z["a"], s)
    for g in range(2):
        likes = [norm.pdf(math.log(10.0), loc=zz, scale=s) for zz in z["a"][g]]
        assert own[g] == pytest.approx(math.log(np.mean(likes)), rel=1e-10)


def test_responsibilities_sum_to_one_and_favour_the_reading_that_fits():
    group, items, z = two_reading_group()
    r = responsibilities(group, items, z, 0.1)
    assert r.sum() == pytest.approx(1.0, rel=1e-12)
    assert r[0] > 0.99  # reading 0 has `a` near 10 and `b` above 3; reading 1 misses both
    per = by_hand_per_reading(items, z, 0.1)
    assert r[1] == pytest.approx(math.exp(per[1]) / (math.exp(per[0]) + math.exp(per[1])))
    # swap the readings: the responsibility follows the reading
    swapped = {i: v[::-1] for i, v in z.items()}
    assert responsibilities(group, items, swapped, 0.1) == pytest.approx(r[::-1])


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 6),
)
def test_responsibilities_always_sum_to_one(seed, n):
    rng = np.random.default_rng(seed)
    group, items, _ = two_reading_group()
    z = {"a": rng.normal(2.3, 1.0, size=(n, 2)), "b": rng.normal(1.1, 1.0, size=(n, 1))}
    r = responsibilities(group, items, z, float(rng.uniform(0.01, 0.5)))
    assert r.shape == (n,)
    assert r.sum() == pytest.approx(1.0, rel=1e-12)
    assert np.all(r >= 0)


def test_batched_evaluation_equals_row_by_row():
    rng = np.random.default_rng(3)
    group, items, _ = two_reading_group()
    items["c"] = make_item((1.0, 2.0), Bound.RANGE, precision=0.05, item_id="c")
    items["m"] = make_item(64.0, precision=0.01, metric=Metric.MAX_BATCH, item_id="m")
    group = Group("dep", ("a", "b", "c", "m"))
    batch = 7
    zb = {
        "a": rng.normal(2.3, 0.3, size=(batch, 2, 2)),
        "b": rng.normal(1.1, 0.3, size=(batch, 2, 1)),
        "c": rng.normal(0.3, 0.3, size=(batch, 2, 3)),
        "m": rng.normal(4.1, 0.2, size=(batch, 2, 1)),
    }
    d = rng.uniform(0.02, 0.3, size=batch)
    got = group_loglik(group, items, zb, d)
    assert np.shape(got) == (batch,)
    total = total_loglik([group], items, zb, d)
    for k in range(batch):
        row = {i: v[k] for i, v in zb.items()}
        assert got[k] == pytest.approx(float(group_loglik(group, items, row, float(d[k]))))
        assert total[k] == pytest.approx(float(total_loglik([group], items, row, float(d[k]))))


def test_groups_gather_items_in_first_seen_order():
    names = {"a": "s/dep", "b": "b", "c": "s/dep", "d": "d"}
    got = groups_of(names, ["b", "a", "d", "c"])
    assert got == [Group("b", ("b",)), Group("s/dep", ("a", "c")), Group("d", ("d",))]


def test_total_is_the_sum_of_the_groups():
    group, items, z = two_reading_group()
    alone = Group("c", ("c",))
    items["c"] = make_item(5.0, item_id="c")
    z["c"] = np.log(np.array([[4.0, 6.0]]))
    d = 0.2
    s = math.hypot(0.02, d)
    c = math.log(np.mean([norm.pdf(math.log(5.0), loc=math.log(v), scale=s) for v in (4.0, 6.0)]))
    want = float(group_loglik(group, items, z, d)) + c
    assert float(total_loglik([group, alone], items, z, d)) == pytest.approx(want, rel=1e-10)
