"""`pipeline_s` in named steps gives what it gave as one function, to 1e-12 relative.

The reference is a frozen copy of the function before the split (`tests/cost/legacy_pipeline.py`).
Compared on every kernel of every shipped mapping (and the variants `test_analytic` checks
against the simulator), each also with its weights already on chip (the period of a looped call
that prefetches its next iteration), on the search's candidates for three layers (two more
with `-m slow`) and on random small kernels: producers listed after their consumers, blocking
ops, collectives from outside the kernel, inside it and into a later one, empty ops, one tile.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdusim.compiler.capacity import max_batch
from rdusim.compiler.compile import compile_mapping
from rdusim.compiler.program import Collective, Kernel, OpPlan
from rdusim.cost.analytic import pipeline_s
from rdusim.search.segments import every_candidate
from rdusim.spec.catalog import shipped_mappings
from rdusim.spec.hardware import Hardware
from rdusim.spec.mapping import load_mapping
from tests.cost import legacy_pipeline

REL = 1e-12

VARIANTS = [
    ("r1_prefill", ("seq_len=8192",)),
    ("r1_prefill", ("snapstream.enabled=false",)),
    ("r1_decode", ("batch=1",)),
    ("r1_decode", ("batch=16", "kernel_looping=false")),
    ("llama31_8b_prefill", ("seq_len=16384",)),
    ("llama31_8b_decode", ("batch=1",)),
    ("llama31_8b_decode", ("batch=32",)),
]
CASES = [(name, ()) for name in shipped_mappings()] + VARIANTS


def same(kernel: Kernel, hw: Hardware) -> None:
    new, old = pipeline_s(kernel, hw), legacy_pipeline.pipeline_s(kernel, hw)
    assert new == pytest.approx(old, rel=REL, abs=0.0), [p.name for p in kernel.ops]


def on_chip(kernel: Kernel) -> Kernel:
    """`kernel` with its weights already on chip, as `estimate` prices a prefetching loop."""
    return replace(kernel, ops=[replace(p, weight_read_bytes=0.0) for p in kernel.ops])


def shipped_kernels(name: str, overrides: tuple[str, ...]) -> Iterator[tuple[Kernel, Hardware]]:
    rm = load_mapping(name, list(overrides))
    prog = max_batch(rm)[1] if rm.spec.batch == "max" else compile_mapping(rm)
    for lp in prog.all_layers():
        for k in lp.kernels:
            yield k, rm.hardware


@pytest.mark.parametrize(("name", "overrides"), CASES, ids=lambda v: str(v))
def test_every_shipped_kernel_is_timed_as_before(name: str, overrides: tuple[str, ...]) -> None:
    checked = 0
    for k, hw in shipped_kernels(name, overrides):
        same(k, hw)
        same(on_chip(k), hw)
        checked += 1
    assert checked >= 3


@cache
def candidates(name: str, kind: str, batch: int) -> tuple[list[Kernel], Hardware]:
    rm = load_mapping(name, [])
    return list(every_candidate(rm, kind, batch)), rm.hardware


FAST_LAYERS = [("r1_decode", "dense", 1), ("llama31_8b_decode", "dense", 1)]
SLOW_LAYERS = [
    ("r1_prefill", "moe", 1),
    ("r1_decode", "moe", 64),
    ("llama31_8b_prefill", "dense", 1),
]


def check_candidates(name: str, kind: str, batch: int) -> None:
    kernels, hw = candidates(name, kind, batch)
    assert len(kernels) >= 100
    for k in kernels:
        same(k, hw)


@pytest.mark.parametrize(("name", "kind", "batch"), FAST_LAYERS)
def test_search_candidates_are_timed_as_before(name: str, kind: str, batch: int) -> None:
    check_candidates(name, kind, batch)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "kind", "batch"), SLOW_LAYERS)
def test_more_search_candidates_are_timed_as_before(name: str, kind: str, batch: int) -> None:
    check_candidates(name, kind, batch)


# ------------------------------------------------------------------ random small kernels


@cache
def hardware() -> Hardware:
    return load_mapping("r1_prefill", []).hardware


sizes = st.one_of(st.just(0.0), st.floats(1e3, 1e11))


@st.composite
def op_plans(draw: st.DrawFn, name: str) -> OpPlan:
    return OpPlan(
        name=name,
        kind="gemm",
        cost_class=draw(st.sampled_from(["systolic", "attention", "simd", "memory"])),
        strategy="tp",
        degree=16,
        flops=draw(st.one_of(st.just(0.0), st.floats(1e6, 1e14))),
        hbm_read=draw(sizes),
        hbm_write=draw(sizes),
        weight_bytes=draw(sizes),
        stream_in=0.0,
        stream_out=0.0,
        pcus=draw(st.integers(0, 64)),
        blocking=draw(st.booleans()),
        spill_bytes=draw(st.one_of(st.just(0.0), sizes)),
        weight_read_bytes=draw(st.one_of(st.none(), sizes)),
    )


@st.composite
def kernels(draw: st.DrawFn) -> Kernel:
    """Ops o0..o(n-1), edges only from a lower to a higher index (so no cycle), listed in a
    drawn order; collectives along edges, from outside the kernel, or into a later one."""
    n = draw(st.integers(1, 6))
    names = [f"o{i}" for i in range(n)]
    ops = [draw(op_plans(name)) for name in names]
    pairs = list(itertools.combinations(names, 2))
    edges = draw(st.lists(st.sampled_from(pairs), unique=True)) if pairs else []
    outside = [("elsewhere", dst) for dst in names] + [(None, dst) for dst in names]
    later = [(src, "later") for src in names]
    ends = st.sampled_from(edges + outside + later)
    collectives = [
        Collective("all-reduce", "x", draw(sizes), draw(st.integers(1, 15)), src, dst)
        for src, dst in draw(st.lists(ends, max_size=4))
    ]
    external = [("before", draw(st.sampled_from(names))), (draw(st.sampled_from(names)), "after")]
    return Kernel(
        "k",
        draw(st.permutations(ops)),
        collectives,
        tiles=draw(st.one_of(st.just(0), st.just(1), st.integers(1, 128))),
        edges=edges + draw(st.lists(st.sampled_from(external), max_size=2)),
    )


@settings(max_examples=300, deadline=None)
@given(kernels())
def test_random_small_kernels_are_timed_as_before(k: Kernel) -> None:
    same(k, hardware())
    same(on_chip(k), hardware())
