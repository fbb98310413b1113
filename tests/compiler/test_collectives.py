"""Collective costs per algorithm and topology: closed forms, a block-moving simulation that
must agree with them, algebraic properties, alpha-beta time and input errors."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rdusim.compiler.collectives import (
    CollectiveCost,
    CollectiveKind,
    Topology,
    collective_cost,
    parse_topology,
)

AG = CollectiveKind.ALL_GATHER
RS = CollectiveKind.REDUCE_SCATTER
AR = CollectiveKind.ALL_REDUCE
A2A = CollectiveKind.ALL_TO_ALL
FC = Topology.FULLY_CONNECTED
RING = Topology.RING

DS = [1, 2, 4, 8, 16]
NS = [0.0, 1.0, 3.0e6, 2.0**20, 7.5e9]


def _check(kind: CollectiveKind, topo: Topology, n: float, d: int, rounds: int, sent: float):
    cost = collective_cost(kind, n, d, topo)
    assert cost.rounds == rounds
    assert isinstance(cost.rounds, int)
    assert cost.bytes_sent == pytest.approx(sent, rel=1e-12, abs=0.0)


# --------------------------------------------------------------------------------------------
# closed forms, one test per algorithm x topology


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("d", DS)
def test_all_gather_fully_connected(d, n):
    rounds, sent = (1, (d - 1) * n / d) if d > 1 else (0, 0.0)
    _check(AG, FC, n, d, rounds, sent)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("d", DS)
def test_all_gather_ring(d, n):
    rounds, sent = (d - 1, (d - 1) * (n / d)) if d > 1 else (0, 0.0)
    _check(AG, RING, n, d, rounds, sent)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("d", DS)
def test_reduce_scatter_fully_connected(d, n):
    rounds, sent = (1, (d - 1) * n / d) if d > 1 else (0, 0.0)
    _check(RS, FC, n, d, rounds, sent)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("d", DS)
def test_reduce_scatter_ring(d, n):
    rounds, sent = (d - 1, (d - 1) * (n / d)) if d > 1 else (0, 0.0)
    _check(RS, RING, n, d, rounds, sent)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("d", DS)
def test_all_reduce_fully_connected(d, n):
    rounds, sent = (2, 2 * (d - 1) * n / d) if d > 1 else (0, 0.0)
    _check(AR, FC, n, d, rounds, sent)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("d", DS)
def test_all_reduce_ring(d, n):
    rounds, sent = (2 * (d - 1), 2 * (d - 1) * n / d) if d > 1 else (0, 0.0)
    _check(AR, RING, n, d, rounds, sent)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("d", DS)
def test_all_to_all_fully_connected(d, n):
    rounds, sent = (1, (d - 1) * n / d**2) if d > 1 else (0, 0.0)
    _check(A2A, FC, n, d, rounds, sent)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("d", DS)
def test_all_to_all_ring(d, n):
    # the block for the socket h hops downstream crosses h links: sum_h h * N/d^2
    forwarded = sum(h * n / d**2 for h in range(1, d))
    rounds, sent = (d - 1, (d - 1) * n / (2 * d)) if d > 1 else (0, 0.0)
    assert forwarded == pytest.approx(sent, rel=1e-12)
    _check(A2A, RING, n, d, rounds, sent)


def test_sixteen_sockets_one_megabyte():
    n = 1.0e6
    table = {
        (AG, FC): (1, 937_500.0),
        (AG, RING): (15, 937_500.0),
        (RS, FC): (1, 937_500.0),
        (RS, RING): (15, 937_500.0),
        (AR, FC): (2, 1_875_000.0),
        (AR, RING): (30, 1_875_000.0),
        (A2A, FC): (1, 58_593.75),
        (A2A, RING): (15, 468_750.0),
    }
    for (kind, topo), (rounds, sent) in table.items():
        _check(kind, topo, n, 16, rounds, sent)


# --------------------------------------------------------------------------------------------
# brute force: move explicit blocks between sockets round by round
#
# An item is one piece of data that must end at one socket: (payload, destination, origin).
# Items with the same payload travelling over one link in one round are one transfer (a
# broadcast block forwarded once, or contributions to one slice summed into one partial). A
# socket forwards an item once every item with the same payload and destination that will pass
# through it has arrived, so partial sums are forwarded only when complete. Each directed link
# carries at most one message (a bundle of items) per round; items received in a round are
# forwarded at the earliest in the next.


@dataclass(frozen=True)
class Item:
    payload: tuple[object, ...]
    dest: int
    origin: int


@dataclass
class SimResult:
    rounds: int
    sent: list[Fraction]  # bytes each socket sent


def _next_hop(topo: Topology, d: int, at: int, dest: int) -> int:
    return dest if topo is FC else (at + 1) % d


def _linked(topo: Topology, d: int, a: int, b: int) -> bool:
    if a == b:
        return False
    return topo is FC or (b - a) % d in (1, d - 1)


def _route(topo: Topology, d: int, src: int, dest: int) -> list[int]:
    """Sockets an item leaves from on its way from src to dest."""
    path, at = [], src
    while at != dest:
        path.append(at)
        at = _next_hop(topo, d, at, dest)
    return path


def _simulate(
    topo: Topology, d: int, items: list[Item], size: Callable[[Item], Fraction]
) -> SimResult:
    where = {it: it.origin for it in items}
    passes = {it: set(_route(topo, d, it.origin, it.dest)) for it in items}
    group: dict[tuple[tuple[object, ...], int], list[Item]] = defaultdict(list)
    for it in items:
        group[it.payload, it.dest].append(it)
    sent = [Fraction(0)] * d
    rounds = 0
    while any(where[it] != it.dest for it in items):
        assert rounds < 4 * d, "no progress"
        bundles: dict[tuple[int, int], list[Item]] = defaultdict(list)
        for it, at in where.items():
            if at == it.dest:
                continue
            expected = [o for o in group[it.payload, it.dest] if at in passes[o]]
            if all(where[o] == at for o in expected):
                bundles[at, _next_hop(topo, d, at, it.dest)].append(it)
        assert bundles, "deadlock"
        for (a, b), bundle in bundles.items():  # one message per directed link
            assert _linked(topo, d, a, b)
            sent[a] += sum(_payload_sizes(bundle, size).values())
            for it in bundle:
                where[it] = b
        rounds += 1
    return SimResult(rounds, sent)


def _payload_sizes(
    bundle: list[Item], size: Callable[[Item], Fraction]
) -> dict[tuple[object, ...], Fraction]:
    """Bytes on the wire for a bundle: each distinct payload once."""
    return {it.payload: size(it) for it in bundle}


def _sim_all_gather(topo: Topology, d: int, n: int) -> SimResult:
    items = [Item(("shard", b), j, b) for b in range(d) for j in range(d) if j != b]
    return _simulate(topo, d, items, lambda it: Fraction(n, d))


def _sim_reduce_scatter(topo: Topology, d: int, n: int) -> SimResult:
    # socket k's addend, slice c, goes to socket c; slices meeting on a socket are summed
    items = [Item(("slice", c), c, k) for k in range(d) for c in range(d) if c != k]
    return _simulate(topo, d, items, lambda it: Fraction(n, d))


def _sim_all_to_all(topo: Topology, d: int, n: int) -> SimResult:
    items = [Item(("block", i, j), j, i) for i in range(d) for j in range(d) if j != i]
    return _simulate(topo, d, items, lambda it: Fraction(n, d * d))


def _sim_all_reduce(topo: Topology, d: int, n: int) -> SimResult:
    rs, ag = _sim_reduce_scatter(topo, d, n), _sim_all_gather(topo, d, n)
    return SimResult(rs.rounds + ag.rounds, [a + b for a, b in zip(rs.sent, ag.sent, strict=True)])


SIMS = {
    AG: _sim_all_gather,
    RS: _sim_reduce_scatter,
    A2A: _sim_all_to_all,
    AR: _sim_all_reduce,
}


@pytest.mark.parametrize("topo", [FC, RING])
@pytest.mark.parametrize("kind", list(SIMS))
@pytest.mark.parametrize("d", range(2, 9))
def test_simulation_matches_module(kind, topo, d):
    n = 1_000_003  # sizes are exact fractions, so n need not divide evenly
    sim = SIMS[kind](topo, d, n)
    cost = collective_cost(kind, n, d, topo)
    assert sim.rounds == cost.rounds
    for socket_bytes in sim.sent:
        assert float(socket_bytes) == pytest.approx(cost.bytes_sent, rel=1e-12)


def test_simulation_ring_uses_only_neighbour_links():
    d = 6
    assert [_next_hop(RING, d, i, (i + 3) % d) for i in range(d)] == [1, 2, 3, 4, 5, 0]
    assert all(_linked(RING, d, i, (i + 1) % d) for i in range(d))
    assert not _linked(RING, d, 0, 3)


# --------------------------------------------------------------------------------------------
# properties

kinds = st.sampled_from(list(CollectiveKind))
topologies = st.sampled_from(list(Topology))
sockets = st.integers(min_value=1, max_value=256)
sizes = st.floats(min_value=0.0, max_value=1e12, allow_nan=False, allow_infinity=False)
scales = st.floats(min_value=0.0, max_value=1e3, allow_nan=False, allow_infinity=False)


@given(kinds, topologies, sockets, sizes, sizes, scales)
def test_bytes_linear_in_size(kind, topo, d, n1, n2, a):
    c1 = collective_cost(kind, n1, d, topo).bytes_sent
    c2 = collective_cost(kind, n2, d, topo).bytes_sent
    both = collective_cost(kind, n1 + n2, d, topo).bytes_sent
    scaled = collective_cost(kind, a * n1, d, topo).bytes_sent
    assert both == pytest.approx(c1 + c2, rel=1e-9, abs=1e-9)
    assert scaled == pytest.approx(a * c1, rel=1e-9, abs=1e-9)


@given(kinds, topologies, sockets, sizes, sizes)
def test_rounds_independent_of_size(kind, topo, d, n1, n2):
    assert collective_cost(kind, n1, d, topo).rounds == collective_cost(kind, n2, d, topo).rounds


@given(kinds, sockets, sizes)
def test_fully_connected_never_needs_more_rounds_than_ring(kind, d, n):
    assert collective_cost(kind, n, d, FC).rounds <= collective_cost(kind, n, d, RING).rounds


@given(topologies, sockets, sizes)
def test_all_reduce_is_reduce_scatter_then_all_gather(topo, d, n):
    ar = collective_cost(AR, n, d, topo)
    rs = collective_cost(RS, n, d, topo)
    ag = collective_cost(AG, n, d, topo)
    assert ar.rounds == rs.rounds + ag.rounds
    assert ar.bytes_sent == pytest.approx(rs.bytes_sent + ag.bytes_sent, rel=1e-12, abs=0.0)


# --------------------------------------------------------------------------------------------
# CollectiveCost arithmetic


def test_time_s_is_latency_per_round_plus_bytes_over_bandwidth():
    cost = CollectiveCost(rounds=3, bytes_sent=4.0e6)
    assert cost.time_s(2e-6, 400e9) == pytest.approx(3 * 2e-6 + 4.0e6 / 400e9)
    assert cost.time_s(0.0, 1.0) == pytest.approx(4.0e6)
    assert CollectiveCost(0, 0.0).time_s(2e-6, 400e9) == 0.0


def test_time_s_of_module_costs():
    cost = collective_cost(AR, 1.0e6, 16, RING)
    assert cost.time_s(2e-6, 400e9) == pytest.approx(30 * 2e-6 + 1.875e6 / 400e9)


def test_bytes_per_round():
    assert CollectiveCost(4, 10.0).bytes_per_round == 2.5
    assert CollectiveCost(0, 0.0).bytes_per_round == 0.0
    assert collective_cost(AG, 1.6e6, 16, RING).bytes_per_round == pytest.approx(1.0e5)


def test_cost_is_frozen():
    cost = CollectiveCost(1, 1.0)
    with pytest.raises(AttributeError):
        cost.rounds = 2  # type: ignore[misc]


@pytest.mark.parametrize(("latency", "bandwidth"), [(-1e-6, 1e9), (math.nan, 1e9), (1e-6, 0.0)])
def test_time_s_rejects_bad_link_parameters(latency, bandwidth):
    with pytest.raises(ValueError):
        CollectiveCost(1, 1.0).time_s(latency, bandwidth)


# --------------------------------------------------------------------------------------------
# inputs and errors


def test_one_socket_costs_nothing():
    for kind in CollectiveKind:
        for topo in Topology:
            assert collective_cost(kind, 1e9, 1, topo) == CollectiveCost(0, 0.0)


def test_string_names_are_accepted():
    assert collective_cost("all-gather", 8.0, 4, "ring") == collective_cost(AG, 8.0, 4, RING)  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [-1.0, math.nan, math.inf, -math.inf, "1e6", None, True])
def test_bad_size_is_rejected(n):
    with pytest.raises(ValueError):
        collective_cost(AG, n, 4, RING)


@pytest.mark.parametrize("d", [0, -2, 2.0, 4.5, "4", None, True])
def test_bad_socket_count_is_rejected(d):
    with pytest.raises(ValueError):
        collective_cost(AG, 1.0, d, RING)


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError):
        collective_cost("broadcast", 1.0, 4, RING)  # type: ignore[arg-type]


def test_parse_topology():
    assert parse_topology("ring") is RING
    assert parse_topology("fully-connected") is FC
    assert parse_topology(" Ring ") is RING


def test_parse_topology_unknown_name():
    with pytest.raises(ValueError, match="unknown link topology"):
        parse_topology("torus")


def test_parse_topology_legacy_name_says_new_name():
    with pytest.raises(ValueError, match='now called "fully-connected"'):
        parse_topology("all-to-all")
    with pytest.raises(ValueError, match='now called "fully-connected"'):
        collective_cost(AG, 1.0, 4, "all-to-all")  # type: ignore[arg-type]
