"""`rdusim.uncertainty.ensemble`: applying members to a hardware (by hand on the log and logit
scales), the dict round trip, its validation, and the shipped ensemble against the presets."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.spec.hardware import load_hardware, presets
from rdusim.uncertainty.ensemble import Ensemble, ensemble_path, shipped_ensemble
from rdusim.uncertainty.parameters import PARAMETERS, Scale, values_of, with_values

SCALES = {p.name: p.scale for p in PARAMETERS}


def odds(v: float) -> float:
    return v / (1.0 - v)


def from_odds(o: float) -> float:
    return o / (1.0 + o)


def moved_by_hand(name: str, own: float, member: float, median: float) -> float:
    """The member's offset from the median applied to `own`, written out per scale: a ratio of
    values on the log scale, a ratio of odds on the logit scale."""
    if SCALES[name] == Scale.LOG:
        return own * member / median
    return from_odds(odds(own) * odds(member) / odds(median))


@pytest.fixture(scope="module")
def shipped() -> Ensemble:
    e = shipped_ensemble()
    assert e is not None, "rdusim/hardware/ensemble.json is missing"
    return e


@pytest.fixture(scope="module")
def hw():
    return load_hardware("sn40l-16")


def small_ensemble() -> Ensemble:
    names = ("hbm_efficiency", "p2p_latency_s")
    members = ((0.8, 2e-6), (0.9, 3e-6), (0.95, 4e-6))
    return Ensemble(
        names=names,
        members=members,
        median={"hbm_efficiency": 0.9, "p2p_latency_s": 3e-6},
        seed=11,
        method="by hand",
        discrepancy=0.12,
        parameters={"hbm_efficiency": {"p05": 0.8, "p50": 0.9, "p95": 0.95, "pinned_by": ["a/b"]}},
        fitted_items=("a/b", "c/d"),
    )


# --- applying members ---------------------------------------------------------------------------


def test_hardware_at_the_exact_median_gets_each_member_exactly(shipped, hw):
    at_median = with_values(hw, shipped.median)
    applied = shipped.applied(at_median)
    assert len(applied) == len(shipped)
    for i, member_hw in enumerate(applied):
        got = values_of(member_hw)
        for name, value in zip(shipped.names, shipped.members[i], strict=True):
            assert got[name] == pytest.approx(value, rel=1e-12), (i, name)


@pytest.mark.parametrize("preset", presets())
def test_shipped_presets_get_each_member_to_the_presets_rounding(shipped, preset):
    """The presets hold the median to four significant digits, not exactly, so a member
    comes back only to that rounding: on the log scale the member moves by the preset's
    relative rounding (at most 5e-4); on the logit scale its odds do, which moves a fraction v
    by at most (1 - v) times that. 1e-3 bounds both. Where the preset puts each member is
    checked exactly by the hand computation."""
    hw = load_hardware(preset)
    for i, member_hw in enumerate(shipped.applied(hw)):
        got = values_of(member_hw)
        for name, value in zip(shipped.names, shipped.members[i], strict=True):
            assert got[name] == pytest.approx(value, rel=1e-3), (i, name)
            # and exactly where the preset puts it (the hand computation)
            own = values_of(hw)[name]
            want = moved_by_hand(name, own, value, shipped.median[name])
            assert got[name] == pytest.approx(want, rel=1e-12), (i, name)


def test_members_move_a_scaled_hardware_by_their_offsets(hw):
    e = small_ensemble()
    # a what-if that moves both parameters away from the median
    what_if = with_values(hw, {"hbm_efficiency": 0.6, "p2p_latency_s": 9e-6})
    applied = e.applied(what_if)
    # member 0, by hand: latency 9e-6 * 2e-6 / 3e-6 = 6e-6; efficiency: odds 1.5 * 4 / 9 = 2/3
    got = values_of(applied[0])
    assert got["p2p_latency_s"] == pytest.approx(6e-6, rel=1e-12)
    assert got["hbm_efficiency"] == pytest.approx(0.4, rel=1e-12)  # odds 2/3 -> 0.4
    # member 1 sits at the median: the what-if itself
    got = values_of(applied[1])
    assert got["hbm_efficiency"] == pytest.approx(0.6, rel=1e-12)
    assert got["p2p_latency_s"] == pytest.approx(9e-6, rel=1e-12)
    # member 2: latency 9e-6 * 4e-6 / 3e-6 = 12e-6; efficiency: odds 1.5 * 19 / 9
    got = values_of(applied[2])
    assert got["p2p_latency_s"] == pytest.approx(12e-6, rel=1e-12)
    assert got["hbm_efficiency"] == pytest.approx(from_odds(1.5 * 19 / 9), rel=1e-12)
    # parameters the ensemble does not name are the what-if's own
    for m in applied:
        assert m.calibration.gemm_efficiency == hw.calibration.gemm_efficiency
        assert m.links.p2p_bandwidth == hw.links.p2p_bandwidth
        assert m.socket == hw.socket


@settings(max_examples=60, deadline=None)
@given(
    scale=st.floats(0.2, 5.0),
    eff=st.floats(0.05, 0.95),
    k=st.integers(0, 63),
)
def test_offsets_are_kept_on_the_free_scale(shipped, hw, scale, eff, k):
    """Applied to a hardware whose latency is scaled by `scale` and whose efficiency is `eff`,
    a member's latency is scaled by the same factor and its efficiency's odds by the member's
    odds ratio to the median."""
    k = k % len(shipped)
    what_if = with_values(
        hw,
        {
            "p2p_latency_s": hw.links.p2p_latency_s * scale,
            "hbm_efficiency": eff,
        },
    )
    got = values_of(shipped.applied(what_if)[k])
    member = shipped.values(k)
    med = shipped.median
    assert got["p2p_latency_s"] == pytest.approx(
        hw.links.p2p_latency_s * scale * member["p2p_latency_s"] / med["p2p_latency_s"], rel=1e-12
    )
    ratio = odds(member["hbm_efficiency"]) / odds(med["hbm_efficiency"])
    assert got["hbm_efficiency"] == pytest.approx(from_odds(odds(eff) * ratio), rel=1e-12)
    assert 0 < got["hbm_efficiency"] < 1


def test_offsets_by_hand():
    e = small_ensemble()
    off = e.offsets(0)
    assert off["p2p_latency_s"] == pytest.approx(math.log(2e-6 / 3e-6), rel=1e-12)
    assert off["hbm_efficiency"] == pytest.approx(math.log(4.0 / 9.0), rel=1e-12)
    assert e.offsets(1) == pytest.approx({"hbm_efficiency": 0.0, "p2p_latency_s": 0.0}, abs=1e-15)
    assert e.values(2) == {"hbm_efficiency": 0.95, "p2p_latency_s": 4e-6}


# --- the stored form ----------------------------------------------------------------------------


def test_dict_round_trip():
    e = small_ensemble()
    d = e.as_dict()
    assert d["names"] == ["hbm_efficiency", "p2p_latency_s"]
    assert d["members"] == [[0.8, 2e-6], [0.9, 3e-6], [0.95, 4e-6]]
    again = Ensemble.from_dict(json.loads(json.dumps(d)))
    assert again == e
    assert again.as_dict() == d


def test_from_dict_defaults_the_optional_parts():
    d = small_ensemble().as_dict()
    del d["parameters"], d["fitted_items"]
    e = Ensemble.from_dict(d)
    assert e.parameters == {} and e.fitted_items == ()
    assert len(e) == 3


def test_shipped_file_round_trips(shipped):
    data = json.loads(ensemble_path().read_text(encoding="utf-8"))
    assert Ensemble.from_dict(shipped.as_dict()) == shipped
    assert shipped.as_dict()["members"] == data["members"]


def test_unknown_parameter_names_are_refused():
    d = small_ensemble().as_dict()
    d["names"] = ["hbm_efficiency", "hbm_latency"]
    with pytest.raises(ValueError, match="unknown parameters: hbm_latency"):
        Ensemble.from_dict(d)


def test_ragged_members_are_refused():
    d = small_ensemble().as_dict()
    d["members"][1] = [0.9]
    with pytest.raises(ValueError, match="one value per parameter"):
        Ensemble.from_dict(d)
    d["members"][1] = [0.9, 3e-6, 1.0]
    with pytest.raises(ValueError, match="one value per parameter"):
        Ensemble.from_dict(d)


# --- the shipped ensemble -----------------------------------------------------------------------


def test_shipped_ensemble_is_large_enough_and_names_every_parameter(shipped):
    assert len(shipped) >= 32
    assert set(shipped.names) == {p.name for p in PARAMETERS}
    assert set(shipped.median) == set(shipped.names)
    assert 0 < shipped.discrepancy < 1
    for m in shipped.members:
        for name, v in zip(shipped.names, m, strict=True):
            assert v > 0 and math.isfinite(v)
            if SCALES[name] == Scale.LOGIT:
                assert v < 1


def test_shipped_median_is_the_members_median(shipped):
    for k, name in enumerate(shipped.names):
        column = sorted(m[k] for m in shipped.members)
        n = len(column)
        middle = column[n // 2] if n % 2 else (column[n // 2 - 1] + column[n // 2]) / 2
        assert shipped.median[name] == pytest.approx(middle, rel=1e-12), name


@pytest.mark.parametrize("preset", presets())
def test_presets_hold_the_median_to_four_significant_digits(shipped, preset):
    hw = load_hardware(preset)
    for name, value in values_of(hw).items():
        assert value == float(f"{shipped.median[name]:.4g}"), name


def test_each_parameters_interval_is_ordered(shipped):
    assert set(shipped.parameters) == set(shipped.names)
    for name, info in shipped.parameters.items():
        assert info["p05"] <= info["p50"] <= info["p95"], name
        assert info["p05"] < info["p95"], name
        assert info["prior"]["low"] < info["prior"]["high"], name


def test_shipped_ensemble_is_cached(shipped):
    assert shipped_ensemble() is shipped
