"""The cost of one kernel call, shared by the simulator and the closed-form model.

Each call costs program load, argument load and the sockets' synchronisation (MICRO'24 SN40L
§IV-D): `software_call_s` when the host issues calls and waits for every socket, or
`hardware_call_s` plus the sockets' barrier on the links (one round fully connected, d - 1 on a
ring) when the AGCUs run a pre-loaded call sequence.
"""

from __future__ import annotations

from rdusim.compiler.collectives import CollectiveKind, Topology, collective_cost
from rdusim.spec.hardware import Hardware
from rdusim.spec.mapping import Orchestration


def call_cost(hw: Hardware, orchestration: Orchestration | str) -> float:
    """Seconds of one kernel call issued by the host (software) or the AGCUs (hardware)."""
    cal = hw.calibration
    if Orchestration(orchestration) == Orchestration.SOFTWARE:
        return cal.software_call_s
    barrier = collective_cost(
        CollectiveKind.ALL_GATHER, 0.0, hw.sockets, Topology(hw.links.topology)
    )
    return cal.hardware_call_s + barrier.rounds * hw.links.p2p_latency_s
