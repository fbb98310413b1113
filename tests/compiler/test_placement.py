"""No kernel rdusim compiles exceeds a socket: every shipped mapping as shipped (and batch-1 and
8-socket variants), every run the evidence's items make, and every candidate the auto-mapper
builds fit its PCUs, PMUs and SRAM; PMUs follow staging as well as SRAM bytes."""

from __future__ import annotations

import math

import pytest

from rdusim.api import MapRun, run_mapping
from rdusim.compiler.allocate import buffer_pmus
from rdusim.search.segments import every_candidate
from rdusim.spec.catalog import shipped_mappings
from rdusim.spec.mapping import load_mapping

VARIANTS = {
    "r1_prefill": [["seq_len=4096"]],
    "r1_decode": [[], ["batch=1", "seq_len=8192", "snapstream.enabled=false"]],
    "r1_decode_paper": [[]],
    "llama31_8b_decode": [["batch=1"], ["hardware=sn40l-8"]],
    "llama31_8b_prefill": [["seq_len=8192"]],
}


def assert_fits(run: MapRun) -> None:
    """Every kernel of the run within one socket's PCUs, PMUs and SRAM; each op's PMUs at
    least its buffers' and its PCUs' staging."""
    hw = run.mapping.hardware
    socket = hw.socket
    for lp in run.program.all_layers():
        for k in lp.kernels:
            assert k.pcus <= socket.pcus, (lp.kind, k.name, k.pcus)
            assert k.pmus <= socket.pmus, (lp.kind, k.name, k.pmus)
            assert k.sram_bytes <= socket.sram_bytes, (lp.kind, k.name, k.sram_bytes)
            for op in k.ops:
                assert op.pmus >= buffer_pmus(op, hw)
                assert op.pmus >= op.pcus * socket.staging_pmus_per_pcu - 1e-9


@pytest.mark.parametrize(
    ("name", "sets"), [(n, s) for n, variants in VARIANTS.items() for s in variants]
)
def test_shipped_kernels_fit_a_socket(name: str, sets: list[str]) -> None:
    assert_fits(run_mapping(name, sets, simulate_it=False, uncertainty=False))


@pytest.mark.parametrize("name", sorted(shipped_mappings()))
def test_every_shipped_mapping_as_shipped_fits_a_socket(name: str) -> None:
    assert_fits(run_mapping(name, simulate_it=False, uncertainty=False))


def test_pmus_are_not_sram_bytes_alone() -> None:
    """In the paper's decode deployment some kernel holds more PMUs than its SRAM bytes fill:
    its PCUs' operand staging sets them."""
    run = run_mapping("r1_decode_paper", simulate_it=False, uncertainty=False)
    socket = run.mapping.hardware.socket
    kernels = [k for lp in run.program.all_layers() for k in lp.kernels]
    by_bytes = {k.name: math.ceil(k.sram_bytes / socket.pmu_bytes) for k in kernels}
    assert any(k.pmus > by_bytes[k.name] + len(k.ops) for k in kernels), [
        (k.name, k.pmus, by_bytes[k.name]) for k in kernels
    ]


@pytest.mark.slow
def test_every_evidence_run_fits_a_socket() -> None:
    """Every run `rdusim validate` makes for an item (its first reading, each choice a figure
    is the largest over): Table 5's six cells at their largest batch among them."""
    from rdusim.validation.items import Use, shipped_evidence
    from rdusim.validation.measures import shipped_runs

    ev = shipped_evidence()
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for item_id in ev.ids(Use.FIT, Use.HOLDOUT):
        for r in shipped_runs(ev, item_id):
            key = (r["mapping"], tuple(r["set"]))
            if key not in seen:
                seen.add(key)
                assert_fits(
                    run_mapping(r["mapping"], r["set"], simulate_it=False, uncertainty=False)
                )
    assert ("r1_decode_paper", tuple(pp_set("32768", "true"))) in seen


def pp_set(seq: str, snap: str) -> list[str]:
    """Table 5's cell as the evidence runs it (r1_decode_paper's deployment settings)."""
    return [
        "batch=max",
        f"seq_len={seq}",
        f"snapstream.enabled={snap}",
        "orchestration=software",
        "moe.expert_loading=all",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["moe", "dense"])
def test_every_search_candidate_fits_a_socket(kind: str) -> None:
    rm = load_mapping(shipped_mappings()["r1_decode"], ["seq_len=32768"])
    socket = rm.hardware.socket
    seen = 0
    for k in every_candidate(rm, kind, batch=16):
        seen += 1
        assert k.pcus <= socket.pcus and k.pmus <= socket.pmus and k.sram_bytes <= socket.sram_bytes
        # the PMUs follow the working PCUs' staging, not the SRAM bytes alone
        assert k.pmus >= k.pcus * socket.staging_pmus_per_pcu - 1e-9
    assert seen > 10
