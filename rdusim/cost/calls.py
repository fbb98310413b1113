"""The cost of one kernel call, from its parts, shared by the simulator and the closed form.

A call (MICRO'24 SN40L §IV-D) loads the kernel's program into the units it uses, loads its
arguments, and ends at a barrier of the sockets (one collective round on a fully connected node,
d - 1 on a ring). When the host issues the calls it also pays the host's round trip: issuing the
call and learning that every socket has finished. When the AGCUs run a pre-loaded call sequence
they do not.

Program load is the configuration bytes of the PCUs and PMUs the kernel configures over the
configuration bandwidth, so a small kernel costs less to load than a whole-layer one.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdusim.compiler.collectives import CollectiveKind, Topology, collective_cost
from rdusim.compiler.program import Kernel
from rdusim.spec.hardware import Hardware
from rdusim.spec.mapping import Orchestration


@dataclass(frozen=True)
class CallCost:
    """One call's parts, in seconds."""

    program_load_s: float
    argument_load_s: float
    barrier_s: float
    host_round_trip_s: float

    @property
    def total_s(self) -> float:
        return self.program_load_s + self.argument_load_s + self.barrier_s + self.host_round_trip_s


def program_bytes(kernel: Kernel, hw: Hardware) -> float:
    """Configuration bytes one call of `kernel` loads on each socket."""
    socket = hw.socket
    return kernel.pcus * socket.config_bytes_per_pcu + kernel.pmus * socket.config_bytes_per_pmu


def barrier_s(hw: Hardware) -> float:
    """The sockets' barrier at the end of a call: the rounds of a zero-byte all-gather."""
    rounds = collective_cost(
        CollectiveKind.ALL_GATHER, 0.0, hw.sockets, Topology(hw.links.topology)
    ).rounds
    return rounds * hw.links.p2p_latency_s


def call_parts(kernel: Kernel, hw: Hardware, orchestration: Orchestration | str) -> CallCost:
    """The parts of one call of `kernel` issued by the host (software) or the AGCUs (hardware)."""
    cal = hw.calibration
    host = Orchestration(orchestration) == Orchestration.SOFTWARE
    return CallCost(
        program_load_s=program_bytes(kernel, hw) / cal.config_bandwidth,
        argument_load_s=cal.argument_load_s,
        barrier_s=barrier_s(hw),
        host_round_trip_s=cal.host_round_trip_s if host else 0.0,
    )


def call_cost(kernel: Kernel, hw: Hardware, orchestration: Orchestration | str) -> float:
    """Seconds of one call of `kernel`."""
    return call_parts(kernel, hw, orchestration).total_s
