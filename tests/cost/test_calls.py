"""One kernel call's parts (`rdusim.cost.calls`), against values worked out by hand.

A call is program load (configuration bytes of the PCUs and PMUs the kernel uses over the
configuration bandwidth) + argument load + the sockets' barrier (a zero-byte all-gather: one
round fully connected, d - 1 on a ring of d, each one link latency) + the host's round trip when
the host issues it (software orchestration; the AGCUs' hardware orchestration has none).

The presets' calibration is re-fitted from time to time, so the hand-worked numbers run on the
presets with round values put in their place; the presets as shipped are checked against the
same sum written out from their fields.
"""

from __future__ import annotations

import pytest

from rdusim.cost.calls import CallCost, call_cost, call_parts
from rdusim.spec.hardware import Hardware, load_hardware
from rdusim.spec.mapping import Orchestration
from tests.kernels import sized_kernel

REL = 1e-12


def round_values(preset: str, topology: str = "fully-connected", sockets: int | None = None):
    """A preset with round numbers: 1000 configuration bytes a PCU, 500 a PMU, 1 GB/s to load
    them, 5 us of arguments, a 300 us host round trip and 2 us a link round."""
    hw = load_hardware(preset)
    socket = hw.socket.model_copy(
        update={"config_bytes_per_pcu": 1000, "config_bytes_per_pmu": 500}
    )
    cal = hw.calibration.model_copy(
        update={"config_bandwidth": 1e9, "argument_load_s": 5e-6, "host_round_trip_s": 3e-4}
    )
    links = hw.links.model_copy(update={"p2p_latency_s": 2e-6, "topology": topology})
    update: dict[str, object] = {"socket": socket, "calibration": cal, "links": links}
    if sockets is not None:
        update["node"] = hw.node.model_copy(update={"sockets": sockets})
    return hw.model_copy(update=update)


# 100 PCUs x 1000 B + 200 PMUs x 500 B = 200,000 B at 1 GB/s: 200 us
PROGRAM_100_200 = 200e-6


@pytest.mark.parametrize(
    ("preset", "topology", "barrier"),
    [
        ("sn40l-16", "fully-connected", 2e-6),  # one round
        ("sn40l-8", "fully-connected", 2e-6),  # one round, whatever the node's size
        ("sn40l-16", "ring", 30e-6),  # 15 rounds of 2 us
        ("sn40l-8", "ring", 14e-6),  # 7 rounds of 2 us
    ],
)
def test_call_parts_by_hand(preset, topology, barrier):
    hw = round_values(preset, topology)
    k = sized_kernel(100, 200, ops=2)
    hard = call_parts(k, hw, "hardware")
    assert hard.program_load_s == pytest.approx(PROGRAM_100_200, rel=REL)
    assert hard.argument_load_s == 5e-6
    assert hard.barrier_s == pytest.approx(barrier, rel=REL)
    assert hard.host_round_trip_s == 0.0
    assert hard.total_s == pytest.approx(200e-6 + 5e-6 + barrier, rel=REL)
    soft = call_parts(k, hw, "software")
    assert soft == CallCost(hard.program_load_s, 5e-6, hard.barrier_s, 3e-4)
    assert soft.total_s == pytest.approx(200e-6 + 5e-6 + barrier + 300e-6, rel=REL)
    assert call_cost(k, hw, "software") == soft.total_s
    assert call_cost(k, hw, "hardware") == hard.total_s


def test_hand_worked_totals():
    """The four sums written out: 200 + 5 + 2 = 207 us; on a ring of 16, 200 + 5 + 30 = 235 us;
    on a ring of 8, 200 + 5 + 14 = 219 us; the host adds 300 us to each."""
    k = sized_kernel(100, 200, ops=2)
    assert call_cost(k, round_values("sn40l-16"), "hardware") == pytest.approx(207e-6, rel=REL)
    assert call_cost(k, round_values("sn40l-16"), "software") == pytest.approx(507e-6, rel=REL)
    assert call_cost(k, round_values("sn40l-16", "ring"), "hardware") == pytest.approx(
        235e-6, rel=REL
    )
    assert call_cost(k, round_values("sn40l-8", "ring"), "hardware") == pytest.approx(
        219e-6, rel=REL
    )
    assert call_cost(k, round_values("sn40l-8", "ring"), "software") == pytest.approx(
        519e-6, rel=REL
    )


@pytest.mark.parametrize(
    ("pcus", "pmus", "program"),
    [
        (0, 0, 0.0),
        (0, 4, 2e-6),  # a gather kernel: 4 PMUs x 500 B = 2000 B
        (2, 7, 5.5e-6),  # 2000 + 3500 B
        (1040, 1040, 1.56e-3),  # a whole socket: 1,040,000 + 520,000 B
    ],
)
def test_program_load_by_hand(pcus, pmus, program):
    hw = round_values("sn40l-16")
    assert call_parts(
        sized_kernel(pcus, pmus, ops=2), hw, "hardware"
    ).program_load_s == pytest.approx(program, rel=REL, abs=1e-18)


def test_a_lone_socket_waits_at_no_barrier():
    for topology in ("fully-connected", "ring"):
        hw = round_values("sn40l-16", topology, sockets=1)
        parts = call_parts(sized_kernel(100, 200, ops=2), hw, "hardware")
        assert parts.barrier_s == 0.0
        assert parts.total_s == pytest.approx(205e-6, rel=REL)


@pytest.mark.parametrize("sockets", [2, 3, 5, 16, 64])
def test_a_ring_barrier_takes_d_minus_1_rounds(sockets):
    ring = round_values("sn40l-16", "ring", sockets=sockets)
    full = round_values("sn40l-16", "fully-connected", sockets=sockets)
    k = sized_kernel(10, 10, ops=2)
    assert call_parts(k, ring, "hardware").barrier_s == pytest.approx((sockets - 1) * 2e-6, rel=REL)
    assert call_parts(k, full, "hardware").barrier_s == pytest.approx(2e-6, rel=REL)


def test_orchestration_by_name_or_enum():
    hw = round_values("sn40l-16")
    k = sized_kernel(100, 200, ops=2)
    assert call_parts(k, hw, Orchestration.SOFTWARE) == call_parts(k, hw, "software")
    assert call_parts(k, hw, Orchestration.HARDWARE) == call_parts(k, hw, "hardware")
    with pytest.raises(ValueError):
        call_parts(k, hw, "firmware")


@pytest.mark.parametrize("preset", ["sn40l-16", "sn40l-8"])
@pytest.mark.parametrize("orchestration", ["software", "hardware"])
def test_the_shipped_presets(preset, orchestration):
    """The same sum from the shipped values: fully connected, so one barrier round."""
    hw: Hardware = load_hardware(preset)
    assert hw.links.topology == "fully-connected"
    socket, cal = hw.socket, hw.calibration
    k = sized_kernel(300, 500, ops=2)
    program = (300 * socket.config_bytes_per_pcu + 500 * socket.config_bytes_per_pmu) / (
        cal.config_bandwidth
    )
    host = cal.host_round_trip_s if orchestration == "software" else 0.0
    expected = program + cal.argument_load_s + hw.links.p2p_latency_s + host
    assert call_cost(k, hw, orchestration) == pytest.approx(expected, rel=REL)
