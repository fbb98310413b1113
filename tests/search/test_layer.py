"""One layer kind's search: the fastest cut under an SRAM cap, and the latency-vs-SRAM front."""

from __future__ import annotations

import itertools
import math
from functools import cache

import pytest

from rdusim.compiler.compile import compile_context, layer_workload
from rdusim.ir.graph import Phase
from rdusim.ir.model import build_model
from rdusim.search.costing import analytic_cost
from rdusim.search.layer import LayerSearch
from rdusim.search.segments import Candidate
from rdusim.spec.mapping import load_mapping, snapstream_sizes


@cache
def search(name: str, kind: str, batch: int) -> LayerSearch:
    rm = load_mapping(name, [])
    phase = Phase(rm.spec.phase)
    graph = build_model(rm.model, phase, snapstream_sizes(rm.spec, "m.yaml")).layers[kind]
    return LayerSearch(
        graph,
        kind,
        layer_workload(rm, batch),
        compile_context(rm),
        analytic_cost,
        rm.spec.orchestration,
    )


def brute_force(s: LayerSearch, cap: float) -> float:
    """Every cut of the ops into contiguous kernels under every plan, each kernel at most `cap`
    bytes of SRAM: the fastest total."""
    n = len(s.order)
    best = math.inf
    for plan in s.builders:
        table = {}
        for i, j in itertools.combinations(range(n + 1), 2):
            c, secs = s.best_kernel(plan, i, j, cap)
            table[i, j] = secs if isinstance(c, Candidate) else math.inf
        for r in range(n):
            for inner in itertools.combinations(range(1, n), r):
                ends = (*inner, n)
                starts = (0, *inner)
                best = min(best, sum(table[a, b] for a, b in zip(starts, ends, strict=True)))
    return best


@pytest.mark.parametrize("fraction", [1.0, 1 / 16, 1 / 32, 1 / 64])
def test_fastest_cut_under_a_cap_is_the_brute_force_minimum(fraction):
    s = search("llama31_8b_decode", "dense", 1)
    cap = fraction * s.ctx.hw.socket.sram_bytes
    options = s.options(1, sram_cap=cap)
    expected = brute_force(s, cap)
    if not math.isfinite(expected):
        assert not options or not math.isfinite(options[0].layer_s)
        return
    assert options[0].layer_s == pytest.approx(expected, rel=1e-12)
    assert max(options[0].sram_bytes) <= cap


def test_the_front_trades_sram_for_time_and_drops_dominated_points():
    s = search("r1_decode", "moe", 64)
    front = s.front()
    assert len(front) >= 2  # this layer fits one kernel only with enough SRAM
    for a, b in itertools.pairwise(front):
        assert a.peak_sram_bytes < b.peak_sram_bytes
        assert a.layer_s > b.layer_s
        assert a.kernels >= b.kernels
    for p in front:
        assert p.peak_sram_bytes <= p.sram_cap_bytes
        assert p.layer_s == pytest.approx(s.options(1, sram_cap=p.sram_cap_bytes)[0].layer_s)


def test_a_kv_block_that_buys_no_time_is_not_taken():
    """The chosen K/V block is the smallest whose kernel is within FRONT_GAIN of the fastest
    block's: every smaller legal block is slower than that, and the choice is no slower."""
    from rdusim.search.layer import FRONT_GAIN

    s = search("r1_prefill", "moe", 1)
    (option,) = s.options(1)
    tiled = 0
    for (i, j), kv, secs in zip(
        option.cut.kernels(), option.kv_blocks, option.kernels_s, strict=True
    ):
        builder = s.builders[option.plan]
        if len(builder.kv_blocks(i, j)) <= 1:
            continue
        tiled += 1
        fastest = s.best_kernel(option.plan, i, j)[1]
        assert secs <= fastest * (1 + FRONT_GAIN)
        smaller = [b for b in builder.kv_blocks(i, j) if b is not None and (kv is None or b < kv)]
        for b in smaller:
            c = builder.build(i, j, b)
            if isinstance(c, Candidate):
                assert s.kernel_s(c.kernel) > fastest * (1 + FRONT_GAIN), b
    assert tiled >= 1
