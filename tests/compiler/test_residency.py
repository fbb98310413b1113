"""`rdusim.compiler.residency`: how many models a node holds in HBM and DDR, and a switch's cost,
against closed forms worked by hand from the published figures."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.compiler.residency import (
    ModelWeights,
    fit_in_order,
    residency,
    switch_seconds,
    tier_fit,
)
from rdusim.spec.hardware import Hardware, load_hardware
from rdusim.spec.model import load_model_config

# Llama-3.1-8B from its config.json: vocab 128256, hidden 4096, 32 layers, 32 query and 8 KV
# heads of 128, FFN 14336, untied embedding and head, an RMSNorm weight before attention, before
# the FFN and at the end.
VOCAB, HIDDEN, LAYERS, KV, FFN = 128256, 4096, 32, 8 * 128, 14336
PER_LAYER = 2 * HIDDEN * HIDDEN + 2 * HIDDEN * KV + 3 * HIDDEN * FFN + 2 * HIDDEN
LLAMA_8B_PARAMS = 2 * VOCAB * HIDDEN + LAYERS * PER_LAYER + HIDDEN  # 8.03e9
BF16 = 2
SOCKETS = 16  # sn40l-16
DDR_PER_SOCKET = 1.5e12  # SnapStream paper §2.2
DDR_BANDWIDTH = 100e9  # SnapStream paper §2.2
HBM_PER_SOCKET = 64e9  # SnapStream paper §2.2


@pytest.fixture(scope="module")
def sn40l_16() -> Hardware:
    return load_hardware("sn40l-16")


def test_llama_8b_by_hand(sn40l_16: Hardware) -> None:
    assert LLAMA_8B_PARAMS == 8_030_261_248
    r = residency([load_model_config("llama-3.1-8b")], sn40l_16)
    (m,) = r.models
    weights = LLAMA_8B_PARAMS * BF16
    assert m.weight_bytes == pytest.approx(weights, rel=1e-12)
    assert m.per_socket_bytes == pytest.approx(weights / SOCKETS, rel=1e-12)
    fraction = sn40l_16.calibration.hbm_usable_fraction
    assert r.hbm.capacity_per_socket_bytes == pytest.approx(HBM_PER_SOCKET * fraction)
    assert r.ddr.capacity_per_socket_bytes == pytest.approx(DDR_PER_SOCKET)
    assert r.hbm.all_fit and r.ddr.all_fit and r.hbm.fit_in_order == r.ddr.fit_in_order == 1
    # from nothing resident: 1.004 GB a socket at 100 GB/s, all sockets at once = 10.04 ms
    assert r.as_dict()["models"][0]["load_s"] == pytest.approx(weights / SOCKETS / DDR_BANDWIDTH)
    assert [s.seconds for s in r.switches] == [0.0]  # to itself: already resident


def test_switches_between_three_models(sn40l_16: Hardware) -> None:
    names = ["deepseek-r1", "llama-3.1-70b", "llama-3.1-8b"]
    r = residency([load_model_config(n) for n in names], sn40l_16)
    assert len(r.switches) == 9
    weights = {m.name: m.weight_bytes for m in r.models}
    assert weights["llama-3.1-8b"] == pytest.approx(LLAMA_8B_PARAMS * BF16)
    for s in r.switches:
        expected = 0.0 if s.source == s.to else weights[s.to] / SOCKETS / DDR_BANDWIDTH
        assert s.seconds == pytest.approx(expected), (s.source, s.to)
    # R1's switch-in: ~673 GB over 16 sockets at 100 GB/s each, about 0.42 s
    r1 = next(s for s in r.switches if s.to == "deepseek-r1" and s.source != s.to)
    assert 0.40 < r1.seconds < 0.44
    total = sum(weights.values()) / SOCKETS
    assert r.hbm.needed_per_socket_bytes == pytest.approx(total)
    assert r.hbm.all_fit == (total <= HBM_PER_SOCKET * sn40l_16.calibration.hbm_usable_fraction)


def test_what_does_not_fit_hbm(sn40l_16: Hardware) -> None:
    """R1 (42 GB a socket) and Llama-3.1-405B (51 GB a socket) do not share 59 GB of usable HBM,
    but sit in DDR together; on 8 sockets R1 alone (84 GB a socket) overflows HBM."""
    models = [load_model_config("deepseek-r1"), load_model_config("llama-3.1-405b")]
    r = residency(models, sn40l_16)
    assert not r.hbm.all_fit and r.hbm.fit_in_order == 1
    assert r.ddr.all_fit and r.ddr.fit_in_order == 2
    r8 = residency(models, load_hardware("sn40l-8"))
    assert r8.hbm.fit_in_order == 0 and r8.models[0].per_socket_bytes > 80e9
    assert [m["fits_hbm"] for m in r8.as_dict()["models"]] == [False, False]
    assert [m["fits_hbm"] for m in r.as_dict()["models"]] == [True, True]
    # half the sockets: each loads twice the bytes, so a switch takes twice as long
    assert r8.switches[1].seconds == pytest.approx(2 * r.switches[1].seconds)


def test_the_report_is_plain_and_ordered(sn40l_16: Hardware) -> None:
    d = residency([load_model_config("llama-3.1-8b")], sn40l_16).as_dict()
    assert list(d) == [
        "hardware",
        "sockets",
        "switch_bandwidth_per_socket",
        "models",
        "tiers",
        "switches",
        "assumptions",
    ]
    assert list(d["tiers"]) == ["hbm", "ddr"]
    assert d["switch_bandwidth_per_socket"] == DDR_BANDWIDTH


# --- properties -------------------------------------------------------------------------------

BYTES = st.floats(min_value=0, max_value=1e13, allow_nan=False, allow_infinity=False)
SHARES = st.lists(BYTES, max_size=12)
CAPACITY = st.floats(min_value=0, max_value=1e14, allow_nan=False, allow_infinity=False)
SOCKET_COUNTS = st.integers(min_value=1, max_value=1024)
BANDWIDTHS = st.floats(min_value=1e6, max_value=1e15, allow_nan=False, allow_infinity=False)


def _weights(name: str, total: float, sockets: int) -> ModelWeights:
    return ModelWeights(name, total, total / sockets)


@settings(max_examples=200, deadline=None)
@given(BYTES, BYTES, SOCKET_COUNTS, BANDWIDTHS)
def test_switch_is_free_to_itself_and_monotone_in_bytes(
    a: float, b: float, sockets: int, bandwidth: float
) -> None:
    small, large = sorted((a, b))
    m_small, m_large = _weights("small", small, sockets), _weights("large", large, sockets)
    assert switch_seconds(m_small, m_small, sockets, bandwidth) == 0.0
    assert switch_seconds(m_large, m_large, sockets, bandwidth) == 0.0
    other = _weights("other", 1e9, sockets)
    t_small = switch_seconds(m_small, other, sockets, bandwidth)
    t_large = switch_seconds(m_large, other, sockets, bandwidth)
    assert 0.0 <= t_small <= t_large
    assert switch_seconds(m_large, None, sockets, bandwidth) == t_large


@settings(max_examples=300, deadline=None)
@given(SHARES, CAPACITY)
def test_fit_count_is_bounded_and_agrees_with_all_fit(shares: list[float], cap: float) -> None:
    n = fit_in_order(shares, cap)
    assert 0 <= n <= len(shares)
    t = tier_fit("hbm", shares, cap)
    assert t.fit_in_order == n
    assert t.all_fit == (n == len(shares))
    assert sum(shares[:n]) <= cap * (1 + 1e-9)


@settings(max_examples=300, deadline=None)
@given(BYTES, SHARES, CAPACITY)
def test_a_model_added_in_front_never_makes_more_of_the_others_fit(
    first: float, shares: list[float], cap: float
) -> None:
    before = fit_in_order(shares, cap)
    after = fit_in_order([first, *shares], cap)
    assert after <= len(shares) + 1
    assert max(after - 1, 0) <= before  # of the models given before, no more fit
    if first > cap:
        assert after == 0
