"""Costs of the four collectives between the sockets of a node, per algorithm and link topology.

The cost model is the alpha-beta one: a collective over d sockets takes some number of sequential
rounds, each paying one link latency (alpha), and each socket sends some number of bytes, paid at
its point-to-point bandwidth (1/beta). Decode moves small tensors, where the latency term dominates,
so the round count matters as much as the volume.

Two topologies are modelled:

* ``fully-connected``: every socket has a direct link to every other, so a collective needs no
  forwarding and each phase is a single round of direct sends (the "direct" algorithms).
* ``ring``: socket i links only to its neighbours i-1 and i+1 (mod d). The collectives use the
  classic one-directional ring algorithms: d-1 rounds per phase, each moving a 1/d block.

The ring and direct algorithms and their alpha-beta costs follow R. Thakur, R. Rabenseifner and
W. Gropp, "Optimization of Collective Communication Operations in MPICH", International Journal of
High Performance Computing Applications 19(1), 2005.

``full_bytes`` (N) is always the size of the whole, unsharded tensor.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from numbers import Real

from rdusim.spec.hardware import Topology


class CollectiveKind(StrEnum):
    ALL_REDUCE = "all-reduce"
    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_TO_ALL = "all-to-all"


_LEGACY_TOPOLOGIES = {"all-to-all": Topology.FULLY_CONNECTED}


@dataclass(frozen=True)
class CollectiveCost:
    """Cost of one collective as seen by one socket."""

    rounds: int  # sequential rounds, each paying one link latency
    bytes_sent: float  # bytes one socket sends in all rounds together

    @property
    def bytes_per_round(self) -> float:
        """Average bytes a socket sends in one round (0 when there are no rounds)."""
        return self.bytes_sent / self.rounds if self.rounds else 0.0

    def time_s(self, latency_s: float, bandwidth: float) -> float:
        """Alpha-beta time: one latency per round plus the bytes at the given bandwidth (B/s)."""
        if not (math.isfinite(latency_s) and latency_s >= 0):
            raise ValueError(f"latency must be finite and >= 0, got {latency_s!r}")
        if not bandwidth > 0:
            raise ValueError(f"bandwidth must be > 0, got {bandwidth!r}")
        return self.rounds * latency_s + self.bytes_sent / bandwidth


NO_COST = CollectiveCost(0, 0.0)


def parse_topology(text: str) -> Topology:
    """The topology named by ``text``; ValueError for unknown or retired names."""
    name = str(text).strip().lower()
    if name in _LEGACY_TOPOLOGIES:
        new = _LEGACY_TOPOLOGIES[name]
        raise ValueError(
            f'link topology "{name}" is now called "{new.value}"; '
            f"write topology: {new.value} instead"
        )
    try:
        return Topology(name)
    except ValueError:
        known = ", ".join(f'"{t.value}"' for t in Topology)
        raise ValueError(f'unknown link topology "{text}"; expected one of {known}') from None


def _all_gather(n: float, d: int, topology: Topology) -> CollectiveCost:
    """Each socket holds N/d and ends with all N.

    Direct: one round in which every socket sends its shard to the d-1 others. Ring: d-1 rounds,
    each forwarding one N/d block to the next socket. Both send (d-1)N/d per socket.
    """
    rounds = 1 if topology is Topology.FULLY_CONNECTED else d - 1
    return CollectiveCost(rounds, (d - 1) * n / d)


def _reduce_scatter(n: float, d: int, topology: Topology) -> CollectiveCost:
    """Each socket holds a full N-byte addend and ends with its reduced N/d slice.

    Direct: one round in which every socket sends each other socket that socket's slice of its
    addend. Ring: d-1 rounds, each adding the received partial slice to the local one and passing
    it on. Both send (d-1)N/d per socket.
    """
    rounds = 1 if topology is Topology.FULLY_CONNECTED else d - 1
    return CollectiveCost(rounds, (d - 1) * n / d)


def _all_reduce(n: float, d: int, topology: Topology) -> CollectiveCost:
    """Reduce-scatter followed by all-gather: twice the rounds and twice the bytes of either."""
    rs = _reduce_scatter(n, d, topology)
    ag = _all_gather(n, d, topology)
    return CollectiveCost(rs.rounds + ag.rounds, rs.bytes_sent + ag.bytes_sent)


def _all_to_all(n: float, d: int, topology: Topology) -> CollectiveCost:
    """Each socket holds N/d and sends a distinct N/d^2 block to every other socket.

    Direct: one round of d-1 blocks, (d-1)N/d^2 bytes. Ring (store and forward in one direction):
    d-1 rounds; the block for the socket h hops downstream crosses h links, so counting forwarded
    bytes as sent, each socket's outgoing link carries sum_{h=1}^{d-1} h N/d^2 = (d-1)N/(2d).
    """
    if topology is Topology.FULLY_CONNECTED:
        return CollectiveCost(1, (d - 1) * n / (d * d))
    return CollectiveCost(d - 1, (d - 1) * n / (2 * d))


_COSTS: dict[CollectiveKind, Callable[[float, int, Topology], CollectiveCost]] = {
    CollectiveKind.ALL_REDUCE: _all_reduce,
    CollectiveKind.ALL_GATHER: _all_gather,
    CollectiveKind.REDUCE_SCATTER: _reduce_scatter,
    CollectiveKind.ALL_TO_ALL: _all_to_all,
}


def _check_bytes(full_bytes: float) -> float:
    if isinstance(full_bytes, bool) or not isinstance(full_bytes, Real):
        raise ValueError(f"full_bytes must be a number, got {full_bytes!r}")
    n = float(full_bytes)
    if not (math.isfinite(n) and n >= 0):
        raise ValueError(f"full_bytes must be finite and >= 0, got {full_bytes!r}")
    return n


def _check_sockets(d: int) -> int:
    if isinstance(d, bool) or not isinstance(d, int):
        raise ValueError(f"socket count must be an int, got {d!r}")
    if d < 1:
        raise ValueError(f"socket count must be >= 1, got {d}")
    return d


def collective_cost(
    kind: CollectiveKind, full_bytes: float, d: int, topology: Topology
) -> CollectiveCost:
    """Rounds and bytes sent per socket for ``kind`` over ``d`` sockets linked by ``topology``.

    ``full_bytes`` is the size of the whole tensor. One socket (or none to talk to) costs nothing.
    """
    n = _check_bytes(full_bytes)
    d = _check_sockets(d)
    ck = CollectiveKind(kind)
    topo = topology if isinstance(topology, Topology) else parse_topology(topology)
    if d == 1:
        return NO_COST
    return _COSTS[ck](n, d, topo)
