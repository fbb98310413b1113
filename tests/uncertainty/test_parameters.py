"""`rdusim.uncertainty.parameters`: the free scales (against scipy's logit/expit and numpy's
log/exp), `with_values` (only the named fields move), and the table against the shipped presets."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit, logit

from rdusim.spec.hardware import Hardware, load_hardware, presets
from rdusim.uncertainty.parameters import BY_NAME, PARAMETERS, Scale, values_of, with_values

LOG_PARAMETERS = [p for p in PARAMETERS if p.scale == Scale.LOG]
LOGIT_PARAMETERS = [p for p in PARAMETERS if p.scale == Scale.LOGIT]

# every field the presets' `calibration:` and `links:` sections must carry, on the scale a
# quantity of its kind needs: fractions on the logit scale, positive quantities on the log scale
EXPECTED_SCALES = {
    "gemm_efficiency": Scale.LOGIT,
    "attention_efficiency": Scale.LOGIT,
    "simd_efficiency": Scale.LOGIT,
    "hbm_efficiency": Scale.LOGIT,
    "hbm_usable_fraction": Scale.LOGIT,
    "p2p_bandwidth": Scale.LOG,
    "p2p_latency_s": Scale.LOG,
    "config_bandwidth": Scale.LOG,
    "argument_load_s": Scale.LOG,
    "host_round_trip_s": Scale.LOG,
}


HW = load_hardware("sn40l-16")


@pytest.fixture(scope="module")
def hw() -> Hardware:
    return HW


def test_the_table_names_each_parameter_once_on_the_scale_its_kind_needs():
    assert {p.name: p.scale for p in PARAMETERS} == EXPECTED_SCALES
    assert len(BY_NAME) == len(PARAMETERS)
    assert LOG_PARAMETERS and LOGIT_PARAMETERS


@settings(deadline=None)
@given(
    p=st.sampled_from(LOG_PARAMETERS),
    v=st.floats(min_value=1e-12, max_value=1e15, allow_nan=False, allow_infinity=False),
)
def test_log_scale_is_the_natural_log_and_round_trips(p, v):
    assert p.to_free(v) == pytest.approx(float(np.log(v)), rel=1e-15, abs=1e-15)
    assert p.from_free(p.to_free(v)) == pytest.approx(v, rel=1e-13)


@settings(deadline=None)
@given(p=st.sampled_from(LOG_PARAMETERS), u=st.floats(min_value=-30.0, max_value=30.0))
def test_log_scale_free_values_round_trip(p, u):
    assert p.from_free(u) == pytest.approx(math.exp(u), rel=1e-15)
    assert p.to_free(p.from_free(u)) == pytest.approx(u, abs=1e-12)


@settings(deadline=None)
@given(
    p=st.sampled_from(LOGIT_PARAMETERS),
    v=st.floats(min_value=1e-6, max_value=1 - 1e-6, allow_nan=False),
)
def test_logit_scale_is_scipys_logit_and_round_trips(p, v):
    assert p.to_free(v) == pytest.approx(float(logit(v)), rel=1e-9, abs=1e-12)
    assert p.from_free(p.to_free(v)) == pytest.approx(v, rel=1e-9, abs=1e-12)
    assert 0.0 < p.from_free(p.to_free(v)) < 1.0


@settings(deadline=None)
@given(p=st.sampled_from(LOGIT_PARAMETERS), u=st.floats(min_value=-15.0, max_value=15.0))
def test_logit_scale_free_values_round_trip(p, u):
    assert p.from_free(u) == pytest.approx(float(expit(u)), rel=1e-12)
    assert p.to_free(p.from_free(u)) == pytest.approx(u, abs=1e-6)


@settings(deadline=None)
@given(a=st.floats(0.01, 0.99), b=st.floats(0.01, 0.99))
def test_logit_scale_is_monotone(a, b):
    p = BY_NAME["hbm_efficiency"]
    if a < b:
        assert p.to_free(a) < p.to_free(b)
    if a == b:
        assert p.to_free(a) == p.to_free(b)


def test_logit_scale_clamps_the_ends_to_finite_values():
    p = BY_NAME["gemm_efficiency"]
    edge = math.log(1e-9 / (1 - 1e-9))
    assert p.to_free(0.0) == pytest.approx(edge, rel=1e-12)
    assert p.to_free(1.0) == pytest.approx(-edge, rel=1e-6)
    assert p.to_free(-0.5) == p.to_free(0.0)  # below the range: clamped, not NaN
    assert math.isfinite(p.to_free(1.5))


@pytest.mark.parametrize("preset", presets())
def test_every_parameter_names_a_real_field_of_the_shipped_preset(preset):
    hw = load_hardware(preset)
    for p in PARAMETERS:
        section, field = p.path
        assert section in Hardware.model_fields, p
        assert field in type(getattr(hw, section)).model_fields, p
        value = getattr(getattr(hw, section), field)
        assert p.get(hw) == float(value)
        assert value > 0
        if p.scale == Scale.LOGIT:
            assert value < 1, p
        # the --set path names the same field
        head = "calibration" if section == "calibration" else f"hardware.{section}"
        assert p.key == f"{head}.{field}"
    assert set(values_of(hw)) == set(EXPECTED_SCALES)


def _dump_without(hw: Hardware, path: tuple[str, str]) -> dict:
    data = hw.model_dump()
    del data[path[0]][path[1]]
    return data


@pytest.mark.parametrize("p", PARAMETERS, ids=lambda p: p.name)
def test_with_values_changes_exactly_the_named_field(hw, p):
    old = p.get(hw)
    new = old * 0.5  # halves stay inside (0, 1) for fractions
    moved = with_values(hw, {p.name: new})
    assert p.get(moved) == new
    section, field = p.path
    assert getattr(getattr(moved, section), field) == new
    # every other field, in every section, is untouched
    assert _dump_without(moved, p.path) == _dump_without(hw, p.path)
    for q in PARAMETERS:
        if q is not p:
            assert q.get(moved) == q.get(hw)
    # the original is not modified (a copy)
    assert p.get(hw) == old


def test_with_values_changes_fields_of_both_sections_at_once(hw):
    values = {"hbm_efficiency": 0.5, "p2p_latency_s": 7e-6, "argument_load_s": 3e-6}
    moved = with_values(hw, values)
    assert moved.calibration.hbm_efficiency == 0.5
    assert moved.calibration.argument_load_s == 3e-6
    assert moved.links.p2p_latency_s == 7e-6
    assert moved.links.p2p_bandwidth == hw.links.p2p_bandwidth
    assert moved.links.topology == hw.links.topology
    assert moved.socket == hw.socket and moved.node == hw.node and moved.name == hw.name
    assert values_of(moved) == {**values_of(hw), **values}


def test_with_values_of_nothing_is_the_same_hardware(hw):
    assert with_values(hw, {}).model_dump() == hw.model_dump()


@pytest.mark.parametrize("name", ["peak_bf16_flops", "gemm", "hbm_efficiency ", "discrepancy"])
def test_with_values_refuses_unknown_names(hw, name):
    with pytest.raises(ValueError, match="not calibrated parameters"):
        with_values(hw, {name: 0.5})
    with pytest.raises(ValueError, match="not calibrated parameters"):  # also next to a known one
        with_values(hw, {"hbm_efficiency": 0.5, name: 0.5})


@pytest.mark.parametrize(
    ("name", "value"), [("hbm_efficiency", 1.5), ("gemm_efficiency", 0.0), ("p2p_bandwidth", -1.0)]
)
def test_with_values_refuses_values_off_their_range(hw, name, value):
    with pytest.raises(ValueError, match="off its range"):
        with_values(hw, {name: value})


@settings(max_examples=50, deadline=None)
@given(
    values=st.fixed_dictionaries(
        {},
        optional={
            p.name: st.floats(0.01, 0.99) if p.scale == Scale.LOGIT else st.floats(1e-7, 1e12)
            for p in PARAMETERS
        },
    )
)
def test_with_values_then_values_of_reads_back_what_was_set(values):
    hw = HW
    got = values_of(with_values(hw, values))
    for name, v in got.items():
        assert v == values.get(name, values_of(hw)[name])
