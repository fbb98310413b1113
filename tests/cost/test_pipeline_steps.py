"""Each named step of `rdusim.cost.analytic.pipeline_s`, worked by hand on a tiny kernel.

Every kernel here runs on a socket with round numbers (`unit_hardware`): an op on one PCU
computes 1e12 flop/s (systolic efficiency 1, SIMD 0.5), HBM moves 1e9 B/s (efficiency 1), the
links 1e9 B/s, and one round of a collective costs 0.5 s. So an op's arguments read as seconds:
`op("a", compute=4, load=8)` computes for 4 s in all and loads for 8 s in all, over every tile.
All the numbers below are sums and halvings of small integers, exact in binary floating point;
each test's docstring derives its answer.
"""

from __future__ import annotations

import math
from functools import cache

import pytest

from rdusim.compiler.program import Collective, Kernel, OpPlan
from rdusim.cost.analytic import (
    _OUT,
    _Arrival,
    _arrival,
    _emitted_s,
    _end_s,
    _Feed,
    _feed_arrival,
    _feeds,
    _finish_s,
    _hbm_jobs,
    _link_jobs,
    _makespan,
    _own_end_s,
    _paced_by_channel,
    _phase_tile_rate,
    _phases,
    _Pipeline,
    _pipeline,
    _producers,
    _Stage,
    _stages,
    _start_s,
    _tile_rate,
    _time_phase,
    _Timeline,
    _topological,
    estimate,
    pipeline_s,
)
from rdusim.spec.hardware import Hardware, Memory
from rdusim.spec.mapping import load_mapping

FLOPS_PER_PCU = 1e12
HBM_BYTES_PER_S = 1e9
P2P_BYTES_PER_S = 1e9
ROUND_S = 0.5


@cache
def unit_hardware() -> Hardware:
    """The shipped SN40L-16 with round numbers in every rate the closed form reads."""
    hw = load_mapping("r1_prefill", []).hardware
    socket = hw.socket.model_copy(
        update={
            "peak_bf16_flops": hw.socket.pcus * FLOPS_PER_PCU,
            "hbm": Memory(capacity_bytes=hw.socket.hbm.capacity_bytes, bandwidth=HBM_BYTES_PER_S),
        }
    )
    links = hw.links.model_copy(update={"p2p_bandwidth": P2P_BYTES_PER_S, "p2p_latency_s": ROUND_S})
    calibration = hw.calibration.model_copy(
        update={"gemm_efficiency": 1.0, "simd_efficiency": 0.5, "hbm_efficiency": 1.0}
    )
    return hw.model_copy(update={"socket": socket, "links": links, "calibration": calibration})


def op(
    name: str,
    compute: float = 0.0,
    load: float = 0.0,
    write: float = 0.0,
    *,
    blocking: bool = False,
    cost_class: str = "systolic",
) -> OpPlan:
    """An op of `compute` seconds on one PCU, `load` seconds of HBM reads, `write` of writes."""
    return OpPlan(
        name=name,
        kind="gemm",
        cost_class=cost_class,
        strategy="tp",
        degree=16,
        flops=compute * FLOPS_PER_PCU,
        hbm_read=load * HBM_BYTES_PER_S,
        hbm_write=write * HBM_BYTES_PER_S,
        weight_bytes=0.0,
        stream_in=0.0,
        stream_out=0.0,
        pcus=1 if compute > 0 else 0,
        blocking=blocking,
    )


def collective(src: str | None, dst: str, transfer: float, rounds: int) -> Collective:
    """A collective of `rounds` rounds (0.5 s each) whose bytes take `transfer` seconds."""
    return Collective("all-reduce", "x", transfer * P2P_BYTES_PER_S, rounds, src, dst)


def kernel(
    *ops: OpPlan,
    tiles: int,
    edges: list[tuple[str, str]] | None = None,
    collectives: list[Collective] | None = None,
) -> Kernel:
    return Kernel("k", list(ops), collectives or [], tiles=tiles, edges=edges or [])


def pipe(k: Kernel) -> _Pipeline:
    return _pipeline(k, unit_hardware())


# ------------------------------------------------------------------ the kernel as stages


def test_producers_keep_in_kernel_edges_only() -> None:
    """Edges x -> a and c -> y touch ops of other kernels and are dropped; c has two producers,
    in edge order."""
    k = kernel(
        op("a"),
        op("b"),
        op("c"),
        tiles=1,
        edges=[("x", "a"), ("a", "b"), ("a", "c"), ("b", "c"), ("c", "y")],
    )
    assert _producers(k) == {"b": ["a"], "c": ["a", "b"]}


def test_feeds_key_collectives_by_consumer() -> None:
    """a -> b, 3 rounds, 2 s of bytes: (a, 1.5 s, 2 s) under b. From the layer input (None) or
    from another kernel's op x into a: no source. From b into another kernel's op z: under
    `_OUT`, the kernel's end."""
    k = kernel(
        op("a"),
        op("b"),
        tiles=1,
        collectives=[
            collective("a", "b", 2.0, 3),
            collective(None, "a", 1.0, 1),
            collective("x", "a", 4.0, 2),
            collective("b", "z", 8.0, 1),
        ],
    )
    assert _feeds(k, unit_hardware()) == {
        "b": [_Feed("a", 1.5, 2.0)],
        "a": [_Feed(None, 0.5, 1.0), _Feed(None, 1.0, 4.0)],
        _OUT: [_Feed("b", 0.5, 8.0)],
    }


def test_stages_price_compute_loads_and_writes_in_seconds() -> None:
    """a: 6e12 flop on 2 PCUs at 1e12 flop/s each, 3 s; reads 2e9 activation + 1e9 weight +
    1e9 spilled bytes at 1e9 B/s, 4 s; writes 5e9 B, 5 s. b: a SIMD op at efficiency 0.5, its
    1e12 element ops on one PCU take 2 s; no PCUs: no compute however many flops."""
    a = op("a", write=5.0, blocking=True)
    a.flops, a.pcus = 6e12, 2
    a.hbm_read, a.weight_bytes, a.spill_bytes = 2e9, 1e9, 1e9
    b = op("b", compute=1.0, cost_class="simd")
    c = op("c")
    c.flops = 1e12
    assert _stages([a, b, c], unit_hardware()) == {
        "a": _Stage("a", True, 3.0, 4.0, 5.0),
        "b": _Stage("b", False, 2.0, 0.0, 0.0),
        "c": _Stage("c", False, 0.0, 0.0, 0.0),
    }


def test_topological_puts_producers_first_and_keeps_a_good_order() -> None:
    """Listed c, b, a with a -> b -> c: a depth-first visit from c emits a, b, c. Listed in
    order already, the same list comes back."""
    a, b, c = op("a"), op("b"), op("c")
    producers = {"b": ["a"], "c": ["b"]}
    assert [p.name for p in _topological([c, b, a], producers)] == ["a", "b", "c"]
    ops = [a, b, c]
    assert _topological(ops, producers) is ops


def test_phases_start_after_each_blocking_op() -> None:
    """a -> b (blocking) -> c, and c's collective into d: a in phase 0, b one later than a (1),
    c as b (1), d as its collective's source c (1). e blocks on nothing in the kernel: 0 + 1.
    f's only input is a collective from outside the kernel: phase 0."""
    k = kernel(
        op("a"),
        op("b", blocking=True),
        op("c"),
        op("d"),
        op("e", blocking=True),
        op("f"),
        tiles=4,
        edges=[("a", "b"), ("b", "c")],
        collectives=[collective("c", "d", 1.0, 1), collective(None, "f", 1.0, 1)],
    )
    p = pipe(k)
    assert _phases(p.stages.values(), p.producers, p.feeds) == {
        "a": 0,
        "b": 1,
        "c": 1,
        "d": 1,
        "e": 1,
        "f": 0,
    }


def test_pipeline_orders_the_stages_and_has_at_least_one_tile() -> None:
    """Ops listed b, a with a -> b come as a, b; a kernel of 0 tiles is timed as one."""
    p = pipe(kernel(op("b"), op("a"), tiles=0, edges=[("a", "b")]))
    assert list(p.stages) == ["a", "b"]
    assert p.tiles == 1
    assert p.phase == {"a": 0, "b": 0}


# ------------------------------------------------------------------ arrivals and starts


def test_emitted_after_the_sources_first_tile_and_the_latency() -> None:
    """4 tiles; a starts at 1 s and computes 4 s, so its first tile is out at 1 + 4/4 = 2 s; a
    collective from it of 1 round (0.5 s) is emitted at 2.5 s. One from an earlier kernel is
    emitted at its latency: 2 rounds, 1 s."""
    p = pipe(kernel(op("a", compute=4.0), op("b"), tiles=4))
    t = _Timeline(start={"a": 1.0}, end={"a": 5.0})
    assert _emitted_s(p, t, _Feed("a", 0.5, 2.0)) == 2.5
    assert _emitted_s(p, t, _Feed(None, 1.0, 2.0)) == 1.0


@pytest.mark.parametrize(
    ("transfer", "first", "last"),
    [
        # the source's end holds back the last tile: max(5 + 2/4, 2.5 + 2) = 5.5
        (2.0, 2.5 + 0.5, 5.5),
        # the links do: max(5 + 8/4, 2.5 + 8) = 10.5
        (8.0, 2.5 + 2.0, 10.5),
    ],
)
def test_feed_arrival_streams_behind_its_source(transfer: float, first: float, last: float) -> None:
    """4 tiles; a starts at 1 s, computes 4 s and ends at 5 s; its collective (0.5 s of
    latency) is emitted at 2.5 s (see above). Its first tile arrives one tile's transfer later;
    its last after the whole transfer from emission, and no sooner than one tile's transfer
    after a's end."""
    p = pipe(kernel(op("a", compute=4.0), op("b"), tiles=4))
    t = _Timeline(start={"a": 1.0}, end={"a": 5.0})
    assert _feed_arrival(p, t, _Feed("a", 0.5, transfer)) == _Arrival(first, last)


def test_feed_arrival_from_an_earlier_kernel() -> None:
    """Latency 1 s, transfer 2 s over 4 tiles: first tile at 1 + 0.5, last at 1 + 2."""
    p = pipe(kernel(op("b"), tiles=4))
    assert _feed_arrival(p, _Timeline(), _Feed(None, 1.0, 2.0)) == _Arrival(1.5, 3.0)


def test_arrival_is_the_latest_of_loader_producers_and_collectives() -> None:
    """4 tiles. b's loader has a tile (2/4 = 0.5 s) by 0.5 s and no last tile to wait for.
    Producer a started at 1 s and computes 4 s: its first tile at 2 s, its end at 5 s. A
    collective from an earlier kernel, 1 round and 2 s: first tile at 0.5 + 0.5 = 1 s, last at
    2.5 s. b's first input tile: max(0.5, 2, 1) = 2 s; its last: max(0, 5, 2.5) = 5 s."""
    k = kernel(
        op("a", compute=4.0),
        op("b", load=2.0),
        tiles=4,
        edges=[("a", "b")],
        collectives=[collective(None, "b", 2.0, 1)],
    )
    p = pipe(k)
    t = _Timeline(start={"a": 1.0}, end={"a": 5.0})
    assert _arrival(p, t, p.stages["b"]) == _Arrival(2.0, 5.0)
    # alone, a loader's first tile: 8 s over 4 tiles
    alone = pipe(kernel(op("c", load=8.0), tiles=4))
    assert _arrival(alone, _Timeline(), alone.stages["c"]) == _Arrival(2.0, 0.0)


def test_start_waits_for_the_whole_input_only_when_blocking() -> None:
    """First input tile at 2 s, last at 5 s: a streaming op starts at 2 s, a blocking one at 5."""
    a = _Arrival(2.0, 5.0)
    assert _start_s(_Stage("s", False, 1.0, 0.0, 0.0), a) == 2.0
    assert _start_s(_Stage("s", True, 1.0, 0.0, 0.0), a) == 5.0


# ------------------------------------------------------------------ the HBM channel


def test_hbm_jobs_load_two_tiles_ahead() -> None:
    """4 tiles; a loads 8 s (2 s a tile), writes 2 s, computes 4 s, starts at 3 s. Double
    buffering: 2 tiles (4 s) released at 0, the other 2 (4 s) when a starts, its writes from
    its first tile out, 3 + 4/4 = 4 s."""
    p = pipe(kernel(op("a", compute=4.0, load=8.0, write=2.0), tiles=4))
    t = _Timeline(start={"a": 3.0})
    assert _hbm_jobs(p, t, [p.stages["a"]]) == [(0.0, 4.0), (3.0, 4.0), (4.0, 2.0)]


def test_hbm_jobs_of_a_one_tile_kernel_load_everything_ahead() -> None:
    """One tile: min(2, 1) / 1 = all 8 s before a starts (at 3 s), nothing after; writes at
    3 + 4 = 7 s."""
    p = pipe(kernel(op("a", compute=4.0, load=8.0, write=2.0), tiles=1))
    t = _Timeline(start={"a": 3.0})
    assert _hbm_jobs(p, t, [p.stages["a"]]) == [(0.0, 8.0), (3.0, 0.0), (7.0, 2.0)]


def test_makespan_by_hand() -> None:
    """(0, 2) ends at 2; (1, 2) waits for it, ends at 4; (3, 0) is empty; (6, 1) finds the
    channel idle and ends at 7."""
    assert _makespan([(6.0, 1.0), (1.0, 2.0), (3.0, 0.0), (0.0, 2.0)]) == 7.0
    assert _makespan([]) == 0.0


def test_tile_rate_by_hand() -> None:
    """Two loaders of 1 s of HBM per tile. Uncapped, they share the channel: 0.5 tile/s each.
    When one's compute takes only 0.25 tile/s, it uses a quarter of the channel and the other
    gets the rest: 0.75 tile/s. A loader alone, uncapped: 1 tile/s. One whose op consumes at
    most 0.5 tile/s of 1 s tiles never saturates the channel: no bound; nor at exactly 1 tile/s,
    which fills it (the largest r with min(r, 1) x 1 <= 1 is unbounded)."""
    assert _tile_rate([1.0, 1.0], [math.inf, math.inf]) == 0.5
    assert _tile_rate([1.0, 1.0], [math.inf, 0.25]) == 0.75
    assert _tile_rate([1.0], [math.inf]) == 1.0
    assert _tile_rate([1.0], [0.5]) == math.inf
    assert _tile_rate([1.0], [1.0]) == math.inf


def test_phase_tile_rate_counts_loads_and_writes_and_caps_by_compute() -> None:
    """4 tiles. x loads 4 s (1 s a tile) and does not compute (no cap); y loads 2 s and writes
    2 s (1 s a tile) and computes 16 s, so it consumes 4/16 = 0.25 tile/s and takes a quarter
    of the channel; x gets 0.75 tile/s. With y computing 4 s (1 tile/s, no bind) they share:
    0.5 tile/s."""
    x = _Stage("x", False, 0.0, 4.0, 0.0)
    assert _phase_tile_rate([x, _Stage("y", False, 16.0, 2.0, 2.0)], 4) == 0.75
    assert _phase_tile_rate([x, _Stage("y", False, 4.0, 2.0, 2.0)], 4) == 0.5


def test_paced_by_the_channel_when_its_loads_are_slower_than_its_compute() -> None:
    """4 tiles at 1 tile/s take the channel 4 s: an op loading and computing 2 s is paced; one
    computing 4 s is not (its compute keeps up exactly); one that loads nothing never is."""
    assert _paced_by_channel(_Stage("s", False, 2.0, 8.0, 0.0), 1.0, 4)
    assert not _paced_by_channel(_Stage("s", False, 4.0, 8.0, 0.0), 1.0, 4)
    assert not _paced_by_channel(_Stage("s", False, 0.0, 0.0, 8.0), 1.0, 4)


# ------------------------------------------------------------------ end times


def test_own_end_is_all_compute_after_start_or_a_tile_after_the_last_input() -> None:
    """Start 1 s, compute 4 s over 4 tiles, last input at 6 s: max(1 + 4, 6 + 1) = 7 s; with
    the last input at 3 s: max(5, 4) = 5 s."""
    s = _Stage("s", False, 4.0, 0.0, 0.0)
    assert _own_end_s(s, 1.0, 6.0, 4) == 7.0
    assert _own_end_s(s, 1.0, 3.0, 4) == 5.0


def test_end_is_held_a_tile_behind_a_producer_in_its_phase() -> None:
    """4 tiles; a -> b, b computes 4 s (1 s a tile), started at 1 s, its last input (a's
    provisional end) at 3 s: its own end max(1 + 4, 3 + 1) = 5 s. a's final end is 6 s, so b's
    last tile ends at 6 + 1 = 7 s. Had a been in an earlier phase (b blocking), it would not
    hold b: 5 s. b loads 2 s: at 1 tile/s the channel needs 4 s, b's compute 4 s keeps up, so
    `reads_done` (100 s) does not pace it."""
    for blocking, expected in [(False, 7.0), (True, 5.0)]:
        k = kernel(
            op("a", compute=4.0),
            op("b", compute=4.0, load=2.0, blocking=blocking),
            tiles=4,
            edges=[("a", "b")],
        )
        p = pipe(k)
        t = _Timeline(start={"a": 0.0, "b": 1.0}, end={"a": 6.0})
        assert _end_s(p, t, p.stages["b"], 3.0, 100.0, 1.0) == expected


def test_end_is_held_behind_a_collective_from_its_phase_and_by_the_channel() -> None:
    """4 tiles; a's collective (2 s of bytes) into c, which computes 2 s (0.5 s a tile), starts
    at 1 s, last input at 3 s: own end max(3, 3.5) = 3.5 s. a ends at 6 s: c's last input tile
    arrives a tile's transfer later, 6.5 s, and c ends a tile of compute after, 7 s. c loads
    1 s: at 0.5 tile/s the channel needs 8 s for 4 tiles, more than c's 2 s of compute, so the
    channel paces c: a tile after the phase's reads are done at 9 s, 9.5 s."""
    k = kernel(
        op("a", compute=4.0),
        op("c", compute=2.0, load=1.0),
        tiles=4,
        collectives=[collective("a", "c", 2.0, 1)],
    )
    p = pipe(k)
    t = _Timeline(start={"a": 0.0, "c": 1.0}, end={"a": 6.0})
    assert _end_s(p, t, p.stages["c"], 3.0, 0.0, math.inf) == 7.0
    assert _end_s(p, t, p.stages["c"], 3.0, 9.0, 0.5) == 9.5


def test_time_phase_of_a_loader_feeding_a_slow_consumer() -> None:
    """4 tiles; a loads 4 s (1 s a tile) and computes 2 s, feeding b, which computes 8 s.

    a: first input tile (its load) at 1 s, starts then; provisional end max(1 + 2, 0.5) = 3 s.
    b: first input a tile of a after a's start, 1 + 0.5 = 1.5 s, last input a's end, 3 s;
    provisional end max(1.5 + 8, 3 + 2) = 9.5 s.
    HBM: a's two tiles ahead (2 s) from 0, its other two (2 s) from 1 s: the channel is done at
    4 s. Tile rate: a's 1 s a tile, capped at 4/2 = 2 tile/s (no bind): 1 tile/s, so 4 s for a's
    tiles, longer than its 2 s of compute: the channel paces a, which ends a tile (0.5 s) after
    4 s, at 4.5 s. b: max(9.5, a's 4.5 + 2) = 9.5 s; it loads nothing, so no pacing.
    """
    k = kernel(op("a", compute=2.0, load=4.0), op("b", compute=8.0), tiles=4, edges=[("a", "b")])
    p = pipe(k)
    t = _Timeline()
    _time_phase(p, t, 0)
    assert t.start == {"a": 1.0, "b": 1.5}
    assert t.end == {"a": 4.5, "b": 9.5}
    assert t.jobs == [(0.0, 2.0), (1.0, 2.0), (1.5, 0.0), (0.0, 0.0), (1.5, 0.0), (3.5, 0.0)]
    assert pipeline_s(k, unit_hardware()) == 9.5


def test_time_phase_after_a_blocking_op() -> None:
    """As above with b blocking: phase 0 is a alone (ends 4.5 s, as above, since b's compute
    did not enter a's end). Phase 1: b's first and last input is a's end, 4.5 s; it starts then
    and ends 8 s later, 12.5 s."""
    k = kernel(
        op("a", compute=2.0, load=4.0),
        op("b", compute=8.0, blocking=True),
        tiles=4,
        edges=[("a", "b")],
    )
    p = pipe(k)
    t = _Timeline()
    _time_phase(p, t, 0)
    assert t.end == {"a": 4.5}
    _time_phase(p, t, 1)
    assert t.start["b"] == 4.5
    assert t.end["b"] == 12.5
    assert pipeline_s(k, unit_hardware()) == 12.5


def test_link_jobs_release_each_collective_when_emitted() -> None:
    """4 tiles; from an earlier kernel (1 round, 1 s): released at 0.5 s. From a (started at
    1 s, 4 s of compute, 1 round, 2 s): at 1 + 1 + 0.5 = 2.5 s."""
    k = kernel(
        op("a", compute=4.0),
        op("b"),
        tiles=4,
        collectives=[collective(None, "a", 1.0, 1), collective("a", "b", 2.0, 1)],
    )
    p = pipe(k)
    t = _Timeline(start={"a": 1.0, "b": 2.0}, end={"a": 5.0, "b": 6.0})
    assert sorted(_link_jobs(p, t)) == [(0.5, 1.0), (2.5, 2.0)]


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        # a's end plus a tile of writes (2/4): 17.5 s; the outgoing collective: 17 + 4/4 = 18 s
        ([(0.0, 3.0)], 18.0),
        # the HBM channel finishing later: 12 + 8 = 20 s
        ([(0.0, 3.0), (12.0, 8.0)], 20.0),
    ],
)
def test_finish_is_the_latest_of_writes_channel_links_and_outgoing(
    jobs: list[tuple[float, float]], expected: float
) -> None:
    """4 tiles; a starts at 1 s, computes 16 s, ends at 17 s, writes 2 s; its collective into
    the next kernel (1 round, 4 s) is emitted at 1 + 4 + 0.5 = 5.5 s, and the links finish at
    9.5 s; its last tile leaves one tile's transfer after a ends, 18 s."""
    k = kernel(
        op("a", compute=16.0, write=2.0),
        tiles=4,
        collectives=[collective("a", "next", 4.0, 1)],
    )
    p = pipe(k)
    t = _Timeline(start={"a": 1.0}, end={"a": 17.0}, jobs=jobs)
    assert _finish_s(p, t) == expected


def test_finish_of_links_alone() -> None:
    """A kernel whose op does nothing, fed by a collective from an earlier kernel of 4 rounds
    (2 s) and 3 s of bytes: the links finish at 5 s; a's end is the collective's last tile,
    2 + 3 = 5 s as well."""
    k = kernel(op("a"), tiles=4, collectives=[collective(None, "a", 3.0, 4)])
    assert pipeline_s(k, unit_hardware()) == 5.0


def test_double_buffering_loads_two_tiles_while_the_input_is_on_its_way() -> None:
    """4 tiles; b loads 8 s (2 s a tile) and does not compute; its input is a collective from an
    earlier kernel with no bytes and 8 rounds, 4 s of latency. b starts at 4 s. Its loader ran
    two tiles ahead: 4 s of loads from 0, done by 4 s; the other two tiles, 4 s, from 4 s:
    the channel ends at 8 s, and b, which the channel paces, with it. Loading one tile ahead
    would idle the channel from 2 s to 4 s and end at 10 s."""
    k = kernel(op("b", load=8.0), tiles=4, collectives=[collective(None, "b", 0.0, 8)])
    assert pipeline_s(k, unit_hardware()) == 8.0


# ------------------------------------------------------------------ a looped call


@pytest.mark.parametrize(("prefetch", "period"), [(True, 12.0), (False, 14.0)])
def test_looped_period_with_and_without_prefetching_the_weights(
    prefetch: bool, period: float
) -> None:
    """4 tiles; a streams 8 s of weights, computes 4 s and writes 4 s.

    One execution: a's first tile of weights at 2 s, it starts then. The channel: 2 tiles of
    weights (4 s) from 0, the other 2 (4 s) from 2 s, the writes (4 s) from 2 + 1 = 3 s: done
    at 12 s. It grants a (3 s of HBM a tile, its compute taking 1 tile/s) 1/3 tile/s, 12 s for
    4 tiles against 4 s of compute: the channel paces a, which ends a tile (1 s) after 12 s, at
    13 s, and its last tile of writes (1 s) ends the kernel at 14 s.
    Prefetching the next iteration's weights behind this one, an iteration costs the slower of
    the channel's 8 + 4 = 12 s and the pipeline with the weights on chip: a computes from 0 to
    4 s and writes 4 s from 1 s, 5 s. So 12 s. Without prefetching, the pipeline again: 14 s.
    """
    a = op("a", compute=4.0, write=4.0)
    a.weight_bytes = 8.0 * HBM_BYTES_PER_S
    k = kernel(a, tiles=4)
    k.prefetch_iteration = prefetch
    e = estimate(k, unit_hardware(), looped_executions=3)
    assert (e.pipeline_s, e.period_s, e.hbm_s, e.p2p_s) == (14.0, period, 12.0, 0.0)
    assert e.call_time_s == pytest.approx(e.call_s + 14.0 + 2 * period, rel=1e-12)
    assert estimate(k, unit_hardware()).period_s == 14.0  # one execution: nothing to hide
