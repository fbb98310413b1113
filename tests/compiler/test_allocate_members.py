"""`allocate_members.allocations`, the allocation pass over many hardware parameter sets at once:
each member's PCUs and PMUs are what `allocate.allocation` gives under that member alone, on
shipped kernels and search candidates (every path of the PMU search: the pace that fits at
once, the bisection, the minimum placement) under every member of the shipped ensemble."""

from __future__ import annotations

from functools import cache

import pytest

from rdusim.compiler.allocate import allocation, phases
from rdusim.compiler.allocate_members import _Rows, _slack, allocations, same_socket
from rdusim.compiler.compile import compile_mapping
from rdusim.compiler.program import Kernel
from rdusim.search.segments import every_candidate
from rdusim.spec.hardware import Hardware
from rdusim.spec.mapping import load_mapping
from rdusim.uncertainty.ensemble import shipped_ensemble
from rdusim.uncertainty.parameters import with_values


@cache
def _kernels(
    name: str, overrides: tuple[str, ...], kind: str | None
) -> tuple[list[Kernel], Hardware]:
    rm = load_mapping(name, list(overrides))
    if kind is None:
        program = compile_mapping(rm, batch=4 if rm.spec.phase == "decode" else None)
        return [k for lp in program.all_layers() for k in lp.kernels], rm.hardware
    return list(every_candidate(rm, kind, 4))[::3], rm.hardware


def _members(hw: Hardware) -> list[Hardware]:
    ensemble = shipped_ensemble()
    assert ensemble is not None
    return ensemble.applied(hw)


@pytest.mark.parametrize(
    ("name", "overrides", "kind"),
    [
        ("r1_prefill", ("seq_len=4096",), None),
        ("r1_decode", ("seq_len=8192",), None),
        ("llama31_8b_decode", ("batch=4",), "dense"),
        ("llama31_8b_prefill", ("seq_len=2048", "snapstream.enabled=false"), "dense"),
    ],
)
def test_each_member_gets_the_allocation_it_gets_alone(name, overrides, kind):
    kernels, hw = _kernels(name, overrides, kind)
    members = _members(hw)
    assert same_socket(members)
    for k in kernels:
        phase = phases(k)
        got = allocations(k, members, phase)
        for i, member in enumerate(members):
            alone = allocation(k, member, phase)
            assert {n: (int(p[i]), int(m[i])) for n, (p, m) in got.items()} == alone, k.name


def test_every_path_of_the_pmu_search_is_taken_alike():
    """Members whose PMUs hold every placement, some, or none of them (fewer PMUs per socket
    do not change the members' shared socket, so each is its own one-member set)."""
    kernels, hw = _kernels("llama31_8b_decode", ("batch=4",), "dense")
    paths = set()
    for pmus in (hw.socket.pmus, 400, 120, 30):
        socket = hw.socket.model_copy(
            update={"pmus": pmus, "sram_bytes": pmus * hw.socket.pmu_bytes}
        )
        small = hw.model_copy(update={"socket": socket})
        members = [small, with_values(small, {"hbm_efficiency": 0.3, "gemm_efficiency": 0.9})]
        for k in kernels[:20]:
            got = allocations(k, members)
            for i, member in enumerate(members):
                alone = allocation(k, member)
                assert {n: (int(p[i]), int(m[i])) for n, (p, m) in got.items()} == alone
            rows = _Rows(k, members, phases(k))
            slack, least = _slack(rows, pmus, len(members))
            paths |= {
                "least" if x else ("search" if s > 1 else "fits")
                for s, x in zip(slack, least, strict=True)
            }
    assert paths == {"fits", "search", "least"}


def test_members_of_another_socket_are_not_one_set():
    _, hw = _kernels("llama31_8b_decode", ("batch=4",), "dense")
    other = hw.model_copy(update={"socket": hw.socket.model_copy(update={"pcus": 520})})
    ring = hw.model_copy(update={"links": hw.links.model_copy(update={"topology": "ring"})})
    assert same_socket([hw, with_values(hw, {"gemm_efficiency": 0.5, "p2p_latency_s": 1e-5})])
    assert not same_socket([hw, other])
    assert not same_socket([hw, ring])
